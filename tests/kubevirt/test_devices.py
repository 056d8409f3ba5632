"""rblnctl.kubevirt.devices: permittedHostDevices entries for every resource a sandbox plugin can advertise."""

from __future__ import annotations

import pytest

from rblnctl.errors import InvalidInput, NotFound, Refused
from rblnctl.kubevirt.devices import device_for_resource
from rblnctl.remedy import Command
from tests.fakes import objects as o
from tests.kubevirt.support import JSON_PATCH, NVIDIA, PCI, kv_patches, permitter, stored


@pytest.mark.parametrize(("name", "selector"), [
    ("RBLN-CA2_PF", "1EFF:1020"), ("RBLN-CA11_VF", "1EFF:1111"), ("RBLN-CA12_PF", "1EFF:1120"),
    ("RBLN-CA21_PF", "1EFF:1210"), ("RBLN-CA22_VF", "1EFF:1221"), ("RBLN-CA25_PF", "1EFF:1250"),
    ("RBLN-CR03_PF", "1EFF:2030"), ("RBLN-CR13_PF", "1EFF:2130"), ("RBLN-CR13_VF", "1EFF:2131"),
    ("RBLN-CR23_PF", "1EFF:2230"),
])
def test_every_product_in_pci_ids_is_accepted(name, selector):
    """pciutils/pciids vendor 1eff lists these; the sandbox plugin names its resources from them."""
    assert device_for_resource(name).pci_vendor_selector == selector


def test_a_resource_list_name_maps_to_its_first_product_card():
    from tests.fakes.releases import V0_3_0
    from rblnctl.operator.policy import parse_policy

    policy = parse_policy(V0_3_0.policy(sandbox=True, vfio_manager=True))
    d = device_for_resource("rebellions.ai/ATOM_MAX_PT", vm_resources=policy.vm_resources)
    assert d.pci_vendor_selector == "1EFF:1250"  # RBLN-CA25, its PF
    with pytest.raises(InvalidInput, match="ATOM_MAX_PT is not a sandbox device plugin resource"):
        device_for_resource("rebellions.ai/ATOM_MAX_PT")


def test_device_for_resource_derives_the_selector_from_the_table():
    d = device_for_resource("rebellions.ai/RBLN-CA22_PF")
    assert (d.resource_name, d.pci_vendor_selector, d.external_resource_provider) == (
        "rebellions.ai/RBLN-CA22_PF", "1EFF:1220", True)
    assert device_for_resource("RBLN-CA25_VF").pci_vendor_selector == "1EFF:1251"
    assert device_for_resource("rebellions.ai/RBLN-ZZ9_PF=1eff:7770").pci_vendor_selector == "1EFF:7770"
    with pytest.raises(InvalidInput) as err:
        device_for_resource("rebellions.ai/RBLN-ZZ9_PF")
    assert "ZZ9" in str(err.value) and "=1EFF:<device>" in str(err.value)
    for bad, why in (("rebellions.ai/npu", "not a sandbox device plugin resource"),
                     ("nvidia.com/T4", "not a Rebellions resource"),
                     ("RBLN-CA22_XX", "not a sandbox device plugin resource"),
                     ("RBLN-CA22_PF=1EFF", "malformed PCI selector"), ("a b", "malformed resource name"),
                     ("nvidia.com/T4=10DE:1EB8", "nvidia.com/T4 is not a Rebellions resource")):
        with pytest.raises(InvalidInput, match=why):
            device_for_resource(bad)


def test_permit_devices_keeps_foreign_entries_and_appends(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[NVIDIA]))
    pm = permitter(kube)
    plan = pm.plan(["rebellions.ai/RBLN-CA22_PF", "rebellions.ai/RBLN-CA25_PF"])
    new = [device_for_resource("RBLN-CA22_PF").entry(), device_for_resource("RBLN-CA25_PF").entry()]
    assert new[1] == {"pciVendorSelector": "1EFF:1250", "resourceName": "rebellions.ai/RBLN-CA25_PF",
                      "externalResourceProvider": True}
    assert plan.patch == [
        {"op": "test", "path": PCI, "value": [NVIDIA]},
        {"op": "replace", "path": PCI, "value": [NVIDIA, *new]},
    ]
    result = pm.apply(plan)
    assert result.changed
    (req,) = kv_patches(apiserver)
    assert req.content_type == JSON_PATCH
    assert stored(apiserver)["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"] == [NVIDIA, *new]
    # a re-run adds no duplicate and writes nothing
    apiserver.clear_requests()
    again = pm.plan(["rebellions.ai/RBLN-CA22_PF", "rebellions.ai/RBLN-CA25_PF"])
    assert again.noop and again.already_permitted == ["rebellions.ai/RBLN-CA22_PF", "rebellions.ai/RBLN-CA25_PF"]
    assert not pm.apply(again).changed and apiserver.writes() == []


def test_permit_devices_lost_reply_is_settled_by_reading_back(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[NVIDIA]))
    apiserver.inject_fault(method="PATCH", path="kubevirts", lose_reply=True)
    pm = permitter(kube)
    result = pm.apply(pm.plan(["rebellions.ai/RBLN-CA22_PF"]))
    assert result.changed and result.attempts == 1 and len(kv_patches(apiserver)) == 1
    assert stored(apiserver)["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"] == [
        NVIDIA, device_for_resource("RBLN-CA22_PF").entry()]


def test_permit_devices_creates_missing_parents(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))  # configuration without permittedHostDevices
    rv = stored(apiserver)["metadata"]["resourceVersion"]
    pm = permitter(kube)
    plan = pm.plan(["RBLN-CA22_PF"])
    assert plan.patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/spec/configuration/permittedHostDevices", "value": {}},
        {"op": "add", "path": PCI, "value": [device_for_resource("RBLN-CA22_PF").entry()]},
    ]
    pm.apply(plan)
    assert stored(apiserver)["spec"]["configuration"]["developerConfiguration"]["featureGates"] == []


def test_existing_entry_by_selector_or_name_is_not_duplicated(kube, apiserver):
    legacy = {"pciVendorSelector": "1EFF:1220", "resourceName": "rebellions.ai/ATOM_CA22_PT",
              "externalResourceProvider": True}
    wrong = {"pciVendorSelector": "1EFF:9999", "resourceName": "rebellions.ai/RBLN-CA25_PF",
             "externalResourceProvider": True}
    apiserver.add(o.kubevirt(permitted_pci=[legacy, wrong]))
    plan = permitter(kube).plan(["RBLN-CA22_PF", "RBLN-CA25_PF"])
    assert plan.noop and plan.skipped == ["rebellions.ai/RBLN-CA22_PF", "rebellions.ai/RBLN-CA25_PF"]
    assert any("ATOM_CA22_PT" in w for w in plan.warnings)
    assert any("1EFF:9999" in w for w in plan.warnings)


def test_external_resource_provider_false_is_reported_and_fixed_only_with_fix(kube, apiserver):
    entry = {"pciVendorSelector": "1EFF:1220", "resourceName": "rebellions.ai/RBLN-CA22_PF"}  # unset = false
    apiserver.add(o.kubevirt(permitted_pci=[NVIDIA, entry]))
    plan = permitter(kube).plan(["RBLN-CA22_PF"])
    assert plan.noop and plan.needs_fix == ["rebellions.ai/RBLN-CA22_PF"]
    assert any("externalResourceProvider false" in str(w) and w.option == "fix" for w in plan.warnings)
    assert not permitter(kube).apply(plan).changed and apiserver.writes() == []

    pm = permitter(kube, fix=True)
    plan = pm.plan([])  # --fix alone is enough
    assert plan.fixed == ["rebellions.ai/RBLN-CA22_PF"]
    pm.apply(plan)
    pci = stored(apiserver)["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]
    assert pci == [NVIDIA, {**entry, "externalResourceProvider": True}]


def test_from_cluster_derives_entries_from_node_resources(kube, apiserver):
    apiserver.add(
        o.npu_node("vm-a", mode="vm-passthrough", product="RBLN-CA22"),
        o.npu_node("vm-b", mode="vm-passthrough", product="RBLN-CA25"),
        o.npu_node("vm-c", mode="vm-passthrough", product="RBLN-CA22"),
        o.npu_node("ct-a", mode="container"),
        o.npu_node("vm-new", mode="vm-passthrough", product="RBLN-CR13"),
        o.npu_node("vm-old", mode="vm-passthrough", allocatable={"rebellions.ai/ATOM_CA25_PT": "1"}),
        o.kubevirt(permitted_pci=[NVIDIA]),
    )
    pm = permitter(kube)
    plan = pm.plan()  # without names: what the cluster advertises
    wanted = ["rebellions.ai/RBLN-CA22_PF", "rebellions.ai/RBLN-CA25_PF", "rebellions.ai/RBLN-CR13_PF"]
    assert [d.resource_name for d in plan.requested] == wanted and plan.added == wanted
    assert any("ATOM_CA25_PT" in w and "no known PCI device ID" in w for w in plan.warnings)
    pm.apply(plan)
    pci = stored(apiserver)["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]
    assert [e["resourceName"] for e in pci] == [NVIDIA["resourceName"], *wanted]


def test_from_cluster_with_nothing_advertised_is_not_found(kube, apiserver):
    """issue 21: before any vm node, the refusal names the command that fixes it (as every other refusal does)."""
    apiserver.add(o.npu_node("ct-a", mode="container"), o.kubevirt())
    with pytest.raises(NotFound, match=r"no NPU node is in vm-passthrough mode yet") as exc:
        permitter(kube).plan(from_cluster=True)
    # issue 39: the fixing commands as Remedy data (the CLI spells them with the program and flags run)
    assert [d.command for d in exc.value.details] == [
        Command.own("node", "set-mode", "vm", "ct-a"),
        Command.own("kubevirt", "permit-devices", resource_name=("rebellions.ai/RBLN-CA22_PF",))]
    # a vm node whose plugin has not started yet: the message says that, not "switch one"
    apiserver.add(o.npu_node("vm-a", mode="vm-passthrough", npus=0))
    with pytest.raises(NotFound, match="though vm-a is in vm-passthrough mode") as exc:
        permitter(kube).plan()
    assert "set-mode" not in str(exc.value)


def test_permit_devices_concurrent_entry_is_kept(kube, apiserver):
    apiserver.add(o.kubevirt(permitted_pci=[]))
    fired = []

    def other_admin(req):
        if req.method == "PATCH" and not fired:
            fired.append(1)
            apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", lambda kv: kv["spec"]["configuration"][
                "permittedHostDevices"]["pciHostDevices"].append(NVIDIA))

    apiserver.on_request(other_admin)
    pm = permitter(kube)
    result = pm.apply(pm.plan(["RBLN-CA22_PF"]))
    assert result.changed and result.attempts == 2
    pci = stored(apiserver)["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]
    assert [e["resourceName"] for e in pci] == [NVIDIA["resourceName"], "rebellions.ai/RBLN-CA22_PF"]


def test_permit_devices_on_cr_being_deleted_is_refused(kube, apiserver):
    kv = o.kubevirt()
    kv["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    apiserver.add(kv)
    pm = permitter(kube)
    with pytest.raises(Refused) as err:
        pm.apply(pm.plan(["RBLN-CA22_PF"]))
    assert any("being deleted" in str(b) for b in err.value.blockers)
    assert apiserver.writes() == []


def test_same_resource_with_two_selectors_is_invalid(kube, apiserver):
    apiserver.add(o.kubevirt(permitted_pci=[]))
    with pytest.raises(InvalidInput, match=r"RBLN-CA22_PF given with two PCI selectors: 1EFF:1220 and 1EFF:9999"):
        permitter(kube).plan(["RBLN-CA22_PF", "RBLN-CA22_PF=1eff:9999"])
    assert apiserver.writes() == []


def test_from_cluster_with_nothing_advertised_names_the_releases_resource(kube, apiserver):
    """issue 27 (finding 8): on chart v0.3.0 the resource to name is one of the policy's resourceList, not
    RBLN-CA22_PF (which that release never advertises)."""
    from tests.fakes.releases import V0_3_0

    policy = V0_3_0.policy(vfio_manager=True, sandbox=True, device_plugin=True)
    apiserver.add(policy, o.npu_node("ct-a", mode="container", product="RBLN-CA25", release=V0_3_0, policy=policy),
                  o.kubevirt())
    with pytest.raises(NotFound, match="no NPU node is in vm-passthrough mode yet") as exc:
        permitter(kube).plan(from_cluster=True)
    assert exc.value.details[-1].command == Command.own("kubevirt", "permit-devices",
                                                         resource_name=("rebellions.ai/ATOM_MAX_PT",))
