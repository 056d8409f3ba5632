"""One-screen cluster overview: operator policy, KubeVirt, NPU nodes per mode (read-only)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from rblnctl.clock import Stop
from rblnctl.errors import RblnError
from rblnctl.kube import KUBEVIRTS, Kube
from rblnctl.kube.optional import ERROR, optional
from rblnctl.kubevirt.status import status_of
from rblnctl.kube.parallel import start
from rblnctl.node.inventory import Change, node_changes, policy_changes, watch_npu_nodes, with_capacity
from rblnctl.operator.capacity import PodsRead
from rblnctl.operator.cluster import read_operator
from rblnctl.operator.nodes import NpuNode, list_npu_node_objects
from rblnctl.operator.policy import Policy
from rblnctl.operator.release import UNKNOWN, OperatorRelease, read_release, unserved_notes
from rblnctl.vm.listing import list_vm_npus


@dataclass(frozen=True, kw_only=True)
class KubeVirtSummary:
    """Where KubeVirt is, its phase and version, and its feature gates."""

    name: str
    namespace: str
    phase: str | None
    version: str | None
    feature_gates: list[str]
    disabled_feature_gates: list[str]


@dataclass(frozen=True, kw_only=True)
class ClusterStatus:
    """What `rblnctl status` reports."""

    server_version: str
    policy: Policy | None
    operator_namespace: str
    kubevirt: list[KubeVirtSummary]
    nodes: list[NpuNode]
    modes: dict[str, int] = field(default_factory=dict)
    npu_vms: dict[str, list[str]] = field(default_factory=dict)  # node -> `namespace/name` of VMs holding NPUs there
    notes: list[str] = field(default_factory=list)
    crd_installed: bool = True
    vm_notes: tuple[str, ...] = ()  # what listing the VMs noted (kept while --watch follows nodes and policies)
    release: OperatorRelease = UNKNOWN  # the operator's release: which enabled VM allocators really serve VMs

    @property
    def vm_method(self) -> str | None:
        """How VMs get NPUs: the policy's VM allocator, counted only when the release makes it serve VMs."""
        return self.policy.vm_method_on(self.release) if self.policy else None


def kubevirt_summary(obj: dict) -> KubeVirtSummary:
    """Summarise one KubeVirt CR: the overview's subset of what `rblnctl kubevirt status` reads."""
    st = status_of(obj)
    return KubeVirtSummary(name=st.name, namespace=st.namespace, phase=st.phase, version=st.version,
                           feature_gates=st.feature_gates, disabled_feature_gates=st.disabled_feature_gates)


def cluster_status(kube: Kube, *, selector: str | None = None) -> ClusterStatus:
    """Read the overview; a missing CRD is a note, not an error."""
    # One read of each collection (what `node list` and `vm list` read, each once), the independent ones at once
    # (rblnctl.kube.parallel); collected in the order they were once read one by one, so a failure is the same.
    version_read = start(kube.server_version)
    view_read = start(lambda: read_operator(kube))
    kubevirt_read = start(lambda: optional(lambda: kube.list(KUBEVIRTS), what="list KubeVirts",
                                           absent=[], on_forbidden=ERROR).value)  # not installed: none
    objects_read = start(lambda: list_npu_node_objects(kube, selector=selector))
    pods_read = PodsRead(kube)
    try:
        version = version_read.result().get("gitVersion", "unknown")
        view = view_read.result()
        release = read_release(kube, view.deployments)
        kubevirts = kubevirt_read.result()
        objects = objects_read.result()
    except BaseException:
        pods_read.cancel()
        raise
    vms_read = start(lambda: list_vm_npus(kube) if kubevirts else None)
    nodes = with_capacity(kube, objects, view.policy, namespace=view.namespace, pods_read=pods_read)
    vms = vms_read.result()
    vm_notes = tuple(vms.notes) if vms is not None else ()
    return ClusterStatus(
        server_version=version,
        policy=view.policy,
        operator_namespace=view.namespace,
        kubevirt=[kubevirt_summary(k) for k in kubevirts],
        nodes=nodes,
        modes=_modes(nodes),
        npu_vms=vms.by_node() if vms is not None else {},
        notes=_notes(view.notes, crd_installed=view.crd_installed, policy=view.policy, kubevirt=bool(kubevirts),
                     nodes=nodes, release=release) + list(vm_notes),
        crd_installed=view.crd_installed,
        vm_notes=vm_notes,
        release=release,
    )


def _modes(nodes: list[NpuNode]) -> dict[str, int]:
    return dict(sorted(Counter(n.mode for n in nodes).items()))


def _notes(choice_notes: tuple[str, ...], *, crd_installed: bool, policy: Policy | None, kubevirt: bool,
           nodes: list[NpuNode], release: OperatorRelease) -> list[str]:
    notes = list(choice_notes)
    if not crd_installed:
        notes.append("RBLNClusterPolicy CRD not found: is the RBLN NPU Operator installed?")
    elif policy is None:
        notes.append("no RBLNClusterPolicy: the operator deploys nothing")
    else:
        notes.extend(unserved_notes(policy, release))  # enabled, but this release hands VMs nothing through it
        notes.extend(components_notes(policy, {n.mode for n in nodes}))
    if not kubevirt:
        notes.append("no KubeVirt CR found: is KubeVirt installed?")
    if not nodes:
        notes.append("no NPU nodes found (is NFD labelling nodes with pci-1eff / pci-1200_1eff?)")
    return notes


def components_notes(policy: Policy, modes: set[str]) -> list[str]:
    """One line per component DaemonSet of the NPU nodes' modes that the policy's status.components reports not
    ready. The policy's own state is not trusted for this: the operator v0.3.0 says `ready` before any
    component pod exists."""
    return [f"RBLNClusterPolicy {policy.name}: DaemonSet {s.describe()}"
            for s in policy.components_not_ready(modes)]


def watch_cluster_status(kube: Kube, *, selector: str | None = None, stop: Stop | None = None,
                         timeout_s: float | None = None,
                         on_retry: Callable[[RblnError], None] | None = None) -> Iterator[ClusterStatus]:
    """Yield the overview now, then again each time the NPU nodes or the policy change (watched, not polled).

    The server version, KubeVirt and the VMs holding NPUs are read once; nodes and policies come
    from rblnctl.node.inventory.watch_npu_nodes. Runs until `stop` is set or `timeout_s` passes.
    """
    first = cluster_status(kube, selector=selector)
    yield first
    last = first
    for snap in watch_npu_nodes(kube, selector=selector, stop=stop, timeout_s=timeout_s, on_retry=on_retry):
        now = replace(first, policy=snap.policy, nodes=snap.nodes, modes=_modes(snap.nodes),
                      notes=_notes(snap.policy_notes, crd_installed=first.crd_installed, policy=snap.policy,
                                   kubevirt=bool(first.kubevirt), nodes=snap.nodes, release=first.release)
                      + list(first.vm_notes))
        if now != last:
            last = now
            yield now


def status_changes(old: ClusterStatus, new: ClusterStatus) -> list[Change]:
    """What changed between two overviews: the policy first, then node by node."""
    return policy_changes(old.policy, new.policy) + node_changes(old.nodes, new.nodes)
