"""`kubevirt.permitted-devices`: advertised resources vs permittedHostDevices."""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import CA22_PF, seed, run, cluster


def test_permitted_host_devices_missing(apiserver, kube):
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"]))
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

