"""One-screen cluster overview: operator policy, KubeVirt, NPU nodes per mode (read-only)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rblnctl.errors import NotFound
from rblnctl.kube import KUBEVIRTS, Kube
from rblnctl.kubevirt.status import status_of
from rblnctl.node.inventory import list_npu_nodes
from rblnctl.operator.cluster import read_operator
from rblnctl.operator.nodes import NpuNode
from rblnctl.operator.policy import Policy
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


def kubevirt_summary(obj: dict) -> KubeVirtSummary:
    """Summarise one KubeVirt CR: the overview's subset of what `rblnctl kubevirt status` reads."""
    st = status_of(obj)
    return KubeVirtSummary(name=st.name, namespace=st.namespace, phase=st.phase, version=st.version,
                           feature_gates=st.feature_gates, disabled_feature_gates=st.disabled_feature_gates)


def cluster_status(kube: Kube, *, selector: str | None = None) -> ClusterStatus:
    """Read the overview; a missing CRD is a note, not an error."""
    version = kube.server_version().get("gitVersion", "unknown")
    view = read_operator(kube)
    notes = list(view.notes)
    if not view.crd_installed:
        notes.append("RBLNClusterPolicy CRD not found: is the RBLN NPU Operator installed?")
    elif view.policy is None:
        notes.append("no RBLNClusterPolicy: the operator deploys nothing")
    try:
        kubevirts = kube.list(KUBEVIRTS)
    except NotFound:
        kubevirts = []
    if not kubevirts:
        notes.append("no KubeVirt CR found: is KubeVirt installed?")
    nodes = list_npu_nodes(kube, view.policy, selector=selector)
    if not nodes:
        notes.append("no NPU nodes found (is NFD labelling nodes with pci-1eff / pci-1200_1eff?)")
    vms = list_vm_npus(kube) if kubevirts else None
    if vms is not None:
        notes.extend(vms.notes)
    return ClusterStatus(
        server_version=version,
        policy=view.policy,
        operator_namespace=view.namespace,
        kubevirt=[kubevirt_summary(k) for k in kubevirts],
        nodes=nodes,
        modes=dict(sorted(Counter(n.mode for n in nodes).items())),
        npu_vms=vms.by_node() if vms is not None else {},
        notes=notes,
    )
