"""ModeSwitcher: make a planned mode switch's writes, in order, and settle each (plan(): facts.py reads, plan.py
decides). The canonical run:

    lock -> record -> cordon -> list and evict (rounds) -> relabel -> wait for the operator
         -> list and evict again -> uncordon -> release the lock

Every write whose reply is lost is settled by reading the node back (rblnctl.node.cordon), so a
failure is rolled back only when nothing past the record and the cordon has landed; after the
relabel the node stays cordoned with its record and the error carries the way to resume or go
back (rblnctl.node.record.Recovery). docs/node.md has the exact requests and failure semantics.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rblnctl import audit
from rblnctl import constants as C
from rblnctl.audit import AuditRun, Auditor
from rblnctl.clock import SYSTEM_CLOCK, Clock, Stop, Stopped, iso_utc
from rblnctl.errors import (ClusterError, ClusterUnreachable, NotFound, OutcomeUnknown, RblnError, Refused, Replaced,
                            WaitTimeout)
from rblnctl.kube import (CLUSTER_POLICIES, NODES, PODS, RESOURCE_SLICES, Kube, Mirror, WatchSpec, outcome_unknown,
                          watch_until)
from rblnctl.node.cordon import write_node
from rblnctl.node.drain import Drainer, evicted_before
from rblnctl.node.events import NodeEvents, Step, WaitState
from rblnctl.node.lock import NodeLock
from rblnctl.node.mode.facts import ModeFacts, read_mode_facts, read_view
from rblnctl.node.mode.plan import ModePlan, ModeResult, judge_vms, mode_filters, new_mode_filter, plan_mode
from rblnctl.node.mode.rules import short_mode
from rblnctl.node.options import ModeOptions
from rblnctl.node.pods import PodRef
from rblnctl.node.record import SwitchRecord, annotation_patch, record_of
from rblnctl.node.vms import npu_vms
from rblnctl.operator import convergence
from rblnctl.operator.cluster import OperatorView, components_among, init_log, init_log_line
from rblnctl.operator.components import InitHold
from rblnctl.operator.nodes import labels_of, mode_of
from rblnctl.operator.policy import choose_active

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Converging:
    """One look of set-mode's wait: the lines it shows (compared: a new line is progress), what is pending and
    what the policy's status says is not ready."""

    shown: tuple[str, ...]
    pending: tuple[convergence.Pending, ...] = field(compare=False)
    not_ready: tuple[str, ...] = field(compare=False)


@dataclass(kw_only=True)
class ModeSwitcher:
    """Switch one node's NPU workload mode; options.drain.timeout_s bounds the whole apply()."""

    kube: Kube
    options: ModeOptions = field(default_factory=ModeOptions)
    events: NodeEvents = field(default_factory=NodeEvents)
    clock: Clock = SYSTEM_CLOCK
    identity: str | None = None  # who holds the node's lock (None: this host and process)
    stop: Stop | None = None  # set when the run is interrupted: no write after it, waits end (rblnctl.clock.Stopped)
    # Warn when a switch leaves no node of the mode the VMs (to container) or the evicted NPU pods (to vm) need (a
    # pool asks once for all its nodes instead: rblnctl.node.pool).
    check_stranded_vms: bool = True
    audit: Auditor | None = None  # writes the switch's Events on the node (None: none; never in a server dry run)
    _view: OperatorView | None = field(default=None, init=False, repr=False)
    # Every pod the last apply() evicted, kept as it goes: a failed or interrupted switch reports them too.
    evicted: list[PodRef] = field(default_factory=list, init=False, repr=False)

    # -- reading and planning --------------------------------------------------------------------------

    def operator(self, *, fresh: bool = False) -> OperatorView:
        """The operator's policy and namespace; Refused when there is no policy (nothing would converge)."""
        if self._view is None or fresh:
            self._view = read_view(self.kube, self.options)
        return self._view

    def drainer(self) -> Drainer:
        """The Drainer this switch uses: same options, events and lock, set-mode's filters."""
        view = self.operator()
        return Drainer(kube=self.kube, options=self.options.drain, events=self.events, clock=self.clock,
                       operator=view, filters=mode_filters(self.options, view), identity=self.identity,
                       stop=self.stop)

    def facts(self, node: str, target: str) -> ModeFacts:
        """Every read the plan needs (rblnctl.node.mode.facts); the operator is read afresh."""
        return read_mode_facts(self.kube, node, target, self.options, view=lambda: self.operator(fresh=True),
                               drainer=self.drainer, check_stranded_vms=self.check_stranded_vms)

    def plan(self, node: str, target: str) -> ModePlan:
        """Read the node, its pods, VMs, lock and the operator's state; decide what apply() will do (no writes)."""
        return plan_mode(self.facts(node, target), node, target, self.options)

    # -- apply ---------------------------------------------------------------------------------------

    def apply(self, plan: ModePlan) -> ModeResult:
        """Make the planned writes in order, under the node's lock; see docs/node.md for failures.

        Before the label is known to be written, a failure is rolled back (uncordon if rblnctl
        cordoned, remove the record) and re-raised. After it, or when whether it landed cannot be
        known, the node stays cordoned with its record and the error carries a Recovery.
        """
        started = self.clock.monotonic()
        self.evicted = []
        if plan.noop:  # no step taken: the front end says "nothing to do" once (it printed it twice)
            return ModeResult(node=plan.node, previous_mode=plan.current_mode, mode=plan.target, changed=False,
                              resumed=False, cordoned=False, uncordoned=False,
                              server_dry_run=self.options.drain.server_dry_run)
        if plan.blockers:
            raise Refused(f"refusing to switch node {plan.node} to {short_mode(plan.target)}", blockers=plan.blockers)
        drainer = self.drainer()
        lock = drainer.lock(plan.node, f"set-mode {plan.node} {short_mode(plan.target)}")
        self.events.on_step(Step.LOCK, f"locking node {plan.node} ({lock.namespace}/{lock.name})")
        try:  # the acquire too: a Lease whose create an interrupt cut short is given back if it landed
            taken = lock.acquire(take_over=self.options.drain.take_over)
            if taken is not None:
                self.events.on_warning(f"took over the expired lock of node {plan.node} from {taken.holder}")
            lock.start_renewing()
            since = plan.started or iso_utc(self.clock.now())  # the switch's start: its record's and its Events'
            run = self._audit_start(plan, since)
            try:
                result = self._switch(plan, drainer, lock, started, since=since,
                                      by=run.auditor.user() if run else None)
            except BaseException as err:
                if run is not None:
                    run.finish(audit.outcome_of(err), f"switch of node {plan.node} from {plan.from_mode} to "
                               f"{plan.target} {audit.outcome_of(err)}{evicted_before(self.evicted)}: "
                               f"{audit.one_line(err)}")
                if isinstance(err, RblnError) and self.evicted:
                    err.details = [*err.details, f"evicted from node {plan.node} before that: "
                                   + ", ".join(str(r) for r in self.evicted)]
                raise
            if run is not None:
                run.finish(audit.DONE, f"switched node {plan.node} from {plan.from_mode} to {plan.target} in "
                           f"{result.elapsed_s:g}s, {len(result.evicted)} pod(s) evicted")
            return result
        finally:
            lock.release()

    def _audit_start(self, plan: ModePlan, since: str) -> AuditRun | None:
        """The switch's audit run, its start recorded on the node (None: no auditor, or a server dry run)."""
        if self.audit is None or self.options.drain.server_dry_run:
            return None
        run = self.audit.run(audit.Regarding.node(plan.node, plan.uid), C.AUDIT_SET_MODE, from_=plan.from_mode,
                             to=plan.target, started=since, on_failed=self.events.on_warning)
        what = "resuming the switch of node" if plan.resume else "switching node"
        run.start(f"{what} {plan.node} from {plan.from_mode} to {plan.target}")
        return run

    def _switch(self, plan: ModePlan, drainer: Drainer, lock: NodeLock, started: float, *, since: str,
                by: str | None = None) -> ModeResult:
        dry = self.options.drain.server_dry_run
        node, uid = plan.node, plan.uid  # every write tests the node it decided on (cordon.write_node)
        deadline = started + self.options.drain.timeout_s
        record = SwitchRecord(target=plan.target, from_mode=plan.from_mode, started=since,
                              cordoned_by_rblnctl=plan.cordoned_by_rblnctl, step=Step.RECORD, by=by)
        # A failure counts as "after the relabel" when this run's label is already written (a resumed run) or
        # when the switch it continues or takes over had already moved the node off its starting mode: rolling
        # back would uncordon a half-switched node and drop the only record of it.
        relabeled = (plan.mode_label == plan.target and plan.resume) or plan.mid_switch
        evicted = self.evicted
        try:
            lock.ensure_held()
            self.events.on_step(Step.RECORD, plan.steps[1].detail if len(plan.steps) > 1 else "recording")
            self._write_record(node, record, dry, uid)
            node_obj = self.kube.get(NODES, node)
            if not (node_obj.get("spec") or {}).get("unschedulable"):
                lock.ensure_held()
                self.events.on_step(Step.CORDON, f"cordoning node {node}")
                record = record.at(Step.CORDON, cordoned_by_rblnctl=True)
                self._cordon(node, record, dry, uid)
            else:
                self.events.on_step(Step.CORDON, f"node {node} is already cordoned"
                                    + (" (by rblnctl)" if record.cordoned_by_rblnctl else ""))
            if not plan.converged:
                # Cordon, then list: VMs and pods that arrived since the plan are judged now.
                survey = drainer.survey(node)
                vms, vm_notes = npu_vms(self.kube, node, survey.evict + survey.ignored)
                _, vm_blockers, _ = judge_vms(node, vms, vm_notes, self.options)
                if vm_blockers or survey.blockers:
                    raise Refused(f"refusing to switch node {node} to {short_mode(plan.target)}: VMs or pods that "
                                  "arrived after the plan block it", blockers=[*vm_blockers, *survey.blockers])
                drainer.evict_rounds(node, deadline, evicted, lock)
            record = record.at(Step.EVICT)
            current = labels_of(self.kube.get(NODES, node)).get(C.WORKLOAD_LABEL)
            if current != plan.target:
                lock.ensure_held()
                self.events.on_step(Step.RELABEL, f"setting {C.WORKLOAD_LABEL}={plan.target}")
                record = record.at(Step.RELABEL)
                relabeled = self._relabel(node, plan.target, record, dry, uid)
            else:
                self._write_record(node, record, dry, uid)
        except RblnError as err:
            if self._deleted(node, err):
                raise self._gone(plan) from err
            if isinstance(err, Replaced):  # another node under this name: nothing to roll back on it
                raise
            if relabeled or getattr(err, "relabel_unknown", False):
                raise self._in_progress(err, plan) from err
            self._rollback(node, record, dry, err, uid)
            raise
        try:
            if not dry and not plan.converged:
                self.events.on_step(Step.WAIT, f"waiting for the operator to switch node {node} to {plan.target}")
                self._wait(node, plan.target, deadline, lock)
                # Nothing that uses the old mode's NPUs may run on a node reported switched: list once more (and
                # evict what arrived; the new mode's own consumers may stay).
                policy = self.operator().policy  # the policy as the wait began (its resource names)
                assert policy is not None
                drainer.evict_rounds(node, deadline, evicted, lock, extra=[new_mode_filter(policy, plan.target)])
            uncordoned = False
            lock.ensure_held()
            if self.options.uncordon and record.cordoned_by_rblnctl:
                self.events.on_step(Step.UNCORDON, f"uncordoning node {node}")
                self._finish(node, uncordon=True, dry=dry, uid=uid)
                uncordoned = True
            else:
                self.events.on_step(Step.UNCORDON, f"leaving node {node} cordoned"
                                    + ("" if record.cordoned_by_rblnctl else " (it was cordoned before rblnctl)"))
                self._finish(node, uncordon=False, dry=dry, uid=uid)
        except RblnError as err:
            if self._deleted(node, err):
                raise self._gone(plan) from err
            if isinstance(err, Replaced):
                raise
            raise self._in_progress(err, plan) from err
        self.events.on_step(Step.FINISH, f"node {node} is in {plan.target} mode" if not dry
                            else "server dry run: every write was accepted; nothing persisted")
        return ModeResult(node=node, previous_mode=plan.from_mode, mode=plan.target, changed=not dry,
                          resumed=plan.resume, cordoned=record.cordoned_by_rblnctl, uncordoned=uncordoned,
                          evicted=evicted, server_dry_run=dry,
                          elapsed_s=round(self.clock.monotonic() - started, 3))

    # -- writes, each settled by reading back on a lost reply ----------------------------------------

    def _retry(self, step: Step) -> Callable[[int, str], None]:
        return lambda attempt, why: self.events.on_step(step, why)

    def _write_record(self, node: str, record: SwitchRecord | None, dry: bool, uid: str) -> None:
        """Record (or with None remove) the progress annotation: a merge patch."""
        def landed(obj: dict) -> bool:
            now = record_of(obj)
            return now == record if record is not None else now is None

        write_node(self.kube, node, annotation_patch(record), patch_type="merge", landed=landed, dry_run=dry,
                   on_retry=self._retry(Step.RECORD), uid=uid)

    def _cordon(self, node: str, record: SwitchRecord, dry: bool, uid: str) -> None:
        """Cordon and record that rblnctl did, in one strategic merge patch: never one without the other."""
        def landed(obj: dict) -> bool:
            now = record_of(obj)
            return bool((obj.get("spec") or {}).get("unschedulable")) and now is not None and now.cordoned_by_rblnctl

        body = {"spec": {"unschedulable": True}, **annotation_patch(record)}
        write_node(self.kube, node, body, patch_type="strategic", landed=landed, dry_run=dry,
                   on_retry=self._retry(Step.CORDON), uid=uid)

    def _relabel(self, node: str, target: str, record: SwitchRecord, dry: bool, uid: str) -> bool:
        """Set the workload label (and the record) in one merge patch guarded by resourceVersion; True when done.

        When whether it landed cannot be known (a lost reply, and the node cannot be read back),
        the error is marked `relabel_unknown`: nothing is then rolled back as if it had not landed.
        """
        body = annotation_patch(record)
        body["metadata"]["labels"] = {C.WORKLOAD_LABEL: target}
        try:
            write_node(self.kube, node, body, patch_type="merge", dry_run=dry,
                       landed=lambda obj: labels_of(obj).get(C.WORKLOAD_LABEL) == target,
                       on_retry=self._retry(Step.RELABEL), uid=uid)
        except OutcomeUnknown as err:
            err.relabel_unknown = True  # type: ignore[attr-defined]
            raise
        return True

    def _finish(self, node: str, *, uncordon: bool, dry: bool, uid: str) -> None:
        """The last write: remove the record (and uncordon) in one patch."""
        def landed(obj: dict) -> bool:
            done = record_of(obj) is None
            return done and (not uncordon or not (obj.get("spec") or {}).get("unschedulable"))

        if uncordon:
            body, kind = {"spec": {"unschedulable": False}, **annotation_patch(None)}, "strategic"
        else:
            body, kind = annotation_patch(None), "merge"
        write_node(self.kube, node, body, patch_type=kind, landed=landed, dry_run=dry,
                   on_retry=self._retry(Step.UNCORDON), uid=uid)

    # -- waiting -------------------------------------------------------------------------------------

    def _wait(self, node: str, target: str, deadline: float, lock: NodeLock) -> None:
        """Wait for the operator to converge `node` on `target`, judging every change the moment it happens.

        Watches what convergence reads (the node, the operator's pods on it, the policies and, with
        DRA, the node's ResourceSlices): a few LISTs and one stream each, whatever the node runs,
        and no pause between a change and its judgement.
        """
        view = self.operator(fresh=True)
        assert view.policy is not None
        specs = [WatchSpec(NODES, field_selector=f"metadata.name={node}"),
                 WatchSpec(PODS, namespace=view.namespace, field_selector=f"spec.nodeName={node}"),
                 WatchSpec(CLUSTER_POLICIES)]
        if C.COMP_DRA in view.policy.allocators(target):
            specs.append(WatchSpec(RESOURCE_SLICES, field_selector=f"spec.nodeName={node},"
                                   f"spec.driver={view.policy.dra_driver}", missing_ok=True))
        timeout_s = self.options.drain.timeout_s
        started = deadline - timeout_s
        logs: dict[tuple[str, str], tuple[str | None, str | None]] = {}  # (pod, init container) -> log, problem

        def retrying(err: Exception) -> None:
            self.events.on_waiting([f"the API server did not answer ({err}); trying again"])

        def look(mirrors: Sequence[Mirror]) -> _Converging:
            nonlocal view
            lock.ensure_held()
            node_obj = mirrors[0].objects.get(("", node))
            if node_obj is None:
                raise NotFound(f'nodes "{node}" not found')
            view = dataclasses.replace(view, choice=choose_active(mirrors[2].items()))
            policy = view.policy
            if policy is None:
                raise Refused(f"the RBLNClusterPolicy was deleted while rblnctl waited for the operator to switch "
                              f"node {node} to {target}: nothing will converge it")
            mode = mode_of(labels_of(node_obj), policy)
            if mode.effective != target:
                # Someone else relabelled the node after us: waiting can only time out, and going on
                # would fight them. Stop here (cordoned, recorded) and let a person decide.
                raise Refused(f"{C.WORKLOAD_LABEL} on node {node} was changed to {mode.label!r} by someone else "
                              f"while rblnctl waited for the operator to switch it to {target}")
            slices = mirrors[3].items() if len(mirrors) > 3 else None
            # (no `now`: a held pod's line says since when, so it changes only when its state does)
            pend = convergence.pending(node_obj, target, policy, components_among(mirrors[1].items(), view), slices)
            not_ready = policy.not_ready(modes=(target,)) if pend else []
            return _Converging(shown=tuple([str(p) for p in pend] + [f"operator: {t}" for t in not_ready]),
                               pending=tuple(pend), not_ready=tuple(not_ready))

        def progress(now: _Converging) -> None:
            if now.pending:
                self.events.on_waiting(list(now.shown))
                self.events.on_wait(self._wait_state(node, target, list(now.pending), list(now.not_ready), logs,
                                                     elapsed_s=self.clock.monotonic() - started, timeout_s=timeout_s))

        seen = watch_until(self.kube, specs, look, lambda now: not now.pending, deadline=deadline, clock=self.clock,
                           stop=self.stop, on_change=progress, on_retry=retrying, poll_s=self.options.drain.poll_s)
        if seen.done:
            return
        if seen.stopped:
            raise Stopped(f"stopped while waiting for the operator to switch node {node}")
        err = WaitTimeout(f"the operator did not switch node {node} to {target} within "
                          f"{self.options.drain.timeout_s:g}s")
        pend = list(seen.state.pending) if seen.state is not None else []
        missing = [str(p) for p in pend] if seen.state is not None else ["nothing read yet"]
        if pend:  # a component pod held in an init container: its last log line says what it waits for (the one
            # the wait already read, else read now)
            def log_of(h: InitHold) -> str | None:
                return logs[(h.ref, h.container)][0] if (h.ref, h.container) in logs else init_log_line(self.kube, h)

            missing = [str(p) for p in convergence.with_logs(pend, log_of, self.clock.now())]
        stuck = [p.hold for p in pend if p.hold is not None and p.hold.stuck]
        # what a person does next (issue 39): a stuck pod does not finish on its own, so a longer wait is no remedy
        advice = [f"waiting longer does not help: {', '.join(sorted({h.component for h in stuck}))} cannot start on "
                  f"this node as things are (what it waits for is above); go back to the old mode (below), or "
                  f"give it what it waits for (docs/operator.md)"] if stuck else []
        raise err.with_details([f"still missing: {m}" for m in missing] + advice)

    def _wait_state(self, node: str, target: str, pend: list[convergence.Pending], not_ready: list[str],
                    logs: dict[tuple[str, str], tuple[str | None, str | None]], *, elapsed_s: float,
                    timeout_s: float) -> WaitState:
        """The wait's state for the front end; a stuck init container's last log line is read once per (pod,
        container), so a held pod says what it waits for while the wait goes on, not only at its timeout."""
        problem = None
        items = []
        for p in pend:
            h = p.hold
            if h is not None and h.stuck:
                key = (h.ref, h.container)
                if key not in logs:
                    logs[key] = init_log(self.kube, h)
                line, why = logs[key]
                problem = problem or why
                if line is not None and h.log is None:
                    h = dataclasses.replace(h, log=line)
                    p = dataclasses.replace(p, hold=h, text=h.describe())
            items.append(p)
        return WaitState(node=node, target=target, pending=tuple(items), operator=tuple(not_ready),
                         elapsed_s=max(0.0, elapsed_s), timeout_s=timeout_s, log_problem=problem)

    # -- failure handling ----------------------------------------------------------------------------

    def _rollback(self, node: str, record: SwitchRecord, dry: bool, cause: RblnError, uid: str) -> None:
        """Undo what ran before the relabel: uncordon if rblnctl cordoned, drop the record; settled by reading back.

        When the node cannot even be read, nothing is written and the cause says so: the record on
        the node (if it landed) lets the next run resume or go back.
        """
        try:
            now = self.kube.get(NODES, node)
        except (ClusterError, ClusterUnreachable) as e:
            self.events.on_step(Step.ROLLBACK, f"cannot read node {node} to roll back ({e}); check it by hand")
            cause.details = [*cause.details, f"not rolled back: node {node} could not be read; if it is cordoned with "
                             f"the {C.SET_MODE_ANNOTATION} annotation, re-run set-mode to resume or go back"]
            return
        on_node = record_of(now)
        # The record on the node is what landed: roll back only what it says this switch did.
        ours = on_node is not None and on_node.target == record.target and on_node.started == record.started
        cordoned_by_us = ours and on_node is not None and on_node.cordoned_by_rblnctl and \
            bool((now.get("spec") or {}).get("unschedulable"))
        try:
            if cordoned_by_us:
                self.events.on_step(Step.ROLLBACK, f"uncordoning node {node} and removing {C.SET_MODE_ANNOTATION}")
                self._finish(node, uncordon=True, dry=dry, uid=uid)
            elif ours:
                self.events.on_step(Step.ROLLBACK, f"removing {C.SET_MODE_ANNOTATION} from node {node}")
                self._finish(node, uncordon=False, dry=dry, uid=uid)
        except RblnError as e:  # report, but the error that made us roll back is the one to raise
            log.warning("rollback of node %s failed: %s", node, e)
            self.events.on_step(Step.ROLLBACK, f"rollback failed: {e}; check node {node} by hand")

    def _deleted(self, node: str, err: RblnError) -> bool:
        """Whether `err` came from the node itself being deleted mid-run (then there is nothing to resume)."""
        if not isinstance(err, NotFound):
            return False
        try:
            return self.kube.get_optional(NODES, node) is None
        except RblnError:
            return False

    @staticmethod
    def _gone(plan: ModePlan) -> NotFound:
        return NotFound(f"node {plan.node} was deleted while rblnctl switched it to {short_mode(plan.target)}: "
                        "there is nothing left to resume or roll back")

    def _in_progress(self, err: RblnError, plan: ModePlan) -> RblnError:
        """The same error class (so the exit code stays), saying the switch is in progress and how to go on."""
        new = copy.copy(err)
        detail = (f"the mode change of node {plan.node} to {short_mode(plan.target)} is in progress: the node stays "
                  "cordoned with its record")
        if outcome_unknown(err):
            detail = (f"whether the relabel of node {plan.node} landed is unknown: the node stays cordoned with its "
                      "record")
        return new.with_details([*err.details, detail], recovery=plan.recovery)

