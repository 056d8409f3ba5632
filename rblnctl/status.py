"""One-screen cluster overview: operator policy, KubeVirt, NPU nodes per mode (read-only)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import ClusterError, InvalidInput, NotFound
from rblnctl.kube import CLUSTER_POLICIES, KUBEVIRTS, Kube
from rblnctl.kubevirt import status_of
from rblnctl.node.inventory import NpuNode, list_npu_nodes


@dataclass(frozen=True, kw_only=True)
class PolicySummary:
    """The RBLNClusterPolicy switches that decide how NPUs reach VMs."""

    name: str
    workload_type: str
    vfio_manager: bool
    sandbox_device_plugin: bool
    dra_kubelet_plugin: bool
    device_plugin: bool


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
    policy: PolicySummary | None
    kubevirt: list[KubeVirtSummary]
    nodes: list[NpuNode]
    modes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _enabled(spec: dict, key: str) -> bool:
    return bool((spec.get(key) or {}).get("enabled", False))


def policy_ignored(obj: dict) -> bool:
    """True when the operator marked this RBLNClusterPolicy as ignored (another one is active).

    The operator acts on one policy only and sets `status.state: ignored` and a Ready condition
    with reason PolicyIgnored on the others (rbln-npu-operator internal/controller).
    """
    status = obj.get("status") or {}
    if str(status.get("state") or "").lower() == "ignored":
        return True
    return any((c or {}).get("reason") == "PolicyIgnored" for c in status.get("conditions") or [])


def active_policy(items: list[dict]) -> dict | None:
    """The RBLNClusterPolicy the operator acts on: the first one not marked ignored (else the first)."""
    if not items:
        return None
    return next((p for p in items if not policy_ignored(p)), items[0])


def policy_summary(obj: dict) -> PolicySummary:
    """Summarise one RBLNClusterPolicy object."""
    spec = obj.get("spec") or {}
    return PolicySummary(
        name=obj["metadata"]["name"],
        workload_type=spec.get("workloadType") or C.DEFAULT_MODE,
        vfio_manager=_enabled(spec, "vfioManager"),
        sandbox_device_plugin=_enabled(spec, "sandboxDevicePlugin"),
        dra_kubelet_plugin=_enabled(spec, "draKubeletPlugin"),
        device_plugin=_enabled(spec, "devicePlugin"),
    )


def kubevirt_summary(obj: dict) -> KubeVirtSummary:
    """Summarise one KubeVirt CR: the overview's subset of what `rblnctl kubevirt status` reads."""
    st = status_of(obj)
    return KubeVirtSummary(
        name=st.name,
        namespace=st.namespace,
        phase=st.phase,
        version=st.version,
        feature_gates=st.feature_gates,
        disabled_feature_gates=st.disabled_feature_gates,
    )


def cluster_status(kube: Kube, *, selector: str | None = None) -> ClusterStatus:
    """Read the overview; a missing CRD is a note, not an error."""
    notes: list[str] = []
    version = kube.server_version().get("gitVersion", "unknown")
    try:
        policies = kube.list(CLUSTER_POLICIES)
    except NotFound:
        policies = []
        notes.append("RBLNClusterPolicy CRD not found: is the RBLN NPU Operator installed?")
    active = active_policy(policies)
    if active is not None and len(policies) > 1:
        others = ", ".join(p["metadata"]["name"] for p in policies if p is not active)
        notes.append(f"{len(policies)} RBLNClusterPolicies found; showing {active['metadata']['name']} "
                     f"(the operator acts on one; also found: {others})")
    try:
        kubevirts = kube.list(KUBEVIRTS)
    except NotFound:
        kubevirts = []
    if not kubevirts:
        notes.append("no KubeVirt CR found: is KubeVirt installed?")
    try:
        nodes = list_npu_nodes(kube, selector=selector)
    except ClusterError as e:
        if selector and e.status == 400:  # the API server could not parse -l
            raise InvalidInput(f"bad label selector {selector!r}: {e}") from e
        raise
    if not nodes:
        notes.append("no NPU nodes found (is NFD labelling nodes with pci-1eff / pci-1200_1eff?)")
    return ClusterStatus(
        server_version=version,
        policy=policy_summary(active) if active is not None else None,
        kubevirt=[kubevirt_summary(k) for k in kubevirts],
        nodes=nodes,
        modes=dict(sorted(Counter(n.mode for n in nodes).items())),
        notes=notes,
    )
