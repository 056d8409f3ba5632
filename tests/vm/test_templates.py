"""rblnctl's ResourceClaimTemplates: deleted only when no VM and no live VMI of the namespace names them, judged
at plan time and again just before the delete (issue 23: each in-between state built by a fixture).

A VMI keeps the spec it started with, so the users of a template are read from every VirtualMachine's template
spec (spec.template.spec) and every unfinished VMI's own spec (spec): a VMI made by hand, or one whose VM was
changed after it started, still holds a claim made from the template.
"""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.vm.support import NS, appears_at, detacher, dra_cluster

TEMPLATE = "rbln-npu-2"
RCT_PATH = r"/resourceclaimtemplates/rbln-npu-2$"


def _templates(apiserver) -> list[str]:
    return sorted(t["metadata"]["name"] for t in apiserver.list("ResourceClaimTemplate", NS))


def _cluster_with_v1(apiserver) -> None:
    """DRA cluster; VM v1 (stopped) has 2 NPUs through rblnctl's template rbln-npu-2, which it alone names."""
    dra_cluster(apiserver)
    apiserver.add(o.resource_claim_template(NS, TEMPLATE, npus=2), o.resource_claim_template(NS, "rbln-npu-1"),
                  o.dra_vm(NS, "v1", 2))


def _running_users():
    """A VMI that runs with rbln-npu-2 while no VM other than v1 names it."""
    yield pytest.param([o.dra_vmi(NS, "scratch", "n1", 2, standalone=True)], "VirtualMachineInstance scratch",
                       id="standalone-vmi")
    # v2 was started with 2 NPUs, then given 1 (its template now names rbln-npu-1): its VMI still runs on rbln-npu-2
    yield pytest.param([o.dra_vm(NS, "v2", 1, running=True), o.dra_vmi(NS, "v2", "n1", 2)],
                       "VirtualMachineInstance v2", id="vmi-of-a-changed-vm")
    yield pytest.param([o.dra_vmi(NS, "starting", None, 2, phase="Scheduling", standalone=True)],
                       "VirtualMachineInstance starting", id="vmi-still-scheduling")


@pytest.mark.parametrize(("users", "named"), list(_running_users()))
def test_a_running_vmi_naming_the_template_keeps_it(apiserver, kube, users, named):
    _cluster_with_v1(apiserver)
    apiserver.add(*users)
    planner = detacher(kube)
    plan = planner.plan("v1", NS)
    assert plan.templates_delete == []
    assert plan.templates_kept == [f"ResourceClaimTemplate {TEMPLATE} kept: {named} still uses it"]
    result = planner.apply(plan)
    assert result.changed and result.templates_deleted == []
    assert _templates(apiserver) == ["rbln-npu-1", TEMPLATE]
    assert apiserver.requests_matching("DELETE", RCT_PATH) == []


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_vmi_naming_the_template_does_not_keep_it(apiserver, kube, phase):
    """A VMI that has ended holds no claim any more (its virt-launcher pod is done): the template goes."""
    _cluster_with_v1(apiserver)
    apiserver.add(o.dra_vmi(NS, "done", "n1", 2, phase=phase, standalone=True))
    planner = detacher(kube)
    plan = planner.plan("v1", NS)
    assert plan.templates_delete == [TEMPLATE] and plan.templates_kept == []
    assert planner.apply(plan).templates_deleted == [TEMPLATE]
    assert _templates(apiserver) == ["rbln-npu-1"]


def _newcomers():
    """Something that names rbln-npu-2, made by another user after rblnctl planned to delete it."""
    yield pytest.param(lambda: [o.dra_vm(NS, "v2", 2)], "VirtualMachine v2", id="vm")
    yield pytest.param(lambda: [o.dra_vmi(NS, "scratch", "n1", 2, standalone=True)], "VirtualMachineInstance scratch",
                       id="standalone-vmi")


@pytest.mark.parametrize(("newcomer", "named"), list(_newcomers()))
@pytest.mark.parametrize("when", ["before-apply", "at-the-vm-patch"])
def test_a_vm_naming_the_template_after_plan_keeps_it(apiserver, kube, newcomer, named, when):
    """plan() found no other user, so it plans the delete; the users are read again just before it."""
    _cluster_with_v1(apiserver)
    planner = detacher(kube)
    plan = planner.plan("v1", NS)
    assert plan.templates_delete == [TEMPLATE]
    if when == "before-apply":
        apiserver.add(*newcomer())
    else:  # after apply() started: v1 is being patched when the newcomer is made
        appears_at(apiserver, "PATCH", r"/virtualmachines/v1$", *newcomer())
    result = planner.apply(plan)
    assert result.changed and result.templates_deleted == []
    assert result.templates_kept == [f"ResourceClaimTemplate {TEMPLATE} kept: {named} now uses it"]
    assert _templates(apiserver) == ["rbln-npu-1", TEMPLATE]
    assert apiserver.requests_matching("DELETE", RCT_PATH) == []


def test_without_a_newcomer_the_planned_delete_happens(apiserver, kube):
    """The control case of the test above: the same plan and apply delete the template."""
    _cluster_with_v1(apiserver)
    planner = detacher(kube)
    result = planner.apply(planner.plan("v1", NS))
    assert result.templates_deleted == [TEMPLATE] and _templates(apiserver) == ["rbln-npu-1"]


def test_a_template_replaced_by_a_hand_made_one_after_plan_is_not_deleted(apiserver, kube):
    """Between plan and apply someone deletes rblnctl's template and makes their own of that name: not rblnctl's
    (no managed-by label), so it is not deleted, whoever uses it."""
    _cluster_with_v1(apiserver)
    planner = detacher(kube)
    plan = planner.plan("v1", NS)
    assert plan.templates_delete == [TEMPLATE]
    apiserver.delete_now("ResourceClaimTemplate", TEMPLATE, NS)
    apiserver.add(o.resource_claim_template(NS, TEMPLATE, npus=2, managed=False))
    result = planner.apply(plan)
    assert result.changed and result.templates_deleted == []
    assert _templates(apiserver) == ["rbln-npu-1", TEMPLATE]
    assert apiserver.requests_matching("DELETE", RCT_PATH) == []


def test_a_server_dry_run_sends_the_delete_with_dry_run_and_keeps_the_template(apiserver, kube):
    """--dry-run=server: the users read at plan time decide (nothing persists, so apply does not read them again);
    the delete is validated by the server, and the template stays."""
    _cluster_with_v1(apiserver)
    planner = detacher(kube, server_dry_run=True)
    plan = planner.plan("v1", NS)
    apiserver.clear_requests()
    result = planner.apply(plan)
    assert result.server_dry_run and result.templates_deleted == [TEMPLATE]
    (delete,) = apiserver.requests_matching("DELETE", RCT_PATH)
    assert delete.dry_run and _templates(apiserver) == ["rbln-npu-1", TEMPLATE]


def test_the_vm_itself_put_back_on_the_template_after_the_patch_keeps_it(apiserver, kube):
    """Issue 37 (the explorer's second-opposite): rblnctl patched v1 off rbln-npu-2, then a second rblnctl put it
    back on rbln-npu-2 before the delete. The users read again just before the delete are every VM, v1 too: deleting
    it left v1 naming a template that no longer existed (v1 could not start)."""
    _cluster_with_v1(apiserver)
    planner = detacher(kube)
    plan = planner.plan("v1", NS)
    assert plan.templates_delete == [TEMPLATE]

    def put_back(req):
        if req.method == "PATCH" and req.path.endswith("/virtualmachines/v1"):
            apiserver.update({**o.dra_vm(NS, "v1", 2), "metadata": {
                **apiserver.get("VirtualMachine", "v1", NS)["metadata"]}})
    stop = apiserver.on_handled(put_back)
    try:
        result = planner.apply(plan)
    finally:
        stop()
    assert result.templates_deleted == []
    assert result.templates_kept == [f"ResourceClaimTemplate {TEMPLATE} kept: VirtualMachine v1 now uses it"]
    assert _templates(apiserver) == ["rbln-npu-1", TEMPLATE]
    assert apiserver.requests_matching("DELETE", RCT_PATH) == []
