"""The facts of vm diagnose: every read, once (read_facts), for the links to judge (rblnctl.vm.diagnose.links).

A fixed set of requests for the VM's method and state: the VM and its VMI, the cluster checks of rblnctl.vm.cluster,
and as the VM needs them its virt-launcher pod, that pod's events and claims, the operator's work on the vm-mode nodes
and the RBLN DRA plugin there (its log only when its state needs it), what fits now, other VMs' claims.
"""


from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import ClusterError, NotFound
from rblnctl.kube import EVENTS, PODS, RESOURCE_CLAIMS, VMIS, VMS, Kube, validate_name
from rblnctl.kube.optional import NOTE, UNKNOWN, optional
from rblnctl.operator.cluster import component_pods, node_slices
from rblnctl.operator.convergence import pending
from rblnctl.vm import devices as D
from rblnctl.vm.cluster import (
    VmCluster,
    claim_index,
    read_cluster,
    with_dra,
)
from rblnctl.vm.fit import FitOptions, FitReader, VmFit
from rblnctl.vm.model import VmNpus, VmRef
from rblnctl.vm.pending import differ
from rblnctl.vm.placement import placement_of
from rblnctl.vm.lifecycle import FINAL_PHASES



PENDING_NODES = 3  # vm-mode nodes whose pending operator work is shown as evidence
LOG_LINES = 200  # lines of the DRA plugin's log read when its state needs them
DRA_ENUMERATION_FAILED = "error enumerating all possible devices"  # state.go NewDeviceState, the crash's words
DRA_NO_IOMMU_GROUP = "Skipping vfio-pci NPU without an IOMMU group"  # vfio.go enumerateVfioDevices


@dataclass(frozen=True, kw_only=True)
class DraPlugin:
    """The RBLN DRA kubelet plugin on one node, as its pod shows it."""

    node: str
    pod: str | None  # None: no plugin pod on the node
    ready: bool = False
    crash_looping: bool = False  # waiting in CrashLoopBackOff, or restarted after a failed run
    restarts: int = 0
    started: datetime | None = None  # when its running container started
    log: str = ""  # its log's last lines, read only when its state needs them ("" otherwise)

    @property
    def enumeration_failed(self) -> bool:
        """It exits at start because it finds neither an rbln-smi NPU nor a vfio-pci one (state.go)."""
        return DRA_ENUMERATION_FAILED in self.log

    @property
    def skipped_no_iommu(self) -> list[str]:
        """The log lines saying a vfio-pci NPU without an IOMMU group was not published (vfio.go)."""
        return [line.strip() for line in self.log.splitlines() if DRA_NO_IOMMU_GROUP in line]


@dataclass(frozen=True, kw_only=True)
class Neighbour:
    """Another VM's running VMI whose DRA claims share a per-node key with this VM's."""

    vm: VmRef
    key: str  # resourceclaimtemplates/<pod claim name> or resourceclaims/<claim name>
    node: str | None


@dataclass(frozen=True, kw_only=True)
class Facts:
    """Everything the links judge, read once (read_facts); the links are pure functions of it (judge)."""

    ref: VmRef
    vm: dict | None
    vmi: dict | None
    cluster: VmCluster | None = None  # None: the VM was not found (nothing else was read)
    have: VmNpus = field(default_factory=VmNpus)  # what its spec asks for
    held: VmNpus | None = None  # what its running VMI passes
    pod: dict | None = None  # its newest unfinished virt-launcher pod
    pod_refused: str | None = None  # why its pods could not be listed (RBAC): `pod` None then says nothing
    pod_events: tuple[dict, ...] = ()  # that pod's events (FailedScheduling, FailedPrepareDynamicResources...)
    claims: Mapping[str, tuple[str | None, dict | None]] = field(default_factory=dict)  # entry -> (claim, object)
    pending: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # node -> what the operator has not done
    # what fits now (rblnctl.vm.fit), per sandbox resource of the VM (None: its DRA vfio NPUs); read unless it runs
    fits: Mapping[str | None, VmFit] = field(default_factory=dict)
    elsewhere: tuple[str, ...] = ()  # not found: the namespaces that hold a VM (or VMI) of that name (rblnctl.vm.where)
    dra_plugins: Mapping[str, DraPlugin] = field(default_factory=dict)  # vm-mode node -> the DRA plugin there
    neighbours: tuple[Neighbour, ...] = ()
    unread: tuple[str, ...] = ()  # the reads RBAC refused, one note each: what they would have shown is unknown
    now: datetime | None = None

    @property
    def running(self) -> bool:
        return self.vmi is not None and (self.vmi.get("status") or {}).get("phase") not in FINAL_PHASES

    @property
    def method(self) -> str | None:
        return self.have.method


def read_facts(kube: Kube, name: str, namespace: str, *, cluster: VmCluster | None = None,
               now: datetime | None = None) -> Facts:
    """Read what judge() needs (reads only): the VM and its VMI, the cluster, and per method and state the
    launcher pod, its events and claims, the operator's work on the vm-mode nodes, the DRA plugin there."""
    validate_name(name, kind="VirtualMachine")
    ref = VmRef(namespace=namespace, name=name)
    vm = kube.get_optional(VMS, name, namespace=namespace)
    vmi = kube.get_optional(VMIS, name, namespace=namespace)
    now = now or datetime.now(UTC)
    if vm is None and vmi is None:
        from rblnctl.vm.where import namespaces_holding

        others = tuple(n for n in namespaces_holding(kube, name, instances=True) if n != namespace)
        return Facts(ref=ref, vm=None, vmi=None, now=now, elsewhere=others)
    cluster = cluster or read_cluster(kube)
    index = claim_index(kube, cluster)
    test = index.test(namespace)
    spec = D.vm_spec(vm) if vm is not None else D.vmi_spec(vmi or {})
    have = D.npus_of(spec, npu_claim=test)
    base = Facts(ref=ref, vm=vm, vmi=vmi, cluster=cluster, have=have, now=now)
    held = D.npus_of(D.vmi_spec(vmi), npu_claim=test) if base.running and vmi is not None else None
    method = have.method
    if method not in C.METHODS:  # a claim whose template RBAC hides may still be an NPU: index.notes says so
        return dataclasses.replace(base, held=held, unread=tuple(index.notes))
    if method == C.METHOD_DRA:
        cluster = with_dra(kube, cluster)
    unread: list[str] = []
    pod = _launcher(kube, vmi, unread) if base.running and vmi is not None else None
    pod_refused = unread[-1] if unread else None  # _launcher's note: the pod is unknown, not absent
    node = ((vmi or {}).get("status") or {}).get("nodeName") or ((pod or {}).get("spec") or {}).get("nodeName")
    nodes = list(dict.fromkeys([*cluster.vm_nodes[:PENDING_NODES], *([str(node)] if node else [])]))
    component_pods = {n: _component_pods(kube, cluster, n) for n in nodes if cluster.node(n) is not None}
    pending = {n: tuple(_pending(kube, cluster, cluster.node(n) or {}, pods)) for n, pods in component_pods.items()}
    facts = dataclasses.replace(base, cluster=cluster, held=held, pod=pod, pod_refused=pod_refused, pending=pending,
                                pod_events=tuple(_pod_events(kube, pod, unread)) if pod is not None else ())
    if method == C.METHOD_DRA:
        facts = dataclasses.replace(facts, dra_plugins=_dra_plugins(kube, cluster, component_pods),
                                    claims=_claim_objects(kube, ref, have, pod),
                                    neighbours=tuple(_neighbours(kube, ref, vmi if facts.running else None,
                                                                 spec, have, node, unread)))
    facts = dataclasses.replace(facts, unread=tuple(dict.fromkeys([*index.notes, *unread])))
    staged = held is not None and differ(held.devices, have.devices)  # a restart brings other NPUs: do they fit?
    if staged or not (facts.running and ((vmi or {}).get("status") or {}).get("phase") == "Running" and node):
        facts = dataclasses.replace(facts, fits=_fits(kube, cluster, spec, have, held, vmi if facts.running else None,
                                                      tolerations=index.tolerations(namespace, spec, have.dra)))
    return facts


def _fits(kube: Kube, cluster: VmCluster, spec: Mapping, have: VmNpus, held: VmNpus | None, vmi: dict | None, *,
          tolerations: tuple[tuple[dict, ...], ...] = ()) -> dict[str | None, VmFit]:
    """What fits now for each kind of NPU the VM (or its running VMI) asks for, placed as its spec says; its own
    virt-launcher pod, if it has one, does not count (one capacity read for all); DRA devices as its requests'
    `tolerations` see them (a device taint they do not tolerate keeps the device from them)."""
    reader = FitReader(kube=kube, cluster=cluster)
    own = str(((vmi or {}).get("metadata") or {}).get("uid") or "") or None
    wanted: dict[str | None, int] = {}
    for d in (*have.devices, *(held.devices if held is not None else ())):
        key = d.resource if d.method == C.METHOD_SANDBOX else None
        wanted.setdefault(key, sum(1 for x in have.devices if (x.resource if x.method == C.METHOD_SANDBOX else None)
                                   == key) or 1)
    out: dict[str | None, VmFit] = {}
    for key, n in wanted.items():
        method = C.METHOD_SANDBOX if key else C.METHOD_DRA
        out[key] = reader.fit(FitOptions(npus=min(n, C.MAX_VM_NPUS), method=method, resource=key,
                                         placement=placement_of(spec), own_vmi=own,
                                         device_tolerations=tolerations if key is None else ()))
    return out


def _component_pods(kube: Kube, cluster: VmCluster, node: str) -> list[tuple[str, dict]] | None:
    """The operator's pods on `node`; None (unknown: _pending says so) when RBAC refuses the list."""
    return optional(lambda: component_pods(kube, cluster.operator, node), on_forbidden=UNKNOWN, absent=[],
                    what=f"list the operator's pods in {cluster.operator.namespace}").value


def _pending(kube: Kube, cluster: VmCluster, node: Mapping, pods: list[tuple[str, dict]] | None) -> list[str]:
    policy = cluster.policy
    if policy is None:
        return ["no RBLNClusterPolicy"]
    if pods is None:
        return [f"cannot list the operator's pods in {cluster.operator.namespace} (forbidden)"]
    name = str((node.get("metadata") or {}).get("name") or "")
    slices = node_slices(kube, name, policy.dra_driver) if C.COMP_DRA in policy.allocators(C.MODE_VM) else None
    return [str(p) for p in pending(node, C.MODE_VM, policy, pods, slices)]


def _dra_plugins(kube: Kube, cluster: VmCluster, component_pods: Mapping[str, list[tuple[str, dict]] | None]
                 ) -> dict[str, DraPlugin]:
    """The DRA plugin on each vm-mode node read; its log when its state needs it (crash loop, or no vfio device
    published: the reason is only in there)."""
    out = {}
    offered = (cluster.dra.vfio if cluster.dra else {})
    for node, pods in component_pods.items():
        if node not in cluster.vm_nodes or pods is None:
            continue
        found = [p for comp, p in pods if comp == C.COMP_DRA]
        if not found:
            out[node] = DraPlugin(node=node, pod=None)
            continue
        p = found[0]
        statuses = (p.get("status") or {}).get("containerStatuses") or []
        cs = statuses[0] if statuses else {}
        state = cs.get("state") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        last = (cs.get("lastState") or {}).get("terminated") or {}
        restarts = int(cs.get("restartCount") or 0)
        crash = waiting == "CrashLoopBackOff" or (restarts > 0 and int(last.get("exitCode") or 0) != 0
                                                   and "running" not in state)
        started = _time((state.get("running") or {}).get("startedAt"))
        log = ""
        if crash or (cs.get("ready") and not offered.get(node)):
            try:  # the log is extra evidence: a refused or failed read leaves it out (the links say what is known)
                log = kube.request("GET", PODS.path(p["metadata"]["name"], namespace=p["metadata"].get("namespace"),
                                                    sub="log"),
                                   query={"container": cs.get("name"), "tailLines": LOG_LINES}, text=True)
            except (NotFound, ClusterError):
                log = ""
        out[node] = DraPlugin(node=node, pod=str(p["metadata"]["name"]), ready=bool(cs.get("ready")),
                              crash_looping=crash, restarts=restarts, started=started, log=log or "")
    return out


def _time(text: Any) -> datetime | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) if text else None
    except ValueError:
        return None


def _pod_events(kube: Kube, pod: dict, unread: list[str]) -> list[dict]:
    """The events of the pod, newest last ([] when Events are not served; refused: [] and a note in `unread`)."""
    meta = pod.get("metadata") or {}
    events = optional(lambda: kube.list(EVENTS, namespace=meta.get("namespace"), field_selector=(
        f"involvedObject.kind=Pod,involvedObject.name={meta.get('name')}")), absent=[], on_forbidden=NOTE, notes=unread,
        what=f"list the Events of pod {meta.get('namespace')}/{meta.get('name')}").value or []
    events = [e for e in events if not meta.get("uid") or (e.get("involvedObject") or {}).get("uid")
              in (None, meta.get("uid"))]
    return sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def _claim_objects(kube: Kube, ref: VmRef, have: VmNpus, pod: dict | None
                   ) -> dict[str, tuple[str | None, dict | None]]:
    """Each NPU claim entry of the VM -> (the ResourceClaim made for its launcher pod, that object)."""
    entries = {c.get("name"): c for c in ((pod or {}).get("spec") or {}).get("resourceClaims") or []}
    statuses = {s.get("name"): s.get("resourceClaimName") for s in ((pod or {}).get("status") or {})
                .get("resourceClaimStatuses") or []}
    out: dict[str, tuple[str | None, dict | None]] = {}
    for claim in dict.fromkeys(str(d.claim) for d in have.dra):
        name = (entries.get(claim) or {}).get("resourceClaimName") or statuses.get(claim)
        out[claim] = (name, kube.get_optional(RESOURCE_CLAIMS, name, namespace=ref.namespace) if name else None)
    return out


def _neighbours(kube: Kube, ref: VmRef, vmi: dict | None, spec: Mapping, have: VmNpus, node: Any,
                unread: list[str]) -> list[Neighbour]:
    """Other running VMIs whose NPU claims share a per-node key with this VM's (one paged LIST of VMIs; refused:
    none known, and a note in `unread` says the neighbours are unknown)."""
    from rblnctl.vm.listing import claim_keys

    keys = set(claim_keys(D.vmi_spec(vmi) if vmi is not None else dict(spec), have.dra))
    if not keys:
        return []
    vmis = optional(lambda: kube.list(VMIS), absent=[], on_forbidden=NOTE, notes=unread,
                    what="list the VirtualMachineInstances of every namespace (VMs sharing its NPU claims are unknown)"
                    ).value or []
    out = []
    for other in vmis:
        meta = other.get("metadata") or {}
        oref = VmRef(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""))
        if oref == ref or (other.get("status") or {}).get("phase") in FINAL_PHASES:
            continue
        theirs = D.npus_of(D.vmi_spec(other), npu_claim=lambda e: True)
        for key in set(claim_keys(D.vmi_spec(other), theirs.dra)) & keys:
            out.append(Neighbour(vm=oref, key=key, node=(other.get("status") or {}).get("nodeName") or None))
    return sorted(out, key=lambda n: (n.vm, n.key))


def _launcher(kube: Kube, vmi: dict, unread: list[str]) -> dict | None:
    """The VMI's newest unfinished virt-launcher pod (kubevirt.io=virt-launcher, kubevirt.io/created-by=<uid>);
    refused: None, and a note in `unread` says the pod is unknown (not that there is none)."""
    meta = vmi.get("metadata") or {}
    uid = meta.get("uid")
    selector = f"{C.VIRT_LAUNCHER_LABEL}={C.VIRT_LAUNCHER_VALUE}" + (f",{C.LAUNCHER_CREATED_BY_LABEL}={uid}"
                                                                     if uid else "")
    pods = optional(lambda: kube.list(PODS, namespace=meta.get("namespace"), label_selector=selector),
                    on_forbidden=NOTE, notes=unread, absent=[],
                    what=f"list the pods in {meta.get('namespace')} (its virt-launcher pod is unknown)").value
    if pods is None:
        return None
    pods = [p for p in pods if (p.get("status") or {}).get("phase") not in FINAL_PHASES and (
        uid or any(o.get("name") == meta.get("name") for o in (p["metadata"].get("ownerReferences") or [])))]
    pods.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
    return pods[-1] if pods else None
