"""The single-alias sandbox resource `rebellions.ai/npu_pt` (RBLN_PT_ALIAS of the alias-only plugin, some later
operator commits) is a VM resource: status counts it, permit-devices --from-cluster permits it, migrate-resources
renames it once the plugin advertises per-product names, and vm attach picks it."""

from __future__ import annotations

import json

from rblnctl.vm.resource_rename import MigrateOptions, ResourceMigrator, Source
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from tests.fakes.releases import NEWER
from tests.helpers import cli
from rblnctl.constants import SANDBOX_ALIAS_RESOURCE as ALIAS


def alias_node(name: str = "n1") -> dict:
    """A vm-passthrough CA22 node whose sandbox plugin runs in single-alias mode."""
    node = o.npu_node(name, mode=o.MODE_VM, product="RBLN-CA22", labels={"rebellions.ai/npu.product": "RBLN-CA22"},
                      allocatable={ALIAS: "2"})
    for f in ("allocatable", "capacity"):
        node["status"][f].pop("rebellions.ai/RBLN-CA22_PF", None)
    return node


def test_set_mode_and_permit_devices_recognise_the_alias(apiserver):
    apiserver.add(NEWER.policy(vfio_manager=True, sandbox=True), NEWER.operator_deployment(), alias_node(),
                  o.kubevirt(feature_gates=["HostDevices"]))
    # convergence sees the alias as the node's VM resource (no operator runs here, so pods are still missing)
    r = cli("node", "set-mode", "n1", "vm", "--dry-run", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    pending = json.loads(r.stdout)["plan"]["pending"]
    assert pending and not any("rebellions.ai/" in p for p in pending), pending
    r = cli("kubevirt", "permit-devices", "--from-cluster", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    pci = apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["permittedHostDevices"]
    assert pci["pciHostDevices"] == [{"pciVendorSelector": "1EFF:1220", "resourceName": ALIAS,
                                      "externalResourceProvider": True}]


def test_permit_devices_says_when_the_alias_nodes_product_is_unknown(apiserver):
    node = alias_node()
    del node["metadata"]["labels"]["rebellions.ai/npu.product"]
    apiserver.add(NEWER.policy(vfio_manager=True, sandbox=True), node, o.kubevirt(feature_gates=["HostDevices"]))
    r = cli("kubevirt", "permit-devices", "--from-cluster", "--dry-run", server=apiserver.url)
    text = " ".join(r.stderr.split())
    assert f"{ALIAS} (on n1) stands for every NPU product" in text and f"{ALIAS}=1EFF:<device>" in text


def test_migrate_renames_the_alias_after_the_plugin_went_per_product(apiserver, kube):
    apiserver.add(NEWER.policy(vfio_manager=True, sandbox=True), o.npu_node("n1", mode=o.MODE_VM),
                  o.kubevirt(feature_gates=["HostDevices"]),
                  o.vm("ns", "a", host_devices=[ALIAS], running=False))
    plan = ResourceMigrator(kube=kube, options=MigrateOptions(), clock=FakeClock()).plan()
    (blocker,) = plan.blockers  # an old VM name: no source says which device it stood for, so it is named
    assert ALIAS in blocker.message and "VirtualMachine ns/a" in blocker.message
    # with KubeVirt still permitting it for 1EFF:1220, the rename is derived
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda k: k["spec"]["configuration"].update(
        permittedHostDevices={"pciHostDevices": [{"pciVendorSelector": "1EFF:1220", "resourceName": ALIAS,
                                                  "externalResourceProvider": True}]}))
    plan = ResourceMigrator(kube=kube, options=MigrateOptions(), clock=FakeClock()).plan()
    assert not plan.blockers
    assert [(r.old, r.new, r.source) for r in plan.renames] == [(ALIAS, "rebellions.ai/RBLN-CA22_PF",
                                                                 Source.PERMITTED)]


def test_the_alias_counts_beside_a_resource_list_the_alias_plugin_ignores(apiserver):
    """A policy kept across the upgrade may still carry sandboxDevicePlugin.resourceList; the alias-only plugin
    ignores it (the operator's own test keeps one to prove that), so the alias still counts."""
    policy = NEWER.policy(vfio_manager=True, sandbox=True)
    policy["spec"]["sandboxDevicePlugin"]["resourceList"] = [
        {"productCardNames": ["RBLN-CA22"], "resourceName": "ATOM_PT", "resourcePrefix": "rebellions.ai"}]
    apiserver.add(policy, NEWER.operator_deployment(), alias_node(), o.kubevirt(feature_gates=["HostDevices"]))
    r = cli("kubevirt", "permit-devices", "--from-cluster", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    pci = apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["permittedHostDevices"]
    assert [e["resourceName"] for e in pci["pciHostDevices"]] == [ALIAS]
