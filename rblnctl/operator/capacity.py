"""NPUs per node, counted as kube-scheduler counts them: allocatable, allocated to pods and claims, free.

One computation for `node list`, `status`, `vm fit` and the capacity warnings of `vm attach`, `vm manifest`
and `vm diagnose` (rblnctl.vm.fit builds on it).

- Device plugins (extended resources, every name rblnctl.operator.resources.is_npu_resource takes for an NPU):
  the node's allocatable minus the requests of the pods bound to it that have not finished. The scheduler
  only sees pods whose phase is neither Succeeded nor Failed (kubernetes/kubernetes pkg/scheduler/scheduler.go
  newPodInformer: `status.phase!=Succeeded,status.phase!=Failed`); a terminating pod still holds what it asked
  for. A pod asks for what its containers request together, or for what its largest init container asks when
  that is more, restartable (sidecar) init containers counting alongside the containers, plus its overhead
  (k8s.io/component-helpers resource/helpers.go PodRequests, AggregateContainerRequests). A request the
  scheduler served from DRA devices (status.extendedResourceClaimStatus: served_by_dra) is counted through its
  claim instead. virt-launcher pods
  are pods like any other: KubeVirt renders one request (and limit) per sandbox host device
  (kubevirt/kubevirt@v1.9.0 pkg/virt-controller/services/renderresources.go WithHostDevicesDevicePlugins).
- DRA: the devices the policy's driver publishes in the node's ResourceSlices (per pool, only the slices of its
  newest `spec.pool.generation`: current_slices) minus those a ResourceClaim's
  `status.allocation.devices.results` names (driver, pool, device), as the scheduler's DRA allocator counts
  them (every allocated claim, whoever holds it, once however many pods share it; a result with
  `adminAccess` holds nothing). Devices are grouped by the DeviceClass that hands them out:
  vfio-bound ones (`vfio-*`, rblnctl.operator.convergence.dra_devices) under the passthrough class
  (`vfio-npu.rebellions.ai`), the others under the driver's name. A device no claim holds but that carries a
  NoSchedule or NoExecute taint (`spec.devices[].taints`) the request does not tolerate is not free: the
  scheduler's allocator skips it (constants.DRA_BLOCKING_TAINT_EFFECTS); it is counted as `tainted`. Which
  request: `device_tolerations`, one list per request (a VM's NPU requests; none given: a request that
  tolerates nothing, as `node list` and the claims `vm manifest` writes).

Reads: the pods of the nodes (one LIST per node for a few nodes, else one cluster-wide LIST), and with DRA the
driver's ResourceSlices and every ResourceClaim. A read that is refused (RBAC) leaves what it would have told
unknown (`NodeCapacity.known` false), never guessed: refused ResourceSlices, under a policy that runs the DRA
plugin, leave every node's count unknown (its NPUs may be devices rblnctl cannot see).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.kube import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Kube
from rblnctl.kube.optional import NOTE, optional
from rblnctl.kube.parallel import start
from rblnctl.kube.projections import POD
from rblnctl.operator import resources as R
from rblnctl.operator.components import daemonset_pod, held_in_init
from rblnctl.operator.policy import Policy

NON_TERMINATED = "status.phase!=Succeeded,status.phase!=Failed"  # the scheduler's pod informer selector
FINISHED_PHASES = ("Succeeded", "Failed")
PER_NODE_LISTS = 16  # up to this many nodes: one pod LIST per node (spec.nodeName); more: one LIST of all pods


@dataclass(frozen=True, kw_only=True)
class TaintedDevice:
    """A DRA device no claim holds whose taint keeps it from the request: the device and the taint, in words."""

    device: str
    taint: str  # key=value:Effect


@dataclass(frozen=True, kw_only=True)
class ResourceUse:
    """One kind of NPU on a node: an extended resource, or the DRA devices one DeviceClass hands out."""

    name: str  # rebellions.ai/RBLN-CA22_PF; for DRA the class: vfio-npu.rebellions.ai (vfio) or the driver
    dra: bool = False
    allocatable: int = 0
    allocated: int = 0
    holders: tuple[str, ...] = ()  # `namespace/name` of the pods (or, DRA, the claims) holding them
    free_devices: tuple[str, ...] = ()  # DRA: the devices no claim holds and no untolerated taint keeps away
    tainted: tuple[TaintedDevice, ...] = ()  # DRA: devices no claim holds that a taint keeps from the request

    @property
    def free(self) -> int:
        """What is left (never below 0: pods may hold more than a plugin that went away still advertises); a
        device that a taint keeps from the request is not free."""
        return max(0, self.allocatable - self.allocated - len(self.tainted))


@dataclass(frozen=True, kw_only=True)
class NodeCapacity:
    """The NPUs of one node: per resource, and in total."""

    node: str
    resources: tuple[ResourceUse, ...] = ()
    known: bool = True  # False: the pods (or claims) holding them could not be read: allocated/free unknown
    problem: str | None = None  # why not known

    @property
    def allocatable(self) -> int:
        return sum(r.allocatable for r in self.resources)

    @property
    def allocated(self) -> int | None:
        return sum(r.allocated for r in self.resources) if self.known else None

    @property
    def free(self) -> int | None:
        return sum(r.free for r in self.resources) if self.known else None

    def of(self, name: str) -> ResourceUse | None:
        """The use of one resource (or DRA class) on this node."""
        return next((r for r in self.resources if r.name == name), None)


# -- what one pod asks for --------------------------------------------------------------------------------------


def _amounts(container: Mapping) -> dict[str, int]:
    """NPU resources one container requests (requests; limits where no request is written: the API server
    defaults an extended resource's request to its limit)."""
    res = container.get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    return {k: R.count(requests.get(k, limits.get(k))) for k in {*requests, *limits} if R.is_npu_resource(k)}


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = max(into.get(k, 0), v)


def pod_requests(pod: Mapping) -> dict[str, int]:
    """The NPU resources a pod holds on its node, by the scheduler's formula (k8s.io/component-helpers
    resource/helpers.go AggregateContainerRequests + overhead): the containers' sum; each init container in
    turn, a restartable one (restartPolicy Always, a sidecar) added to the containers' sum and to those that
    follow it, the others with the sidecars started before them; the larger of the two; plus the overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        _add(total, _amounts(c))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        own = _amounts(c)
        if c.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            step = dict(sidecars)
        else:
            step = dict(own)
            _add(step, sidecars)
        _max(init_peak, step)
    _max(total, init_peak)
    overhead = {k: R.count(v) for k, v in (spec.get("overhead") or {}).items() if R.is_npu_resource(k)}
    _add(total, overhead)
    return {k: v for k, v in total.items() if v}


def served_by_dra(pod: Mapping) -> set[str]:
    """The extended resources the scheduler served the pod from DRA devices instead of a device plugin (a
    DeviceClass's `extendedResourceName`, KEP-5004: the operator's `npu.rebellions.ai` class maps
    `rebellions.ai/npu`, RBLN-SW/rbln-npu-operator@v0.3.0 internal/scope/patch/dra_kubelet_plugin.go). It names
    them in `status.extendedResourceClaimStatus.requestMappings[].resourceName` and allocates a claim for them:
    that claim's devices count, not the pod's request (else the NPU would be counted twice)."""
    status = ((pod.get("status") or {}).get("extendedResourceClaimStatus")) or {}
    return {str(m.get("resourceName")) for m in status.get("requestMappings") or [] if m.get("resourceName")}


def holds_node_resources(pod: Mapping) -> bool:
    """Whether a pod counts against its node: bound to it and not finished (the scheduler's view)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def _ref(obj: Mapping) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace') or ''}/{md.get('name') or ''}"


@dataclass(frozen=True, slots=True)
class PodUse:
    """What one unfinished pod holds of its node's NPUs: all capacity keeps of a pod once it is read. A fleet's
    pods are read page by page and each page dropped (~4 KB of dicts a pod against ~0.2 KB for this: 20,000 pods
    at 5,000 nodes, issue 31)."""

    ref: str  # namespace/name
    uid: str
    requests: tuple[tuple[str, int], ...]  # (NPU resource, count) the scheduler counts: not those DRA serves
    launcher_of: str = ""  # a virt-launcher pod's VMI (its kubevirt.io/created-by label), else ""


def pod_use(pod: Mapping) -> PodUse | None:
    """What `pod` holds of its node's NPUs; None when it holds nothing capacity counts or tells apart (finished,
    unbound, or asking no NPU resource of the node and running no VMI, whose claims vm fit tells by its uid)."""
    if not holds_node_resources(pod):
        return None
    by_dra = served_by_dra(pod)
    requests = tuple((k, v) for k, v in pod_requests(pod).items() if k not in by_dra)
    md = pod.get("metadata") or {}
    launcher_of = str((md.get("labels") or {}).get(C.LAUNCHER_CREATED_BY_LABEL) or "")
    if not requests and not launcher_of:
        return None
    return PodUse(ref=_ref(pod), uid=str(md.get("uid") or ""), requests=requests, launcher_of=launcher_of)


@dataclass
class PodsByNode:
    """Pods read for capacity, grouped by node as they stream in: each one's PodUse, and whole only the few
    DaemonSet pods held in an init container (rblnctl.node.inventory.held_pods tells the operator's among
    them)."""

    uses: dict[str, list[PodUse]] = field(default_factory=dict)
    held: dict[str, list[dict]] = field(default_factory=dict)

    def only(self, names: Sequence[str]) -> PodsByNode:
        """These nodes' part (each present, maybe with nothing)."""
        return PodsByNode(uses={n: self.uses.get(n, []) for n in names},
                          held={n: self.held[n] for n in names if n in self.held})

    def add(self, pod: Mapping, nodes: Mapping[str, object] | None = None) -> None:
        """Keep what `pod` holds (`nodes`: only on these nodes)."""
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if nodes is not None and node not in nodes:
            return
        if (use := pod_use(pod)) is not None:
            self.uses.setdefault(node, []).append(use)
        if held_in_init(pod) and daemonset_pod(pod):  # an operator component is a DaemonSet's pod
            self.held.setdefault(node, []).append(dict(pod))


# -- taints and tolerations ---------------------------------------------------------------------------------------


def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    """Whether a toleration tolerates a taint: k8s.io/api core/v1 toleration.go Toleration.ToleratesTaint, for a
    node's taints; DRA's device tolerations follow the same rule (kubernetes/kubernetes
    staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/devicetoleration.go ToleratesTaint, "copied from"
    core/v1's): an empty effect or key matches every one, Exists every value, Equal (the default) the same value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def taint_text(taint: Mapping) -> str:
    """`key=value:Effect` (`key:Effect` without a value), as kubectl writes a taint."""
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def device_taint(device: Mapping, requests: Sequence[Sequence[Mapping]] = ()) -> Mapping | None:
    """The first taint of a ResourceSlice device that keeps it from the requests, None when none does.

    A NoSchedule or NoExecute taint keeps a device from a request unless one of the request's tolerations
    tolerates it; other effects (None, and any added later) never do (allocator_stable.go
    taintPreventsAllocation). `requests`: the tolerations of each request that could take the device (a VM's
    NPU requests); a device counts only when every one of them tolerates its taints. Empty: one request that
    tolerates nothing.
    """
    for taint in device.get("taints") or []:
        if not isinstance(taint, Mapping) or taint.get("effect") not in C.DRA_BLOCKING_TAINT_EFFECTS:
            continue
        if not all(any(tolerates(t, taint) for t in request) for request in (requests or ((),))):
            return taint
    return None


# -- DRA ----------------------------------------------------------------------------------------------------------


def _is_vfio(device: Mapping) -> bool:
    """A device is vfio when its name starts with `vfio-` or its `type` attribute is `vfio`
    (RBLN-SW/rbln-k8s-dra-driver cmd/npu-kubelet-plugin/vfio.go)."""
    attrs = device.get("attributes") or {}
    kind = next((v.get("string") for k, v in attrs.items() if k.split("/")[-1] == "type"
                 and isinstance(v, Mapping)), None)
    return str(device.get("name") or "").startswith(C.DRA_VFIO_DEVICE_PREFIX) or kind == "vfio"


def _devices(s: Mapping) -> list[Mapping]:
    return [d for d in ((s.get("spec") or {}).get("devices")) or [] if isinstance(d, Mapping)]


def dra_devices(slices: Sequence[Mapping]) -> tuple[list[str], list[str]]:
    """(vfio device names, other device names) the slices offer (vfio: _is_vfio)."""
    vfio: list[str] = []
    other: list[str] = []
    for s in slices:
        for d in _devices(s):
            (vfio if _is_vfio(d) else other).append(str(d.get("name") or ""))
    return sorted(vfio), sorted(other)


def allocated_devices(claims: Iterable[Mapping], *, skip: Callable[[Mapping], bool] | None = None
                      ) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> the claim (`namespace/name`) it is allocated to, from every claim's
    status.allocation.devices.results (`skip`: claims not to count). A result with `adminAccess` holds nothing:
    the scheduler leaves such a device free for other claims."""
    out: dict[tuple[str, str, str], str] = {}
    for claim in claims:
        if skip is not None and skip(claim):
            continue
        results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
        for r in results:
            if r.get("adminAccess"):  # not considered allocated: kubernetes/kubernetes pkg/scheduler/framework/
                continue  # plugins/dynamicresources/allocateddevices.go foreachAllocatedDevice
            key = (str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
            out.setdefault(key, _ref(claim))
    return out


def current_slices(slices: Sequence[Mapping]) -> list[Mapping]:
    """The slices the scheduler uses: per pool (driver, pool name), only those of its newest generation; older
    ones, left a while when a driver republishes its pool, are ignored (kubernetes/kubernetes
    staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/pools_stable.go addSlice)."""
    def pool_of(s: Mapping) -> tuple[str, str]:
        spec = s.get("spec") or {}
        return str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or "")

    def generation(s: Mapping) -> int:
        return int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0)

    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        newest[pool_of(s)] = max(newest.get(pool_of(s), 0), generation(s))
    return [s for s in slices if generation(s) == newest[pool_of(s)]]


def _dra_uses(slices: Sequence[Mapping], allocated: Mapping[tuple[str, str, str], str], *, driver: str,
              vfio_class: str, tolerations: Sequence[Sequence[Mapping]] = ()) -> list[ResourceUse]:
    """The node's DRA devices of `driver` (in its pools' newest generation), grouped by class, with who holds
    each, and those no claim holds that a taint keeps from a request with `tolerations` (device_taint)."""
    slices = current_slices(slices)
    groups: dict[str, tuple[list[str], list[str], list[TaintedDevice]]] = {}  # class -> (free, holders, tainted)
    counts: dict[str, list[int]] = {}  # class -> [allocatable, allocated]
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool = str((spec.get("pool") or {}).get("name") or "")
        for d in _devices(s):
            name = str(d.get("name") or "")
            cls = vfio_class if _is_vfio(d) else driver
            free, holders, tainted = groups.setdefault(cls, ([], [], []))
            n = counts.setdefault(cls, [0, 0])
            n[0] += 1
            holder = allocated.get((driver, pool, name))
            if holder is not None:
                n[1] += 1
                holders.append(holder)
            elif (taint := device_taint(d, tolerations)) is not None:
                tainted.append(TaintedDevice(device=name, taint=taint_text(taint)))
            else:
                free.append(name)
    return [ResourceUse(name=cls, dra=True, allocatable=counts[cls][0], allocated=counts[cls][1],
                        holders=tuple(dict.fromkeys(sorted(h))), free_devices=tuple(sorted(f)),
                        tainted=tuple(sorted(t, key=lambda x: x.device)))
            for cls, (f, h, t) in sorted(groups.items())]


# -- one node, from facts already read (pure) --------------------------------------------------------------------


def node_capacity(node: Mapping, pods: Iterable[Mapping] | None, *, slices: Sequence[Mapping] = (),
                  allocated: Mapping[tuple[str, str, str], str] | None = None, driver: str = C.DRA_DRIVER,
                  vfio_class: str = C.DRA_DEVICECLASS_VM, skip_pod: Callable[[PodUse], bool] | None = None,
                  slices_known: bool = True, problem: str | None = None,
                  device_tolerations: Sequence[Sequence[Mapping]] = ()) -> NodeCapacity:
    """The NPUs of `node`: its allocatable NPU resources less what `pods` (those bound to it; None: unknown)
    request, and its DRA devices (`slices` of the node; `slices_known` false: they could not be read) less
    `allocated` ones (None: claims unknown) and those a taint keeps from a request with `device_tolerations`
    (one list per request; none: a request that tolerates nothing).
    `skip_pod`: pods not to count, by what they hold (a VM's own launcher, when judging whether the VM fits once
    restarted)."""
    name = str((node.get("metadata") or {}).get("name") or "")
    uses = None if pods is None else \
        [u for p in pods if (p.get("spec") or {}).get("nodeName") == name and (u := pod_use(p)) is not None]
    return node_usage(node, uses, slices=slices, allocated=allocated, driver=driver, vfio_class=vfio_class,
                      skip_pod=skip_pod, slices_known=slices_known, problem=problem,
                      device_tolerations=device_tolerations)


def node_usage(node: Mapping, uses: Iterable[PodUse] | None, *, slices: Sequence[Mapping] = (),
               allocated: Mapping[tuple[str, str, str], str] | None = None, driver: str = C.DRA_DRIVER,
               vfio_class: str = C.DRA_DEVICECLASS_VM, skip_pod: Callable[[PodUse], bool] | None = None,
               slices_known: bool = True, problem: str | None = None,
               device_tolerations: Sequence[Sequence[Mapping]] = ()) -> NodeCapacity:
    """node_capacity from what the node's pods hold (`uses`; None: unknown) rather than the pods."""
    name = str((node.get("metadata") or {}).get("name") or "")
    alloc = {k: R.count(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
             if R.is_npu_resource(k)}
    used: dict[str, int] = {}
    holders: dict[str, list[str]] = {}
    for u in uses or ():
        if skip_pod is not None and skip_pod(u):
            continue
        for k, v in u.requests:
            used[k] = used.get(k, 0) + v
            holders.setdefault(k, []).append(u.ref)
    resources = [ResourceUse(name=k, allocatable=alloc.get(k, 0), allocated=used.get(k, 0),
                             holders=tuple(holders.get(k, ())))
                 for k in sorted({*(k for k, v in alloc.items() if v > 0), *used})]
    resources += _dra_uses(slices, allocated or {}, driver=driver, vfio_class=vfio_class,
                           tolerations=device_tolerations)
    known = uses is not None and slices_known and (allocated is not None or not slices)
    return NodeCapacity(node=name, resources=tuple(resources), known=known, problem=None if known else problem)


# -- reading ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CapacityFacts:
    """What the capacity of some nodes is computed from (read_facts), reusable for several computations."""

    uses: dict[str, list[PodUse]] | None  # node -> what its unfinished pods hold; None: could not be read
    held: dict[str, list[dict]] = field(default_factory=dict)  # node -> its pods held in an init container
    slices: dict[str, list[dict]] = field(default_factory=dict)  # node -> the driver's ResourceSlices there
    claims: list[dict] | None = None  # every ResourceClaim (None: not read, or could not be)
    driver: str = C.DRA_DRIVER
    vfio_class: str = C.DRA_DEVICECLASS_VM
    slices_known: bool = True  # False: the DRA plugin runs but its ResourceSlices could not be read
    problems: tuple[str, ...] = ()  # why something is unknown

    def capacity(self, node: Mapping, *, skip_pod: Callable[[PodUse], bool] | None = None,
                 skip_claim: Callable[[Mapping], bool] | None = None,
                 device_tolerations: Sequence[Sequence[Mapping]] = ()) -> NodeCapacity:
        """The capacity of one of the nodes read (pure); DRA devices as a request with `device_tolerations`
        (one list per request) sees them."""
        name = str((node.get("metadata") or {}).get("name") or "")
        slices = self.slices.get(name, [])
        allocated = allocated_devices(self.claims, skip=skip_claim) if self.claims is not None else None
        return node_usage(node, None if self.uses is None else self.uses.get(name, []), slices=slices,
                          allocated=allocated, driver=self.driver, vfio_class=self.vfio_class,
                          skip_pod=skip_pod, slices_known=self.slices_known,
                          problem="; ".join(self.problems) or None, device_tolerations=device_tolerations)


def dra_in_use(policy: Policy | None) -> bool:
    """Whether the policy runs the DRA kubelet plugin in some mode (else no node publishes NPUs as devices)."""
    return policy is not None and policy.is_enabled(C.COMP_DRA)


class PodsRead:
    """Every unfinished pod, read (one cluster-wide paged LIST into PodsByNode) on its own thread from the moment
    it is made: a display command starts it beside its Node lists rather than after them, which at 5,000 nodes
    are a second of the server's time. read_facts takes it; for a few nodes it cancels it (after the page in
    flight) and lists their pods node by node instead."""

    def __init__(self, kube: Kube) -> None:
        self._cancelled = threading.Event()
        self._read = start(lambda: self._all(kube))

    def _all(self, kube: Kube) -> PodsByNode | None:
        out = PodsByNode()
        for p in kube.iter_list(PODS, field_selector=NON_TERMINATED, projection=POD):
            if self._cancelled.is_set():
                return None
            out.add(p)
        return out

    def cancel(self) -> None:
        self._cancelled.set()

    def result(self) -> PodsByNode | None:
        """The pods (None once cancelled); the read's error, raised here."""
        return self._read.result()


def read_facts(kube: Kube, nodes: Sequence[Mapping], policy: Policy | None, *, dra: bool | None = None,
               pods_read: PodsRead | None = None) -> CapacityFacts:
    """Read what the capacity of `nodes` needs (reads only): their unfinished pods (`pods_read`: as read already
    started, for more than PER_NODE_LISTS nodes); with DRA (`dra`, default: when the policy enables the DRA
    kubelet plugin) the driver's ResourceSlices and every ResourceClaim."""
    names = [str((n.get("metadata") or {}).get("name") or "") for n in nodes]
    problems: list[str] = []
    if pods_read is not None and len(names) <= PER_NODE_LISTS:
        pods_read.cancel()
        pods_read = None

    def by_node() -> PodsByNode:
        if pods_read is not None:
            return (pods_read.result() or PodsByNode()).only(names)
        out = PodsByNode(uses={n: [] for n in names})
        if len(names) <= PER_NODE_LISTS:
            for n in names:
                for p in kube.iter_list(PODS, field_selector=f"spec.nodeName={n},{NON_TERMINATED}", projection=POD):
                    out.add(p)
        elif names:
            for p in kube.iter_list(PODS, field_selector=NON_TERMINATED, projection=POD):
                out.add(p, out.uses)
        return out

    # refused: None, unknown (never zero pods), and a problem says why
    pods: PodsByNode | None = optional(by_node, what="list pods", on_forbidden=NOTE, notes=problems).value
    driver = policy.dra_driver if policy is not None else C.DRA_DRIVER
    vfio_class = policy.dra_device_class_vm if policy is not None else C.DRA_DEVICECLASS_VM
    slices: dict[str, list[dict]] = {}
    claims: list[dict] | None = None
    slices_known = True
    if (dra_in_use(policy) if dra is None else dra) and names:
        # resource.k8s.io/v1 not served: no slices; refused: unknown (slices_known) and a problem
        read = optional(lambda: kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={driver}"), absent=[],
                        what="list ResourceSlices", on_forbidden=NOTE, notes=problems)
        found, slices_known = read.value or [], read.known
        wanted = set(names)
        for s in found:
            node = str((s.get("spec") or {}).get("nodeName") or "")
            if node in wanted:
                slices.setdefault(node, []).append(s)
        if slices:
            claims = optional(lambda: kube.list(RESOURCE_CLAIMS), what="list ResourceClaims", absent=[],
                              on_forbidden=NOTE, notes=problems).value  # refused: None, unknown
    return CapacityFacts(uses=None if pods is None else pods.uses, held={} if pods is None else pods.held,
                         slices=slices, claims=claims if slices else [], driver=driver,
                         vfio_class=vfio_class, slices_known=slices_known, problems=tuple(problems))

