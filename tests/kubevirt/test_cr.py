"""rblnctl.kubevirt.cr: finding the CR, guarded JSON Patches, and the conflict retry loop (through the editors)."""

from __future__ import annotations

import pytest

from rblnctl.errors import (
    Ambiguous,
    ClusterError,
    ConfigError,
    Conflict,
    Forbidden,
    NotFound,
    OutcomeUnknown,
    Refused,
)
from rblnctl.kubevirt.cr import LOST_REPLY, find_kubevirt
from rblnctl.kubevirt.gates import rbln_gates
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from tests.kubevirt.support import FG, JSON_PATCH, editor, gates_of, kv_patches, stored


def test_no_kubevirt_cr_is_a_clear_not_found(kube, apiserver):
    with pytest.raises(NotFound, match="no KubeVirt installation found"):
        editor(kube).plan(enable=rbln_gates())
    assert apiserver.writes() == []


def test_missing_kubevirt_crd_is_the_same_not_found(kube, apiserver):
    apiserver.remove_resource("kubevirts.kubevirt.io")
    with pytest.raises(NotFound, match="no KubeVirt installation found"):
        find_kubevirt(kube)


def test_two_crs_are_listed_and_name_namespace_pick_one(kube, apiserver):
    apiserver.add(o.kubevirt("kubevirt", "kubevirt"), o.kubevirt("kv2", "other"))
    with pytest.raises(Ambiguous) as err:
        find_kubevirt(kube)
    assert "kubevirt/kubevirt" in str(err.value) and "kv2/other" in str(err.value)
    assert err.value.choices == ["kubevirt/kubevirt", "kv2/other"] and err.value.options == ("name", "namespace")
    assert find_kubevirt(kube, name="other", namespace="kv2")["metadata"]["namespace"] == "kv2"
    assert find_kubevirt(kube, namespace="kv2")["metadata"]["name"] == "other"
    assert find_kubevirt(kube, name="other")["metadata"]["namespace"] == "kv2"
    with pytest.raises(NotFound, match='"nope" not found in namespace "kv2"'):
        find_kubevirt(kube, name="nope", namespace="kv2")


def test_no_configuration_adds_every_parent_in_order(kube, apiserver):
    apiserver.add(o.kubevirt(with_configuration=False))
    rv = stored(apiserver)["metadata"]["resourceVersion"]
    ed = editor(kube)
    plan = ed.plan(enable=rbln_gates())
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


def test_server_dry_run_sends_dry_run_all_and_persists_nothing(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    ed = editor(kube, server_dry_run=True)
    result = ed.apply(ed.plan(enable=rbln_gates()))
    assert result.changed and result.server_dry_run
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
    plan = ed.plan(enable=rbln_gates())
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
    result = ed.apply(ed.plan(enable=rbln_gates()))
    assert not result.changed and result.attempts == 1 and result.plan.noop
    assert gates_of(stored(apiserver)) == ["HostDevices"]


def test_persistent_conflict_fails_clearly_after_bounded_attempts(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    n = iter(range(100))

    def busy_operator(req):
        if req.method == "PATCH":
            apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", lambda kv: gates_of(kv).append(f"Gate{next(n)}"))

    apiserver.on_request(busy_operator)
    clock = FakeClock()
    ed = editor(kube, clock=clock)
    plan = ed.plan(enable=rbln_gates())
    with pytest.raises(Conflict) as err:
        ed.apply(plan)
    assert "gave up after 5 attempts" in str(err.value) and "kubevirt/kubevirt" in str(err.value)
    assert "nothing was changed" in str(err.value)
    assert [r.status for r in kv_patches(apiserver)] == [422] * 5
    assert clock.sleeps == [0.2, 0.4, 0.8, 1.6]
    final = gates_of(stored(apiserver))
    assert "HostDevices" not in final and final[:1] == ["Snapshot"] and len(final) == 6


def test_http_409_is_retried_like_a_failed_test(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.inject_fault(method="PATCH", path="/kubevirts/", status=409, reason="Conflict",
                           message="the object has been modified")
    ed = editor(kube)
    result = ed.apply(ed.plan(enable=rbln_gates()))
    assert result.changed and result.attempts == 2
    assert gates_of(stored(apiserver)) == ["HostDevices"]


# -- a reply lost in transit: the re-read CR settles it -------------------------------------------


def test_lost_reply_whose_patch_landed_is_settled_by_reading_back(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot", "HostDevices"]))
    apiserver.inject_fault(method="PATCH", path="kubevirts", lose_reply=True)
    clock = FakeClock()
    retries = []
    ed = editor(kube, clock=clock, on_retry=lambda n, msg: retries.append(n))
    result = ed.apply(ed.plan(disable=["HostDevices"]))
    # the plan that was sent is reported (not the no-op re-plan), and it is not sent again
    assert result.changed and result.attempts == 1 and result.plan.removed == ["HostDevices"]
    (req,) = kv_patches(apiserver)
    assert req.reply_lost and req.applied
    assert gates_of(stored(apiserver)) == ["Snapshot"]
    assert retries == [] and clock.sleeps == []
    assert [r.method for r in apiserver.requests if r.path.endswith("/kubevirts/kubevirt")][-1] == "GET"


def test_lost_reply_whose_patch_did_not_land_is_replanned_and_sent_again(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    apiserver.inject_fault(method="PATCH", path="kubevirts", drop=True)  # dropped before it was handled
    clock = FakeClock()
    retries = []
    ed = editor(kube, clock=clock, on_retry=lambda n, msg: retries.append((n, msg)))
    result = ed.apply(ed.plan(enable=rbln_gates()))
    assert result.changed and result.attempts == 2
    assert [n for n, _ in retries] == [1] and retries[0][1].startswith(LOST_REPLY)
    assert clock.sleeps == []  # nothing to wait for: no other writer was seen
    assert gates_of(stored(apiserver)) == ["Snapshot", "HostDevices"]
    first, second = kv_patches(apiserver)
    assert second.body[0]["op"] == "test"  # the re-sent patch is guarded by what was read back


def test_lost_replies_that_never_land_give_up_after_bounded_attempts(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.inject_fault(method="PATCH", path="kubevirts", drop=True, times=10)
    ed = editor(kube, max_attempts=2)
    with pytest.raises(Conflict, match="gave up after 2 attempts, its last reply was lost"):
        ed.apply(ed.plan(enable=rbln_gates()))
    assert len(kv_patches(apiserver)) == 2 and gates_of(stored(apiserver)) == []


def test_lost_reply_and_failed_read_back_is_outcome_unknown(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.inject_fault(method="PATCH", path="kubevirts", lose_reply=True)
    ed = editor(kube)
    plan = ed.plan(disable=["HostDevices"])
    apiserver.forbid("get", "kubevirts")
    with pytest.raises(OutcomeUnknown, match="may have been applied.*reading KubeVirt kubevirt/kubevirt back"):
        ed.apply(plan)
    assert len(kv_patches(apiserver)) == 1


def test_other_422_is_not_retried(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.inject_fault(method="PATCH", path="/kubevirts/", status=422, reason="Invalid",
                           message='admission webhook "kubevirt-update-validator.kubevirt.io" denied the request')
    ed = editor(kube)
    with pytest.raises(ClusterError) as err:
        ed.apply(ed.plan(enable=rbln_gates()))
    assert not isinstance(err.value, Conflict) and err.value.status == 422
    assert len(kv_patches(apiserver)) == 1


def test_403_on_patch_names_verb_resource_and_namespace(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.forbid("patch", "kubevirts", namespace="kubevirt")
    ed = editor(kube)
    plan = ed.plan(enable=rbln_gates())  # reads are still allowed
    with pytest.raises(Forbidden) as err:
        ed.apply(plan)
    msg = str(err.value)
    assert "patch" in msg and "kubevirts.kubevirt.io" in msg and 'namespace "kubevirt"' in msg
    assert gates_of(stored(apiserver)) == []


def test_null_parent_is_replaced_by_an_object(kube, apiserver):
    kv = o.kubevirt()
    kv["spec"]["configuration"]["developerConfiguration"] = None
    apiserver.add(kv)
    ed = editor(kube)
    plan = ed.plan(enable=rbln_gates())
    assert {"op": "replace", "path": "/spec/configuration/developerConfiguration", "value": {}} in plan.patch
    ed.apply(plan)
    assert gates_of(stored(apiserver)) == ["HostDevices"]


@pytest.mark.parametrize(("where", "value"), [
    (("spec", "configuration"), "oops"),
    (("spec", "configuration", "developerConfiguration"), ["HostDevices"]),
])
def test_parent_that_is_not_an_object_is_refused_not_overwritten(kube, apiserver, where, value):
    kv = o.kubevirt(with_configuration=False) if where == ("spec", "configuration") else o.kubevirt()
    kv["spec"]["configuration"] = value if len(where) == 2 else {"developerConfiguration": value}
    apiserver.add(kv)
    with pytest.raises(Refused, match=rf"{'.'.join(where[1:])} is a (str|list), not an object; fix the CR by hand"):
        editor(kube).plan(enable=rbln_gates())
    assert apiserver.writes() == []


def test_max_attempts_below_one_is_a_config_error(kube):
    with pytest.raises(ConfigError, match="max_attempts must be at least 1"):
        editor(kube, max_attempts=0)
