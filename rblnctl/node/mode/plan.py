"""Plan a mode switch from facts already read (pure: no I/O, no Kube, no clock; rblnctl.node.mode.facts reads,
rblnctl.node.mode.apply writes): refuse, or decide the steps, the blockers and the warnings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.node.drain import SCOPE_ALL, SCOPE_NPU, DrainPlan
from rblnctl.node.events import Step
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
from rblnctl.node.mode.facts import ModeFacts
from rblnctl.node.mode.rules import (
    is_converged,
    other_mode,
    parse_mode,
    refuse_node,
    refuse_record,
    short_mode,
)
from rblnctl.node.options import ModeOptions
from rblnctl.node.pods import PodRef
from rblnctl.node.record import Recovery, read_record
from rblnctl.node.vms import vm_blocker
from rblnctl.operator.cluster import OperatorView
from rblnctl.operator.nodes import labels_of, mode_of, node_product
from rblnctl.operator.policy import Policy
from rblnctl.plan import Blocker
from rblnctl.remedy import Command, Remedy
from rblnctl.vm.guard import NpuVm



def mode_filters(options: ModeOptions, view: OperatorView) -> list[PodFilter]:
    """drain's filters, with set-mode's VM guard in place of drain's VM rule."""
    d = options.drain
    return [finished(), mirror(), operator_components(view),
            daemonsets(npu_consumers_block=True, evict_npu_consumers=options.evict_daemonsets),
            npu_consumers_only(d.all_pods), vm_guard_handles_launchers(d.evict_vms),
            kubevirt_refuses(d.disable_eviction), emptydir(d.delete_emptydir_data, vm_override=d.evict_vms),
            unmanaged(d.force)]


def new_mode_filter(policy: Policy, target: str) -> PodFilter:
    """The pods the target mode's own NPUs serve: they may stay on a switched node."""
    names = policy.vm_resources if target == C.MODE_VM else policy.container_resources
    return new_mode_consumers(names.matches, claims_are_new=target == C.MODE_CONTAINER)


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


# -- judgements ---------------------------------------------------------------------------------------------------

def judge_vms(node: str, vms: Sequence[NpuVm], notes: Sequence[str],
              options: ModeOptions) -> tuple[list[str], list[Blocker], list[str]]:
    """The VMs holding NPUs on the node: their names, what blocks (each VM, unless evicting VMs), the warnings."""
    evict_vms = options.drain.evict_vms
    blockers = [] if evict_vms else [vm_blocker(v, node) for v in vms]
    warnings = list(notes)
    if vms and evict_vms:
        warnings.append(f"evicting the virt-launcher pods of {len(vms)} VM(s) holding NPUs; each VM "
                        "stops (its NPUs cannot live-migrate) and restarts elsewhere only if its run strategy "
                        "says so")
    return [str(v) for v in vms], blockers, warnings


def iommu_blockers(node: str, node_obj: Mapping[str, Any], features: Sequence[dict] | None) -> list[Blocker]:
    """NFD says the node's IOMMU is off for its NPUs: the VFIO Manager could never bind them, so the switch
    would cordon and evict for nothing. No NodeFeatures read (no NFD API, no permission): nothing is judged."""
    from rblnctl.nfd import iommu_fact, node_nfd

    if features is None:
        return []
    on, evidence = iommu_fact(node_nfd(dict(node_obj), list(features)))
    if on is not False:
        return []
    return [Blocker(f"node {node}'s IOMMU is off for its NPUs ({evidence}): the VFIO Manager could never bind "
                    "them to vfio-pci, so the switch would cordon and evict for nothing; turn the IOMMU on",
                    override="skip_iommu_check",
                    remedy=Remedy("{command} on the node says how",
                                  Command.own("preflight", local=True, on_host=True)))]


def plan_steps(node: str, target: str, label: str | None, unschedulable: bool, resume: bool,
               cordoned_by: bool, drain: DrainPlan, options: ModeOptions) -> list[PlanStep]:
    """The writes and waits apply() makes, in order, as the plan shows them."""
    d = options.drain
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
    will_uncordon = options.uncordon and (not unschedulable or cordoned_by)
    steps.append(PlanStep(step=Step.UNCORDON, detail=f"uncordon node {node}" if will_uncordon else
                          (f"leave node {node} cordoned (as asked)" if not options.uncordon else
                           f"leave node {node} cordoned (it was cordoned before rblnctl)")))
    return steps


def _switch_checks(facts: ModeFacts, node: str, target: str, options: ModeOptions,
                   warnings: list[str | Remedy]) -> list[Blocker]:
    """Whether the operator would ever finish this switch: the policy, its release and NFD's IOMMU fact, each
    blocker passed over (a warning) when its `skip_*` option says so (rblnctl.operator.release)."""
    policy = facts.view.policy
    assert policy is not None
    iommu = iommu_blockers(node, facts.node_obj, facts.node_features) if target == C.MODE_VM else []
    warnings.extend(facts.iommu_notes)
    skipped = {"skip_release_check": options.skip_release_check, "skip_iommu_check": options.skip_iommu_check}
    blockers: list[Blocker] = []
    product = node_product(dict(facts.node_obj))
    for b in [*policy.switch_blockers(target, product=product, release=facts.release), *iommu]:
        if b.override is not None and skipped.get(b.override):
            warnings.append(f"check skipped: {b.message}; the switch goes ahead and its wait will time out "
                            "unless the operator serves the node after all")
        else:
            blockers.append(b)
    if facts.release is not None:
        warnings.extend(a for a in (facts.release.assumption(c) for c in policy.allocators(target)) if a)
    return blockers


def plan_mode(facts: ModeFacts, node: str, target: str, options: ModeOptions) -> ModePlan:
    """Decide what apply() will do to `node` from the facts read (pure); Refused/InvalidInput as the gates say."""
    target = parse_mode(target)
    node_obj = facts.node_obj
    refuse_node(node, node_obj)
    policy = facts.view.policy
    assert policy is not None
    warnings: list[str | Remedy] = list(facts.view.notes)
    mode = mode_of(labels_of(dict(node_obj)), policy)
    label, current = mode.label, mode.effective
    if not mode.label_valid:
        warnings.append(f"node {node} has {C.WORKLOAD_LABEL}={label!r}, which the operator does not know; it "
                        f"treats the node as {current} (the policy default)")
    record, unreadable = read_record(node_obj)
    if unreadable:
        warnings.append(unreadable)
    refuse_record(node_obj, target, record, options, facts.view)
    unschedulable = bool((node_obj.get("spec") or {}).get("unschedulable"))
    resume, cordoned_by, started, started_from = False, False, None, None
    # The node's mode already differs from where the recorded switch started: its relabel landed.
    mid_switch = record is not None and bool(record.from_mode) and current != record.from_mode
    if record is not None and record.target == target:
        resume, started, cordoned_by = True, record.started, record.cordoned_by_rblnctl
        started_from = record.from_mode if record.from_mode in C.WORKLOAD_MODES else None
    elif record is not None:
        warnings.append(f"reversing an unfinished switch to {short_mode(record.target)}")
        cordoned_by, resume = record.cordoned_by_rblnctl, True  # keep its knowledge of who cordoned
    # Another run holding the lock may be about to change the node: even "nothing to do" waits for it.
    blockers: list[Blocker] = list(facts.lock_blockers)
    pending = list(facts.pending)
    converged = is_converged(node_obj, policy, target, pending)
    if converged and record is None and not facts.lock_blockers:
        return ModePlan(node=node, target=target, current_mode=current, mode_label=label, noop=True, resume=False,
                        cordoned_by_rblnctl=False, unschedulable=unschedulable, warnings=warnings)
    if not converged and facts.survey is None:
        # Facts read where the node was converged (no pods listed, no VMs found) cannot plan a switch: an empty
        # survey would pass every pod and VM on the node. Fail closed rather than plan blind.
        raise ValueError(f"plan_mode: node {node} is not converged on {target} but its pods were not read")
    scope = SCOPE_ALL if options.drain.all_pods else SCOPE_NPU
    vms: list[str] = []
    if converged:
        # Only an interrupted switch's leftovers (cordon, record) to clear: the NPUs stay in this mode, so
        # no pod has to leave and no VM is at risk.
        drain = DrainPlan(node=node, scope=scope, cordon=False, unschedulable=unschedulable)
    else:
        survey = facts.survey
        assert survey is not None  # checked above
        drain = DrainPlan(node=node, scope=scope, cordon=not unschedulable, unschedulable=unschedulable,
                          evict=survey.evict, ignored=survey.ignored, blockers=survey.blockers)
        vms, vm_blockers, vm_warnings = judge_vms(node, facts.vms, facts.vm_notes, options)
        blockers.extend(vm_blockers)
        warnings.extend(vm_warnings)
        blockers.extend(drain.blockers)
        blockers.extend(_switch_checks(facts, node, target, options, warnings))
        if facts.stranded:
            warnings.append(facts.stranded)
    steps = plan_steps(node, target, label, unschedulable, resume, cordoned_by, drain, options)
    return ModePlan(node=node, target=target, current_mode=current, mode_label=label, noop=False, resume=resume,
                    cordoned_by_rblnctl=cordoned_by, started=started, unschedulable=unschedulable, steps=steps,
                    vms=vms, drain=drain, blockers=blockers, warnings=warnings, pending=pending,
                    converged=converged, mid_switch=mid_switch, started_from=started_from,
                    uid=str((node_obj.get("metadata") or {}).get("uid") or ""))
