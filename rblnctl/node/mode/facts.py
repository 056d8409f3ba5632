"""The facts of a mode switch: every read its plan needs (read_mode_facts), for rblnctl.node.mode.plan to judge.

In the order the switch has always read them, and no further than the plan needs: the Node (stop at the gates:
no NPU, deploy skip), the operator's policies and namespace (rblnctl.operator.cluster.read_operator), the progress
record (stop at an unfinished switch to the other mode), the node's lock, what the operator has not converged on
yet; then, only when pods may have to leave, the node's pods (one paged LIST, judged by set-mode's filters), the
VMs holding NPUs, the operator release and NFD's IOMMU fact (vm mode) and whether the switch strands VMs or pods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import Refused
from rblnctl.kube import NODE_FEATURES, NODES, Kube, validate_name
from rblnctl.kube.optional import NOTE, optional
from rblnctl.node.drain import Drainer, Survey
from rblnctl.node.mode.rules import is_converged, parse_mode, refuse_node, refuse_record
from rblnctl.node.record import read_record
from rblnctl.node.options import ModeOptions
from rblnctl.node.vms import npu_vms, stranded_pods, stranded_vms
from rblnctl.operator import convergence
from rblnctl.operator.cluster import OperatorView, component_pods, node_slices, read_operator
from rblnctl.operator.nodes import labels_of, mode_of
from rblnctl.operator.release import OperatorRelease, read_release
from rblnctl.plan import Blocker
from rblnctl.remedy import Remedy
from rblnctl.vm.guard import NpuVm


@dataclass(frozen=True, kw_only=True)
class ModeFacts:
    """Everything a mode switch's plan is a function of (no Kube handle: build one by hand to test the planner)."""

    node_obj: Mapping[str, Any]  # the Node as read
    view: OperatorView  # the operator's policies and namespace (a policy exists: read_view refuses otherwise)
    # Another run holds the node's lock (rblnctl.node.lock; none in a server dry run, which takes no lock).
    lock_blockers: tuple[Blocker, ...] = ()
    pending: tuple[str, ...] = ()  # what the operator has not converged on for the target (operator.convergence)
    # Read only when pods may have to leave (the node is not converged on the target yet):
    survey: Survey | None = None  # the node's pods, judged by set-mode's filters (None: not listed)
    vms: tuple[NpuVm, ...] = ()  # the VMs holding NPUs on the node
    vm_notes: tuple[str, ...] = ()  # what finding them could not read
    release: OperatorRelease | None = None  # the operator release (read for vm mode with a VM allocator)
    node_features: tuple[dict, ...] | None = None  # the node's NFD NodeFeatures (vm mode; None: not read)
    iommu_notes: tuple[str, ...] = ()  # why the IOMMU was not checked (no permission)
    stranded: str | Remedy | None = None  # no node of the mode the VMs or the evicted NPU pods need is left


def read_view(kube: Kube, options: ModeOptions) -> OperatorView:
    """The operator's policy and namespace; Refused when there is no policy (nothing would converge)."""
    view = read_operator(kube, namespace=options.operator_namespace)
    if view.policy is None:
        why = "no RBLNClusterPolicy exists" if view.crd_installed else "the RBLNClusterPolicy CRD is not installed"
        raise Refused(f"{why}: the RBLN NPU Operator deploys nothing, so no node would ever switch; install "
                      "the operator with its RBLNClusterPolicy first")
    return view


def read_pending(kube: Kube, view: OperatorView, node_obj: Mapping[str, Any],
                 target: str) -> list[convergence.Pending]:
    """What is still missing before the operator has converged `node_obj` on `target` (empty: done)."""
    policy = view.policy
    assert policy is not None
    name = node_obj["metadata"]["name"]
    slices = node_slices(kube, name, policy.dra_driver) if C.COMP_DRA in policy.allocators(target) else None
    return convergence.pending(dict(node_obj), target, policy, component_pods(kube, view, name), slices)


def read_node_features(kube: Kube, node: str, notes: list[str]) -> tuple[dict, ...] | None:
    """The node's NodeFeature objects (one LIST); None when there is no NFD API, or no permission (then `notes`
    says the IOMMU was not checked)."""
    read = optional(lambda: kube.list(NODE_FEATURES, label_selector=f"{C.NFD_NODE_NAME_LABEL}={node}"),
                    what=f"list NodeFeatures (node {node}'s IOMMU was not checked)", absent=[],
                    on_forbidden=NOTE, notes=notes)
    if not read.known or read.absent:
        return None
    return tuple(read.value)


def read_mode_facts(kube: Kube, node: str, target: str, options: ModeOptions, *, view: Callable[[], OperatorView],
                    drainer: Callable[[], Drainer], check_stranded_vms: bool = True) -> ModeFacts:
    """Read what the plan of switching `node` to `target` needs (reads only); the plan's gates stop the reading
    where the plan refuses. `view` reads the operator (read_view); `drainer` is the switch's Drainer over it."""
    validate_name(node)
    target = parse_mode(target)
    node_obj = kube.get(NODES, node)
    refuse_node(node, node_obj)
    operator = view()
    policy = operator.policy
    assert policy is not None
    record, _ = read_record(node_obj)
    refuse_record(node_obj, target, record, options, operator)
    d = drainer()
    lock_blockers = () if options.drain.server_dry_run else \
        tuple(d.lock(node, "").check(take_over=options.drain.take_over))
    pending = tuple(str(p) for p in read_pending(kube, operator, node_obj, target))
    facts = ModeFacts(node_obj=node_obj, view=operator, lock_blockers=lock_blockers, pending=pending)
    if is_converged(node_obj, policy, target, pending):
        return facts  # no pod has to leave: nothing more to read
    survey = d.survey(node)
    vms, vm_notes = npu_vms(kube, node, survey.evict + survey.ignored)
    release = read_release(kube, operator.deployments) if target == C.MODE_VM and policy.allocators(target) else None
    iommu_notes: list[str] = []
    features = read_node_features(kube, node, iommu_notes) if target == C.MODE_VM else None
    current = mode_of(labels_of(node_obj), policy).effective
    stranded: str | Remedy | None = None
    if target == C.MODE_CONTAINER and current == C.MODE_VM and check_stranded_vms:
        stranded = stranded_vms(kube, policy, [node])
    if target == C.MODE_VM and current == C.MODE_CONTAINER and check_stranded_vms:
        stranded = stranded_pods(kube, policy, [node], survey.evict)
    return ModeFacts(node_obj=node_obj, view=operator, lock_blockers=lock_blockers, pending=pending, survey=survey,
                     vms=tuple(vms), vm_notes=tuple(vm_notes), release=release, node_features=features,
                     iommu_notes=tuple(iommu_notes), stranded=stranded)
