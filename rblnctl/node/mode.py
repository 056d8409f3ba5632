"""ModeSwitcher: cordon, drain NPU consumers, set rebellions.ai/npu.workload.config, wait for the operator, uncordon.

The RBLN NPU operator (like NVIDIA's GPU operator) swaps a node's `npu.deploy.*` labels when its
workload label changes, but neither cordons nor drains: that is this module's job. Progress is
recorded in a node annotation so that an interrupted switch can be resumed by running the same
command again. See docs/node.md for the exact requests and the failure semantics.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    RblnError,
    Refused,
    WaitTimeout,
)
from rblnctl.kube import NODES, VMIS, Kube
from rblnctl.node.drain import SCOPE_ALL, SCOPE_NPU, Drainer, DrainPlan, PodRef, cordon_patch
from rblnctl.operator import convergence
from rblnctl.operator.cluster import OperatorView, component_pods, node_slices, read_operator
from rblnctl.operator.components import deploy_labels
from rblnctl.operator.nodes import is_npu_node, labels_of, mode_of, node_product
from rblnctl.operator.resources import is_npu_resource

log = logging.getLogger(__name__)

RELABEL_ATTEMPTS = 5

# Steps, as reported through on_step and recorded in the progress annotation.
STEP_RECORD = "record"
STEP_CORDON = "cordon"
STEP_EVICT = "evict"
STEP_RELABEL = "relabel"
STEP_WAIT = "wait"
STEP_UNCORDON = "uncordon"
STEP_FINISH = "finish"
STEP_ROLLBACK = "rollback"

def parse_mode(value: str) -> str:
    """Return the label value for what the user typed (`vm`, `vm-passthrough`, `container`)."""
    mode = C.MODE_ALIASES.get(value.strip().lower())
    if mode is None:
        raise InvalidInput(f"unknown mode {value!r}: use one of {', '.join(C.MODE_ALIASES)}")
    return mode


def short_mode(mode: str) -> str:
    """`vm` for vm-passthrough, as the command line spells it."""
    return "vm" if mode == C.MODE_VM else mode


@dataclass(frozen=True, kw_only=True)
class PlanStep:
    """One write (or wait) run() will make, in order."""

    step: str
    detail: str


@dataclass(frozen=True, kw_only=True)
class ModePlan:
    """What set-mode would do to `node`; `blockers` non-empty means run() refuses and writes nothing."""

    node: str
    target: str  # label value: container | vm-passthrough
    current_mode: str  # effective mode now (label, else the policy default)
    mode_label: str | None  # raw label value (None when unset)
    noop: bool  # already in the target mode and the operator has converged
    resume: bool  # a set-mode to the same target was interrupted; run() continues it
    cordoned_by_rblnctl: bool  # from the progress annotation when resuming
    started: str | None = None  # when the resumed switch started (progress annotation)
    unschedulable: bool  # the node is cordoned now
    steps: list[PlanStep] = field(default_factory=list)
    vms: list[str] = field(default_factory=list)  # ns/name of VMIs on the node holding NPUs
    drain: DrainPlan | None = None
    blockers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # what the operator has not converged on yet


@dataclass(frozen=True, kw_only=True)
class ModeResult:
    """What run() did."""

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


def _noop(*_: Any) -> None:
    return None


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(kw_only=True)
class ModeSwitcher:
    """Switch one node's NPU workload mode safely (cordon, drain, relabel, wait, uncordon).

    `timeout_s` bounds the whole run (evictions and the wait for the operator). `uncordon` False
    leaves the node cordoned at the end; the node is only ever uncordoned if rblnctl cordoned it.
    """

    kube: Kube
    timeout_s: float = 600.0
    force: bool = False  # proceed past the VM guard, unmanaged pods and another target in progress
    all_pods: bool = False
    delete_emptydir_data: bool = False
    disable_eviction: bool = False
    grace_period_s: int | None = None
    server_dry_run: bool = False
    uncordon: bool = True
    poll_s: float = 1.0
    max_parallel: int = 8
    operator_namespace: str | None = None  # None: the policy's spec.namespace, else the operator's own
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    on_step: Callable[[str, str], None] = _noop
    on_waiting: Callable[[list[str]], None] = _noop  # what the operator still has to do, each poll
    on_evicted: Callable[[PodRef], None] = _noop
    on_deleted: Callable[[PodRef], None] = _noop
    on_pdb_blocked: Callable[[PodRef, str, int], None] = _noop

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise InvalidInput(f"timeout must be more than 0 seconds, not {self.timeout_s:g}")
        if self.grace_period_s is not None and self.grace_period_s < 0:
            raise InvalidInput(f"grace period must be 0 or more seconds, not {self.grace_period_s}")

    def _drainer(self, view: OperatorView) -> Drainer:
        # The VM guard below decides about VMs; with --force their launchers go like any NPU pod.
        return Drainer(operator=view,
            kube=self.kube, all_pods=self.all_pods, force=self.force, delete_emptydir_data=self.delete_emptydir_data,
            evict_vms=True, disable_eviction=self.disable_eviction, grace_period_s=self.grace_period_s,
            timeout_s=self.timeout_s, poll_s=self.poll_s, max_parallel=self.max_parallel, cordon=False,
            server_dry_run=self.server_dry_run, sleep=self.sleep,
            clock=self.clock, on_evicted=self.on_evicted, on_deleted=self.on_deleted,
            on_pdb_blocked=self.on_pdb_blocked,
        )

    # -- reading -------------------------------------------------------------------------------------

    def _operator(self) -> OperatorView:
        view = read_operator(self.kube, namespace=self.operator_namespace)
        if view.policy is None:
            why = "no RBLNClusterPolicy exists" if view.crd_installed else "the RBLNClusterPolicy CRD is not installed"
            raise Refused(f"{why}: the RBLN NPU Operator deploys nothing, so no node would ever switch; install the "
                          "operator with its RBLNClusterPolicy first")
        return view

    def pending(self, view: OperatorView, node_obj: dict, target: str) -> list[convergence.Pending]:
        """What is still missing before the operator has converged `node_obj` on `target` (empty: done)."""
        policy = view.policy
        assert policy is not None
        name = node_obj["metadata"]["name"]
        slices = node_slices(self.kube, name, policy.dra_driver) if C.COMP_DRA in policy.allocators(target) else None
        return convergence.pending(node_obj, target, policy, component_pods(self.kube, view, name), slices)

    def _vms(self, node: str, drain: DrainPlan | None) -> list[str]:
        """VMIs on `node` that hold NPUs (host devices or DRA claims), plus NPU-holding virt-launcher pods."""
        found: dict[str, str] = {}
        try:
            vmis = self.kube.list(VMIS, label_selector=f"{C.VMI_NODE_LABEL}={node}")
        except NotFound:  # KubeVirt not installed
            vmis = []
        for v in vmis:
            if ((v.get("status") or {}).get("nodeName") or node) != node:
                continue
            spec = v.get("spec") or {}
            devices = ((spec.get("domain") or {}).get("devices") or {}).get("hostDevices") or []
            npus = [d.get("deviceName") for d in devices if is_npu_resource(str(d.get("deviceName", "")))]
            claims = [d.get("claimName") for d in devices if d.get("claimName")]
            claims += [c.get("name") for c in spec.get("resourceClaims") or []]
            if npus or claims:
                what = ", ".join([*npus, *(f"claim {c}" for c in dict.fromkeys(claims))])
                found[f"{v['metadata'].get('namespace')}/{v['metadata']['name']}"] = what
        for e in (drain.evict + drain.ignored) if drain else []:
            if e.npu and e.vmi and f"{e.namespace}/{e.vmi}" not in found:
                found[f"{e.namespace}/{e.vmi}"] = f"virt-launcher pod {e.name} requests NPUs"
        return [f"{k} ({v})" for k, v in sorted(found.items())]

    # -- plan ----------------------------------------------------------------------------------------

    def plan(self, node: str, target: str) -> ModePlan:
        """Read the node, its pods, VMs and the operator's state; decide what run() will do (no writes)."""
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
        view = self._operator()
        policy = view.policy
        assert policy is not None
        warnings: list[str] = list(view.notes)
        mode = mode_of(labels, policy)
        label, current = mode.label, mode.effective
        if not mode.label_valid:
            warnings.append(f"node {node} has {C.WORKLOAD_LABEL}={label!r}, which the operator does not know; it "
                            f"treats the node as {current} (the policy default)")
        annotations = (node_obj.get("metadata") or {}).get("annotations") or {}
        progress: dict | None = None
        raw = annotations.get(C.SET_MODE_ANNOTATION)
        if raw is not None:
            try:
                progress = json.loads(raw)
                if not isinstance(progress, dict) or progress.get("target") not in C.WORKLOAD_MODES:
                    raise ValueError("no valid target")
            except ValueError:
                warnings.append(f"ignoring an unreadable {C.SET_MODE_ANNOTATION} annotation on {node}: {raw[:80]!r}")
                progress = None
        unschedulable = bool((node_obj.get("spec") or {}).get("unschedulable"))
        blockers: list = []
        resume = False
        cordoned_by = False
        started = None
        if progress is not None:
            if progress["target"] == target:
                resume = True
                started = progress.get("started")
                cordoned_by = bool(progress.get("cordoned_by_rblnctl"))
            elif not self.force:
                raise Refused(
                    f"a switch of node {node} to {short_mode(progress['target'])} started at "
                    f"{progress.get('started', '?')} is unfinished: run `rblnctl node set-mode {node} "
                    f"{short_mode(progress['target'])}` to finish it, or pass --force to switch to "
                    f"{short_mode(target)} instead")
            else:
                warnings.append(f"abandoning an unfinished switch to {short_mode(progress['target'])} (--force)")
                cordoned_by = bool(progress.get("cordoned_by_rblnctl"))
                resume = True  # we keep its knowledge of who cordoned the node
        pending = [str(p) for p in self.pending(view, node_obj, target)]
        converged = current == target and not pending
        if converged and progress is None:
            return ModePlan(node=node, target=target, current_mode=current, mode_label=label, noop=True, resume=False,
                            cordoned_by_rblnctl=False, unschedulable=unschedulable, warnings=warnings)
        if converged:
            # Only an interrupted switch's leftovers (cordon, annotation) to clear: the NPUs stay in this mode,
            # so no pod has to leave and no VM is at risk.
            drain = DrainPlan(node=node, scope=SCOPE_ALL if self.all_pods else SCOPE_NPU, cordon=False,
                              unschedulable=unschedulable)
        else:
            drain = self._drainer(view).plan(node, node_obj=node_obj)
            # The operator would never finish this switch: refuse before any write, naming the policy field.
            blockers.extend(policy.switch_blockers(target, product=node_product(node_obj)))
        vms = self._vms(node, drain) if not converged else []
        if vms and not self.force:
            blockers.extend(f"VM {v} holds NPUs on {node}: stop or migrate these VMs first" for v in vms)
        elif vms:
            warnings.append(f"--force: evicting the virt-launcher pods of {len(vms)} VM(s) holding NPUs; each VM "
                            f"stops (its NPUs cannot live-migrate) and restarts elsewhere only if its run strategy "
                            f"says so")
        blockers.extend(drain.blockers)
        steps = self._steps(node, target, label, unschedulable, resume, cordoned_by, drain)
        return ModePlan(node=node, target=target, current_mode=current, mode_label=label, noop=False, resume=resume,
                        cordoned_by_rblnctl=cordoned_by, started=started, unschedulable=unschedulable, steps=steps,
                        vms=vms, drain=drain, blockers=blockers, warnings=warnings, pending=pending)

    def _steps(self, node: str, target: str, label: str | None, unschedulable: bool, resume: bool,
               cordoned_by: bool, drain: DrainPlan) -> list[PlanStep]:
        steps = [PlanStep(step=STEP_RECORD, detail=(
            f"update annotation {C.SET_MODE_ANNOTATION} (resuming an unfinished switch)" if resume
            else f"annotate node {node} with {C.SET_MODE_ANNOTATION} (progress, for resuming)"))]
        if unschedulable:
            steps.append(PlanStep(step=STEP_CORDON, detail=f"node {node} is already cordoned"
                                  + (" (by rblnctl)" if cordoned_by else "")))
        else:
            steps.append(PlanStep(step=STEP_CORDON, detail=f"cordon node {node}"))
        n = len(drain.evict)
        names = ", ".join(f"{e.namespace}/{e.name}" for e in drain.evict[:5]) + (", ..." if n > 5 else "")
        what = "pod(s)" if self.all_pods else "NPU pod(s)"
        steps.append(PlanStep(step=STEP_EVICT, detail=f"evict {n} {what}" + (f": {names}" if n else "")
                              + (" (DELETE, no PodDisruptionBudget check)" if self.disable_eviction and n else "")))
        if label == target:
            steps.append(PlanStep(step=STEP_RELABEL, detail=f"{C.WORKLOAD_LABEL} is already {target}"))
        else:
            relabel = f"set {C.WORKLOAD_LABEL}={target} (was {label or 'unset'})"
            steps.append(PlanStep(step=STEP_RELABEL, detail=relabel))
        steps.append(PlanStep(step=STEP_WAIT, detail=f"wait up to {self.timeout_s:g}s for the operator to converge"))
        will_uncordon = self.uncordon and (not unschedulable or cordoned_by)
        steps.append(PlanStep(step=STEP_UNCORDON, detail=f"uncordon node {node}" if will_uncordon else
                              (f"leave node {node} cordoned (--no-uncordon)" if not self.uncordon else
                               f"leave node {node} cordoned (it was cordoned before rblnctl)")))
        return steps

    # -- run -----------------------------------------------------------------------------------------

    def run(self, plan: ModePlan) -> ModeResult:
        """Make the planned writes in order; see docs/node.md for what a failure leaves behind.

        Before the label is written, a failure is rolled back (uncordon if rblnctl cordoned, remove
        the progress annotation) and re-raised. After it, the node stays cordoned with the annotation
        and the error says to re-run the same command, which resumes.
        """
        started = self.clock()
        if plan.noop:
            self.on_step(STEP_FINISH, f"node {plan.node} is already in {plan.target} mode; nothing to do")
            return ModeResult(node=plan.node, previous_mode=plan.current_mode, mode=plan.target, changed=False,
                              resumed=False, cordoned=False, uncordoned=False, server_dry_run=self.server_dry_run)
        if plan.blockers:
            raise Refused(f"refusing to switch node {plan.node} to {short_mode(plan.target)}", blockers=plan.blockers)
        deadline = started + self.timeout_s
        dry = self.server_dry_run
        node = plan.node
        progress = {"target": plan.target, "from": plan.current_mode, "started": _now_iso(),
                    "cordoned_by_rblnctl": plan.cordoned_by_rblnctl, "step": STEP_RECORD}
        if plan.started:
            progress["started"] = plan.started
        # Only a resumed run can find its own label already written: then a failure is "after the relabel".
        relabeled = plan.mode_label == plan.target and plan.resume
        evicted: list[PodRef] = []
        try:
            self.on_step(STEP_RECORD, plan.steps[0].detail)
            self._annotate(node, progress, dry)
            node_obj = self.kube.get(NODES, node)
            if not (node_obj.get("spec") or {}).get("unschedulable"):
                self.on_step(STEP_CORDON, f"cordoning node {node}")
                cordoned = {**progress, "cordoned_by_rblnctl": True, "step": STEP_CORDON}
                self.kube.patch(NODES, node, {**cordon_patch(True), **self._ann_patch(cordoned)},
                                patch_type="strategic", dry_run=dry)
                progress = cordoned
            else:
                self.on_step(STEP_CORDON, f"node {node} is already cordoned"
                             + (" (by rblnctl)" if progress["cordoned_by_rblnctl"] else ""))
            refs = [e.ref for e in plan.drain.evict] if plan.drain else []
            self.on_step(STEP_EVICT, f"evicting {len(refs)} pod(s)" if refs else "no pod to evict")
            evicted = self._drainer(self._operator()).evict(refs, deadline=deadline)
            progress["step"] = STEP_EVICT
            if plan.mode_label != plan.target:
                self.on_step(STEP_RELABEL, f"setting {C.WORKLOAD_LABEL}={plan.target}")
                progress["step"] = STEP_RELABEL
                self._relabel(node, plan.target, progress, dry)
                relabeled = True
            else:
                self._annotate(node, progress, dry)
        except RblnError as err:
            if self._deleted(node, err):
                raise self._gone(plan) from err
            if relabeled:
                raise self._in_progress(err, plan) from err
            self._rollback(node, progress, dry)
            raise
        try:
            if not dry:
                self.on_step(STEP_WAIT, f"waiting for the operator to switch node {node} to {plan.target}")
                self._wait(node, plan.target, deadline)
            uncordoned = False
            if self.uncordon and progress["cordoned_by_rblnctl"]:
                self.on_step(STEP_UNCORDON, f"uncordoning node {node}")
                self.kube.patch(NODES, node, {**cordon_patch(False), **self._ann_patch(None)},
                                patch_type="strategic", dry_run=dry)
                uncordoned = True
            else:
                self.on_step(STEP_UNCORDON, f"leaving node {node} cordoned"
                             + ("" if progress["cordoned_by_rblnctl"] else " (it was cordoned before rblnctl)"))
                self._annotate(node, None, dry)
        except RblnError as err:
            if self._deleted(node, err):
                raise self._gone(plan) from err
            raise self._in_progress(err, plan) from err
        self.on_step(STEP_FINISH, f"node {node} is in {plan.target} mode" if not dry
                     else "server dry run: every write was accepted; nothing persisted")
        return ModeResult(node=node, previous_mode=plan.current_mode, mode=plan.target, changed=not dry,
                          resumed=plan.resume, cordoned=bool(progress["cordoned_by_rblnctl"]), uncordoned=uncordoned,
                          evicted=evicted, server_dry_run=dry, elapsed_s=round(self.clock() - started, 3))

    @staticmethod
    def _ann_patch(progress: dict | None) -> dict:
        value = None if progress is None else json.dumps(progress, sort_keys=True)
        return {"metadata": {"annotations": {C.SET_MODE_ANNOTATION: value}}}

    def _annotate(self, node: str, progress: dict | None, dry: bool) -> None:
        """Record (or with None remove) the progress annotation: a merge patch."""
        self.kube.patch(NODES, node, self._ann_patch(progress), patch_type="merge", dry_run=dry)

    def _relabel(self, node: str, target: str, progress: dict, dry: bool) -> None:
        """Set the workload label (and the progress note) in one merge patch guarded by resourceVersion."""
        for attempt in range(1, RELABEL_ATTEMPTS + 1):
            rv = self.kube.get(NODES, node)["metadata"].get("resourceVersion")
            body = self._ann_patch(progress)
            body["metadata"]["resourceVersion"] = rv
            body["metadata"]["labels"] = {C.WORKLOAD_LABEL: target}
            try:
                self.kube.patch(NODES, node, body, patch_type="merge", dry_run=dry)
                return
            except Conflict:
                if attempt == RELABEL_ATTEMPTS:
                    raise
                log.debug("node %s changed while relabelling (attempt %d); re-reading", node, attempt)
                self.on_step(STEP_RELABEL, f"node {node} changed under us (attempt {attempt}); re-reading")

    def _wait(self, node: str, target: str, deadline: float) -> None:
        last: list[str] = []
        while True:
            view = self._operator()  # re-read: the policy's status is shown while waiting
            assert view.policy is not None
            node_obj = self.kube.get(NODES, node)
            mode = mode_of(labels_of(node_obj), view.policy)
            if mode.effective != target:
                # Someone else relabelled the node after us: waiting can only time out, and going on
                # would fight them. Stop here (cordoned, annotated) and let a person decide.
                raise Refused(f"{C.WORKLOAD_LABEL} on node {node} was changed to {mode.label!r} by someone else "
                              f"while rblnctl waited for the operator to switch it to {target}")
            missing = [str(p) for p in self.pending(view, node_obj, target)]
            if not missing:
                return
            shown = missing + [f"operator: {t}" for t in view.policy.not_ready()]
            if shown != last:
                self.on_waiting(shown)
                last = shown
            if self.clock() >= deadline:
                raise WaitTimeout(f"the operator did not switch node {node} to {target} within {self.timeout_s:g}s; "
                                  f"still missing: {'; '.join(missing)}")
            self.sleep(max(0.0, min(self.poll_s, deadline - self.clock())))

    def _rollback(self, node: str, progress: dict, dry: bool) -> None:
        """Undo what ran before the relabel: uncordon if rblnctl cordoned, drop the annotation."""
        try:
            if progress.get("cordoned_by_rblnctl"):
                self.on_step(STEP_ROLLBACK, f"uncordoning node {node} and removing {C.SET_MODE_ANNOTATION}")
                self.kube.patch(NODES, node, {**cordon_patch(False), **self._ann_patch(None)},
                                patch_type="strategic", dry_run=dry)
            else:
                self.on_step(STEP_ROLLBACK, f"removing {C.SET_MODE_ANNOTATION} from node {node}")
                self._annotate(node, None, dry)
        except RblnError as e:  # report, but the error that made us roll back is the one to raise
            log.warning("rollback of node %s failed: %s", node, e)
            self.on_step(STEP_ROLLBACK, f"rollback failed: {e}; check node {node} by hand")

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
        """The same error class (so the exit code stays), its message telling how to resume or go back."""
        new = copy.copy(err)
        message = (f"{err}. The mode change of node {plan.node} to {short_mode(plan.target)} is in progress: the "
                   f"node stays cordoned; {recovery_hint(plan)}")
        new.args = (message,)
        return new


def recovery_hint(plan: ModePlan) -> str:
    """How to finish or undo an interrupted switch: the two commands, as one clause."""
    back = short_mode(plan.current_mode) if plan.current_mode != plan.target else \
        short_mode(C.MODE_CONTAINER if plan.target == C.MODE_VM else C.MODE_VM)
    return (f"re-run `rblnctl node set-mode {plan.node} {short_mode(plan.target)}` to resume, or "
            f"`rblnctl node set-mode {plan.node} {back} --force` to go back")
