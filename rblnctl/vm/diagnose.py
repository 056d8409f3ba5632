"""Why a VM has no NPU: walk the chain from the VM to a device and stop at the first broken link.

Each link is PASS or FAIL with the evidence read and, when it fails, the remedy. In order:
VirtualMachine (exists, status) -> NpuRequest (the spec passes NPUs) -> FeatureGates -> VmModeNodes ->
sandbox: PermittedHostDevice, Advertised, FreeCapacity / DRA: DeviceClass, ResourceSlices -> Instance
(a VMI exists; KubeVirt could render its pod) -> DRA: ClaimAllocated -> Scheduling (the virt-launcher
pod's FailedScheduling events, parsed) -> NodeComponents (the node's mode and operator components,
rblnctl.operator.convergence) -> Ready.

The cluster-side checks are rblnctl.vm.cluster's, the same ones `vm attach` refuses on.
"""

from __future__ import annotations

import dataclasses

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import Forbidden, NotFound
from rblnctl.kube import EVENTS, PODS, RESOURCE_CLAIMS, VMIS, VMS, Kube, validate_name
from rblnctl.operator import resources as R
from rblnctl.operator.cluster import component_pods, node_slices
from rblnctl.operator.convergence import pending
from rblnctl.operator.nodes import labels_of, mode_of
from rblnctl.vm import devices as D
from rblnctl.vm.cluster import (
    Check,
    VmCluster,
    check_advertised,
    check_device_class,
    check_kubevirt,
    check_gates,
    check_permitted,
    check_slices,
    check_vm_nodes,
    claim_index,
    most_per_node,
    read_cluster,
    set_mode_remedy,
    with_dra,
)
from rblnctl.vm.model import Remedy, VmNpus, VmRef
from rblnctl.vm.placement import placement_of, why_not
from rblnctl.vm.restart import FINAL_PHASES


LIST_VMS = ("vm", "list", "-A")  # which VMs hold NPUs: the remedy when none is free


class LinkStatus(enum.StrEnum):
    """Whether a link holds."""

    PASS = "PASS"
    FAIL = "FAIL"


class LinkName(enum.StrEnum):
    """The links, in the order they are walked."""

    VM = "VirtualMachine"
    REQUEST = "NpuRequest"
    GATES = "FeatureGates"
    VM_NODES = "VmModeNodes"
    PERMITTED = "PermittedHostDevice"
    DEVICE_CLASS = "DeviceClass"
    ADVERTISED = "Advertised"
    SLICES = "ResourceSlices"
    CAPACITY = "FreeCapacity"
    INSTANCE = "Instance"
    CLAIM = "ClaimAllocated"
    SCHEDULING = "Scheduling"
    NODE = "NodeComponents"
    READY = "Ready"


TITLES = {
    LinkName.VM: "the VirtualMachine exists",
    LinkName.REQUEST: "its spec asks for NPUs",
    LinkName.GATES: "KubeVirt's feature gates are on",
    LinkName.PERMITTED: "KubeVirt permits the resource",
    LinkName.DEVICE_CLASS: "the passthrough DeviceClass exists",
    LinkName.VM_NODES: "some NPU node is in vm mode",
    LinkName.ADVERTISED: "a vm-mode node advertises the resource",
    LinkName.SLICES: "ResourceSlices offer vfio NPUs",
    LinkName.CAPACITY: "a node it may run on has free NPUs",
    LinkName.INSTANCE: "a VMI runs it",
    LinkName.CLAIM: "its ResourceClaim is allocated",
    LinkName.SCHEDULING: "its virt-launcher pod is scheduled",
    LinkName.NODE: "the node's operator components are ready",
    LinkName.READY: "the VMI is Running and Ready",
}
# What is wrong when a link does not hold: each title, negated. A link that can fail for several reasons
# says which one where it fails (_Chain.add's `failure`).
FAILURES = {
    LinkName.VM: "the VirtualMachine does not exist",
    LinkName.REQUEST: "its spec passes no NPU",
    LinkName.GATES: "a KubeVirt feature gate it needs is off",
    LinkName.PERMITTED: "KubeVirt does not permit its NPU resource",
    LinkName.DEVICE_CLASS: "the passthrough DeviceClass does not exist",
    LinkName.VM_NODES: "no NPU node is in vm mode",
    LinkName.ADVERTISED: "no vm-mode node advertises its NPU resource",
    LinkName.SLICES: "no ResourceSlice offers vfio NPUs",
    LinkName.CAPACITY: "no node it may run on has free NPUs",
    LinkName.INSTANCE: "no VMI runs it",
    LinkName.CLAIM: "its ResourceClaim is not allocated",
    LinkName.SCHEDULING: "its virt-launcher pod is not scheduled",
    LinkName.NODE: "its node's operator components are not ready",
    LinkName.READY: "the VMI is not Running and Ready",
}


@dataclass(frozen=True, kw_only=True)
class Link:
    """One link of the chain."""

    name: LinkName
    status: LinkStatus
    evidence: tuple[str, ...]
    remedy: Remedy | None = None
    failure: str | None = None  # what is wrong, in words (None: the link holds)

    @property
    def title(self) -> str:
        """What the link asserts, in words (what holds when it passes: not a fact when it fails)."""
        return TITLES[self.name]

    @property
    def message(self) -> str:
        """The evidence as one line."""
        return "; ".join(self.evidence)

    @property
    def ok(self) -> bool:
        """The link holds."""
        return self.status == LinkStatus.PASS


@dataclass(frozen=True, kw_only=True)
class VmDiagnosis:
    """The links walked, up to and including the first broken one."""

    vm: VmRef
    method: str | None
    npus: int
    links: tuple[Link, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Every link holds: the VM has its NPUs."""
        return all(link.ok for link in self.links)

    @property
    def broken(self) -> Link | None:
        """The first link that does not hold."""
        return next((link for link in self.links if not link.ok), None)

    @property
    def found(self) -> bool:
        """The VirtualMachine (or a standalone VMI) exists."""
        return not any(link.name == LinkName.VM and not link.ok for link in self.links)

    def summary(self) -> str | None:
        """The broken link as one line saying what is wrong (None: every link holds)."""
        broken = self.broken
        if broken is None:
            return None
        if broken.name == LinkName.VM:
            return str(broken.failure)
        return f"VM {self.vm}: {broken.failure} (broken link: {broken.name.value})"


@dataclass(frozen=True, kw_only=True)
class SchedulingFailure:
    """kube-scheduler's FailedScheduling message, parsed: `0/5 nodes are available: 3 Insufficient x, 2 ...`."""

    message: str
    available: int | None
    total: int | None
    reasons: tuple[tuple[int, str], ...]  # (node count, reason)


_AVAILABLE = re.compile(r"^\s*(\d+)/(\d+) nodes are available:\s*(.*)$", re.S)
_REASON = re.compile(r"^(\d+)\s+(.+)$")


def parse_failed_scheduling(message: str) -> SchedulingFailure:
    """Split kube-scheduler's message (k8s.io/kubernetes pkg/scheduler/framework FitError.Error) into reasons.

    The reasons follow "N/M nodes are available:" as "count reason" joined by ", ", sorted, ending
    with "."; a "preemption: ..." sentence may follow. Anything else is kept whole as one reason.
    """
    m = _AVAILABLE.match(message)
    if not m:
        return SchedulingFailure(message=message, available=None, total=None, reasons=((0, message.strip()),))
    rest = re.split(r"\.\s+preemption:", m.group(3), maxsplit=1)[0].strip().rstrip(".")
    reasons = []
    for part in (p.strip() for p in rest.split(", ")):
        r = _REASON.match(part)
        if r:
            reasons.append((int(r.group(1)), r.group(2).strip()))
        elif part:
            reasons.append((0, part))
    return SchedulingFailure(message=message, available=int(m.group(1)), total=int(m.group(2)), reasons=tuple(reasons))


class _Chain:
    """Links so far; add() says whether to go on."""

    def __init__(self) -> None:
        self.links: list[Link] = []

    def add(self, name: LinkName, ok: bool, evidence: Sequence[str], remedy: Remedy | None = None, *,
            failure: str | None = None) -> bool:
        self.links.append(Link(name=name, status=LinkStatus.PASS if ok else LinkStatus.FAIL, evidence=tuple(evidence),
                               remedy=None if ok else remedy, failure=None if ok else failure or FAILURES[name]))
        return ok

    def check(self, name: LinkName, check: Check, extra: Sequence[str] = (), *, failure: str | None = None) -> bool:
        return self.add(name, check.ok, [*check.evidence, *([] if check.ok else extra)], check.remedy,
                        failure=failure)


def diagnose(kube: Kube, name: str, namespace: str, *, cluster: VmCluster | None = None) -> VmDiagnosis:
    """Walk the chain for one VM (reads only) and return the links up to the first broken one."""
    validate_name(name, kind="VirtualMachine")
    ref = VmRef(namespace=namespace, name=name)
    chain = _Chain()
    warnings: list[str] = []

    def done(method: str | None = None, npus: int = 0) -> VmDiagnosis:
        return VmDiagnosis(vm=ref, method=method, npus=npus, links=tuple(chain.links), warnings=tuple(warnings))

    vm = kube.get_optional(VMS, name, namespace=namespace)
    vmi = kube.get_optional(VMIS, name, namespace=namespace)
    if vm is None and vmi is None:
        chain.add(LinkName.VM, False, [f"no VirtualMachine or VirtualMachineInstance {ref}"],
                  Remedy(text="create it; `vm manifest` writes one with NPUs", command=("vm", "manifest", name)),
                  failure=f"VirtualMachine {ref} not found")
        return done()
    if vm is not None:
        st = vm.get("status") or {}
        rs = (vm.get("spec") or {}).get("runStrategy") or ("Always" if (vm.get("spec") or {}).get("running")
                                                            else "Halted")
        chain.add(LinkName.VM, True, [f"VirtualMachine {ref}: status {st.get('printableStatus') or '<none>'}, "
                                      f"runStrategy {rs}"])
    else:
        chain.add(LinkName.VM, True, [f"no VirtualMachine; a standalone VirtualMachineInstance {ref}"])

    cluster = cluster or read_cluster(kube)
    index = claim_index(kube, cluster)
    test = index.test(namespace)
    spec = D.vm_spec(vm) if vm is not None else D.vmi_spec(vmi or {})
    have = D.npus_of(spec, npu_claim=test)
    running = vmi is not None and (vmi.get("status") or {}).get("phase") not in FINAL_PHASES
    held = D.npus_of(D.vmi_spec(vmi), npu_claim=test) if running and vmi is not None else None
    if not _request(chain, ref, have, held, cluster):
        return done(have.method, have.count)
    method = str(have.method)
    gates = check_gates(cluster, method)
    if gates.warning:
        warnings.append(gates.warning)
    if not chain.check(LinkName.GATES, gates,
                       failure=None if check_kubevirt(cluster).ok else "KubeVirt is not installed (no KubeVirt CR)"):
        return done(method, have.count)
    if not chain.check(LinkName.VM_NODES, check_vm_nodes(cluster)):
        return done(method, have.count)
    if method == C.METHOD_DRA:
        cluster = with_dra(kube, cluster)
        if not chain.check(LinkName.DEVICE_CLASS, check_device_class(cluster)):
            return done(method, have.count)
    else:
        checks = [check_permitted(cluster, r) for r in have.resources]
        if not chain.add(LinkName.PERMITTED, all(c.ok for c in checks), [e for c in checks for e in c.evidence],
                         next((c.remedy for c in checks if not c.ok), None)):
            return done(method, have.count)
    if method == C.METHOD_DRA:
        slices = check_slices(cluster)
        if slices.warning:
            warnings.append(slices.warning)
        if not chain.check(LinkName.SLICES, slices, _vm_node_pending(kube, cluster, cluster.vm_nodes)):
            return done(method, have.count)
    else:
        checks = [check_advertised(cluster, r) for r in have.resources]
        bad = [c for c in checks if not c.ok]
        extra = _vm_node_pending(kube, cluster, cluster.vm_nodes) if bad else []
        if not chain.add(LinkName.ADVERTISED, not bad, [e for c in checks for e in c.evidence] + extra,
                         bad[0].remedy if bad else None):
            return done(method, have.count)
        if not _capacity(chain, kube, cluster, spec, have, vmi if running else None, ref):
            return done(method, have.count)

    pod = _launcher(kube, vmi) if running and vmi is not None else None
    if not _instance(chain, ref, vm, vmi if running else None, pod):
        return done(method, have.count)
    assert vmi is not None
    if method == C.METHOD_DRA and not _claims(chain, kube, ref, have, pod):
        never = _never_fits(cluster, ref, vmi)
        if never is not None:  # no node has that many vfio NPUs at all: freeing some would not help
            broken = chain.links[-1]
            chain.links[-1] = dataclasses.replace(broken, evidence=(*broken.evidence, never[0]), remedy=never[1])
        return done(method, have.count)
    if not _scheduling(chain, kube, ref, vmi, pod, cluster):
        return done(method, have.count)
    node = ((vmi.get("status") or {}).get("nodeName")) or ((pod or {}).get("spec") or {}).get("nodeName")
    if not _node_components(chain, kube, cluster, str(node), method):
        return done(method, have.count)
    _ready(chain, ref, vmi, held)
    return done(method, have.count)


# -- links ------------------------------------------------------------------------------------------------


def _request(chain: _Chain, ref: VmRef, have: VmNpus, held: VmNpus | None, cluster: VmCluster) -> bool:
    attach = ("vm", "attach", ref.name, "-n", ref.namespace)
    if not have.count:
        others = f" (host devices: {', '.join(have.other_devices)})" if have.other_devices else ""
        return chain.add(LinkName.REQUEST, False, [f"the spec passes no NPU{others}"],
                         Remedy(text="give it NPUs", command=attach))
    listed = ", ".join(f"{d.name}={d.source}" for d in have.devices)
    if have.method == "mixed":
        method = cluster.policy.vm_method if cluster.policy and cluster.policy.vm_method else C.METHOD_SANDBOX
        return chain.add(LinkName.REQUEST, False, [f"{have.count} NPU(s) through both methods ({listed}): the "
                                                   "operator offers NPUs one way only"],
                         Remedy(text=f"express them all through {method}",
                                command=(*attach, "--method", method, "--convert", "--restart")),
                         failure="its spec passes NPUs through both methods")
    evidence = [f"{have.count} NPU(s) through {have.method}: {listed}"]
    if held is not None and sorted(d.source for d in held.devices) != sorted(d.source for d in have.devices):
        return chain.add(LinkName.REQUEST, False, [*evidence, f"but its running VMI passes {held.count} "
                                                   f"({', '.join(d.source for d in held.devices) or 'none'}): "
                                                   "the VM was changed after it started"],
                         Remedy(text=f"restart the VM (`virtctl restart {ref.name} -n {ref.namespace}`)"),
                         failure="its running VMI passes other NPUs than its spec")
    return chain.add(LinkName.REQUEST, True, evidence)


def _vm_node_pending(kube: Kube, cluster: VmCluster, nodes: Sequence[str], limit: int = 3) -> list[str]:
    """What the operator has not done yet on the vm-mode nodes (evidence for a resource nobody offers)."""
    policy = cluster.policy
    if policy is None:
        return ["no RBLNClusterPolicy: the operator deploys nothing"]
    out = []
    for name in list(nodes)[:limit]:
        node = cluster.node(name)
        if node is None:
            continue
        missing = _pending(kube, cluster, node)
        out.append(f"{name}: " + ("; ".join(missing[:3]) if missing else "operator components ready"))
    return out


def _pending(kube: Kube, cluster: VmCluster, node: Mapping) -> list[str]:
    policy = cluster.policy
    if policy is None:
        return ["no RBLNClusterPolicy"]
    name = str((node.get("metadata") or {}).get("name") or "")
    try:
        pods = component_pods(kube, cluster.operator, name)
    except Forbidden:
        return [f"cannot list the operator's pods in {cluster.operator.namespace} (forbidden)"]
    slices = node_slices(kube, name, policy.dra_driver) if C.COMP_DRA in policy.allocators(C.MODE_VM) else None
    return [str(p) for p in pending(node, C.MODE_VM, policy, pods, slices)]


def _requested(pod: Mapping, resource: str) -> int:
    """Devices of `resource` a pod requests (requests, else limits; init containers: the largest)."""
    spec = pod.get("spec") or {}

    def amount(c: Mapping) -> int:
        res = c.get("resources") or {}
        return R.count((res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource, 0)))

    main = sum(amount(c) for c in spec.get("containers") or [])
    init = max((amount(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _capacity(chain: _Chain, kube: Kube, cluster: VmCluster, spec: Mapping, have: VmNpus, vmi: dict | None,
              ref: VmRef) -> bool:
    """Free NPUs (allocatable minus what the node's pods request) on nodes the VM may land on.

    When no node it may land on has as many NPUs at all (allocatable, free or not), freeing some would
    never help: the remedy is to ask for fewer (or to switch a bigger node to vm mode), not to stop a VM.
    """
    if vmi is not None and (vmi.get("status") or {}).get("nodeName") and \
            (vmi.get("status") or {}).get("phase") == "Running":
        node = vmi["status"]["nodeName"]
        return chain.add(LinkName.CAPACITY, True, [f"runs on {node}, which holds its NPUs"])
    placement = placement_of(spec)
    own = str(((vmi or {}).get("metadata") or {}).get("uid") or "")
    evidence: list[str] = []
    ok = True
    never: list[tuple[str, int, int, str]] = []  # (resource, wanted, the most any allowed node has, that node)
    for resource in have.resources:
        wanted = sum(1 for d in have.sandbox if d.resource == resource)
        fits = []
        biggest: tuple[int, str] | None = None
        for name in cluster.advertised.get(resource, []):
            node = cluster.node(name) or {}
            reason = why_not(node, placement)
            if reason:
                evidence.append(f"{name}: excluded by {reason}")
                continue
            alloc = R.count(((node.get("status") or {}).get("allocatable") or {}).get(resource, 0))
            if biggest is None or alloc > biggest[0]:
                biggest = (alloc, name)
            used = 0
            holders = []
            for p in kube.iter_list(PODS, field_selector=f"spec.nodeName={name}"):
                if (p.get("status") or {}).get("phase") in FINAL_PHASES:
                    continue
                if own and (labels_of(p).get(C.LAUNCHER_CREATED_BY_LABEL) == own):
                    continue
                n = _requested(p, resource)
                if n:
                    used += n
                    holders.append(f"{p['metadata'].get('namespace')}/{p['metadata']['name']}")
            free = alloc - used
            evidence.append(f"{name}: {alloc} {resource} allocatable, {used} in use"
                            + (f" ({', '.join(holders[:3])}{' ...' if len(holders) > 3 else ''})" if holders else "")
                            + f", {free} free")
            if free >= wanted:
                fits.append(name)
        if not fits:
            ok = False
            evidence.insert(0, f"no node the VM may run on ({placement.describe()}) has {wanted} free {resource}")
            if biggest is not None and wanted > biggest[0]:
                never.append((resource, wanted, *biggest))
        else:
            evidence.insert(0, f"{wanted} {resource} fit on {', '.join(fits)}")
    if never:
        resource, wanted, most, node = never[0]
        evidence.insert(0, f"{wanted} {resource} never fit: no node the VM may run on has that many at all (the most "
                        f"is {most}, on {node})")
        command = ("vm", "attach", ref.name, "-n", ref.namespace, "--npus", str(most)) if len(have.resources) == 1 \
            and most > 0 else None
        return chain.add(LinkName.CAPACITY, False, evidence, Remedy(
            text=f"ask for at most {most} NPU(s) (freeing NPUs would not help), or switch a node with {wanted} "
                 f"{resource} to vm mode", command=command),
            failure=f"no node it may run on has {wanted} {resource}, free or not")
    return chain.add(LinkName.CAPACITY, ok, evidence, Remedy(
        text="free NPUs on a node the VM may run on (stop a VM that holds them), widen the VM's nodeSelector, "
             "affinity or tolerations, or switch another node to vm mode; the VMs that hold NPUs",
        command=LIST_VMS))


def _launcher(kube: Kube, vmi: dict) -> dict | None:
    """The VMI's newest unfinished virt-launcher pod (kubevirt.io=virt-launcher, kubevirt.io/created-by=<uid>)."""
    meta = vmi.get("metadata") or {}
    uid = meta.get("uid")
    selector = f"{C.VIRT_LAUNCHER_LABEL}={C.VIRT_LAUNCHER_VALUE}" + (f",{C.LAUNCHER_CREATED_BY_LABEL}={uid}"
                                                                     if uid else "")
    try:
        pods = kube.list(PODS, namespace=meta.get("namespace"), label_selector=selector)
    except Forbidden:
        return None
    pods = [p for p in pods if (p.get("status") or {}).get("phase") not in FINAL_PHASES and (
        uid or any(o.get("name") == meta.get("name") for o in (p["metadata"].get("ownerReferences") or [])))]
    pods.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
    return pods[-1] if pods else None


def _instance(chain: _Chain, ref: VmRef, vm: dict | None, vmi: dict | None, pod: dict | None) -> bool:
    start = Remedy(text=f"start it (`virtctl start {ref.name} -n {ref.namespace}`)")
    if vmi is None:
        status = ((vm or {}).get("status") or {}).get("printableStatus") or "Stopped"
        return chain.add(LinkName.INSTANCE, False, [f"no running VMI: the VM is {status}, so nothing holds NPUs"],
                         start)
    st = vmi.get("status") or {}
    phase = st.get("phase") or "Pending"
    failing = [c for c in st.get("conditions") or [] if c.get("status") == "False" and c.get("type") != "Ready"]
    if pod is None and phase in ("", "Pending", "Scheduling"):
        msgs = [f"{c.get('type')} {c.get('reason') or ''}: {c.get('message') or ''}".strip() for c in failing]
        evidence = [f"VMI {ref} is {phase} and KubeVirt made no virt-launcher pod for it", *msgs]
        text = " ".join(msgs)
        remedy = Remedy(text=f"see `kubectl describe vmi {ref.name} -n {ref.namespace}`")
        m = re.search(r"HostDevice (\S+) is not permitted", text)
        if m:
            remedy = Remedy(text=f"permit {m.group(1)}",
                            command=("kubevirt", "permit-devices", "--resource-name", m.group(1)))
        return chain.add(LinkName.INSTANCE, False, evidence, remedy,
                         failure="KubeVirt made no virt-launcher pod for its VMI")
    if phase == "Failed":
        return chain.add(LinkName.INSTANCE, False, [f"VMI {ref} failed"], start, failure="its VMI failed")
    where = f" on {st.get('nodeName')}" if st.get("nodeName") else ""
    return chain.add(LinkName.INSTANCE, True, [f"VMI {ref} is {phase}{where}"
                                               + (f"; virt-launcher pod {pod['metadata']['name']}" if pod else "")])


def _claims(chain: _Chain, kube: Kube, ref: VmRef, have: VmNpus, pod: dict | None) -> bool:
    """The NPU claims of the virt-launcher pod are allocated (pod.status.resourceClaimStatuses names them)."""
    entries = {c.get("name"): c for c in ((pod or {}).get("spec") or {}).get("resourceClaims") or []}
    statuses = {s.get("name"): s.get("resourceClaimName") for s in ((pod or {}).get("status") or {})
                .get("resourceClaimStatuses") or []}
    evidence: list[str] = []
    ok = True
    for claim in dict.fromkeys(str(d.claim) for d in have.dra):
        entry = entries.get(claim) or {}
        name = entry.get("resourceClaimName") or statuses.get(claim)
        if not name:
            ok = False
            evidence.append(f"no ResourceClaim made for {claim} yet (the virt-launcher pod's status names none)")
            continue
        obj = kube.get_optional(RESOURCE_CLAIMS, name, namespace=ref.namespace)
        if obj is None:
            ok = False
            evidence.append(f"ResourceClaim {ref.namespace}/{name} ({claim}) does not exist")
            continue
        results = (((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        if not (obj.get("status") or {}).get("allocation"):
            ok = False
            evidence.append(f"ResourceClaim {ref.namespace}/{name} ({claim}) is not allocated")
            continue
        got = ", ".join(f"{r.get('request')}={r.get('pool')}/{r.get('device')}" for r in results)
        evidence.append(f"ResourceClaim {ref.namespace}/{name} ({claim}) allocated: {got or 'no devices'}")
    if not ok and pod is not None:
        failure = _failed_scheduling(kube, pod)
        if failure:
            evidence.append(f"scheduler: {failure.message}")
    return chain.add(LinkName.CLAIM, ok, evidence, Remedy(
        text="the scheduler allocates a claim when a vm-mode node has enough free vfio NPUs: free one (stop a VM "
             "that holds them) or switch another node to vm mode; the VMs that hold NPUs", command=LIST_VMS))


def _failed_scheduling(kube: Kube, pod: dict) -> SchedulingFailure | None:
    """The newest FailedScheduling event of the pod, parsed (None: none, or events cannot be read)."""
    meta = pod.get("metadata") or {}
    try:
        events = kube.list(EVENTS, namespace=meta.get("namespace"),
                           field_selector=f"involvedObject.kind=Pod,involvedObject.name={meta.get('name')}")
    except (Forbidden, NotFound):
        return None
    failed = [e for e in events if e.get("reason") == "FailedScheduling"
              and (not meta.get("uid") or (e.get("involvedObject") or {}).get("uid") in (None, meta.get("uid")))]
    if not failed:
        return None
    failed.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return parse_failed_scheduling(str(failed[-1].get("message") or ""))


def _scheduling(chain: _Chain, kube: Kube, ref: VmRef, vmi: dict, pod: dict | None, cluster: VmCluster) -> bool:
    if pod is None:
        node = (vmi.get("status") or {}).get("nodeName")
        return chain.add(LinkName.SCHEDULING, bool(node), [f"VMI placed on {node}" if node else
                                                           "no virt-launcher pod found"],
                         failure="its VMI is on no node and has no virt-launcher pod")
    conds = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    node = (pod.get("spec") or {}).get("nodeName")
    scheduled = conds.get("PodScheduled") or {}
    if node or scheduled.get("status") == "True":
        return chain.add(LinkName.SCHEDULING, True, [f"virt-launcher pod {pod['metadata']['name']} is on {node}"])
    failure = _failed_scheduling(kube, pod)
    evidence = [f"virt-launcher pod {pod['metadata']['name']} is Pending, not scheduled"]
    if failure is None:
        message = scheduled.get("message")
        if message:
            failure = parse_failed_scheduling(str(message))
    remedy = Remedy(text=f"see `kubectl describe pod {pod['metadata']['name']} -n {ref.namespace}`")
    if failure is not None:
        total = f" of {failure.total}" if failure.total is not None else ""
        evidence.append(f"FailedScheduling: {failure.available if failure.available is not None else '?'}"
                        f"{total} nodes available")
        evidence += [f"{n} node(s): {r}" if n else r for n, r in failure.reasons]
        text = " ".join(r for _, r in failure.reasons)
        never = _never_fits(cluster, ref, vmi) if re.search(r"Insufficient " + re.escape(C.RESOURCE_PREFIX), text) \
            or "claim" in text.lower() else None
        if never is not None:
            evidence.append(never[0])
            remedy = never[1]
        elif re.search(r"Insufficient " + re.escape(C.RESOURCE_PREFIX), text):
            remedy = Remedy(text="every node it may run on has its NPUs in use: free NPUs (stop a VM that holds "
                            "them) or switch another node to vm mode; the VMs that hold NPUs", command=LIST_VMS)
        elif "claim" in text.lower():
            remedy = Remedy(text="no vm-mode node can allocate its ResourceClaim: free a vfio NPU or switch another "
                            "node to vm mode; the VMs that hold NPUs", command=LIST_VMS)
        elif "affinity" in text or "selector" in text:
            remedy = Remedy(text="no node matches the VM's nodeSelector or affinity: widen them, or switch a node "
                            "that matches to vm mode")
        elif "taint" in text:
            remedy = Remedy(text="the NPU nodes carry taints the VM does not tolerate: add tolerations to the VM")
        elif not cluster.vm_nodes:
            remedy = set_mode_remedy(cluster)
    return chain.add(LinkName.SCHEDULING, False, evidence, remedy)


def _never_fits(cluster: VmCluster, ref: VmRef, vmi: dict) -> tuple[str, Remedy] | None:
    """When the VMI asks more NPUs of one kind than any vm-passthrough node has at all: the evidence and the
    remedy (ask for fewer), since freeing NPUs would never make it fit (rblnctl.vm.cluster.most_per_node)."""
    held = D.npus_of(D.vmi_spec(vmi), npu_claim=lambda _c: True)
    wanted: dict[str | None, int] = {}
    for d in held.devices:
        key = d.resource if d.method == C.METHOD_SANDBOX else None
        wanted[key] = wanted.get(key, 0) + 1
    for resource, n in wanted.items():
        most = most_per_node(cluster, C.METHOD_SANDBOX if resource else C.METHOD_DRA, resource)
        if most is not None and n > most[0]:
            what = resource or "vfio NPUs"
            return (f"{n} {what} never fit: no vm-passthrough node has that many at all (the most is {most[0]}, on "
                    f"{most[1]})",
                    Remedy(text=f"ask for at most {most[0]} NPU(s) (freeing NPUs would not help), or switch a node "
                                f"with {n} to vm mode; then restart the VM",
                           command=("vm", "attach", ref.name, "-n", ref.namespace, "--npus", str(most[0]), "--restart")
                           if len(wanted) == 1 else None))
    return None


def _node_components(chain: _Chain, kube: Kube, cluster: VmCluster, node_name: str, method: str) -> bool:
    node = cluster.node(node_name)
    if node is None:
        return chain.add(LinkName.NODE, False, [f"{node_name} is not an NPU node"],
                         Remedy(text="the VM runs on a node without NPUs: fix its nodeSelector"),
                         failure=f"its node {node_name} has no NPUs")
    mode = mode_of(labels_of(node), cluster.policy)
    if mode.effective != C.MODE_VM:
        return chain.add(LinkName.NODE, False, [f"{node_name} is in {mode.effective} mode"],
                         Remedy(text=f"switch {node_name} to vm mode", command=("node", "set-mode", "vm", node_name)),
                         failure=f"its node {node_name} is in {mode.effective} mode")
    missing = _pending(kube, cluster, node)
    if missing:
        return chain.add(LinkName.NODE, False, [f"{node_name}: {m}" for m in missing[:5]],
                         Remedy(text="the operator has not finished converging the node on vm mode (a stuck "
                                f"component: `kubectl -n {cluster.operator.namespace} describe pod`); watch it",
                                command=("node", "list")))
    alloc = ((node.get("status") or {}).get("allocatable") or {})
    what = ", ".join(f"{k}={v}" for k, v in sorted(alloc.items()) if R.is_npu_resource(k)) or "no NPU resources"
    return chain.add(LinkName.NODE, True, [f"{node_name}: vm mode, operator components ready ({what})"])


def _ready(chain: _Chain, ref: VmRef, vmi: dict, held: VmNpus | None) -> bool:
    st = vmi.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
    if st.get("phase") == "Running" and ready:
        devices = ", ".join(d.name for d in held.devices) if held else ""
        return chain.add(LinkName.READY, True, [f"VMI {ref} Running and Ready on {st.get('nodeName')}"
                                                + (f" with {devices}" if devices else "")])
    why = [f"{c.get('type')}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
           for c in st.get("conditions") or [] if c.get("status") == "False"]
    return chain.add(LinkName.READY, False, [f"VMI {ref} is {st.get('phase') or 'Pending'}, not Ready", *why],
                     Remedy(text=f"see `kubectl describe vmi {ref.name} -n {ref.namespace}`"))
