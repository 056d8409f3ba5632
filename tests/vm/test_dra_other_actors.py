"""Issue 37 on the DRA path of `vm attach` (no --restart): another actor between rblnctl's read, its template create,
its VM patch and its template delete (the explorer's world `vm-attach-dra`, tests/explore/worlds.py, one step at a
time on the fake). The VM patch carries the identity and the run state it was decided on; the result is judged with
the uid; what an interrupted run left (rblnctl's unused ResourceClaimTemplate) the re-run deletes."""

from __future__ import annotations

import uuid

import pytest

from rblnctl.errors import Refused, Replaced
from tests.fakes import objects as o
from tests.vm.support import NS, attacher, dra_cluster

VM_PATH = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/v1"
SUB = f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/v1/"


def world(apiserver) -> None:
    """A stopped VM with 1 NPU through rblnctl's template rbln-npu-1 (placed on n1 when it starts)."""
    apiserver.simulate_kubevirt = True
    dra_cluster(apiserver)
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-1"), o.dra_vm(NS, "v1", 1, node="n1"))


def templates(apiserver) -> list[str]:
    return sorted(t["metadata"]["name"] for t in apiserver.list("ResourceClaimTemplate", NS))


def vm(apiserver) -> dict:
    return apiserver.get("VirtualMachine", "v1", NS)


def npu_patches(apiserver) -> list:
    return [r for r in apiserver.requests if r.method == "PATCH" and r.path == VM_PATH]


def after_the_npu_patch(apiserver, action) -> None:
    """`action` runs once rblnctl's NPU patch of the VM was handled, before its reply is sent."""
    armed = [True]

    def hook(req):
        if armed[0] and req.method == "PATCH" and req.path == VM_PATH and 200 <= req.status < 300:
            armed[0] = False
            action()
    apiserver.on_handled(hook)


def recreate(apiserver) -> None:
    """The owner: `kubectl delete`, then `kubectl create` from its manifest (1 NPU, rbln-npu-1; another uid)."""
    apiserver.delete_now("VirtualMachine", "v1", NS)
    fresh = o.dra_vm(NS, "v1", 1, node="n1")
    fresh["metadata"]["uid"] = str(uuid.uuid4())
    apiserver.add(fresh)


def test_a_vm_recreated_after_its_patch_is_not_reported_done(apiserver, kube):
    """Before: exit 0, "VM vms/v1: 1 -> 2 NPU(s)", while the VM there is a new one with 1 NPU naming rbln-npu-1 (the
    explorer's vm-attach-dra owner-recreate at after-02)."""
    world(apiserver)
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    old_uid = plan.uid
    after_the_npu_patch(apiserver, lambda: recreate(apiserver))
    with pytest.raises(Replaced, match="was deleted and re-created while rblnctl changed its NPUs") as err:
        planner.apply(plan)
    assert any(f"uid {old_uid}" in str(d) for d in err.value.details)
    now = vm(apiserver)
    assert now["metadata"]["uid"] != old_uid and len(now["spec"]["template"]["spec"]["domain"]["devices"][
        "hostDevices"]) == 1
    assert templates(apiserver) == ["rbln-npu-1", "rbln-npu-2"]  # the new VM names rbln-npu-1: kept


def test_a_vm_started_after_the_read_is_not_patched_as_stopped(apiserver, kube):
    """Before: the patch landed on the running VM (its uid test held) and the run said done while the VMI ran on
    with 1 NPU (the explorer's vm-attach-dra owner-start at before-01 and after-01)."""
    world(apiserver)
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    assert {"op": "test", "path": "/spec/runStrategy", "value": "Halted"} in (plan.patch or [])
    apiserver._kubevirt.handle("PUT", SUB + "start", {})  # the owner: `virtctl start v1`
    assert vm(apiserver)["spec"]["runStrategy"] == "Always"
    apiserver.clear_requests()
    with pytest.raises(Refused, match="was started by someone else after rblnctl read it as stopped") as err:
        planner.apply(plan)
    assert [r.status for r in npu_patches(apiserver)] == [422]  # the run-state test refused it
    assert len(vm(apiserver)["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]) == 1
    (blocker,) = err.value.blockers
    assert blocker.remedy is not None and blocker.remedy.command.option_map.get("restart") is True
    assert any("rbln-npu-2 was created for the change" in str(d) for d in err.value.details)


def test_a_manual_vm_whose_start_was_asked_after_the_read_is_not_patched(apiserver, kube):
    """A Manual VM's start only appends a Start request to status.stateChangeRequests: the patch tests it too."""
    world(apiserver)
    apiserver.simulate_kubevirt = False  # the request stays pending (virt-controller has not acted yet)
    apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"].update(runStrategy="Manual"))
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v.setdefault("status", {}).update(
        stateChangeRequests=[{"action": "Start"}]))
    apiserver.clear_requests()
    with pytest.raises(Refused, match=r"a Start request is pending"):
        planner.apply(plan)
    assert [r.status for r in npu_patches(apiserver)] == [422]


def test_a_template_delete_its_precondition_refused_is_judged_again(apiserver, kube):
    """A 409 on the delete (its resourceVersion precondition: the template was written meanwhile) is read again and
    judged again. Before: "kept: it changed while rblnctl was deleting it", exit 0, the template left for ever (the
    explorer's crash point vm-attach-dra 03-DELETE conflict)."""
    world(apiserver)
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    apiserver.inject_fault(method="DELETE", path="/resourceclaimtemplates/rbln-npu-1$", status=409,
                           reason="Conflict", message="Precondition failed: ResourceVersion", times=1)
    result = planner.apply(plan)
    assert result.templates_deleted == ["rbln-npu-1"] and templates(apiserver) == ["rbln-npu-2"]


def test_a_template_an_interrupted_run_left_is_named_with_the_command_that_deletes_it(apiserver, kube):
    """The re-run of an interrupted attach says "nothing to do" and names rblnctl's template no VM uses, with the
    command that deletes it (it does not delete it itself: another run's template, created a moment before its VM
    patch, looks the same; the explorer's vm-attach-dra second-opposite at after-01). Not someone else's."""
    world(apiserver)
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-3", npus=3),
                  o.resource_claim_template(NS, "theirs", managed=False))
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.noop
    notes = [str(w) for w in plan.warnings if "no VM or VMI of the namespace names it" in str(w)]
    assert len(notes) == 1 and f"`kubectl delete resourceclaimtemplate rbln-npu-3 -n {NS}`" in notes[0]
    assert templates(apiserver) == ["rbln-npu-1", "rbln-npu-3", "theirs"]


def test_templates_rbac_will_not_list_leave_the_plan_as_it_was(apiserver, kube):
    """Naming unused templates is a note: a 403 on the list (RBAC per namespace) names none and stops nothing."""
    world(apiserver)
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-3", npus=3))
    apiserver.inject_fault(method="GET", path=f"/namespaces/{NS}/resourceclaimtemplates$", status=403,
                           reason="Forbidden", message="cannot list resource resourceclaimtemplates", times=5)
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.noop and not plan.blockers
    assert not [w for w in plan.warnings if "no VM or VMI of the namespace names it" in str(w)]


def _interrupted_before_the_delete(apiserver, kube) -> None:
    """`vm attach v1 --npus 2` killed after its NPU patch landed, before it deleted rbln-npu-1 (the explorer's
    vm-attach-dra 02-PATCH sigterm and 03-DELETE sigint): the VM names rbln-npu-2 and records the one it left."""
    world(apiserver)
    apiserver.inject_fault(method="DELETE", path="/resourceclaimtemplates/rbln-npu-1$", drop=True, times=100)
    planner = attacher(kube, npus=2)
    with pytest.raises(Exception):  # noqa: B017, PT011 - a dropped connection, however the client words it
        planner.apply(planner.plan("v1", NS))
    apiserver.clear_faults()
    assert templates(apiserver) == ["rbln-npu-1", "rbln-npu-2"]
    left = vm(apiserver)["metadata"]["annotations"]["rebellions.ai/rblnctl.template-left"]
    assert left.startswith("rbln-npu-1 uid=")


def test_the_rerun_of_an_attach_interrupted_before_its_template_delete_deletes_that_template(apiserver, kube):
    """Before: the re-run said "nothing to do" and rbln-npu-1, rblnctl's and unused, stayed for ever (issue 37)."""
    _interrupted_before_the_delete(apiserver, kube)
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    assert not plan.noop and plan.patch is None and plan.templates_delete == ["rbln-npu-1"]
    result = planner.apply(plan)
    assert result.templates_deleted == ["rbln-npu-1"] and templates(apiserver) == ["rbln-npu-2"]
    assert attacher(kube, npus=2).plan("v1", NS).noop  # and then there is nothing left to do


@pytest.mark.parametrize("meanwhile", ["recreated", "used"])
def test_the_rerun_leaves_a_left_template_that_is_another_object_or_in_use(apiserver, kube, meanwhile):
    """Only the object the VM left, and only while nothing names it: a template of that name re-created since
    (another uid) or named by another VM is not deleted."""
    _interrupted_before_the_delete(apiserver, kube)
    if meanwhile == "recreated":
        apiserver.delete_now("ResourceClaimTemplate", "rbln-npu-1", NS)
        again = o.resource_claim_template(NS, "rbln-npu-1")
        again["metadata"]["uid"] = str(uuid.uuid4())
        apiserver.add(again)
    else:
        apiserver.add(o.dra_vm(NS, "other", 1))
    plan = attacher(kube, npus=2).plan("v1", NS)
    assert plan.noop and plan.templates_delete == []
    assert templates(apiserver) == ["rbln-npu-1", "rbln-npu-2"]


def test_set_methods_clean_up_of_a_vm_left_with_no_npus_deletes_the_template_and_adds_no_npu(apiserver, kube):
    """`vm detach` of every NPU, interrupted before its template delete; set-method's clean-up (clean_up_left)
    deletes the template and changes nothing else. Before (a review of the first version): the clean-up went through
    a conversion plan whose NPU count defaults to 1, and gave the VM an NPU."""
    from tests.vm.support import detacher

    world(apiserver)
    apiserver.inject_fault(method="DELETE", path="/resourceclaimtemplates/rbln-npu-1$", drop=True, times=100)
    planner = detacher(kube)
    with pytest.raises(Exception):  # noqa: B017, PT011 - a dropped connection, however the client words it
        planner.apply(planner.plan("v1", NS))
    apiserver.clear_faults()
    before = vm(apiserver)["spec"]
    assert not before["template"]["spec"].get("resourceClaims") and templates(apiserver) == ["rbln-npu-1"]
    assert attacher(kube).clean_up_left("v1", NS) == ["rbln-npu-1"]
    assert templates(apiserver) == [] and vm(apiserver)["spec"] == before
