"""The NPU patch of a VM, settled: VmPatcher sends the plan's guarded JSON patch (rblnctl.vm.attach.plan) until the
VM holds the plan's lists, re-reading and re-planning the same target when the VM changed under it (bounded), and
refusing when the VM is no longer as the plan or this run left it (started meanwhile, its mark taken)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rblnctl.clock import Clock
from rblnctl.errors import ClusterError, Conflict, NotFound, OutcomeUnknown, RblnError, Refused
from rblnctl.kube import VMS, Kube, writes
from rblnctl.kubevirt.cr import is_conflict
from rblnctl.remedy import Command, Remedy
from rblnctl.vm.attach.facts import VmFacts, VmReader
from rblnctl.vm.attach.layout import is_running, lists_of
from rblnctl.vm.attach.mark import MarkHeld, StartedMeanwhile, held_guards, mark_holder, stale_mark
from rblnctl.vm.attach.model import (
    RETRY_BACKOFF_S,
    RUNS,
    AttachOptions,
    VmEvents,
    VmNpuPlan,
    of_run_state,
)
from rblnctl.vm.attach.plan import vm_plan
from rblnctl.vm.attach.templates import TemplateChange
from rblnctl.vm.lifecycle import replaced, run_strategy
from rblnctl.vm.model import VmBlocker


@dataclass(frozen=True, kw_only=True)
class VmPatcher:
    """Patches one run's planned NPU change into a VM."""

    kube: Kube
    reader: VmReader  # the VM and its VMI, read back
    options: AttachOptions  # a re-plan's options; max_attempts, server_dry_run
    events: VmEvents
    clock: Clock
    identity: str  # the run whose stopped mark a held VM carries
    guard: Callable[[], None] | None = None  # what the caller's decision rests on beyond the VM (AttachPlanner.guard)

    def write(self, plan: VmNpuPlan, *, held: bool = False) -> tuple[VmNpuPlan, int]:
        """Patch the VM (a JSON patch whose `test` ops guard the lists the plan read: devices.guarded_patch) until it
        holds the plan's lists. Returns the plan that landed (a re-plan's, after a conflict) and the patches sent.

        `held`: this run holds the VM stopped (its stop landed, its mark names it): the VM is read first and must
        still be as the run left it, and the patch also tests what an owner's start or another run would change (the
        runStrategy / running that virt-api's start flips, the mark as this run wrote it). Someone else started it
        since (a VMI, a Start request, another runStrategy): StartedMeanwhile, nothing written, the VM left running
        as they started it; the mark taken or removed: MarkHeld.

        A failed test (422; or a 409) re-reads the VM and re-plans the same target (bounded, with a backoff); a patch
        whose outcome is unknown is settled by reading the VM back (rblnctl.kube.writes): the lists are there, done;
        else the re-plan is sent. The re-plan keeps what this run decided about starting the VM and what it warned
        of: the stopped mark on the VM now is this run's own, not an earlier run's.
        """
        ns, name = plan.vm.namespace, plan.vm.name
        current = [plan]
        guards: list[dict] = []  # held: the tests of the VM's run state and mark, as last read
        said: list[bool] = []

        def next_write(state: Any) -> writes.Write | None:
            if state is not writes.UNREAD:
                if state is None:
                    raise NotFound(f"VirtualMachine {plan.vm} was deleted while rblnctl changed its NPUs")
                vm, vmi = state
                if plan.uid is not None and (vm.get("metadata") or {}).get("uid") != plan.uid:
                    raise replaced(plan.vm, "changed its NPUs")  # its patch tests the uid: none of it landed
                if lists_of(vm) == (current[0].host_devices_after, current[0].resource_claims_after):
                    return None  # it holds the change (our patch landed, its reply lost)
                if held:
                    self._still_held(plan, vm, vmi)
                    guards[:] = held_guards(vm)
                replan = vm_plan(VmFacts(vm=vm, vmi=vmi, now=self.clock.now()), current[0].target,
                                 options=self.options, identity=self.identity, templates=TemplateChange(
                                     delete=list(current[0].templates_delete), kept=list(current[0].templates_kept),
                                     left=current[0].template_left))
                if plan.restart and replan.running:
                    raise Refused(f"VM {plan.vm} was started again while rblnctl changed its NPUs; nothing was "
                                  "written", blockers=[VmBlocker("start it only after the change is made")])
                if not plan.running and not plan.restart:
                    still_stopped(plan, vm, replan.running)
                replan = dataclasses.replace(replan, restart=plan.restart, start=plan.start, stale_mark=plan.stale_mark,
                                             uid=plan.uid,
                                             noop=replan.patch is None, warnings=list(plan.warnings), blockers=[
                                                 b for b in replan.blockers
                                                 if not (plan.restart and b.override == "restart")])
                if replan.blockers:
                    raise Refused(f"VM {plan.vm} changed under us and the change no longer applies",
                                  blockers=replan.blockers)
                current[0] = replan
                if replan.noop:
                    return None
            if self.guard is not None:
                self.guard()
            if not said:  # a retry says why (on_retry)
                said.append(True)
                self.events.on_step(f"patching VM {plan.vm}")
            patch = current[0].patch or []
            if guards:  # held: the guards test what rblnctl left (spec, its mark); the plan's run-state tests would
                # add virt-controller's status, which lags the stop rblnctl just made (a 422 and a retry each time)
                patch = [op for op in patch if not (op.get("op") == "test" and of_run_state(str(op.get("path"))))]
            return writes.patch(VMS, name, patch[:1] + guards + patch[1:], patch_type="json", namespace=ns)

        def gave_up(last: ClusterError, sent: int) -> RblnError:
            if writes.unknown(last) and not isinstance(last, Conflict):
                return last if not isinstance(last, OutcomeUnknown) else OutcomeUnknown(
                    f"{last}; VM {plan.vm} still does not hold the change after {sent} tries")
            return Conflict(f"VM {plan.vm} kept changing while rblnctl wrote it: gave up after {sent} attempts; "
                            "rerun once the other writer is done", status=409, reason="Conflict")

        done = writes.settle(self.kube, next_write, read=lambda: self.reader.read(name, ns), what=f"VM {plan.vm}",
                             retry=is_conflict, attempts=self.options.max_attempts, backoff_s=RETRY_BACKOFF_S,
                             clock=self.clock, on_retry=self.events.on_retry, dry_run=self.options.server_dry_run,
                             exhausted=gave_up, read_first=held)
        return current[0], max(done.sent, 1)

    def _still_held(self, plan: VmNpuPlan, vm: dict, vmi: dict | None) -> None:
        """Raise unless the VM is still as this run left it stopped: its mark names this run, no VMI runs and its
        mark's evidence holds (stale_mark: no Start request, the runStrategy and observedGeneration it left)."""
        mine = mark_holder(vm, self.clock.now())
        if mine is None or mine.holder != self.identity:
            whose = "removed" if mine is None else f"taken over by another rblnctl run ({mine.holder})"
            raise MarkHeld(f"the stopped mark of VM {plan.vm} was {whose} while rblnctl had the VM stopped: nothing "
                           "was written; rblnctl leaves the VM as it is", blockers=[VmBlocker(
                               "see `vm list` for what the VM is now, then re-run this command")])
        why = stale_mark(vm)
        # a VMI being deleted is rblnctl's own stop still being carried out (an earlier run's, taken over), no start
        runs = is_running(vmi) and not ((vmi or {}).get("metadata") or {}).get("deletionTimestamp")
        if runs or why is not None:
            raise StartedMeanwhile(
                f"VM {plan.vm} was started by someone else after rblnctl stopped it and before it changed its NPUs "
                f"({'a VMI runs' if runs else f'the mark of this run {why}'}): nothing was written",
                blockers=[VmBlocker("it runs as they started it, with the NPUs it had; re-run this command to "
                                    "restart it with the change")])


def still_stopped(plan: VmNpuPlan, vm: dict, running: bool) -> None:
    """A VM planned as stopped (its patch tests RUN_STATE) read again: Refused when someone started it since (a
    VMI runs, its runStrategy changed, a Start request is pending). Its change was decided for a stopped VM: on a
    running one it would wait for a restart that no one asked for, under a message that says done."""
    now = run_strategy(vm)
    why = None
    if running:
        why = "a VMI runs now"
    elif plan.run_strategy is not None and now != plan.run_strategy and now in RUNS:
        why = f"its runStrategy {plan.run_strategy} -> {now}"
    elif any(isinstance(r, dict) and r.get("action") == "Start"
             for r in (vm.get("status") or {}).get("stateChangeRequests") or []):
        why = "a Start request is pending"
    if why is None:
        return
    ref = plan.vm
    raise Refused(
        f"VM {ref} was started by someone else after rblnctl read it as stopped ({why}): its NPUs were not "
        "changed", blockers=[VmBlocker(
            "a change to its NPUs takes effect only when it restarts; restarting stops it, patches it, starts it "
            "and waits until it is Ready", remedy=Remedy("restart it onto the change with {command}", Command.own(
                "vm", plan.target.action, ref.name, namespace=ref.namespace, restart=True, again=True)))])
