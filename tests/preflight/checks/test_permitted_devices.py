"""`kubevirt.permitted-devices`: advertised resources vs permittedHostDevices."""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import CA22_PF, seed, run, cluster


def test_permitted_host_devices_missing(apiserver, kube):
    # the list exists (empty): KubeVirt refuses every name it does not hold (test_permitted_devices_unlisted.py)
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[]))
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert p.status == Status.FAIL
    assert f"advertised but not permitted: {CA22_PF} (3 nodes)" in p.evidence
    assert p.remedy == "`rblnctl kubevirt permit-devices --from-cluster`"


def test_permitted_host_devices_without_external_provider(apiserver, kube):
    entry = {"pciVendorSelector": "1EFF:1220", "resourceName": CA22_PF, "externalResourceProvider": False}
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[entry]))
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert p.status == Status.FAIL and "externalResourceProvider is not true" in p.evidence
    assert "--fix" in p.remedy


def test_permitted_host_devices_none_and_nothing_advertised_warns(apiserver, kube):
    seed(apiserver, mode="container", kubevirt=o.kubevirt(feature_gates=["HostDevices"]))
    report = run(kube)
    c = cluster(report)
    assert c["kubevirt.permitted-devices"].status == Status.WARN
    assert c["nodes.vm-mode"].status == Status.WARN and "none of 3" in c["nodes.vm-mode"].evidence


def test_unreadable_nodes_do_not_claim_nothing_is_advertised(apiserver, kube):
    seed(apiserver)
    apiserver.forbid("list", "nodes")
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert "no node advertises" not in p.evidence and "could not be read" in p.evidence



def test_the_remedy_names_the_resources_of_the_release_installed(apiserver, kube):
    """Chart v0.3.0's sandbox plugin advertises its policy's resourceList names (ATOM_PT, ATOM_MAX_PT, REBEL_PT), never
    RBLN-<MODEL>_PF: the remedy and the evidence name those. Before, they named rebellions.ai/RBLN-CA22_PF there."""
    from tests.fakes.releases import V0_3_0

    policy = V0_3_0.policy(vfio_manager=True, sandbox=True, device_plugin=True)
    seed(apiserver, mode="container", policy=policy, operator=V0_3_0.operator_deployment(), nodes=1,
         kubevirt=o.kubevirt(feature_gates=["HostDevices"]))
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert p.status == Status.WARN and "RBLN-CA22_PF" not in p.remedy + p.evidence
    # the seeded node's product is RBLN-CA22, which chart v0.3.0's sandbox resourceList does not list: its first entry
    assert "`rblnctl kubevirt permit-devices --resource-name rebellions.ai/ATOM_PT`" in p.remedy
    assert "rebellions.ai/ATOM_PT, rebellions.ai/ATOM_MAX_PT, rebellions.ai/REBEL_PT" in p.evidence


def test_the_remedy_names_the_clusters_product_in_the_per_product_scheme(apiserver, kube):
    seed(apiserver, mode="container", nodes=1, kubevirt=o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.mutate("Node", "npu-0000", fn=lambda n: n["metadata"]["labels"].update(
        {"rebellions.ai/npu.product": "RBLN-CA25"}))
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert "`rblnctl kubevirt permit-devices --resource-name rebellions.ai/RBLN-CA25_PF`" in p.remedy


def test_example_resource_per_scheme():
    from rblnctl.operator import resources as R
    from rblnctl.operator.policy import parse_policy
    from tests.fakes.releases import V0_3_0

    v030 = parse_policy(V0_3_0.policy(vfio_manager=True, sandbox=True)).vm_resources
    assert v030.example(["RBLN-CA25"]) == "rebellions.ai/ATOM_MAX_PT"
    assert v030.example(["RBLN-CR03"]) == "rebellions.ai/REBEL_PT"
    assert v030.example([]) == "rebellions.ai/ATOM_PT"
    later = R.ResourceNames(mode="vm-passthrough")
    assert later.example(["RBLN-CR13"]) == "rebellions.ai/RBLN-CR13_PF" and later.example([]) == CA22_PF
