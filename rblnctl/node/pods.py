"""Pods as drain and set-mode see them: references, what the plan decided, and whether a pod uses NPUs."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import ClusterError, ClusterUnreachable, NotFound
from rblnctl.kube import RESOURCE_CLAIMS, VMIS, Kube
from rblnctl.operator.resources import is_npu_resource
from rblnctl.plan import Blocker


class Action(enum.StrEnum):
    """What a drain does with a pod."""

    EVICT = "evict"
    IGNORE = "ignore"


@dataclass(frozen=True, kw_only=True)
class PodRef:
    """One pod, by namespace, name and UID (the UID tells a replacement from the original)."""

    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class PodEntry:
    """A pod on the node, what the drain does with it, and why (`blockers`: why it must not go ahead)."""

    namespace: str
    name: str
    uid: str
    action: Action
    reason: str
    npu: bool = False  # the pod consumes NPUs (rebellions.ai/* resources or an NPU DRA claim)
    vmi: str | None = None  # for a KubeVirt virt-launcher pod: the VirtualMachineInstance it runs
    blockers: list[Blocker] = field(default_factory=list)

    @property
    def ref(self) -> PodRef:
        return PodRef(namespace=self.namespace, name=self.name, uid=self.uid)


def controller(pod: dict) -> dict | None:
    """The pod's controlling ownerReference (None: unmanaged)."""
    return next((r for r in (pod.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)


def labels(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("labels") or {}


def is_launcher(pod: dict) -> bool:
    """A KubeVirt virt-launcher pod (it runs one VMI)."""
    return labels(pod).get(C.VIRT_LAUNCHER_LABEL) == C.VIRT_LAUNCHER_VALUE


def is_vmi_launcher(pod: dict) -> bool:
    """A virt-launcher pod that KubeVirt made for a VMI: the label and a controller ownerReference to a
    VirtualMachineInstance (kubevirt/kubevirt@v1.8.4 pkg/virt-controller/services/template.go: podLabels sets
    kubevirt.io=virt-launcher, the pod's OwnerReferences are NewControllerRef(vmi, VirtualMachineInstance))."""
    owner = controller(pod) or {}
    return (is_launcher(pod) and owner.get("kind") == C.VMI_KIND
            and str(owner.get("apiVersion") or "").split("/")[0] == C.KUBEVIRT_GROUP)


def is_finished(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def npu_resources(pod: dict) -> list[str]:
    """NPU resources any container or init container requests or limits."""
    spec = pod.get("spec") or {}
    found: set[str] = set()
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            found.update(k for k in (res.get(part) or {}) if is_npu_resource(k))
    return sorted(found)


@dataclass(kw_only=True)
class NpuUse:
    """Decide whether pods use NPUs; DRA claims are read once each (cached for a plan)."""

    kube: Kube
    dra_driver: str
    _claims: dict[tuple[str, str], dict | None] = field(default_factory=dict)

    def reason(self, pod: dict) -> str | None:
        """Why the pod counts as an NPU consumer, or None.

        A claim not allocated yet (a template not turned into a claim) or gone counts too: evicting
        one pod too many is safe, leaving an NPU user behind is not. A claim allocated by another
        driver does not.
        """
        res = npu_resources(pod)
        if res:
            return ", ".join(res)
        spec = pod.get("spec") or {}
        statuses = {s.get("name"): s.get("resourceClaimName")
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        ns = (pod.get("metadata") or {}).get("namespace", "")
        for rc in spec.get("resourceClaims") or []:
            claim_name = rc.get("resourceClaimName") or statuses.get(rc.get("name"))
            if not claim_name:
                return f"resource claim {rc.get('name')} (not allocated yet)"
            claim = self._claim(ns, claim_name)
            if claim is None:
                return f"resource claim {claim_name} (not found)"
            results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
            if any(r.get("driver") == self.dra_driver for r in results):
                return f"resource claim {claim_name} allocated by {self.dra_driver}"
        return None

    def _claim(self, ns: str, name: str) -> dict | None:
        key = (ns, name)
        if key not in self._claims:
            self._claims[key] = self.kube.get_optional(RESOURCE_CLAIMS, name, namespace=ns)
        return self._claims[key]


@dataclass(kw_only=True)
class LauncherVmis:
    """The VMIs of virt-launcher pods, read (GET) once each when a filter needs one (cached for a survey), and the
    cluster's default eviction strategy (the KubeVirt CR's, read once when first needed)."""

    kube: Kube
    _vmis: dict[tuple[str, str], dict | str] = field(default_factory=dict)
    _cluster_strategy: list[str | None] = field(default_factory=list)

    def eviction_strategy(self, vmi: dict) -> str | None:
        """The VMI's eviction strategy as KubeVirt's eviction webhook takes it (kubevirt/kubevirt v1.9.0
        pkg/util/migrations/migrations.go VMIEvictionStrategy): the VMI's spec.evictionStrategy, else the KubeVirt
        CR's spec.configuration.evictionStrategy, else none. A CR that cannot be read counts as none (the webhook's
        own refusal still stops the eviction, at apply time)."""
        own = (vmi.get("spec") or {}).get("evictionStrategy")
        if own:
            return str(own)
        if not self._cluster_strategy:
            from rblnctl.kube import KUBEVIRTS
            from rblnctl.kube.optional import OnForbidden, optional

            crs = optional(lambda: self.kube.list(KUBEVIRTS), what="list KubeVirt CRs", absent=[],
                           on_forbidden=OnForbidden.UNKNOWN).value or []
            strategy = next((((cr.get("spec") or {}).get("configuration") or {}).get("evictionStrategy")
                             for cr in crs), None)
            self._cluster_strategy.append(str(strategy) if strategy else None)
        return self._cluster_strategy[0]

    def get(self, ns: str, name: str) -> dict | str:
        """The VMI, or why it cannot be read (a string: gone, forbidden, an error)."""
        key = (ns, name)
        if key not in self._vmis:
            try:
                self._vmis[key] = self.kube.get(VMIS, name, namespace=ns)
            except NotFound:
                self._vmis[key] = "it is not found"
            except ClusterUnreachable:
                raise
            except ClusterError as e:
                self._vmis[key] = f"reading it failed: {e}"
        return self._vmis[key]
