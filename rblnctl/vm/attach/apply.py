"""Make a plan of a VM's NPUs true (the writes, settled): AttachPlanner and DetachPlanner, plan() then apply().

plan() reads the facts (rblnctl.vm.attach.facts) and plans on them (rblnctl.vm.attach.plan, pure); apply() writes:
the template to create, the VM's JSON patch (its `test` ops of the uid, the lists and the run state the plan was
decided on; a 422 re-reads and re-plans, bounded), the templates to delete (uid preconditions), and with --restart the
stop, the stopped mark (rblnctl.vm.attach.mark: a lease this run holds) and the start; every write whose outcome is
unknown is settled by reading back (rblnctl.kube.writes).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock, iso_utc
from rblnctl.errors import (
    ClusterError,
    Conflict,
    NotFound,
    OutcomeUnknown,
    RblnError,
    Refused,
    Replaced,
    WaitTimeout,
    one_line,
)
from rblnctl.kube import RESOURCE_CLAIM_TEMPLATES, VMIS, VMS, Kube, writes
from rblnctl.kubevirt.cr import identity_test, is_conflict
from rblnctl.remedy import Command, Remedy
from rblnctl.vm import devices as D
from rblnctl.vm import pending as P
from rblnctl.vm.attach.facts import VmFacts, VmReader
from rblnctl.vm.attach.layout import is_running, lists_of, ref_of, template_count
from rblnctl.vm.attach.mark import (
    MARK_STOPPED,
    MARK_STOPPING,
    MarkHeld,
    StartedMeanwhile,
    held_guards,
    mark_holder,
    mark_key,
    mark_value,
    marked_stopping,
    released,
    run_identity,
    stale_mark,
)
from rblnctl.vm.attach.model import (
    RUNS,
    AttachOptions,
    DetachOptions,
    VmEvents,
    VmNpuPlan,
    VmNpuResult,
    WriteOptions,
    of_run_state,
    virtctl_start,
)
from rblnctl.vm.attach.plan import detach_target, plan_attach, vm_plan
from rblnctl.vm.attach.templates import TemplateChange, left_behind
from rblnctl.vm.cluster import VmCluster
from rblnctl.vm.lifecycle import START, STOP, VmLifecycle, replaced, run_strategy
from rblnctl.vm.model import VmBlocker, VmRef

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.2  # first wait after a conflict; doubles


@dataclass(kw_only=True)
class _Restart:
    """How far apply() got with a VM it stops and starts (what a failure or an interruption must undo)."""

    ours: bool = False  # rblnctl stopped this VM (its stop landed, or an earlier run's mark says so)
    confirmed: bool = False  # the mark on the VM says "stopped" (not "stopping")
    marked: bool = False  # this run may have set the mark (sent before the stop)
    changed: bool = False  # the VM patch went through
    started: bool = False  # rblnctl's start went through (or the VM was found starting)
    not_restarted: str | None = None  # why the planned restart was not made


@dataclass(kw_only=True)
class AttachPlanner:
    """Plan and apply a change of a VM's NPUs; reads the cluster once per planner (reuse it across VMs)."""

    kube: Kube
    options: AttachOptions = AttachOptions()
    events: VmEvents = VmEvents()
    clock: Clock = SYSTEM_CLOCK
    cluster: VmCluster | None = None  # facts read on first use (or handed in)
    recovery: list[str] = field(default_factory=list)  # after apply() failed or was interrupted: what it left
    left_stopped: bool = False  # ...and the VM is left stopped by rblnctl, carrying its mark: a re-run starts it
    interrupted: VmNpuResult | None = None  # after apply() was interrupted (Ctrl-C, a signal): what it had done
    identity: str = field(default_factory=run_identity)  # the holder this run's stopped marks name (mark_holder)
    # what the caller's decision rests on beyond the VM, checked before the template create and each VM patch: it
    # raises to stop the change (policy set-method: the policy still selects the method converted to)
    guard: Callable[[], None] | None = None
    reader: VmReader = field(init=False)

    def __post_init__(self) -> None:
        self.reader = VmReader(kube=self.kube, clock=self.clock, cluster=self.cluster)

    # -- planning ----------------------------------------------------------------------------------------

    def plan(self, name: str, namespace: str, *, uid: str | None = None, while_: str = "planned its change"
             ) -> VmNpuPlan:
        """Read the VM and the cluster, resolve method, count and resource, and plan the change (reads only).

        `uid`: the VM the caller decided on (policy set-method read it earlier): a VM of that name with another uid
        raises Replaced ("... while rblnctl {while_}"), nothing planned for it. Raises NotFound (no such VM),
        Ambiguous (several resources could be meant: the caller must name one) and InvalidInput. Everything else that
        stops the change is a blocker on the plan.
        """
        vm, vmi = self._read(name, namespace, uid=uid, while_=while_)
        return plan_attach(self.reader.attach(vm, vmi, self.options), self.options, identity=self.identity)

    def _read(self, name: str, namespace: str, *, uid: str | None, while_: str) -> tuple[dict, dict | None]:
        vm, vmi = self.reader.read(name, namespace)
        if uid is not None and (vm.get("metadata") or {}).get("uid") != uid:
            raise replaced(ref_of(vm), while_)
        return vm, vmi

    def template_users(self, namespace: str, template: str, *, exclude: str, vm_too: bool = False) -> list[str]:
        """VmReader.template_users: who names `template` in the namespace."""
        return self.reader.template_users(namespace, template, exclude=exclude, vm_too=vm_too)

    def unused_templates(self, namespace: str, *, keep: Sequence[str | None] = ()) -> list[str]:
        """VmReader.unused_templates: rblnctl's templates of the namespace no VM or VMI names."""
        return self.reader.unused_templates(namespace, keep=keep)

    def clean_up_left(self, name: str, namespace: str, *, uid: str | None = None) -> list[str]:
        """Only delete the template the VM's last NPU patch moved it off and an interrupted run left (left_behind),
        changing nothing else (set-method's clean-up of a VM it converted already: no NPU count is planned, so a VM
        with none keeps none). Returns the templates deleted. Raises Replaced (another uid) and NotFound."""
        vm, _ = self._read(name, namespace, uid=uid, while_="cleaned up after its conversion")
        current = self.reader.base(vm, None).have().managed_template
        objects, users = self.reader.left_facts(vm, current)
        names = left_behind(vm, current, objects, users)
        if not names:
            return []
        deleted, _ = self._delete_templates(ref_of(vm), names)
        return deleted

    # -- applying ----------------------------------------------------------------------------------------

    def apply(self, plan: VmNpuPlan) -> VmNpuResult:
        """Make the plan true; idempotent (a no-op plan writes nothing).

        Order (restart): mark the VM as about to be stopped (annotation VM_STOPPED_ANNOTATION, "stopping"), ask for
        the stop, wait until stopped, mark it stopped (its stop landed; the mark's evidence read now, final); create
        the template, patch the VM (a JSON patch testing the uid and the lists the plan read), delete the templates
        no one uses any more (checked again just before); start it, clear the mark, wait until Ready with the NPUs
        its spec asks for. The rule (docs/architecture.md, "VMs rblnctl
        stops"): the mark goes on before the stop is sent and comes off only once the VM is started again, or
        rblnctl knows its stop never landed; a VM rblnctl did not stop is never started (one its owner stopped
        between the plan and the stop is changed and left stopped: `not_restarted` says so; one someone else
        started, or started and stopped, after rblnctl's stop is not started or called restarted: `_not_ours_now`,
        just before the start). Every write tests the VM's uid (Replaced: deleted and re-created under rblnctl,
        nothing written).

        What rblnctl stopped it starts again: on any failure (or Ctrl-C, a signal) after its stop the VM is started
        before the error is raised, and when even that fails the mark stays, the error (and its `result`,
        left_stopped) says how to start it, and the next run starts it (plan.start). `recovery` holds what the VM
        was left as, for an interrupted run's message. Raises Refused (blockers, or the VM changed into something
        the plan cannot take), Conflict (it kept changing), WaitTimeout (not Ready in time: the change is made;
        details say why), API errors as they are.
        """
        if plan.blockers:
            raise Refused(f"refusing to change the NPUs of VM {plan.vm}", blockers=plan.blockers)
        dry = self.options.server_dry_run
        self.recovery, self.left_stopped, self.interrupted = [], False, None
        if plan.noop:
            return VmNpuResult(plan=plan, changed=False, attempts=0, templates_kept=list(plan.templates_kept),
                               server_dry_run=dry)
        restarter = VmLifecycle(kube=self.kube, clock=self.clock, timeout_s=self.options.ready_timeout_s,
                                backoff_s=self.options.poll_s / 4, server_dry_run=dry, on_step=self.events.on_step)
        run = _Restart(ours=plan.start, confirmed=plan.start)
        final, attempts, created = plan, 0, None
        deleted: list[str] = []
        kept: list[str] = []
        try:
            if plan.restart:
                run.marked = True
                self._mark(plan, MARK_STOPPING)  # before the stop is sent
                if restarter.ask_stop(plan.vm, uid=plan.uid):
                    run.ours = True
                else:  # stopped (or stopping) already, by someone else: not rblnctl's to start
                    run.not_restarted = (f"VM {plan.vm} was stopped by someone else before rblnctl stopped it (between "
                                         "the plan and the stop): its NPUs are changed and it is left stopped")
                    self._mark(plan, None)
                    run.marked = False
                if not dry:
                    restarter.wait_stopped(plan.vm)
                    if run.ours:  # its stop landed and the VM is stopped: the mark is certain, its evidence final
                        self._mark(plan, MARK_STOPPED)  # (virt-controller moves observedGeneration while a VMI is
                        run.confirmed = True  # there: it follows a runStrategy flip that leaves the template alone)
            elif run.ours:  # the earlier run's mark, taken (this run holds it now) and renewed for its writes
                self._mark(plan, MARK_STOPPED)
            if plan.patch is not None:
                if self.guard is not None and plan.patch is not None:
                    self.guard()
                created = self._create_template(plan) if plan.template_create else None
                final, attempts = self._write(plan, held=run.ours and not dry)
                run.changed = True
                deleted, kept = self._delete_templates(final.vm, final.templates_delete)
                if plan.stale_mark and not run.ours:
                    self._mark(plan, None)
            elif plan.templates_delete:  # nothing to change but the template an interrupted run left (_left_behind)
                deleted, kept = self._delete_templates(plan.vm, plan.templates_delete)
        except BaseException as err:  # an API error, Ctrl-C, SIGTERM: start what we stopped, then raise
            if not dry:
                self._recover(restarter, plan, err, run)
            if created and not run.changed and isinstance(err, RblnError):  # said, so "not changed" is true
                err.details = [*err.details, f"ResourceClaimTemplate {plan.vm.namespace}/{created} was created for "
                               "the change and no VM uses it yet: the command that makes the change uses it"]
            self._if_interrupted(err, VmNpuResult(
                plan=final, changed=run.changed, attempts=attempts, template_created=created,
                templates_deleted=deleted, templates_kept=[*final.templates_kept, *kept], server_dry_run=dry,
                restarted=run.started and not dry, not_restarted=run.not_restarted))
            raise
        result = VmNpuResult(plan=final, changed=run.changed, attempts=attempts, template_created=created,
                             templates_deleted=deleted, templates_kept=[*final.templates_kept, *kept],
                             restarted=run.ours and not dry, server_dry_run=dry, not_restarted=run.not_restarted)
        if not run.ours or dry:
            if run.changed and not dry:
                self._still_the_vm(plan)
            return result
        others: str | None = None
        try:
            others = self._not_ours_now(restarter, plan)
            if others is None and not restarter.start(plan.vm, uid=plan.uid):
                others = self._not_ours_now(restarter, plan) or \
                    f"VM {plan.vm} was started by someone else before rblnctl started it again"
            if others is None:
                run.started = True
            self._mark(plan, None)  # started by rblnctl, or by someone else: the mark is no longer true
            run.ours = False
        except BaseException as err:
            refused = isinstance(err, RblnError) and not writes.unknown(err) and not run.started
            self._recover(restarter, plan, err, run, retry_start=not refused)
            self._if_interrupted(err, dataclasses.replace(result, restarted=run.started))
            raise
        if others is not None:  # someone else started (or started and stopped) the VM rblnctl stopped: theirs now
            now = restarter.read(plan.vm, full=False)
            going = now is not None and ((now.live and not now.stopping) or now.run_strategy == "Always"
                                         or "Start" in now.requests)
            return dataclasses.replace(result, restarted=False, not_restarted=others, started_by_others=going)
        try:
            restarter.wait_ready(plan.vm, as_specified=True)
        except KeyboardInterrupt as err:  # changed and started: only the wait for Ready was cut short
            self._if_interrupted(err, result)
            raise
        except WaitTimeout as e:
            from rblnctl.vm.diagnose import diagnose

            why = diagnose(self.kube, plan.vm.name, plan.vm.namespace).broken
            details = [f"{why.failure or why.title}: {why.message}"] if why else []
            raise WaitTimeout(f"the NPUs of VM {plan.vm} were changed and it was started, but {e}") \
                .with_details(details) from e
        return dataclasses.replace(result, ready=True)

    def _mark(self, plan: VmNpuPlan, state: str | None, *, within: VmLifecycle | None = None,
              release: bool = False) -> None:
        """Set VM_STOPPED_ANNOTATION (MARK_STOPPING: about to stop it; MARK_STOPPED: rblnctl stopped it), or clear it
        (None). Its value is the time and what the VM read just before is (mark_value: uid, generation,
        observedGeneration, runStrategy: what stale_mark() compares later) and this run as its holder (renewed by each
        write, for the run's --timeout and a margin: mark_holder); `release`: no holder (the run leaves the mark for
        a later one), and with `state` "keep" the value on the VM is kept but for its holder. A JSON patch carrying
        the VM's identity (a `test` of /metadata/uid, and of the annotation's value as read), settled by reading the
        VM back; a VM of another uid raises Replaced, nothing written; a mark another run holds live raises
        MarkHeld, nothing written. `within`: a clean-up's bounded lifecycle, whose connection and deadline it
        shares."""
        kube = self.kube if within is None else within.kube
        ns, name = plan.vm.namespace, plan.vm.name
        now = self.clock.now()
        when = iso_utc(now)
        lease = int(self.options.ready_timeout_s + C.VM_STOPPED_MARK_LEASE_MARGIN_S)
        wanted: list[str | None] = []  # the value this call writes, fixed on its first read

        def next_write(vm: Any) -> writes.Write | None:
            if vm is None:
                raise NotFound(f"VirtualMachine {plan.vm} was deleted while rblnctl changed its NPUs")
            meta = vm.get("metadata") or {}
            if plan.uid is not None and meta.get("uid") != plan.uid:
                raise replaced(plan.vm, "changed its NPUs")
            annotations = meta.get("annotations")
            have = (annotations or {}).get(C.VM_STOPPED_ANNOTATION)
            other = mark_holder(vm, self.clock.now())
            if other is not None and other.holder != self.identity and not other.expired:
                raise MarkHeld(f"VM {plan.vm} is held by another rblnctl run ({other.describe(self.clock.now())}): "
                               "rblnctl leaves it to that run", blockers=[VmBlocker(
                                   "wait for that run to finish, then re-run this command")])
            if not wanted:
                if state == "keep":
                    wanted.append(released(str(have)) if have else None)
                elif state:
                    wanted.append(mark_value(when, vm, stopping=state == MARK_STOPPING,
                                             holder=None if release else self.identity, lease_s=lease))
                else:
                    wanted.append(None)
            value = wanted[0]
            if have == value:
                return None
            key = mark_key()
            ops: list[dict] = identity_test(vm)
            if value is None:
                ops += [{"op": "test", "path": key, "value": have}, {"op": "remove", "path": key}]
            elif annotations is None:
                ops += [{"op": "add", "path": "/metadata/annotations", "value": {C.VM_STOPPED_ANNOTATION: value}}]
            else:
                ops += [{"op": "test", "path": key, "value": have}, {"op": "add", "path": key, "value": value}]
            return writes.patch(VMS, name, ops, patch_type="json", namespace=ns)

        writes.settle(kube, next_write, read=lambda: kube.get_optional(VMS, name, namespace=ns), read_first=True,
                      what=f"VM {plan.vm}", dry_run=self.options.server_dry_run, retry=is_conflict,
                      clock=SYSTEM_CLOCK if within is None else within.clock,
                      deadline=None if within is None else within.deadline)

    @staticmethod
    def _still_stopped(plan: VmNpuPlan, vm: dict, running: bool) -> None:
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

    def _still_the_vm(self, plan: VmNpuPlan) -> None:
        """After a change that starts nothing: the VM read back is the one changed (its uid), or Replaced. A VM
        deleted and re-created after the patch landed is another one, which holds none of the change: not done (the
        templates it names are kept: `_delete_templates` read its users just before)."""
        vm = self.kube.get_optional(VMS, plan.vm.name, namespace=plan.vm.namespace)
        uid = (vm or {}).get("metadata", {}).get("uid")
        if vm is not None and plan.uid is not None and uid != plan.uid:
            raise replaced(plan.vm, "changed its NPUs").with_details([
                f"the change was made to the VM rblnctl read (uid {plan.uid}), deleted since; the one there now (uid "
                f"{uid}) has the NPUs its own manifest gives it: re-run the command to change it"])
        if vm is None or plan.running:
            return
        # Planned as stopped: its patch tested the run state as read, but a Manual VM's start is only a Start request
        # in its status, which virt-controller turns into a VMI and clears, all before the patch can see it (seen on
        # real KubeVirt v1.9.0 under load: the patch landed, "1 -> 2 NPU(s)", exit 0, and the VM ran with 1). A VMI
        # now that runs without the change: say so, not done.
        vmi = self.kube.get_optional(VMIS, plan.vm.name, namespace=plan.vm.namespace)
        if vmi is None or not is_running(vmi) or _runs_with(vmi, plan):
            return
        ref = plan.vm
        raise StartedMeanwhile(
            f"VM {ref} was started by someone else while rblnctl changed its NPUs: the change is in its spec, but it "
            "runs with the NPUs it had", blockers=[VmBlocker(
                "the change takes effect when it restarts", remedy=Remedy("restart it onto the change with {command}",
                                                                          Command.own("vm", "restart", ref.name,
                                                                                      namespace=ref.namespace)))])

    def _not_ours_now(self, life: VmLifecycle, plan: VmNpuPlan, *, stop_seen: bool = True,
                      changed: bool = True) -> str | None:
        """Just before rblnctl starts the VM it stopped: None when it still may (the VM as it left it), else why not,
        in words, for `not_restarted`. Raises Replaced (another uid) and NotFound (deleted).

        Someone else acted since rblnctl's stop when a VMI runs (their `virtctl start`: the VM is theirs now, and
        says whether it runs with the NPUs its spec asks for), or when the VM's mark no longer matches it
        (stale_mark: a VMI was started and stopped again since, its runStrategy changed, a request is pending)."""
        vm = life.kube.get_optional(VMS, plan.vm.name, namespace=plan.vm.namespace)
        if vm is None:
            raise NotFound(f"VirtualMachine {plan.vm} was deleted while rblnctl changed its NPUs")
        if plan.uid is not None and (vm.get("metadata") or {}).get("uid") != plan.uid:
            raise replaced(plan.vm, "had it stopped")
        state = life.read(plan.vm)
        if state is not None and state.live and not state.stopping:
            a = state.attachment
            if a is not None and a.pending_change:
                return (f"VM {plan.vm} was started by someone else after rblnctl stopped it and before it started it "
                        f"again: {P.staged_words(a.held, a.wanted)}; `vm restart {plan.vm.name} -n "
                        f"{plan.vm.namespace} --wait` applies the change")
            if not changed:
                return (f"VM {plan.vm} was started by someone else after rblnctl stopped it: it runs as they started "
                        "it, with the NPUs it had; re-run this command to restart it with the change")
            return (f"VM {plan.vm} was started by someone else after rblnctl stopped it: it runs with the NPUs of its "
                    "changed spec, not restarted by rblnctl")
        value = str(((vm.get("metadata") or {}).get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION) or "")
        if stop_seen and marked_stopping(value):
            return None  # this run saw its own stop land, its mark not yet confirmed: its evidence predates the stop
        why = stale_mark(vm)
        if why is not None and state is not None and (run_strategy(vm) == "Always" or "Start" in state.requests):
            return (f"VM {plan.vm} was started by someone else after rblnctl stopped it (the mark of the rblnctl run "
                    f"{why}): rblnctl neither started it nor waited for it; `vm diagnose {plan.vm.name} -n "
                    f"{plan.vm.namespace}` shows whether it runs with the NPUs of its changed spec")
        if why is not None and (state is None or not state.live):
            return (f"VM {plan.vm} is left stopped, as someone else left it: the mark of the rblnctl run {why}; "
                    f"`{virtctl_start(plan.vm)}` starts it")
        return None

    def _recover(self, restarter: VmLifecycle, plan: VmNpuPlan, err: BaseException, run: _Restart, *,
                 retry_start: bool = True) -> None:
        """After a failure or an interruption: leave the VM as the rule says, and say so (`recovery`; for an RblnError
        also a detail line, and when the VM stays stopped a `result` with left_stopped and the command that starts
        it, which the front end prints, -o json too).

        - rblnctl stopped it (its stop landed, or an earlier run's mark): start it (again: a start is idempotent, so
          one interrupted in flight is finished) and clear the mark; when that fails, the mark stays, certain, and
          the next run starts it;
        - its stop never went out, or was refused: it never landed, so the mark goes and nothing is started;
        - its stop went out and its answer never came: the VM read back says whether it landed (then as the first
          case); when it shows nothing yet, the stop may still land, and rblnctl cannot tell that from a stop of
          someone else later: the "stopping" mark stays (the next run does not start the VM) and `virtctl start` is
          named.
        """
        how = virtctl_start(plan.vm)
        what = "the NPU change was made" if run.changed else "its NPUs were not changed"
        lines: list[str] = []
        interrupted = isinstance(err, KeyboardInterrupt)
        # interrupted: the process ends promptly, so the whole clean-up (its reads, the start, the mark) shares
        # CLEANUP_TIMEOUT_S (an unresponsive virt-api is not retried for a minute) and a VM still stopping is not
        # waited for
        life = restarter.bounded(C.CLEANUP_TIMEOUT_S) if interrupted else restarter
        within = life if interrupted else None
        if isinstance(err, MarkHeld):  # another run holds the VM (took an expired mark over, or its owner cleared it)
            lines.append(f"VM {plan.vm} is left to the rblnctl run that holds it now, or as its owner left it ({what})")
            self.recovery = lines
            if isinstance(err, RblnError):
                err.details = [*err.details, *lines]
            return
        if not run.ours and run.marked:
            if restarter.asked != STOP or restarter.refused:  # our stop never landed: the mark goes
                self._best_effort(lambda: self._mark(plan, None, within=within))
                why = "its stop was refused" if restarter.asked == STOP else "rblnctl stopped before asking"
                lines.append(f"VM {plan.vm} was not stopped ({why}) and {what}")
            else:
                if life.settle_asked(plan.vm):  # the VM read back once: the stop landed
                    run.ours = True  # ours, started again below
                else:  # the "stopping" mark stays, no run's (the re-run it names must not wait for this one)
                    self._best_effort(lambda: self._mark(plan, "keep", within=within))
                    lines.append(f"the stop request for VM {plan.vm} may have reached virt-api and had not taken "
                                 f"effect when rblnctl stopped ({what}); if it does, the VM ends stopped: start it "
                                 f"with `{how}` (rblnctl cannot tell that stop from someone else's later, so it will "
                                 "not start the VM itself)")
        if run.ours:
            problem: BaseException | None = None
            others: str | None = None
            if not run.started:
                if retry_start and life.asked == START and life.settle_asked(plan.vm):
                    run.started = True  # its own start went through (its answer cut short): the VM runs because of it
                elif retry_start:
                    try:
                        others = self._not_ours_now(life, plan, changed=run.changed)
                        if others is None and not life.start(plan.vm, wait_stopping=not interrupted, uid=plan.uid):
                            others = f"VM {plan.vm} was started by someone else before rblnctl started it again"
                        run.started = others is None
                    except (RblnError, KeyboardInterrupt) as e:
                        problem = e
                else:
                    problem = err
            if others is not None:  # someone else started (or started and stopped) it since: theirs, as they left it
                self._best_effort(lambda: self._mark(plan, None, within=within))
                lines.append(f"{others} ({what})")
            elif problem is None:
                self._best_effort(lambda: self._mark(plan, None, within=within))
                lines.append(f"VM {plan.vm} was stopped by rblnctl and has been started again ({what})")
            elif isinstance(problem, Replaced):  # another VM of the name now: nothing of rblnctl's to start or mark
                lines.append(one_line(problem))
            else:
                if not run.confirmed:  # the stop is known to have landed: the mark says so, for the next run
                    self._best_effort(lambda: self._mark(plan, MARK_STOPPED, within=within, release=True))
                else:  # the mark stays, held by no run: the re-run this names takes it at once
                    self._best_effort(lambda: self._mark(plan, "keep", within=within))
                self.left_stopped = True
                why = one_line(problem)
                if interrupted and retry_start and isinstance(problem, RblnError):
                    why = f"not within the {C.CLEANUP_TIMEOUT_S:g}s an interrupted run gives it: {why}"
                lines.append(f"VM {plan.vm} is left stopped: rblnctl stopped it to change its NPUs ({what}) and could "
                             f"not start it again ({why}); start it with `{how}`, or re-run "
                             "this command: it starts a VM rblnctl stopped")
                if isinstance(err, RblnError):
                    err.result = VmNpuResult(plan=plan, changed=run.changed, attempts=0,  # type: ignore[attr-defined]
                                             server_dry_run=False, left_stopped=True, start_command=how)
        self.recovery = lines
        if isinstance(err, RblnError):
            err.details = [*err.details, *lines]

    def _if_interrupted(self, err: BaseException, done: VmNpuResult) -> None:
        """After an interruption (Ctrl-C, a signal), once the clean-up ran: what was done (`interrupted`), for the
        front end to show, the VM left stopped and how to start it included. Not put on the exception: a caller
        that runs this planner inside its own command (policy set-method --convert-vms) has results of its own."""
        if not isinstance(err, KeyboardInterrupt):
            return
        if self.left_stopped:
            done = dataclasses.replace(done, left_stopped=True, restarted=False,
                                       start_command=virtctl_start(done.plan.vm))
        self.interrupted = done

    @staticmethod
    def _best_effort(fn: Callable[[], Any]) -> Any:
        """A clean-up step that must not hide the error being handled (a second Ctrl-C ends it too)."""
        try:
            return fn()
        except (RblnError, KeyboardInterrupt) as e:
            log.debug("clean-up step failed: %s", e)
            return None

    def _create_template(self, plan: VmNpuPlan) -> str:
        """Create rblnctl's ResourceClaimTemplate; a create whose outcome is unknown is settled by reading it back."""
        tpl = plan.template_create or {}
        name = tpl["metadata"]["name"]
        ns = plan.vm.namespace
        cls = next((c for _, c, _ in D.claim_requests(tpl)), C.DRA_DEVICECLASS_VM)
        self.events.on_step(f"creating ResourceClaimTemplate {ns}/{name}")

        def different(existing: dict | None) -> Conflict:
            return Conflict(f"ResourceClaimTemplate {ns}/{name} could not be created as rblnctl writes it "
                            f"({'it is not there' if existing is None else 'another one with that name appeared'}); "
                            "nothing else was changed", status=409, reason="Conflict")

        def next_write(existing: Any) -> writes.Write | None:
            if existing is writes.UNREAD or existing is None:
                return writes.create(RESOURCE_CLAIM_TEMPLATES, tpl, namespace=ns)
            if D.template_fits(existing, template_count(name), cls):
                return None
            raise different(existing)

        try:
            writes.settle(self.kube, next_write, what=f"ResourceClaimTemplate {ns}/{name}",
                          read=lambda: self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name, namespace=ns),
                          dry_run=self.options.server_dry_run)
            return name
        except Conflict as e:  # AlreadyExists: made in between (another rblnctl?); fine if it is the same
            if e.reason != "AlreadyExists" and "already exists" not in str(e):
                raise
        existing = self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name, namespace=ns)
        if existing is None or not D.template_fits(existing, template_count(name), cls):
            raise different(existing)
        return name

    def _write(self, plan: VmNpuPlan, *, held: bool = False) -> tuple[VmNpuPlan, int]:
        """Patch the VM (a JSON patch whose `test` ops guard the lists the plan read: devices.guarded_patch) until it
        holds the plan's lists.

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
                    self._still_stopped(plan, vm, replan.running)
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

    def _delete_templates(self, ref: VmRef, names: Sequence[str]) -> tuple[list[str], list[str]]:
        deleted: list[str] = []
        kept: list[str] = []
        ns = ref.namespace
        for name in names:
            # The VM itself too: after rblnctl's patch its spec names the template only if someone put it back
            # meanwhile (a second rblnctl's opposite change reuses it: issue 37's explorer, second-opposite).
            users = [] if self.options.server_dry_run else self.template_users(ns, name, exclude=ref.name,
                                                                                vm_too=True)
            if users:
                kept.append(f"ResourceClaimTemplate {name} kept: {', '.join(users)} now "
                            f"{'uses' if len(users) == 1 else 'use'} it")
                continue
            obj = self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name, namespace=ns)
            if obj is None or not D.is_managed(obj):
                continue
            self.events.on_step(f"deleting ResourceClaimTemplate {ns}/{name} (no VM uses it any more)")
            uid = obj["metadata"].get("uid")

            def next_delete(current: Any, name: str = name, obj: dict = obj, uid: Any = uid) -> writes.Write | None:
                found = obj if current is writes.UNREAD else current
                if found is None or found["metadata"].get("uid") != uid:
                    return None  # gone (our delete landed), or replaced by another object
                if not D.is_managed(found):  # relabelled since (a 409 re-read it): someone else's now
                    raise Conflict(f"ResourceClaimTemplate {ns}/{name} is no longer labelled as rblnctl's",
                                   status=409, reason="Conflict")
                body = {"apiVersion": "v1", "kind": "DeleteOptions",
                        "preconditions": {"uid": uid, "resourceVersion": found["metadata"].get("resourceVersion")}}
                return writes.delete(RESOURCE_CLAIM_TEMPLATES, name, namespace=ns, body=body)

            try:
                writes.settle(self.kube, next_delete, what=f"ResourceClaimTemplate {ns}/{name}",
                              read=lambda name=name: self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name,  # type: ignore[misc]
                                                                            namespace=ns),
                              retry=writes.is_409, backoff_s=RETRY_BACKOFF_S, clock=self.clock,
                              attempts=self.options.max_attempts,  # a precondition's 409 (its resourceVersion
                              dry_run=self.options.server_dry_run)  # moved): read again, judged again
            except NotFound:
                continue
            except Conflict:
                kept.append(f"ResourceClaimTemplate {name} kept: it changed while rblnctl was deleting it")
                continue
            deleted.append(name)
        return deleted, kept


@dataclass(kw_only=True)
class DetachPlanner(AttachPlanner):
    """Take NPUs from a VM: all of them, or one host device by name; the same writes and guarantees as attach."""

    detach: DetachOptions = DetachOptions()

    def __post_init__(self) -> None:
        super().__post_init__()
        # The write path reads restart/dry-run/retry settings from `options`.
        self.options = AttachOptions(**{f.name: getattr(self.detach, f.name)
                                        for f in dataclasses.fields(WriteOptions)})

    def plan(self, name: str, namespace: str, *, uid: str | None = None, while_: str = "planned its change"
             ) -> VmNpuPlan:
        """Read the VM and plan removing its NPUs (reads only). InvalidInput when `device` is not one of them;
        Replaced when `uid` is given and the VM is another one (AttachPlanner.plan)."""
        vm, vmi = self._read(name, namespace, uid=uid, while_=while_)
        facts = self.reader.base(vm, vmi)
        target, warnings = detach_target(facts, self.detach)
        facts = self.reader.with_templates(facts, target, next_restart=self.options.next_restart)
        return vm_plan(facts, target, options=self.options, identity=self.identity, warnings=warnings)


def _runs_with(vmi: dict, plan: VmNpuPlan) -> bool:
    """Whether the VMI was made from the changed spec: its NPU host devices and claims are the plan's (by name and
    device, as virt-controller copies them from the template)."""
    spec = vmi.get("spec") or {}

    def names(entries: Sequence[dict], key: str) -> list[tuple[object, object]]:
        return sorted((e.get("name"), e.get(key)) for e in entries)

    return (names(D.host_devices(spec), "deviceName") == names(plan.host_devices_after, "deviceName")
            and names(D.resource_claims(spec), "resourceClaimTemplateName")
            == names(plan.resource_claims_after, "resourceClaimTemplateName"))
