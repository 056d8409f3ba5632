"""What a failed or interrupted apply() leaves (docs/architecture.md, "VMs rblnctl stops"): Recovery starts again the
VM rblnctl stopped and settles its stopped mark, or says why it cannot and how to start it; RestartProgress is how
far apply() got, which is what the clean-up must undo. The mark's writes are rblnctl.vm.attach.marker's."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import RblnError, Replaced, one_line
from rblnctl.vm.attach.mark import MARK_STOPPED, MarkHeld
from rblnctl.vm.attach.marker import MarkStep
from rblnctl.vm.attach.model import VmNpuPlan, VmNpuResult, virtctl_start
from rblnctl.vm.attach.readback import not_ours_now
from rblnctl.vm.lifecycle import START, STOP, VmLifecycle

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class RestartProgress:
    """How far apply() got with a VM it stops and starts (what a failure or an interruption must undo)."""

    ours: bool = False  # rblnctl stopped this VM (its stop landed, or an earlier run's mark says so)
    confirmed: bool = False  # the mark on the VM says "stopped" (not "stopping")
    marked: bool = False  # this run may have set the mark (sent before the stop)
    changed: bool = False  # the VM patch went through
    started: bool = False  # rblnctl's start went through (or the VM was found starting)
    not_restarted: str | None = None  # why the planned restart was not made


@dataclass(frozen=True, kw_only=True)
class Recovered:
    """What the clean-up left: a line per thing the VM was left as (for an interrupted run's message)."""

    lines: list[str] = field(default_factory=list)
    left_stopped: bool = False  # the VM is left stopped by rblnctl, carrying its mark: a re-run starts it


def best_effort(fn: Callable[[], Any]) -> Any:
    """A clean-up step that must not hide the error being handled (a second Ctrl-C ends it too)."""
    try:
        return fn()
    except (RblnError, KeyboardInterrupt) as e:
        log.debug("clean-up step failed: %s", e)
        return None


def interrupted_result(done: VmNpuResult, *, left_stopped: bool) -> VmNpuResult:
    """What an interrupted run (Ctrl-C, a signal) had done, once its clean-up ran: the VM left stopped and how to
    start it included."""
    if left_stopped:
        return dataclasses.replace(done, left_stopped=True, restarted=False,
                                   start_command=virtctl_start(done.plan.vm))
    return done


@dataclass(kw_only=True)
class Recovery:
    """The clean-up of one apply() of `plan` after a failure or an interruption."""

    plan: VmNpuPlan
    restarter: VmLifecycle  # the run's: what it asked of virt-api last
    mark: MarkStep  # the run's mark writes (AttachPlanner._mark)

    def recover(self, err: BaseException, run: RestartProgress, *, retry_start: bool = True) -> Recovered:
        """Leave the VM as the rule says, and say so (the lines returned; for an RblnError also a detail line, and when
        the VM stays stopped a `result` with left_stopped and the command that starts it, which the front end prints,
        -o json too).

        - rblnctl stopped it (its stop landed, or an earlier run's mark): start it (again: a start is idempotent, so
          one interrupted in flight is finished) and clear the mark; when that fails, the mark stays, certain, and
          the next run starts it;
        - its stop never went out, or was refused: it never landed, so the mark goes and nothing is started;
        - its stop went out and its answer never came: the VM read back says whether it landed (then as the first
          case); when it shows nothing yet, the stop may still land, and rblnctl cannot tell that from a stop of
          someone else later: the "stopping" mark stays (the next run does not start the VM) and `virtctl start` is
          named.
        """
        what = "the NPU change was made" if run.changed else "its NPUs were not changed"
        interrupted = isinstance(err, KeyboardInterrupt)
        # interrupted: the process ends promptly, so the whole clean-up (its reads, the start, the mark) shares
        # CLEANUP_TIMEOUT_S (an unresponsive virt-api is not retried for a minute) and a VM still stopping is not
        # waited for
        life = self.restarter.bounded(C.CLEANUP_TIMEOUT_S) if interrupted else self.restarter
        within = life if interrupted else None  # the mark's writes share that bound
        if isinstance(err, MarkHeld):  # another run holds the VM (took an expired mark over, or its owner cleared it)
            lines = [f"VM {self.plan.vm} is left to the rblnctl run that holds it now, or as its owner left it "
                     f"({what})"]
            err.details = [*err.details, *lines]
            return Recovered(lines=lines)
        lines = self._stop_unseen(run, life, within, what) if not run.ours and run.marked else []
        left = Recovered()
        if run.ours:
            left = self._start_ours(err, run, life, within, what, retry_start=retry_start)
        lines += left.lines
        if isinstance(err, RblnError):
            err.details = [*err.details, *lines]
        return Recovered(lines=lines, left_stopped=left.left_stopped)

    def _stop_unseen(self, run: RestartProgress, life: VmLifecycle, within: VmLifecycle | None, what: str
                     ) -> list[str]:
        """The run marked the VM "stopping" and never saw its stop land: the stop never went out or was refused (the
        mark goes), it landed (`run.ours`: started again by _start_ours), or it may still land (the mark stays)."""
        plan, restarter = self.plan, self.restarter
        if restarter.asked != STOP or restarter.refused:  # our stop never landed: the mark goes
            best_effort(lambda: self.mark(plan, None, within=within))
            why = "its stop was refused" if restarter.asked == STOP else "rblnctl stopped before asking"
            return [f"VM {plan.vm} was not stopped ({why}) and {what}"]
        if life.settle_asked(plan.vm):  # the VM read back once: the stop landed
            run.ours = True  # ours, started again below
            return []
        # the "stopping" mark stays, no run's (the re-run it names must not wait for this one)
        best_effort(lambda: self.mark(plan, "keep", within=within))
        return [f"the stop request for VM {plan.vm} may have reached virt-api and had not taken effect when rblnctl "
                f"stopped ({what}); if it does, the VM ends stopped: start it with `{virtctl_start(plan.vm)}` (rblnctl "
                "cannot tell that stop from someone else's later, so it will not start the VM itself)"]

    def _start_ours(self, err: BaseException, run: RestartProgress, life: VmLifecycle, within: VmLifecycle | None,
                    what: str, *, retry_start: bool) -> Recovered:
        """The VM rblnctl stopped: start it again (unless someone else acted since) and clear its mark; when it cannot,
        leave the mark for the next run and say how to start it (`err.result`: left_stopped)."""
        plan = self.plan
        how = virtctl_start(plan.vm)
        interrupted = isinstance(err, KeyboardInterrupt)
        problem: BaseException | None = None
        others: str | None = None
        if not run.started:
            if retry_start and life.asked == START and life.settle_asked(plan.vm):
                run.started = True  # its own start went through (its answer cut short): the VM runs because of it
            elif retry_start:
                try:
                    others = not_ours_now(life, plan, changed=run.changed)
                    if others is None and not life.start(plan.vm, wait_stopping=not interrupted, uid=plan.uid):
                        others = f"VM {plan.vm} was started by someone else before rblnctl started it again"
                    run.started = others is None
                except (RblnError, KeyboardInterrupt) as e:
                    problem = e
            else:
                problem = err
        if others is not None:  # someone else started (or started and stopped) it since: theirs, as they left it
            best_effort(lambda: self.mark(plan, None, within=within))
            return Recovered(lines=[f"{others} ({what})"])
        if problem is None:
            best_effort(lambda: self.mark(plan, None, within=within))
            return Recovered(lines=[f"VM {plan.vm} was stopped by rblnctl and has been started again ({what})"])
        if isinstance(problem, Replaced):  # another VM of the name now: nothing of rblnctl's to start or mark
            return Recovered(lines=[one_line(problem)])
        if not run.confirmed:  # the stop is known to have landed: the mark says so, for the next run
            best_effort(lambda: self.mark(plan, MARK_STOPPED, within=within, release=True))
        else:  # the mark stays, held by no run: the re-run this names takes it at once
            best_effort(lambda: self.mark(plan, "keep", within=within))
        why = one_line(problem)
        if interrupted and retry_start and isinstance(problem, RblnError):
            why = f"not within the {C.CLEANUP_TIMEOUT_S:g}s an interrupted run gives it: {why}"
        if isinstance(err, RblnError):
            err.result = VmNpuResult(plan=plan, changed=run.changed, attempts=0,  # type: ignore[attr-defined]
                                     server_dry_run=False, left_stopped=True, start_command=how)
        return Recovered(left_stopped=True, lines=[
            f"VM {plan.vm} is left stopped: rblnctl stopped it to change its NPUs ({what}) and could not start it "
            f"again ({why}); start it with `{how}`, or re-run this command: it starts a VM rblnctl stopped"])
