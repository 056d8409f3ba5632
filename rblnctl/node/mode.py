"""ModeSwitcher: switch a node's NPUs between container and vm-passthrough mode, safely and resumably.

The RBLN NPU operator (like NVIDIA's GPU operator) swaps a node's deploy labels when its workload
label changes, but neither cordons nor drains; that is this module's job. The canonical run:

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
from rblnctl.errors import (
    ClusterError,
    ClusterUnreachable,
    InvalidInput,
    NotFound,
    OutcomeUnknown,
    RblnError,
    Refused,
    WaitTimeout,
)
from rblnctl.kube import (
    CLUSTER_POLICIES,
    NODE_FEATURES,
    NODES,
    PODS,
    RESOURCE_SLICES,
    Kube,
    Mirror,
    WatchSpec,
    outcome_unknown,
    validate_name,
    watch_until,
)
from rblnctl.kube.optional import NOTE, optional
from rblnctl.node.cordon import write_node
from rblnctl.node.drain import SCOPE_ALL, SCOPE_NPU, Drainer, DrainPlan, Survey, evicted_before
from rblnctl.node.events import NodeEvents, Step, WaitState
from rblnctl.node.filters import (
    PodFilter,
    daemonsets,
    emptydir,
    finished,
    kubevirt_refuses,
    mirror,
    new_mode_consumers,
    npu_consumers_only,
    operator_components,
    unmanaged,
    vm_guard_handles_launchers,
)
from rblnctl.node.lock import NodeLock
from rblnctl.node.options import ModeOptions
from rblnctl.node.pods import PodRef
from rblnctl.node.record import Recovery, SwitchRecord, annotation_patch, parse_record, record_of
from rblnctl.node.vms import npu_vms, stranded_pods, stranded_vms, vm_blocker
from rblnctl.operator import convergence
from rblnctl.operator.cluster import (
    OperatorView,
    component_pods,
    components_among,
    init_log,
    init_log_line,
    node_slices,
    read_operator,
)
from rblnctl.operator.components import InitHold, deploy_labels
from rblnctl.operator.nodes import is_npu_node, labels_of, mode_of, node_product
from rblnctl.operator.policy import choose_active
from rblnctl.operator.release import read_release
from rblnctl.plan import Blocker
from rblnctl.remedy import Command, Remedy

log = logging.getLogger(__name__)

def parse_mode(value: str) -> str:
    """Return the label value for what the user typed (`vm`, `vm-passthrough`, `container`)."""
    mode = C.MODE_ALIASES.get(str(value).strip().lower())
    if mode is None:
        hint = suggest_mode(value)
        raise InvalidInput(f"unknown mode {value!r}" + (f" (did you mean {hint}?)" if hint else "")
                           + f": use one of {', '.join(C.MODE_ALIASES)}")
    return mode


def suggest_mode(value: str) -> str | None:
    """The mode a typo most likely meant (`vmm`: vm, `contaner`: container); None when nothing is close."""
    import difflib

    close = difflib.get_close_matches(str(value).strip().lower(), list(C.MODE_ALIASES), n=1, cutoff=0.6)
    return close[0] if close else None


def short_mode(mode: str) -> str:
    """`vm` for vm-passthrough, as the command line spells it."""
    return "vm" if mode == C.MODE_VM else mode


def other_mode(mode: str) -> str:
    return C.MODE_CONTAINER if mode == C.MODE_VM else C.MODE_VM


def mode_filters(options: ModeOptions, view: OperatorView) -> list[PodFilter]:
    """drain's filters, with set-mode's VM guard in place of drain's VM rule."""
    d = options.drain
    return [finished(), mirror(), operator_components(view),
            daemonsets(npu_consumers_block=True, evict_npu_consumers=options.evict_daemonsets),
            npu_consumers_only(d.all_pods), vm_guard_handles_launchers(d.evict_vms),
            kubevirt_refuses(d.disable_eviction), emptydir(d.delete_emptydir_data, vm_override=d.evict_vms),
            unmanaged(d.force)]


@dataclass(frozen=True, kw_only=True)
class PlanStep:
    """One write (or wait) apply() will make, in order."""

    step: Step
    detail: str


@dataclass(frozen=True, kw_only=True)
class ModePlan:
    """What set-mode would do to `node`; `blockers` non-empty means apply() refuses and writes nothing."""

    node: str
    target: str  # label value: container | vm-passthrough
    current_mode: str  # effective mode now (label, else the policy default)
    mode_label: str | None  # raw label value (None when unset)
    noop: bool  # already in the target mode and the operator has converged
    resume: bool  # a switch to the same target was interrupted; apply() continues it
    cordoned_by_rblnctl: bool  # from the record when resuming
    unschedulable: bool  # the node is cordoned now
    started: str | None = None  # when the resumed switch started (record)
    steps: list[PlanStep] = field(default_factory=list)
    vms: list[str] = field(default_factory=list)  # VMs on the node holding NPUs
    drain: DrainPlan | None = None  # the pods as listed now (apply() lists again after the cordon)
    blockers: list[Blocker] = field(default_factory=list)
    warnings: list[str | Remedy] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # what the operator has not converged on yet
    converged: bool = False  # the node is in the target mode already: only an interrupted switch's leftovers to clear
    # An unfinished switch (this target's, or one taken over) already moved the node off the mode it started
    # from: a failure of this run must not roll back to "schedulable, no record" (docs/node.md).
    mid_switch: bool = False
    # The mode the switch really started from: a resumed run's is its record's `from` (its relabel may have
    # landed already, so the node's mode now is no longer where it started); None: current_mode.
    started_from: str | None = None
    uid: str = ""  # the node's uid as planned (the audit Events name it, so `kubectl describe node` shows them)

    @property
    def from_mode(self) -> str:
        """Where this switch started: the record's `from` when resuming, else the node's mode now."""
        return self.started_from or self.current_mode

    @property
    def recovery(self) -> Recovery:
        """How to resume this switch, or go back from it."""
        back = self.from_mode if self.from_mode != self.target else other_mode(self.target)
        return Recovery(node=self.node, target=self.target, back=back)


@dataclass(frozen=True, kw_only=True)
class ModeResult:
    """What apply() did."""

    node: str
    previous_mode: str
    mode: str
    changed: bool  # the workload label was written (or a resumed switch was finished)
    resumed: bool
    cordoned: bool  # rblnctl cordoned the node for this switch
    uncordoned: bool  # ...and uncordoned it at the end
    evicted: list[PodRef] = field(default_factory=list)
    server_dry_run: bool = False
    elapsed_s: float = 0.0


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

    # -- reading -------------------------------------------------------------------------------------

    def operator(self, *, fresh: bool = False) -> OperatorView:
        """The operator's policy and namespace; Refused when there is no policy (nothing would converge)."""
        if self._view is None or fresh:
            view = read_operator(self.kube, namespace=self.options.operator_namespace)
            if view.policy is None:
                why = "no RBLNClusterPolicy exists" if view.crd_installed else \
                    "the RBLNClusterPolicy CRD is not installed"
                raise Refused(f"{why}: the RBLN NPU Operator deploys nothing, so no node would ever switch; install "
                              "the operator with its RBLNClusterPolicy first")
            self._view = view
        return self._view

    def drainer(self) -> Drainer:
        """The Drainer this switch uses: same options, events and lock, set-mode's filters."""
        view = self.operator()
        return Drainer(kube=self.kube, options=self.options.drain, events=self.events, clock=self.clock,
                       operator=view, filters=mode_filters(self.options, view), identity=self.identity,
                       stop=self.stop)

    def pending(self, view: OperatorView, node_obj: dict, target: str) -> list[convergence.Pending]:
        """What is still missing before the operator has converged `node_obj` on `target` (empty: done)."""
        policy = view.policy
        assert policy is not None
        name = node_obj["metadata"]["name"]
        slices = node_slices(self.kube, name, policy.dra_driver) if C.COMP_DRA in policy.allocators(target) else None
        return convergence.pending(node_obj, target, policy, component_pods(self.kube, view, name), slices)

    def _vm_blockers(self, node: str, survey: Survey) -> tuple[list[str], list[Blocker], list[str]]:
        vms, warnings = npu_vms(self.kube, node, survey.evict + survey.ignored)
        evict_vms = self.options.drain.evict_vms
        blockers = [] if evict_vms else [vm_blocker(v, node) for v in vms]
        if vms and evict_vms:
            warnings.append(f"evicting the virt-launcher pods of {len(vms)} VM(s) holding NPUs; each VM "
                            "stops (its NPUs cannot live-migrate) and restarts elsewhere only if its run strategy "
                            "says so")
        return [str(v) for v in vms], blockers, warnings

    # -- plan ----------------------------------------------------------------------------------------

    def plan(self, node: str, target: str) -> ModePlan:
        """Read the node, its pods, VMs, lock and the operator's state; decide what apply() will do (no writes)."""
        validate_name(node)
        target = parse_mode(target)
        node_obj = self.kube.get(NODES, node)
        if not is_npu_node(node_obj):
            raise Refused(f"node {node} has no Rebellions NPU (neither an NFD pci-1eff label nor "
                          f"{C.NPU_PRESENT_LABEL}=true): there is no NPU mode to switch")
        labels = labels_of(node_obj)
        if deploy_labels(labels).skip:
            raise Refused(f"node {node} has {C.DEPLOY_SKIP_LABEL}=true: the operator deploys nothing there, so it "
                          f"would never switch; remove the label first "
                          f"(kubectl label node {node} {C.DEPLOY_SKIP_LABEL}-)")
        view = self.operator(fresh=True)
        policy = view.policy
        assert policy is not None
        warnings: list[str | Remedy] = list(view.notes)
        mode = mode_of(labels, policy)
        label, current = mode.label, mode.effective
        if not mode.label_valid:
            warnings.append(f"node {node} has {C.WORKLOAD_LABEL}={label!r}, which the operator does not know; it "
                            f"treats the node as {current} (the policy default)")
        raw = ((node_obj.get("metadata") or {}).get("annotations") or {}).get(C.SET_MODE_ANNOTATION)
        try:
            record = parse_record(raw)
        except ValueError:
            warnings.append(f"ignoring an unreadable {C.SET_MODE_ANNOTATION} annotation on {node}: {str(raw)[:80]!r}")
            record = None
        unschedulable = bool((node_obj.get("spec") or {}).get("unschedulable"))
        blockers: list[Blocker] = []
        resume = False
        cordoned_by = False
        started = None
        started_from = None
        # The node's mode already differs from where the recorded switch started: its relabel landed.
        mid_switch = record is not None and bool(record.from_mode) and current != record.from_mode
        if record is not None:
            if record.target == target:
                resume, started, cordoned_by = True, record.started, record.cordoned_by_rblnctl
                started_from = record.from_mode if record.from_mode in C.WORKLOAD_MODES else None
            elif not self.options.reverse:
                raise Refused(
                    f"a switch of node {node} to {short_mode(record.target)} started at {record.started or '?'} is "
                    f"unfinished: finish that one, or reverse it to switch to {short_mode(target)} instead",
                    options=("reverse",),
                ).with_details([], recovery=Recovery(node=node, target=record.target, back=target))
            else:
                warnings.append(f"reversing an unfinished switch to {short_mode(record.target)}")
                cordoned_by, resume = record.cordoned_by_rblnctl, True  # keep its knowledge of who cordoned
        drainer = self.drainer()
        # Another run holding the lock may be about to change the node: even "nothing to do" waits for it.
        lock_blockers: list[Blocker] = [] if self.options.drain.server_dry_run else \
            drainer.lock(node, "").check(take_over=self.options.drain.take_over)
        blockers.extend(lock_blockers)
        pending = [str(p) for p in self.pending(view, node_obj, target)]
        converged = current == target and not pending
        if converged and record is None and not lock_blockers:
            return ModePlan(node=node, target=target, current_mode=current, mode_label=label, noop=True, resume=False,
                            cordoned_by_rblnctl=False, unschedulable=unschedulable, warnings=warnings)
        if converged:
            # Only an interrupted switch's leftovers (cordon, record) to clear: the NPUs stay in this mode, so
            # no pod has to leave and no VM is at risk.
            drain = DrainPlan(node=node, scope=SCOPE_ALL if self.options.drain.all_pods else SCOPE_NPU, cordon=False,
                              unschedulable=unschedulable)
            vms: list[str] = []
        else:
            survey = drainer.survey(node)
            drain = DrainPlan(node=node, scope=SCOPE_ALL if self.options.drain.all_pods else SCOPE_NPU,
                              cordon=not unschedulable, unschedulable=unschedulable, evict=survey.evict,
                              ignored=survey.ignored, blockers=survey.blockers)
            vms, vm_blockers, vm_warnings = self._vm_blockers(node, survey)
            blockers.extend(vm_blockers)
            warnings.extend(vm_warnings)
            blockers.extend(drain.blockers)
            # The operator would never finish this switch: refuse before any write, naming the policy field
            # or the operator release (rblnctl.operator.release; `skip_release_check` goes past a release's limits,
            # `skip_iommu_check` past NFD's IOMMU fact).
            release = read_release(self.kube, view.deployments) \
                if target == C.MODE_VM and policy.allocators(target) else None
            iommu = self._iommu_blockers(node, node_obj, warnings) if target == C.MODE_VM else []
            skipped = {"skip_release_check": self.options.skip_release_check,
                       "skip_iommu_check": self.options.skip_iommu_check}
            for b in [*policy.switch_blockers(target, product=node_product(node_obj), release=release), *iommu]:
                if b.override is not None and skipped.get(b.override):
                    warnings.append(f"check skipped: {b.message}; the switch goes ahead and its wait will time out "
                                    "unless the operator serves the node after all")
                else:
                    blockers.append(b)
            if release is not None:
                warnings.extend(a for a in (release.assumption(c) for c in policy.allocators(target)) if a)
            if target == C.MODE_CONTAINER and current == C.MODE_VM and self.check_stranded_vms:
                stranded = stranded_vms(self.kube, policy, [node])
                if stranded:
                    warnings.append(stranded)
            if target == C.MODE_VM and current == C.MODE_CONTAINER and self.check_stranded_vms:
                stranded = stranded_pods(self.kube, policy, [node], survey.evict)
                if stranded:
                    warnings.append(stranded)
        steps = self._steps(node, target, label, unschedulable, resume, cordoned_by, drain)
        return ModePlan(node=node, target=target, current_mode=current, mode_label=label, noop=False, resume=resume,
                        cordoned_by_rblnctl=cordoned_by, started=started, unschedulable=unschedulable, steps=steps,
                        vms=vms, drain=drain, blockers=blockers, warnings=warnings, pending=pending,
                        converged=converged, mid_switch=mid_switch, started_from=started_from,
                        uid=str((node_obj.get("metadata") or {}).get("uid") or ""))

    def _iommu_blockers(self, node: str, node_obj: dict, warnings: list[str | Remedy]) -> list[Blocker]:
        """NFD says the node's IOMMU is off for its NPUs: the VFIO Manager could never bind them, so the switch
        would cordon and evict for nothing. One LIST of the node's NodeFeature objects; no NFD API or no fact:
        nothing is judged (preflight reports it); no permission: nothing is judged and a warning says the IOMMU
        was not checked."""
        from rblnctl.nfd import iommu_fact, node_nfd

        read = optional(lambda: self.kube.list(NODE_FEATURES, label_selector=f"{C.NFD_NODE_NAME_LABEL}={node}"),
                        what=f"list NodeFeatures (node {node}'s IOMMU was not checked)", absent=[],
                        on_forbidden=NOTE, notes=warnings)
        if not read.known or read.absent:
            return []
        features = read.value
        on, evidence = iommu_fact(node_nfd(node_obj, features))
        if on is not False:
            return []
        return [Blocker(f"node {node}'s IOMMU is off for its NPUs ({evidence}): the VFIO Manager could never bind "
                        "them to vfio-pci, so the switch would cordon and evict for nothing; turn the IOMMU on",
                        override="skip_iommu_check",
                        remedy=Remedy("{command} on the node says how",
                                      Command.own("preflight", local=True, on_host=True)))]

    def _steps(self, node: str, target: str, label: str | None, unschedulable: bool, resume: bool,
               cordoned_by: bool, drain: DrainPlan) -> list[PlanStep]:
        d = self.options.drain
        steps = [PlanStep(step=Step.LOCK, detail=f"take the lock of node {node} (a Lease)"),
                 PlanStep(step=Step.RECORD, detail=(
                     f"update annotation {C.SET_MODE_ANNOTATION} (resuming an unfinished switch)" if resume
                     else f"annotate node {node} with {C.SET_MODE_ANNOTATION} (progress, for resuming)"))]
        if unschedulable:
            steps.append(PlanStep(step=Step.CORDON, detail=f"node {node} is already cordoned"
                                  + (" (by rblnctl)" if cordoned_by else "")))
        else:
            steps.append(PlanStep(step=Step.CORDON, detail=f"cordon node {node}"))
        n = len(drain.evict)
        names = ", ".join(f"{e.namespace}/{e.name}" for e in drain.evict[:5]) + (", ..." if n > 5 else "")
        what = "pod(s)" if d.all_pods else "NPU pod(s)"
        steps.append(PlanStep(step=Step.EVICT, detail=f"list the pods again and evict {n} {what}"
                              + (f": {names}" if n else "") + (" (DELETE, no PodDisruptionBudget check)"
                                                               if d.disable_eviction and n else "")))
        if label == target:
            steps.append(PlanStep(step=Step.RELABEL, detail=f"{C.WORKLOAD_LABEL} is already {target}"))
        else:
            relabel = f"set {C.WORKLOAD_LABEL}={target} (was {label or 'unset'})"
            steps.append(PlanStep(step=Step.RELABEL, detail=relabel))
        steps.append(PlanStep(step=Step.WAIT, detail=f"wait up to {d.timeout_s:g}s for the operator to converge"))
        will_uncordon = self.options.uncordon and (not unschedulable or cordoned_by)
        steps.append(PlanStep(step=Step.UNCORDON, detail=f"uncordon node {node}" if will_uncordon else
                              (f"leave node {node} cordoned (as asked)" if not self.options.uncordon else
                               f"leave node {node} cordoned (it was cordoned before rblnctl)")))
        return steps

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
        node = plan.node
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
            self._write_record(node, record, dry)
            node_obj = self.kube.get(NODES, node)
            if not (node_obj.get("spec") or {}).get("unschedulable"):
                lock.ensure_held()
                self.events.on_step(Step.CORDON, f"cordoning node {node}")
                record = record.at(Step.CORDON, cordoned_by_rblnctl=True)
                self._cordon(node, record, dry)
            else:
                self.events.on_step(Step.CORDON, f"node {node} is already cordoned"
                                    + (" (by rblnctl)" if record.cordoned_by_rblnctl else ""))
            if not plan.converged:
                # Cordon, then list: VMs and pods that arrived since the plan are judged now.
                survey = drainer.survey(node)
                vms, vm_blockers, _ = self._vm_blockers(node, survey)
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
                relabeled = self._relabel(node, plan.target, record, dry)
            else:
                self._write_record(node, record, dry)
        except RblnError as err:
            if self._deleted(node, err):
                raise self._gone(plan) from err
            if relabeled or getattr(err, "relabel_unknown", False):
                raise self._in_progress(err, plan) from err
            self._rollback(node, record, dry, err)
            raise
        try:
            if not dry and not plan.converged:
                self.events.on_step(Step.WAIT, f"waiting for the operator to switch node {node} to {plan.target}")
                self._wait(node, plan.target, deadline, lock)
                # Nothing that uses the old mode's NPUs may run on a node reported switched: list once more (and
                # evict what arrived; the new mode's own consumers may stay).
                drainer.evict_rounds(node, deadline, evicted, lock, extra=[self._new_mode_filter(plan.target)])
            uncordoned = False
            lock.ensure_held()
            if self.options.uncordon and record.cordoned_by_rblnctl:
                self.events.on_step(Step.UNCORDON, f"uncordoning node {node}")
                self._finish(node, uncordon=True, dry=dry)
                uncordoned = True
            else:
                self.events.on_step(Step.UNCORDON, f"leaving node {node} cordoned"
                                    + ("" if record.cordoned_by_rblnctl else " (it was cordoned before rblnctl)"))
                self._finish(node, uncordon=False, dry=dry)
        except RblnError as err:
            if self._deleted(node, err):
                raise self._gone(plan) from err
            raise self._in_progress(err, plan) from err
        self.events.on_step(Step.FINISH, f"node {node} is in {plan.target} mode" if not dry
                            else "server dry run: every write was accepted; nothing persisted")
        return ModeResult(node=node, previous_mode=plan.from_mode, mode=plan.target, changed=not dry,
                          resumed=plan.resume, cordoned=record.cordoned_by_rblnctl, uncordoned=uncordoned,
                          evicted=evicted, server_dry_run=dry,
                          elapsed_s=round(self.clock.monotonic() - started, 3))

    def _new_mode_filter(self, target: str) -> PodFilter:
        policy = self.operator().policy
        assert policy is not None
        names = policy.vm_resources if target == C.MODE_VM else policy.container_resources
        return new_mode_consumers(names.matches, claims_are_new=target == C.MODE_CONTAINER)

    # -- writes, each settled by reading back on a lost reply ----------------------------------------

    def _retry(self, step: Step) -> Callable[[int, str], None]:
        return lambda attempt, why: self.events.on_step(step, why)

    def _write_record(self, node: str, record: SwitchRecord | None, dry: bool) -> None:
        """Record (or with None remove) the progress annotation: a merge patch."""
        def landed(obj: dict) -> bool:
            now = record_of(obj)
            return now == record if record is not None else now is None

        write_node(self.kube, node, annotation_patch(record), patch_type="merge", landed=landed, dry_run=dry,
                   on_retry=self._retry(Step.RECORD))

    def _cordon(self, node: str, record: SwitchRecord, dry: bool) -> None:
        """Cordon and record that rblnctl did, in one strategic merge patch: never one without the other."""
        def landed(obj: dict) -> bool:
            now = record_of(obj)
            return bool((obj.get("spec") or {}).get("unschedulable")) and now is not None and now.cordoned_by_rblnctl

        body = {"spec": {"unschedulable": True}, **annotation_patch(record)}
        write_node(self.kube, node, body, patch_type="strategic", landed=landed, dry_run=dry,
                   on_retry=self._retry(Step.CORDON))

    def _relabel(self, node: str, target: str, record: SwitchRecord, dry: bool) -> bool:
        """Set the workload label (and the record) in one merge patch guarded by resourceVersion; True when done.

        When whether it landed cannot be known (a lost reply, and the node cannot be read back),
        the error is marked `relabel_unknown`: nothing is then rolled back as if it had not landed.
        """
        body = annotation_patch(record)
        body["metadata"]["labels"] = {C.WORKLOAD_LABEL: target}
        try:
            write_node(self.kube, node, body, patch_type="merge", dry_run=dry,
                       landed=lambda obj: labels_of(obj).get(C.WORKLOAD_LABEL) == target,
                       on_retry=self._retry(Step.RELABEL))
        except OutcomeUnknown as err:
            err.relabel_unknown = True  # type: ignore[attr-defined]
            raise
        return True

    def _finish(self, node: str, *, uncordon: bool, dry: bool) -> None:
        """The last write: remove the record (and uncordon) in one patch."""
        def landed(obj: dict) -> bool:
            done = record_of(obj) is None
            return done and (not uncordon or not (obj.get("spec") or {}).get("unschedulable"))

        if uncordon:
            body, kind = {"spec": {"unschedulable": False}, **annotation_patch(None)}, "strategic"
        else:
            body, kind = annotation_patch(None), "merge"
        write_node(self.kube, node, body, patch_type=kind, landed=landed, dry_run=dry,
                   on_retry=self._retry(Step.UNCORDON))

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

    def _rollback(self, node: str, record: SwitchRecord, dry: bool, cause: RblnError) -> None:
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
                self._finish(node, uncordon=True, dry=dry)
            elif ours:
                self.events.on_step(Step.ROLLBACK, f"removing {C.SET_MODE_ANNOTATION} from node {node}")
                self._finish(node, uncordon=False, dry=dry)
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
