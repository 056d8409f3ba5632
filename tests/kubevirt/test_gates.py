"""rblnctl.kubevirt.gates: conflict-safe gate edits and KubeVirt's gate facts per release."""

from __future__ import annotations

import pytest

from rblnctl.errors import InvalidInput, Refused, UnknownName
from rblnctl.kubevirt.gates import plan_gates, rbln_gates
from tests.fakes import objects as o
from tests.kubevirt.support import DIS, FG, editor, gates_of, kv_patches, stored


def test_empty_gate_list_is_tested_then_replaced(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    rv = stored(apiserver)["metadata"]["resourceVersion"]
    plan = editor(kube).plan(enable=rbln_gates(dra=True))
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
    plan = ed.plan(enable=rbln_gates(dra=True))
    assert plan.added == ["HostDevicesWithDRA"]
    assert plan.feature_gates_after == ["Snapshot", "HostDevices", "CPUManager", "HostDevicesWithDRA"]
    ed.apply(plan)
    assert gates_of(stored(apiserver)) == ["Snapshot", "HostDevices", "CPUManager", "HostDevicesWithDRA"]


def test_gate_in_disabled_list_is_removed_from_there_in_the_same_patch(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"], disabled_gates=["ImageVolume", "HostDevicesWithDRA"]))
    ed = editor(kube)
    plan = ed.plan(enable=rbln_gates(dra=True))
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
    plan = ed.plan(enable=rbln_gates(dra=True))
    assert plan.blockers and "v1.8.2" in plan.blockers[0].message and "1.9.0" in plan.blockers[0].message
    with pytest.raises(Refused) as err:
        ed.apply(plan)
    assert err.value.blockers[0].override == "force"
    assert apiserver.writes() == []
    # HostDevices alone has no floor
    assert editor(kube).plan(enable=rbln_gates()).blockers == []


@pytest.mark.parametrize(("version", "has"), [
    ("v1.5.0", "and v1.5.0 does not have it yet"),
    ("v1.8.2", "and in v1.8.2 it is Alpha"),
])
def test_dra_below_the_floor_is_one_consistent_refusal(kube, apiserver, version, has):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], version=version))
    plan = editor(kube).plan(enable=rbln_gates(dra=True))
    (b,) = plan.blockers
    assert b.message.startswith(f"HostDevicesWithDRA needs KubeVirt >= 1.9.0; KubeVirt kubevirt/kubevirt reports "
                                f"{version}")
    assert f"the gate exists since 1.6.0 as Alpha, {has}; DRA host devices for RBLN NPUs need 1.9.0" in b.message
    # no separate warning about the gate's arrival contradicting the floor
    assert not any("HostDevicesWithDRA" in w for w in plan.warnings), plan.warnings
    forced = editor(kube, force=True).plan(enable=rbln_gates(dra=True))
    (w,) = [w for w in forced.warnings if "HostDevicesWithDRA" in w]
    assert "exists since 1.6.0" in w and w.endswith("going ahead anyway (forced)")


def test_dra_on_old_kubevirt_with_force_goes_ahead_with_a_warning(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], version="v1.8.2"))
    ed = editor(kube, force=True)
    plan = ed.plan(enable=rbln_gates(dra=True))
    assert plan.blockers == [] and any("v1.8.2" in w and "forced" in w for w in plan.warnings)
    assert ed.apply(plan).changed
    assert gates_of(stored(apiserver)) == ["HostDevices", "HostDevicesWithDRA"]


def test_dra_with_unknown_version_is_refused_unless_forced(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], phase="Deploying"))  # no observedKubeVirtVersion yet
    plan = editor(kube).plan(enable=rbln_gates(dra=True))
    assert plan.blockers and "does not report its version" in plan.blockers[0].message
    assert editor(kube, force=True).plan(enable=rbln_gates(dra=True)).blockers == []


def test_idempotent_rerun_sends_nothing(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["LiveMigration"]))
    ed = editor(kube)
    assert ed.apply(ed.plan(enable=rbln_gates(dra=True))).changed
    apiserver.clear_requests()
    plan = ed.plan(enable=rbln_gates(dra=True))
    assert plan.noop and plan.patch == []
    result = ed.apply(plan)
    assert not result.changed and result.attempts == 0
    assert apiserver.writes() == []
    assert gates_of(stored(apiserver)) == ["LiveMigration", "HostDevices", "HostDevicesWithDRA"]


def test_planning_alone_makes_no_write(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    plan = editor(kube).plan(enable=rbln_gates(dra=True))
    assert not plan.noop and plan.patch
    assert apiserver.writes() == [] and gates_of(stored(apiserver)) == []


def test_cr_being_deleted_is_refused(kube, apiserver):
    kv = o.kubevirt(feature_gates=[])
    kv["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    kv["metadata"]["finalizers"] = ["foregroundDeleteKubeVirt"]
    apiserver.add(kv)
    ed = editor(kube)
    plan = ed.plan(enable=rbln_gates())
    assert plan.blockers and "being deleted" in plan.blockers[0].message
    with pytest.raises(Refused) as err:
        ed.apply(plan)
    assert any("being deleted" in str(b) for b in err.value.blockers)
    assert apiserver.writes() == []


@pytest.mark.parametrize("bad", ["", " ", "Host Devices", "HostDevices ", "Host-Devices", "HostDevices\n", "Gate/1"])
def test_malformed_gate_names_are_rejected_before_any_request(kube, apiserver, bad):
    apiserver.add(o.kubevirt())
    apiserver.clear_requests()
    with pytest.raises(InvalidInput, match="malformed feature gate name"):
        editor(kube).plan(enable=["HostDevices", bad])
    with pytest.raises(InvalidInput, match="malformed feature gate name"):
        editor(kube).plan(disable=[bad])
    assert apiserver.requests == []


def test_disabling_an_unknown_gate_warns_about_removing_not_adding(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["NoSuchGate"], version="v1.9.0"))
    # Removing a gate the CR lists is the cleanup of a typo someone wrote: allowed, whatever its name (issue 21).
    assert editor(kube).plan(disable=["NoSuchGate"]).removed == ["NoSuchGate"]
    with pytest.raises(UnknownName):  # one the CR does not list is a typo of this command line
        editor(kube).plan(disable=["NoSuchGate", "OtherGate"])
    plan = editor(kube, allow_unknown=True).plan(disable=["NoSuchGate", "OtherGate"])
    (listed, absent) = [w for w in plan.warnings if "registers no such gate" in w]
    assert listed.endswith("registers no such gate; removing it from featureGates")
    assert absent.endswith("registers no such gate; it is not in featureGates: nothing to remove")
    assert not any("adding it anyway" in w for w in plan.warnings)
    plan = editor(kube, allow_unknown=True).plan(disable=["NoSuchGate"], add_to_disabled=True)
    assert any(w.endswith("removing it from featureGates and adding it to disabledFeatureGates anyway")
               for w in plan.warnings), plan.warnings


def test_unknown_gate_is_refused_naming_the_gate_it_most_likely_meant(kube, apiserver):
    """issue 21: KubeVirt ignores a gate it does not register, so `HostDevice` beside `HostDevices` changes nothing."""
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.clear_requests()
    with pytest.raises(UnknownName) as exc:
        editor(kube).plan(enable=["HostDevices", "HostDevice", "hostdevices", "Snapshott", "Zzz"])
    err = exc.value
    assert "'HostDevice' (did you mean HostDevices?)" in str(err) and "'hostdevices' (did you mean HostDevices?)" \
        in str(err) and "'Snapshott' (did you mean Snapshot?)" in str(err) and "'Zzz' (did" not in str(err)
    assert err.options == ("allow_unknown",) and apiserver.requests == []  # refused before any request
    # plan_gates (the library's guarantee for any front end) refuses too, and knows a newer KubeVirt may have it
    with pytest.raises(UnknownName, match="KubeVirt v1.99.0 is newer than that"):
        plan_gates(o.kubevirt(version="v1.99.0"), enable=["BrandNewGate"])


def test_unknown_gate_is_accepted_with_a_warning_when_allowed(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    ed = editor(kube, allow_unknown=True)
    plan = ed.plan(enable=["HostDevices", "BrandNewGate", "hostdevices"])
    assert any("unknown feature gate BrandNewGate" in w and w.endswith("adding it anyway") for w in plan.warnings)
    assert any("hostdevices" in w and "did you mean HostDevices" in w for w in plan.warnings)
    ed.apply(plan)
    assert gates_of(stored(apiserver)) == ["HostDevices", "BrandNewGate", "hostdevices"]


def test_disable_removes_gates_and_keeps_the_rest_in_order(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot", "HostDevicesWithDRA", "CPUManager", "HostDevices"]))
    ed = editor(kube)
    plan = ed.plan(disable=["HostDevicesWithDRA", "HostDevices"])
    assert plan.removed == ["HostDevicesWithDRA", "HostDevices"]
    # only featureGates decided the plan: it is guarded by value alone
    assert plan.patch == [
        {"op": "test", "path": FG, "value": ["Snapshot", "HostDevicesWithDRA", "CPUManager", "HostDevices"]},
        {"op": "replace", "path": FG, "value": ["Snapshot", "CPUManager"]},
    ]
    # HostDevicesWithDRA is Beta in 1.9: removing it from the list leaves it on, and we say so
    assert any("HostDevicesWithDRA stays on" in w and "disabledFeatureGates" in w for w in plan.warnings)
    ed.apply(plan)
    assert gates_of(stored(apiserver)) == ["Snapshot", "CPUManager"]
    apiserver.clear_requests()
    again = ed.plan(disable=["HostDevicesWithDRA", "HostDevices"])
    assert again.noop and not ed.apply(again).changed and apiserver.writes() == []


def test_disable_with_add_to_disabled_lists_the_gate_there(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"]))
    ed = editor(kube)
    plan = ed.plan(disable=["HostDevicesWithDRA"], add_to_disabled=True)
    assert plan.newly_disabled == ["HostDevicesWithDRA"] and plan.warnings == []
    ed.apply(plan)
    dev = stored(apiserver)["spec"]["configuration"]["developerConfiguration"]
    assert dev["featureGates"] == ["HostDevices"] and dev["disabledFeatureGates"] == ["HostDevicesWithDRA"]


def test_add_to_disabled_needs_kubevirt_1_8(kube, apiserver):
    """disabledFeatureGates exists from KubeVirt v1.8.0 (api/core/v1 DeveloperConfiguration)."""
    apiserver.add(o.kubevirt(feature_gates=["HostDevicesWithDRA"], version="v1.7.4"))
    plan = editor(kube).plan(disable=["HostDevicesWithDRA"], add_to_disabled=True)
    assert plan.blockers and "disabledFeatureGates needs KubeVirt >= 1.8.0" in plan.blockers[0].message
    assert plan.blockers[0].override == "force"
    on_1_8 = o.kubevirt("kv18", "k18", feature_gates=["HostDevicesWithDRA"], version="v1.8.0")
    on_1_8["metadata"]["resourceVersion"] = "7"
    p18 = plan_gates(on_1_8, disable=["HostDevicesWithDRA"], add_to_disabled=True)
    assert p18.blockers == [] and any("changes nothing there" in w for w in p18.warnings)


def test_plan_gates_rejects_the_same_gate_both_ways():
    with pytest.raises(InvalidInput, match="cannot enable and disable HostDevices at once"):
        plan_gates(o.kubevirt(), enable=["HostDevices"], disable=["HostDevices"])


@pytest.mark.parametrize("version", [None, "v1.8.2"])
def test_rerun_with_gates_already_listed_is_a_noop_whatever_the_version(kube, apiserver, version):
    """The version floor guards adding HostDevicesWithDRA; when it is already listed there is nothing to refuse."""
    kv = o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], version=version or "v1.9.0")
    if version is None:
        del kv["status"]["observedKubeVirtVersion"]
    apiserver.add(kv)
    ed = editor(kube)
    plan = ed.plan(enable=rbln_gates(dra=True))
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
    plan = editor(kube).plan(disable=["HostDevicesWithDRA"], add_to_disabled=True)
    assert plan.noop and plan.blockers == []


def test_disable_without_a_gate_is_invalid_before_any_request(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.clear_requests()
    with pytest.raises(InvalidInput, match="name at least one feature gate"):
        editor(kube).plan(disable=[])
    assert apiserver.requests == []
