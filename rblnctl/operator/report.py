"""What `rblnctl policy show` reports: the active RBLNClusterPolicy, its VM allocation method, every component
(enabled or not, its DaemonSet's rollout, the state the policy's status gives it) and the ignored policies."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rblnctl.operator.release import read_release, unserved_notes
from rblnctl import constants as C
from rblnctl.kube import DAEMONSETS, Kube
from rblnctl.kube.optional import NOTE, optional
from rblnctl.operator.cluster import read_operator
from rblnctl.operator.components import DaemonSetState, canonical, component_of_daemonset, daemonset_state
from rblnctl.operator.nodes import labels_of, mode_of
from rblnctl.operator.policy import Policy


@dataclass(frozen=True, kw_only=True)
class ComponentReport:
    """One operator component under the active policy."""

    component: str  # vfio-manager
    key: str | None  # its policy switch (vfioManager); None: always deployed
    enabled: bool
    daemonsets: list[DaemonSetState] = field(default_factory=list)
    state: str | None = None  # the verdict of the policy's status.components entry for its DaemonSet (ComponentState)
    ready: bool | None = None  # that entry's DaemonSetReady condition (None: no entry, or no condition)
    reason: str = ""  # that condition's message (or reason) when it is not ready


@dataclass(frozen=True, kw_only=True)
class PolicyReport:
    """The operator's policy as `policy show` prints it."""

    crd_installed: bool
    active: Policy | None
    ignored: list[Policy]
    namespace: str
    namespace_source: str
    components: list[ComponentReport]
    modes: dict[str, int]  # NPU nodes per effective mode
    notes: list[str] = field(default_factory=list)

    @property
    def method(self) -> str | None:
        """How VMs get NPUs under the active policy: sandbox, dra, or None."""
        return self.active.vm_method if self.active else None


def policy_report(kube: Kube) -> PolicyReport:
    """Read the policies, the operator's DaemonSets and the NPU nodes (three LISTs and the node lists)."""
    from rblnctl.operator.nodes import list_npu_node_objects

    view = read_operator(kube)
    policy = view.policy
    notes = list(view.notes)
    if not view.crd_installed:
        notes.append("the RBLNClusterPolicy CRD is not installed: is the RBLN NPU Operator?")
    elif policy is None:
        notes.append("no RBLNClusterPolicy: the operator deploys nothing")
    components: list[ComponentReport] = []
    if policy is not None:
        daemonsets = optional(lambda: kube.list(DAEMONSETS, namespace=view.namespace), absent=[], on_forbidden=NOTE,
                              notes=notes, what=f"list the DaemonSets in {view.namespace}").value or []
        by_component: dict[str, list[DaemonSetState]] = {}
        for ds in daemonsets:
            comp = component_of_daemonset(ds, base_names=view.base_names)
            if comp is not None:
                by_component.setdefault(comp, []).append(daemonset_state(ds))
        entries = {s.name: s for s in policy.components}
        for comp in dict.fromkeys(canonical(c) for c in C.OPERATOR_COMPONENTS):
            found = sorted(by_component.get(comp, []), key=lambda d: d.name)
            if comp == C.COMP_PARTITION_MANAGER and not found and not policy.is_enabled(comp):
                continue  # only the partition line has it: not a row of the releases that do not

            mine = [entries[d.name] for d in found if d.name in entries]
            worst = next((s for s in mine if not s.is_ready), mine[0] if mine else None)
            components.append(ComponentReport(
                component=comp, key=C.COMPONENT_POLICY_KEYS.get(comp), enabled=policy.is_enabled(comp),
                daemonsets=found, state=worst.verdict if worst else None, ready=worst.ready if worst else None,
                reason=(worst.message or worst.reason) if worst and not worst.is_ready else ""))
        notes.extend(unserved_notes(policy, read_release(kube, view.deployments)))  # rblnctl.operator.release
    nodes = list_npu_node_objects(kube)
    modes = Counter(mode_of(labels_of(n), policy).effective for n in nodes)
    return PolicyReport(crd_installed=view.crd_installed, active=policy,
                        ignored=[p for p in view.choice.all if policy is None or p.name != policy.name],
                        namespace=view.namespace, namespace_source=view.namespace_source, components=components,
                        modes=dict(sorted(modes.items())), notes=notes)
