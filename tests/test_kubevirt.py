"""rblnctl.kubevirt against the loopback API server: finding the CR, conflict-safe gate and device patches, status."""

from __future__ import annotations

import pytest

from rblnctl.errors import ClusterError, ConfigError, Conflict, Forbidden, InvalidInput, NotFound, Refused
from rblnctl.kube import KubeOptions, connect
from rblnctl.kubevirt import (
    DevicePermitter,
    GateEditor,
    device_for_resource,
    find_kubevirt,
    kubevirt_status,
    plan_gates,
    rbln_gates,
)
from tests.fakes import objects as o

KV_PATH = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
JSON_PATCH = "application/json-patch+json"
FG = "/spec/configuration/developerConfiguration/featureGates"
DIS = "/spec/configuration/developerConfiguration/disabledFeatureGates"
PCI = "/spec/configuration/permittedHostDevices/pciHostDevices"
NVIDIA = {"pciVendorSelector": "10DE:1EB8", "resourceName": "nvidia.com/TU104GL_Tesla_T4",
          "externalResourceProvider": True}


@pytest.fixture
def kube(apiserver):
    return connect(KubeOptions(server=apiserver.url, request_timeout_s=5))


def editor(kube, **kw):
    kw.setdefault("sleep", lambda s: None)
    return GateEditor(kube=kube, **kw)


def permitter(kube, **kw):
    kw.setdefault("sleep", lambda s: None)
    return DevicePermitter(kube=kube, **kw)


def stored(apiserver, ns="kubevirt", name="kubevirt"):
    return apiserver.get("KubeVirt", name, ns)


def gates_of(obj):
    return obj["spec"]["configuration"]["developerConfiguration"].get("featureGates")


def kv_patches(apiserver):
    return [r for r in apiserver.writes() if r.method == "PATCH" and r.path == KV_PATH]


# -- finding the CR -------------------------------------------------------------------------------


def test_no_kubevirt_cr_is_a_clear_not_found(kube, apiserver):
    with pytest.raises(NotFound, match="no KubeVirt installation found"):
        editor(kube).plan_enable(rbln_gates())
    assert apiserver.writes() == []


def test_missing_kubevirt_crd_is_the_same_not_found(kube, apiserver):
    apiserver.remove_resource("kubevirts.kubevirt.io")
    with pytest.raises(NotFound, match="no KubeVirt installation found"):
        find_kubevirt(kube)


def test_two_crs_are_listed_and_name_namespace_pick_one(kube, apiserver):
    apiserver.add(o.kubevirt("kubevirt", "kubevirt"), o.kubevirt("kv2", "other"))
    with pytest.raises(InvalidInput) as err:
        find_kubevirt(kube)
    assert "kubevirt/kubevirt" in str(err.value) and "kv2/other" in str(err.value)
    assert "--name" in str(err.value) and "--namespace" in str(err.value)
    assert find_kubevirt(kube, name="other", namespace="kv2")["metadata"]["namespace"] == "kv2"
    assert find_kubevirt(kube, namespace="kv2")["metadata"]["name"] == "other"
    assert find_kubevirt(kube, name="other")["metadata"]["namespace"] == "kv2"
    with pytest.raises(NotFound, match='"nope" not found in namespace "kv2"'):
        find_kubevirt(kube, name="nope", namespace="kv2")


# -- enable-gates ---------------------------------------------------------------------------------


def test_no_configuration_adds_every_parent_in_order(kube, apiserver):
    apiserver.add(o.kubevirt(with_configuration=False))
    rv = stored(apiserver)["metadata"]["resourceVersion"]
    ed = editor(kube)
    plan = ed.plan_enable(rbln_gates())
    assert plan.patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/spec/configuration", "value": {}},
        {"op": "add", "path": "/spec/configuration/developerConfiguration", "value": {}},
        {"op": "add", "path": FG, "value": ["HostDevices"]},
    ]
    result = ed.apply(plan)
    assert result.changed and result.attempts == 1
    (req,) = kv_patches(apiserver)
    assert req.content_type == JSON_PATCH and req.body == plan.patch and not req.dry_run
    assert gates_of(stored(apiserver)) == ["HostDevices"]
    # the rest of the spec is untouched
    assert stored(apiserver)["spec"]["imagePullPolicy"] == "IfNotPresent"


def test_empty_gate_list_is_tested_then_replaced(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    rv = stored(apiserver)["metadata"]["resourceVersion"]
    plan = editor(kube).plan_enable(rbln_gates(dra=True))
    # disabledFeatureGates is absent, so its absence is guarded by resourceVersion
    assert plan.patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "test", "path": FG, "value": []},
        {"op": "replace", "path": FG, "value": ["HostDevices", "HostDevicesWithDRA"]},
    ]
    editor(kube).apply(plan)
    assert gates_of(stored(apiserver)) == ["HostDevices", "HostDevicesWithDRA"]


def test_existing_gates_are_kept_in_order(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot", "HostDevices", "CPUManager"]))
    ed = editor(kube)
    plan = ed.plan_enable(rbln_gates(dra=True))
    assert plan.added == ["HostDevicesWithDRA"]
    assert plan.feature_gates_after == ["Snapshot", "HostDevices", "CPUManager", "HostDevicesWithDRA"]
    ed.apply(plan)
    assert gates_of(stored(apiserver)) == ["Snapshot", "HostDevices", "CPUManager", "HostDevicesWithDRA"]


def test_gate_in_disabled_list_is_removed_from_there_in_the_same_patch(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"], disabled_gates=["ImageVolume", "HostDevicesWithDRA"]))
    ed = editor(kube)
    plan = ed.plan_enable(rbln_gates(dra=True))
    assert plan.undisabled == ["HostDevicesWithDRA"]
    assert any("HostDevicesWithDRA" in w and "disabledFeatureGates" in w for w in plan.warnings)
    # both lists exist, so both are guarded by value and no resourceVersion test is needed
    assert plan.patch == [
        {"op": "test", "path": FG, "value": ["Snapshot"]},
        {"op": "test", "path": DIS, "value": ["ImageVolume", "HostDevicesWithDRA"]},
        {"op": "replace", "path": FG, "value": ["Snapshot", "HostDevices", "HostDevicesWithDRA"]},
        {"op": "replace", "path": DIS, "value": ["ImageVolume"]},
    ]
    ed.apply(plan)
    dev = stored(apiserver)["spec"]["configuration"]["developerConfiguration"]
    assert dev["featureGates"] == ["Snapshot", "HostDevices", "HostDevicesWithDRA"]
    assert dev["disabledFeatureGates"] == ["ImageVolume"]
    assert len(kv_patches(apiserver)) == 1


def test_dra_on_old_kubevirt_is_refused_with_version_and_floor(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], version="v1.8.2"))
    ed = editor(kube)
    plan = ed.plan_enable(rbln_gates(dra=True))
    assert plan.blockers and "v1.8.2" in plan.blockers[0] and "1.9.0" in plan.blockers[0]
    with pytest.raises(Refused) as err:
        ed.apply(plan)
    assert "--force" in err.value.blockers[0]
    assert apiserver.writes() == []
    # HostDevices alone has no floor
    assert editor(kube).plan_enable(rbln_gates()).blockers == []


def test_dra_on_old_kubevirt_with_force_goes_ahead_with_a_warning(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], version="v1.8.2"))
    ed = editor(kube, force=True)
    plan = ed.plan_enable(rbln_gates(dra=True))
    assert plan.blockers == [] and any("v1.8.2" in w and "--force" in w for w in plan.warnings)
    assert ed.apply(plan).changed
    assert gates_of(stored(apiserver)) == ["HostDevices", "HostDevicesWithDRA"]


def test_dra_with_unknown_version_is_refused_unless_forced(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], phase="Deploying"))  # no observedKubeVirtVersion yet
    plan = editor(kube).plan_enable(rbln_gates(dra=True))
    assert plan.blockers and "does not report its version" in plan.blockers[0]
    assert editor(kube, force=True).plan_enable(rbln_gates(dra=True)).blockers == []


def test_idempotent_rerun_sends_nothing(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["LiveMigration"]))
    ed = editor(kube)
    assert ed.apply(ed.plan_enable(rbln_gates(dra=True))).changed
    apiserver.clear_requests()
    plan = ed.plan_enable(rbln_gates(dra=True))
    assert plan.noop and plan.patch == []
    result = ed.apply(plan)
    assert not result.changed and result.attempts == 0
    assert apiserver.writes() == []
    assert gates_of(stored(apiserver)) == ["LiveMigration", "HostDevices", "HostDevicesWithDRA"]


def test_planning_alone_makes_no_write(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    plan = editor(kube).plan_enable(rbln_gates(dra=True))
    assert not plan.noop and plan.patch
    assert apiserver.writes() == [] and gates_of(stored(apiserver)) == []


def test_server_dry_run_sends_dry_run_all_and_persists_nothing(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    ed = editor(kube, server_dry_run=True)
    result = ed.apply(ed.plan_enable(rbln_gates()))
    assert result.changed and result.dry_run == "server"
    (req,) = kv_patches(apiserver)
    assert req.dry_run and req.query["dryRun"] == ["All"]
    assert gates_of(stored(apiserver)) == ["Snapshot"]


def test_concurrent_edit_between_read_and_write_is_retried_and_kept(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    fired = []

    def other_admin(req):
        if req.method == "PATCH" and not fired:
            fired.append(req)
            apiserver.mutate("KubeVirt", "kubevirt", "kubevirt",
                             lambda kv: gates_of(kv).append("CPUManager"))

    apiserver.on_request(other_admin)
    retries = []
    ed = editor(kube, on_retry=lambda n, msg: retries.append((n, msg)))
    plan = ed.plan_enable(rbln_gates())
    result = ed.apply(plan)
    assert result.changed and result.attempts == 2
    assert retries and retries[0][0] == 1 and "test failed" in retries[0][1]
    first, second = kv_patches(apiserver)
    assert first.status == 422 and second.status == 200
    # the re-plan was built on the other admin's list
    assert result.plan.feature_gates_before == ["Snapshot", "CPUManager"]
    assert gates_of(stored(apiserver)) == ["Snapshot", "CPUManager", "HostDevices"]


def test_concurrent_writer_that_already_enabled_the_gate_ends_in_a_noop(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))

    def other_admin(req):
        if req.method == "PATCH" and "HostDevices" not in gates_of(stored(apiserver)):
            apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", lambda kv: gates_of(kv).append("HostDevices"))

    apiserver.on_request(other_admin)
    ed = editor(kube)
    result = ed.apply(ed.plan_enable(rbln_gates()))
    assert not result.changed and result.attempts == 1 and result.plan.noop
    assert gates_of(stored(apiserver)) == ["HostDevices"]


def test_persistent_conflict_fails_clearly_after_bounded_attempts(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    n = iter(range(100))

    def busy_operator(req):
        if req.method == "PATCH":
            apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", lambda kv: gates_of(kv).append(f"Gate{next(n)}"))

    apiserver.on_request(busy_operator)
    waits = []
    ed = editor(kube, sleep=waits.append)
    plan = ed.plan_enable(rbln_gates())
    with pytest.raises(Conflict) as err:
        ed.apply(plan)
    assert "gave up after 5 attempts" in str(err.value) and "kubevirt/kubevirt" in str(err.value)
    assert "nothing was changed" in str(err.value)
    assert [r.status for r in kv_patches(apiserver)] == [422] * 5
    assert waits == [0.2, 0.4, 0.8, 1.6]
    final = gates_of(stored(apiserver))
    assert "HostDevices" not in final and final[:1] == ["Snapshot"] and len(final) == 6


def test_http_409_is_retried_like_a_failed_test(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.inject_fault(method="PATCH", path="/kubevirts/", status=409, reason="Conflict",
                           message="the object has been modified")
    ed = editor(kube)
    result = ed.apply(ed.plan_enable(rbln_gates()))
    assert result.changed and result.attempts == 2
    assert gates_of(stored(apiserver)) == ["HostDevices"]


def test_other_422_is_not_retried(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.inject_fault(method="PATCH", path="/kubevirts/", status=422, reason="Invalid",
                           message='admission webhook "kubevirt-update-validator.kubevirt.io" denied the request')
    ed = editor(kube)
    with pytest.raises(ClusterError) as err:
        ed.apply(ed.plan_enable(rbln_gates()))
    assert not isinstance(err.value, Conflict) and err.value.status == 422
    assert len(kv_patches(apiserver)) == 1


def test_403_on_patch_names_verb_resource_and_namespace(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.forbid("patch", "kubevirts", namespace="kubevirt")
    ed = editor(kube)
    plan = ed.plan_enable(rbln_gates())  # reads are still allowed
    with pytest.raises(Forbidden) as err:
        ed.apply(plan)
    msg = str(err.value)
    assert "patch" in msg and "kubevirts.kubevirt.io" in msg and 'namespace "kubevirt"' in msg
    assert gates_of(stored(apiserver)) == []


def test_cr_being_deleted_is_refused(kube, apiserver):
    kv = o.kubevirt(feature_gates=[])
    kv["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    kv["metadata"]["finalizers"] = ["foregroundDeleteKubeVirt"]
    apiserver.add(kv)
    ed = editor(kube)
    plan = ed.plan_enable(rbln_gates())
    assert plan.blockers and "being deleted" in plan.blockers[0]
    with pytest.raises(Refused) as err:
        ed.apply(plan)
    assert any("being deleted" in b for b in err.value.blockers)
    assert apiserver.writes() == []


@pytest.mark.parametrize("bad", ["", " ", "Host Devices", "HostDevices ", "Host-Devices", "HostDevices\n", "Gate/1"])
def test_malformed_gate_names_are_rejected_before_any_request(kube, apiserver, bad):
    apiserver.add(o.kubevirt())
    apiserver.clear_requests()
    with pytest.raises(InvalidInput, match="malformed feature gate name"):
        editor(kube).plan_enable(["HostDevices", bad])
    with pytest.raises(InvalidInput, match="malformed feature gate name"):
        editor(kube).plan_disable([bad])
    assert apiserver.requests == []


def test_unknown_gate_is_accepted_with_a_warning(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    ed = editor(kube)
    plan = ed.plan_enable(["HostDevices", "BrandNewGate", "hostdevices"])
    assert any("unknown feature gate BrandNewGate" in w for w in plan.warnings)
    assert any("hostdevices" in w and "did you mean HostDevices" in w for w in plan.warnings)
    ed.apply(plan)
    assert gates_of(stored(apiserver)) == ["HostDevices", "BrandNewGate", "hostdevices"]


# -- disable-gates --------------------------------------------------------------------------------


def test_disable_removes_gates_and_keeps_the_rest_in_order(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot", "HostDevicesWithDRA", "CPUManager", "HostDevices"]))
    ed = editor(kube)
    plan = ed.plan_disable(["HostDevicesWithDRA", "HostDevices"])
    assert plan.removed == ["HostDevicesWithDRA", "HostDevices"]
    # only featureGates decided the plan: it is guarded by value alone
    assert plan.patch == [
        {"op": "test", "path": FG, "value": ["Snapshot", "HostDevicesWithDRA", "CPUManager", "HostDevices"]},
        {"op": "replace", "path": FG, "value": ["Snapshot", "CPUManager"]},
    ]
    # HostDevicesWithDRA is Beta in 1.9: removing it from the list leaves it on, and we say so
    assert any("HostDevicesWithDRA stays on" in w and "--add-to-disabled" in w for w in plan.warnings)
    ed.apply(plan)
    assert gates_of(stored(apiserver)) == ["Snapshot", "CPUManager"]
    apiserver.clear_requests()
    again = ed.plan_disable(["HostDevicesWithDRA", "HostDevices"])
    assert again.noop and not ed.apply(again).changed and apiserver.writes() == []


def test_disable_with_add_to_disabled_lists_the_gate_there(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"]))
    ed = editor(kube)
    plan = ed.plan_disable(["HostDevicesWithDRA"], add_to_disabled=True)
    assert plan.newly_disabled == ["HostDevicesWithDRA"] and plan.warnings == []
    ed.apply(plan)
    dev = stored(apiserver)["spec"]["configuration"]["developerConfiguration"]
    assert dev["featureGates"] == ["HostDevices"] and dev["disabledFeatureGates"] == ["HostDevicesWithDRA"]


def test_add_to_disabled_needs_kubevirt_1_9(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevicesWithDRA"], version="v1.8.0"))
    plan = editor(kube).plan_disable(["HostDevicesWithDRA"], add_to_disabled=True)
    assert plan.blockers and "disabledFeatureGates needs KubeVirt >= 1.9.0" in plan.blockers[0]


def test_plan_gates_rejects_the_same_gate_both_ways():
    with pytest.raises(InvalidInput, match="cannot enable and disable HostDevices at once"):
        plan_gates(o.kubevirt(), enable=["HostDevices"], disable=["HostDevices"])


def test_null_parent_is_replaced_by_an_object(kube, apiserver):
    kv = o.kubevirt()
    kv["spec"]["configuration"]["developerConfiguration"] = None
    apiserver.add(kv)
    ed = editor(kube)
    plan = ed.plan_enable(rbln_gates())
    assert {"op": "replace", "path": "/spec/configuration/developerConfiguration", "value": {}} in plan.patch
    ed.apply(plan)
    assert gates_of(stored(apiserver)) == ["HostDevices"]


# -- permit-devices -------------------------------------------------------------------------------


def test_device_for_resource_derives_the_selector_from_the_table():
    d = device_for_resource("rebellions.ai/RBLN-CA22_PF")
    assert (d.resource_name, d.pci_vendor_selector, d.external_resource_provider) == (
        "rebellions.ai/RBLN-CA22_PF", "1EFF:1220", True)
    assert device_for_resource("RBLN-CA25_VF").pci_vendor_selector == "1EFF:1251"
    assert device_for_resource("rebellions.ai/RBLN-CR13_PF=1eff:2130").pci_vendor_selector == "1EFF:2130"
    with pytest.raises(InvalidInput) as err:
        device_for_resource("rebellions.ai/RBLN-CR13_PF")
    assert "CR13" in str(err.value) and "rebellions.ai/RBLN-CA22_PF (1EFF:1220)" in str(err.value)
    for bad, why in (("rebellions.ai/npu", "not an RBLN sandbox resource name"),
                     ("nvidia.com/T4", "not an RBLN sandbox resource name"),
                     ("RBLN-CA22_XX", "not an RBLN sandbox resource name"),
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
    assert any("externalResourceProvider false" in w and "--fix" in w for w in plan.warnings)
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
    plan = pm.plan(from_cluster=True)
    assert [d.resource_name for d in plan.requested] == ["rebellions.ai/RBLN-CA22_PF", "rebellions.ai/RBLN-CA25_PF"]
    assert plan.added == ["rebellions.ai/RBLN-CA22_PF", "rebellions.ai/RBLN-CA25_PF"]
    assert any("RBLN-CR13_PF" in w and "vm-new" in w for w in plan.warnings)
    assert any("ATOM_CA25_PT" in w and "legacy" in w for w in plan.warnings)
    pm.apply(plan)
    pci = stored(apiserver)["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]
    assert [e["resourceName"] for e in pci] == [NVIDIA["resourceName"], "rebellions.ai/RBLN-CA22_PF",
                                                "rebellions.ai/RBLN-CA25_PF"]


def test_from_cluster_with_nothing_advertised_is_not_found(kube, apiserver):
    apiserver.add(o.npu_node("ct-a", mode="container"), o.kubevirt())
    with pytest.raises(NotFound, match="no NPU node advertises"):
        permitter(kube).plan(from_cluster=True)
    with pytest.raises(InvalidInput, match="nothing to permit"):
        permitter(kube).plan()


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
    assert any("being deleted" in b for b in err.value.blockers)
    assert apiserver.writes() == []


# -- status ---------------------------------------------------------------------------------------


def test_status_counts_beta_on_by_default_from_1_9(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0",
                             permitted_pci=[NVIDIA, ("1EFF:1220", "rebellions.ai/RBLN-CA22_PF")]))
    st = kubevirt_status(kube)
    hd, dra = st.gates
    assert (hd.name, hd.effective, hd.listed) == ("HostDevices", True, True)
    assert (dra.name, dra.effective, dra.listed) == ("HostDevicesWithDRA", True, False) and "Beta" in dra.reason
    assert [(d.resource_name, d.model) for d in st.permitted_devices] == [("rebellions.ai/RBLN-CA22_PF", "CA22 PF")]
    assert st.other_permitted_devices == 1
    assert (st.phase, st.version, st.deleting) == ("Deployed", "v1.9.0", False)
    assert st.notes == []


def test_status_on_1_8_and_disabled_gates(kube, apiserver):
    apiserver.add(o.kubevirt("kv-old", "old", feature_gates=[], version="v1.8.1"),
                  o.kubevirt("kv-new", "new", feature_gates=["HostDevices"], disabled_gates=["HostDevicesWithDRA"]))
    old = kubevirt_status(kube, namespace="kv-old")
    assert [g.effective for g in old.gates] == [False, False]
    assert any("HostDevices is off" in n for n in old.notes)
    assert any("permit-devices" in n for n in old.notes)
    new = kubevirt_status(kube, name="new", namespace="kv-new")
    dra = new.gates[1]
    assert dra.effective is False and dra.disabled
    assert any("HostDevicesWithDRA is in disabledFeatureGates" in n for n in new.notes)


def test_status_with_unknown_version_cannot_tell_beta_gates(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], phase="Deploying"))
    st = kubevirt_status(kube)
    assert st.version is None and st.gates[1].effective is None
    assert any("phase is Deploying" in n for n in st.notes)


def test_status_reports_a_cr_being_deleted(kube, apiserver):
    kv = o.kubevirt(feature_gates=["HostDevices"])
    kv["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    apiserver.add(kv)
    st = kubevirt_status(kube)
    assert st.deleting and any("being deleted" in n for n in st.notes)


@pytest.mark.parametrize("version", [None, "v1.8.2"])
def test_rerun_with_gates_already_listed_is_a_noop_whatever_the_version(kube, apiserver, version):
    """The version floor guards adding HostDevicesWithDRA; when it is already listed there is nothing to refuse."""
    kv = o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], version=version or "v1.9.0")
    if version is None:
        del kv["status"]["observedKubeVirtVersion"]
    apiserver.add(kv)
    ed = editor(kube)
    plan = ed.plan_enable(rbln_gates(dra=True))
    assert plan.noop and plan.blockers == [] and plan.patch == []
    assert any("1.9.0" in w for w in plan.warnings)  # still told about the floor
    result = ed.apply(plan)
    assert not result.changed and apiserver.writes() == []


def test_add_to_disabled_floor_only_when_something_is_added_there(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], disabled_gates=["HostDevicesWithDRA"],
                             version="v1.9.0"))
    kv = stored(apiserver)
    del kv["status"]["observedKubeVirtVersion"]
    apiserver.update(kv)
    plan = editor(kube).plan_disable(["HostDevicesWithDRA"], add_to_disabled=True)
    assert plan.noop and plan.blockers == []


def test_disable_without_a_gate_is_invalid_before_any_request(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.clear_requests()
    with pytest.raises(InvalidInput, match="name at least one feature gate to disable"):
        editor(kube).plan_disable([])
    assert apiserver.requests == []


def test_same_resource_with_two_selectors_is_invalid(kube, apiserver):
    apiserver.add(o.kubevirt(permitted_pci=[]))
    with pytest.raises(InvalidInput, match=r"RBLN-CA22_PF given with two PCI selectors: 1EFF:1220 and 1EFF:9999"):
        permitter(kube).plan(["RBLN-CA22_PF", "RBLN-CA22_PF=1eff:9999"])
    assert apiserver.writes() == []


@pytest.mark.parametrize(("where", "value"), [
    (("spec", "configuration"), "oops"),
    (("spec", "configuration", "developerConfiguration"), ["HostDevices"]),
])
def test_parent_that_is_not_an_object_is_refused_not_overwritten(kube, apiserver, where, value):
    kv = o.kubevirt(with_configuration=False) if where == ("spec", "configuration") else o.kubevirt()
    kv["spec"]["configuration"] = value if len(where) == 2 else {"developerConfiguration": value}
    apiserver.add(kv)
    with pytest.raises(Refused, match=rf"{'.'.join(where[1:])} is a (str|list), not an object; fix the CR by hand"):
        editor(kube).plan_enable(rbln_gates())
    assert apiserver.writes() == []


def test_max_attempts_below_one_is_a_config_error(kube):
    with pytest.raises(ConfigError, match="max_attempts must be at least 1"):
        editor(kube, max_attempts=0)
