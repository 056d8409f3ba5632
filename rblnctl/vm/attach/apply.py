"""Make a plan of a VM's NPUs true: AttachPlanner and DetachPlanner, plan() then apply(), which only sequences steps.

plan() reads the facts (rblnctl.vm.attach.facts) and plans on them (rblnctl.vm.attach.plan, pure); apply() writes,
each step a module of its own whose writes are settled by reading back (rblnctl.kube.writes): the template to create
and those to delete (rblnctl.vm.attach.template_writes: uid preconditions), the VM's JSON patch
(rblnctl.vm.attach.patcher: its `test` ops of the uid, the lists and the run state the plan was decided on; a 422
re-reads and re-plans, bounded), and with --restart the stop, the stopped mark (rblnctl.vm.attach.marker; the rule,
rblnctl.vm.attach.mark: a lease this run holds) and the start, the VM read back around them
(rblnctl.vm.attach.readback). After a failure or an interruption, the clean-up is rblnctl.vm.attach.recovery's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import RblnError, Refused, WaitTimeout
from rblnctl.kube import Kube, writes
from rblnctl.vm.attach.facts import VmReader
from rblnctl.vm.attach.layout import ref_of
from rblnctl.vm.attach.mark import MARK_STOPPED, MARK_STOPPING, run_identity
from rblnctl.vm.attach.marker import MarkWriter
from rblnctl.vm.attach.model import (
    AttachOptions,
    DetachOptions,
    VmEvents,
    VmNpuPlan,
    VmNpuResult,
    WriteOptions,
)
from rblnctl.vm.attach.patcher import VmPatcher
from rblnctl.vm.attach.plan import detach_target, plan_attach, vm_plan
from rblnctl.vm.attach.readback import not_ours_now, still_the_vm
from rblnctl.vm.attach.recovery import Recovery, RestartProgress, interrupted_result
from rblnctl.vm.attach.template_writes import TemplateWriter
from rblnctl.vm.attach.templates import left_behind
from rblnctl.vm.cluster import VmCluster
from rblnctl.vm.lifecycle import VmLifecycle, replaced


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
        deleted, _ = self._templates().delete_unused(ref_of(vm), names)
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
        started, or started and stopped, after rblnctl's stop is not started or called restarted: `not_ours_now`,
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
        run = RestartProgress(ours=plan.start, confirmed=plan.start)
        final, attempts, created = plan, 0, None
        deleted: list[str] = []
        kept: list[str] = []
        templates = self._templates()
        try:
            if plan.restart:
                self._stop(plan, restarter, run)
            elif run.ours:  # the earlier run's mark, taken (this run holds it now) and renewed for its writes
                self._mark(plan, MARK_STOPPED)
            if plan.patch is not None:
                if self.guard is not None:
                    self.guard()
                created = templates.create_for(plan) if plan.template_create else None
                final, attempts = self._patcher().write(plan, held=run.ours and not dry)
                run.changed = True
                deleted, kept = templates.delete_unused(final.vm, final.templates_delete)
                if plan.stale_mark and not run.ours:
                    self._mark(plan, None)
            elif plan.templates_delete:  # nothing to change but the template an interrupted run left (left_behind)
                deleted, kept = templates.delete_unused(plan.vm, plan.templates_delete)
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
                still_the_vm(self.reader, plan)
            return result
        return self._start_again(plan, restarter, run, result)

    # -- the steps of apply() ------------------------------------------------------------------------------------

    def _stop(self, plan: VmNpuPlan, restarter: VmLifecycle, run: RestartProgress) -> None:
        """Mark the VM "stopping", ask virt-api to stop it, wait until it is stopped and mark it "stopped" (`run` says
        how far it got); a VM already stopped by someone else is not rblnctl's: its mark goes, `not_restarted` says
        why it will not be started."""
        run.marked = True
        self._mark(plan, MARK_STOPPING)  # before the stop is sent
        if restarter.ask_stop(plan.vm, uid=plan.uid):
            run.ours = True
        else:  # stopped (or stopping) already, by someone else: not rblnctl's to start
            run.not_restarted = (f"VM {plan.vm} was stopped by someone else before rblnctl stopped it (between "
                                 "the plan and the stop): its NPUs are changed and it is left stopped")
            self._mark(plan, None)
            run.marked = False
        if not self.options.server_dry_run:
            restarter.wait_stopped(plan.vm)
            if run.ours:  # its stop landed and the VM is stopped: the mark is certain, its evidence final
                self._mark(plan, MARK_STOPPED)  # (virt-controller moves observedGeneration while a VMI is
                run.confirmed = True  # there: it follows a runStrategy flip that leaves the template alone)

    def _start_again(self, plan: VmNpuPlan, restarter: VmLifecycle, run: RestartProgress,
                     result: VmNpuResult) -> VmNpuResult:
        """Start the VM rblnctl stopped (unless someone else acted since: not_ours_now), clear its mark and wait
        until it is Ready with the NPUs its spec asks for; on a failure, the clean-up (_recover) first."""
        others: str | None = None
        try:
            others = not_ours_now(restarter, plan)
            if others is None and not restarter.start(plan.vm, uid=plan.uid):
                others = not_ours_now(restarter, plan) or \
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
        """Every stopped-mark write of this run, apply()'s and its clean-up's (MarkWriter.write)."""
        MarkWriter(kube=self.kube, clock=self.clock, identity=self.identity, options=self.options).write(
            plan, state, within=within, release=release)

    def _recover(self, restarter: VmLifecycle, plan: VmNpuPlan, err: BaseException, run: RestartProgress, *,
                 retry_start: bool = True) -> None:
        """After a failure or an interruption: Recovery.recover, what it left kept in `recovery` and `left_stopped`."""
        left = Recovery(plan=plan, restarter=restarter, mark=self._mark).recover(err, run, retry_start=retry_start)
        self.recovery, self.left_stopped = left.lines, left.left_stopped

    def _if_interrupted(self, err: BaseException, done: VmNpuResult) -> None:
        """After an interruption (Ctrl-C, a signal), once the clean-up ran: what was done (`interrupted`), for the
        front end to show. Not put on the exception: a caller that runs this planner inside its own command (policy
        set-method --convert-vms) has results of its own."""
        if isinstance(err, KeyboardInterrupt):
            self.interrupted = interrupted_result(done, left_stopped=self.left_stopped)

    def _templates(self) -> TemplateWriter:
        return TemplateWriter(kube=self.kube, reader=self.reader, options=self.options, events=self.events,
                              clock=self.clock)

    def _patcher(self) -> VmPatcher:
        return VmPatcher(kube=self.kube, reader=self.reader, options=self.options, events=self.events,
                         clock=self.clock, identity=self.identity, guard=self.guard)


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

