"""The stopped-by-rblnctl mark (rebellions.ai/rblnctl.stopped) is acted on only while the VM is stopped.

rblnctl marks a VM before it stops it and clears the mark once it has started it again; when it cannot start it,
the mark stays so that the next run does (tests/vm/test_restart.py). A VM that runs while it carries the mark was
started by someone else (`virtctl start`, as the error told them): it is not rblnctl's to start, stop or restart.
"""

from __future__ import annotations

import pytest

from rblnctl.errors import Forbidden
from rblnctl.vm.attach import stale_mark
from rblnctl.vm.lifecycle import VmLifecycle
from tests.fakes import objects as o
from tests.vm.support import CA22, NS, attacher, sandbox_cluster, vm_writes
from tests.vm.test_restart import DENIED, START, is_running, npu_patch_fails, running_vm, vm
from rblnctl.constants import VM_STOPPED_ANNOTATION as STOPPED


def marked_but_started_by_hand(apiserver) -> None:
    """VM v1 carries the mark of a run that could not start it, and runs: someone started it since."""
    sandbox_cluster(apiserver)
    vm = o.vm(NS, "v1", host_devices=[CA22])
    vm["metadata"]["annotations"] = {STOPPED: "2026-01-01T00:00:00Z"}
    apiserver.add(vm, o.vmi(NS, "v1", "n1", [CA22]))


def test_a_running_vm_with_the_mark_is_not_started_again(apiserver, kube):
    marked_but_started_by_hand(apiserver)
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.noop and not plan.start and not plan.blockers
    assert not any("stopped by an earlier rblnctl run" in str(w) for w in plan.warnings)
    assert attacher(kube, npus=1).apply(plan).changed is False and vm_writes(apiserver) == []


def test_a_change_to_a_running_vm_with_the_mark_is_refused_as_running(apiserver, kube):
    marked_but_started_by_hand(apiserver)
    plan = attacher(kube, npus=2).plan("v1", NS)
    (b,) = plan.blockers
    assert b.override == "restart" and "is running" in b.message and not plan.start


# -- a mark someone else's start and stop made stale ---------------------------------------------------------------
#
# The mark records the VM's generation. One rblnctl run changes the VM's spec at most twice while it holds the mark
# (the stop's runStrategy, the NPU patch); a user's `virtctl start` and `virtctl stop` change it twice more. Before
# the generation was recorded, a VM rblnctl had left stopped, then started and stopped again by its owner, was started
# by the next `vm attach` as if rblnctl still held it.


def left_stopped(apiserver, kube, *, npus: int = 2) -> None:
    """A `vm attach --restart` that stopped v1 and could neither change it nor start it again."""
    planner = attacher(kube, npus=npus, restart=True)
    plan = planner.plan("v1", NS)
    unhook = npu_patch_fails(apiserver, status=403, reason="Forbidden", message=DENIED)
    apiserver.inject_fault(method="PUT", path=START, status=500, times=20)
    with pytest.raises(Forbidden):
        planner.apply(plan)
    unhook()
    apiserver.clear_faults()
    assert not is_running(apiserver)


def by_hand(kube, action: str) -> None:
    """The owner starts or stops v1 through virt-api (as `virtctl start|stop` does) and waits."""
    life = VmLifecycle(kube=kube, timeout_s=30)
    life.apply(life.plan(action, "v1", NS, wait=True))


def test_the_mark_records_what_the_vm_was_when_rblnctl_stopped_it(apiserver, kube):
    """uid, generation, the generation its last VMI started from (status.observedGeneration) and its runStrategy as
    rblnctl's stop left it (issue 37)."""
    running_vm(apiserver)
    left_stopped(apiserver, kube)
    now = vm(apiserver)
    observed = str(now["status"].get("observedGeneration", "none"))
    value = now["metadata"]["annotations"][STOPPED]
    assert f" uid={now['metadata']['uid']} generation={now['metadata']['generation']} observed=" in value
    assert value.endswith(" run=Halted") and observed in value.split("observed=")[1].split()[0].split(",")


def test_a_vm_started_and_stopped_by_hand_since_is_not_started_by_the_next_run(apiserver, kube):
    running_vm(apiserver)
    left_stopped(apiserver, kube)
    by_hand(kube, "start")
    by_hand(kube, "stop")
    plan = attacher(kube, npus=2).plan("v1", NS)
    assert not plan.start and plan.stale_mark and not plan.noop and not plan.blockers
    (w,) = [str(w) for w in plan.warnings if "carries the mark" in str(w)]
    assert "it was started since" in w and "stopped again: by someone else" in w and f"virtctl start v1 -n {NS}" in w
    result = attacher(kube, npus=2).apply(plan)
    assert result.changed and not result.restarted and not is_running(apiserver)  # changed, left as its owner left it
    assert STOPPED not in (vm(apiserver)["metadata"].get("annotations") or {})  # the stale mark went with the change


def test_a_stale_mark_on_a_vm_with_nothing_to_change_is_left_and_named(apiserver, kube):
    sandbox_cluster(apiserver)
    stopped = o.vm(NS, "v1", host_devices=[CA22], running=False)
    stopped["metadata"].update(generation=10, annotations={STOPPED: "2026-01-01T00:00:00Z generation=5"})
    apiserver.add(stopped)
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.noop and not plan.start
    assert any(f"annotate vm v1 -n {NS} {STOPPED}-" in str(w) for w in plan.warnings)
    apiserver.clear_requests()
    assert attacher(kube, npus=1).apply(plan).changed is False and vm_writes(apiserver) == []


def test_runs_that_keep_failing_to_start_it_renew_the_mark_so_a_later_run_still_starts_it(apiserver, kube):
    """Each resumed run patches the VM (a generation each): it renews the mark first, so its own writes never make
    the mark look stale to the run after it."""
    running_vm(apiserver)
    left_stopped(apiserver, kube)
    for npus in (2, 3):  # resumed runs whose change is made but whose start fails
        apiserver.inject_fault(method="PUT", path=START, status=500, times=20)
        with pytest.raises(Exception):
            attacher(kube, npus=npus).apply(attacher(kube, npus=npus).plan("v1", NS))
        apiserver.clear_faults()
        assert not is_running(apiserver) and vm(apiserver)["metadata"]["annotations"][STOPPED]
    plan = attacher(kube, npus=3).plan("v1", NS)
    assert plan.start and not plan.stale_mark
    assert attacher(kube, npus=3).apply(plan).ready and is_running(apiserver)


@pytest.mark.parametrize("value, generation, stale", [
    ("2026-01-01T00:00:00Z", 40, False),  # an older rblnctl's mark (a time only): taken as it was meant
    ("2026-01-01T00:00:00Z generation=7", 7, False),
    ("2026-01-01T00:00:00Z generation=7", 9, False),  # the run's own stop and patch
    ("2026-01-01T00:00:00Z generation=7", 10, True),
])
def test_stale_mark(value, generation, stale):
    vm = {"metadata": {"generation": generation, "annotations": {STOPPED: value}}}
    assert bool(stale_mark(vm)) is stale


MARK = "2026-01-01T00:00:00Z uid=u1 generation=7 observed=5 run=Halted"


@pytest.mark.parametrize("observed, stale", [(5, False), (6, False), (7, True)])
def test_a_mark_set_while_a_vmi_was_there_allows_the_generation_virt_controller_may_bump_to(observed, stale):
    """Set while the VMI was still there (status.created), the mark allows the VM's generation then too: real
    virt-controller moves observedGeneration to it after a stop's runStrategy flip (measured on v1.9.0)."""
    from rblnctl.vm.attach import mark_value

    then = {"metadata": {"uid": "u1", "generation": 6}, "spec": {"runStrategy": "Halted"},
            "status": {"observedGeneration": 5, "created": True}}
    value = mark_value("2026-01-01T00:00:00Z", then)
    assert value.endswith(" observed=5,6 run=Halted")
    now = {"metadata": {"uid": "u1", "generation": 7, "annotations": {STOPPED: value}},
           "spec": {"runStrategy": "Halted"}, "status": {"observedGeneration": observed}}
    assert bool(stale_mark(now)) is stale


@pytest.mark.parametrize("uid, generation, observed, run, requests, stale", [
    ("u1", 7, 5, "Halted", [], None),
    ("u1", 12, 5, "Halted", [], None),  # its spec edited since (its memory): not a start, the mark stands (37.4)
    ("u2", 7, 5, "Halted", [], "deleted and re-created"),  # another VM of the name (37.2)
    ("u1", 7, 7, "Halted", [], "it was started since"),  # a VMI ran generation 7 since: an owner's start (37.1)
    ("u1", 7, 5, "Manual", [], "runStrategy was changed since"),
    ("u1", 7, 5, "Halted", [{"action": "Start"}], "a Start request is pending"),
    ("u1", 7, 5, "Halted", [{"action": "Stop", "uid": "gone"}], None),  # rblnctl's own, not cleared yet
])
def test_stale_mark_by_its_evidence(uid, generation, observed, run, requests, stale):
    vm = {"metadata": {"uid": uid, "generation": generation, "annotations": {STOPPED: MARK}},
          "spec": {"runStrategy": run}, "status": {"observedGeneration": observed, "stateChangeRequests": requests}}
    why = stale_mark(vm)
    assert (why is None) if stale is None else (stale in str(why))


# -- the mark's liveness (issue 37): a holder and a lease, as a coordination Lease ---------------------------------


def test_a_run_that_leaves_the_vm_stopped_releases_its_mark_so_the_printed_rerun_takes_it_at_once(apiserver, kube):
    running_vm(apiserver)
    left_stopped(apiserver, kube)
    value = vm(apiserver)["metadata"]["annotations"][STOPPED]
    assert " holder=" not in value and " lease=" not in value  # held by no run: the evidence only
    again = attacher(kube, npus=2)
    plan = again.plan("v1", NS)
    assert plan.start and not plan.blockers
    assert again.apply(plan).ready and STOPPED not in (vm(apiserver)["metadata"].get("annotations") or {})


def _held_by(apiserver, kube, *, renewed_s_ago: float, lease_s: int = 60, fresh: bool = True) -> str:
    """VM v1 left stopped by a run that still names itself its mark's holder, renewed `renewed_s_ago` before the
    planner's clock now."""
    from datetime import timedelta

    from rblnctl.clock import iso_utc
    from rblnctl.vm.attach import mark_value
    from tests.fakes.clock import FakeClock

    if fresh:
        running_vm(apiserver)
        left_stopped(apiserver, kube)
    when = iso_utc(FakeClock().now() - timedelta(seconds=renewed_s_ago))
    holder = "rblnctl@elsewhere/4242/0badc0de"
    apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["metadata"]["annotations"].update(
        {STOPPED: mark_value(when, v, holder=holder, lease_s=lease_s)}))
    return holder


def test_a_second_run_refuses_while_the_mark_is_held_live_and_writes_nothing(apiserver, kube):
    """The first run is at work on the VM (stopping, changing or starting it): a second one must not take its mark
    for an abandoned one and start the VM mid-run."""
    holder = _held_by(apiserver, kube, renewed_s_ago=5)
    apiserver.clear_requests()
    plan = attacher(kube, npus=1, restart=True).plan("v1", NS)
    (b,) = plan.blockers
    assert f"held by another rblnctl run ({holder}, last renewed 5s ago (2026-12-02T11:59:55Z))" in b.message
    assert "its mark expires 60s after its last renewal" in b.message
    assert "wait for that run to finish" in b.message and not plan.start
    with pytest.raises(Exception, match="refusing"):
        attacher(kube, npus=1, restart=True).apply(plan)
    assert vm_writes(apiserver) == [] and not is_running(apiserver)


def test_a_mark_whose_holder_stopped_renewing_is_taken_over_and_said(apiserver, kube):
    _held_by(apiserver, kube, renewed_s_ago=61)
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    assert plan.start and not plan.blockers
    assert any("stopped renewing it: its lease expired, rblnctl takes the mark over" in str(w) for w in plan.warnings)
    assert planner.apply(plan).ready and is_running(apiserver)
    assert STOPPED not in (vm(apiserver)["metadata"].get("annotations") or {})


def test_a_run_whose_mark_was_taken_over_writes_nothing_more(apiserver, kube):
    """Its mark expired (the run was stuck) and another run took the VM over: the stuck run's NPU patch tests the mark
    it wrote, so it changes nothing and leaves the VM to the run holding it now."""
    from rblnctl.vm.attach import MarkHeld
    from tests.vm.support import host_devices
    from tests.vm.test_restart import is_npu_patch

    running_vm(apiserver)
    before = host_devices(apiserver)
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)

    def take_over(req):
        if is_npu_patch(req):
            apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["metadata"]["annotations"].update(
                {STOPPED: v["metadata"]["annotations"][STOPPED].replace(planner.identity, "rblnctl@other/1/feedf00d")}))
    unhook = apiserver.on_request(take_over)
    with pytest.raises(MarkHeld, match="taken over by another rblnctl run"):
        planner.apply(plan)
    unhook()
    assert host_devices(apiserver) == before and not is_running(apiserver)
    assert "rblnctl@other/1/feedf00d" in vm(apiserver)["metadata"]["annotations"][STOPPED]


def test_a_run_that_planned_before_another_took_the_mark_writes_nothing_over_it(apiserver, kube):
    """Between this run's plan and its first write another run took the released mark (live now): this run's mark
    write reads it first and leaves it, and the VM, to that run."""
    from rblnctl.vm.attach import MarkHeld

    running_vm(apiserver)
    left_stopped(apiserver, kube)
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    assert plan.start
    holder = _held_by(apiserver, kube, renewed_s_ago=1, fresh=False)
    apiserver.clear_requests()
    with pytest.raises(MarkHeld, match="held by another rblnctl run"):
        planner.apply(plan)
    assert holder in vm(apiserver)["metadata"]["annotations"][STOPPED]
    assert vm_writes(apiserver) == [] and not is_running(apiserver)
