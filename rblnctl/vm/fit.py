"""How many VMs of K NPUs fit now, and where: `vm fit`, and the capacity warnings of `vm attach`, `vm manifest`
and `vm diagnose` (one computation for all four).

A VM's NPUs come from one node (its virt-launcher pod is one pod), so a node with F free NPUs of the VM's kind
holds F // K such VMs, and N VMs fit when those add up to N. The free NPUs are rblnctl.operator.capacity's
(the scheduler's accounting: requests of unfinished pods, DRA devices less those claims hold). A node counts
only when the VM could land there: it is in vm-passthrough mode, offers the VM's kind of NPU (sandbox: the
device plugin's resource; DRA: vfio devices of the passthrough class), and the VM's virt-launcher may go there
(rblnctl.vm.placement: the `kubevirt.io/schedulable=true` KubeVirt puts into every launcher's nodeSelector and
the KubeVirt CR's nodeSelectors, the VM's nodeSelector, required node affinity, cordons and taints it does not
tolerate). A DRA device a NoSchedule/NoExecute taint keeps from the VM's requests is not free
(rblnctl.operator.capacity.device_taint; `device_tolerations`: the requests' tolerations). When no such node
has K NPUs at all, free or not, freeing NPUs never helps: `never` says so.

A sandbox resource name the device plugin advertises too (rblnctl.operator.policy.Policy.shared_resources: chart
v0.3.0's CRD default when sandboxDevicePlugin.resourceList is left out) is offered by container-mode nodes as well,
and kube-scheduler may place a VM asking for it there, on NPUs no vfio-pci holds (the resource exists; the VM will
not get its passthrough devices). Those nodes are not counted as fitting: `shared_with` names them and a warning
says so, with the policy's remedy (Policy.own_names_remedy).

Not modelled (named in docs/vm.md, Assumptions): the other labels KubeVirt puts into some launchers'
nodeSelector beyond kubernetes.io/arch, dedicated CPUs, CPU model and features (rblnctl.vm.placement weighs those:
machine type, Hyper-V, TSC, SEV/TDX are not), the `devices.kubevirt.io/*` resources every launcher requests, CPU and
memory, preferred affinity. The scheduler's own verdict, a `FailedScheduling` event, is what `vm diagnose`
shows beside this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import InvalidInput, RblnError
from rblnctl.kube import Kube
from rblnctl.operator import resources as R
from rblnctl.operator.capacity import CapacityFacts, NodeCapacity, PodUse, ResourceUse, read_facts
from rblnctl.operator.nodes import labels_of, mode_of, node_product
from rblnctl.vm.cluster import VmCluster, choose_method, pick_resource, product_of, read_cluster
from rblnctl.vm.model import npu_choice
from rblnctl.remedy import Command, Remedy
from rblnctl.vm.placement import Placement, launcher_placement, why_not

ANYWHERE = Placement(node_selector={}, terms=(), tolerations=())


@dataclass(frozen=True, kw_only=True)
class FitOptions:
    """What to fit: `count` VMs of `npus` NPUs each, through `method` (default: the policy's), of one sandbox
    `resource` (or `product`; default: the only one vm-mode nodes advertise), placed as `placement` says."""

    npus: int
    count: int = 1
    method: str | None = None
    resource: str | None = None
    product: str | None = None
    placement: Placement = ANYWHERE
    own_vmi: str | None = None  # a VMI's uid: its virt-launcher pods and their claims are not counted (a restart
    # frees them)
    device_tolerations: tuple[tuple[dict, ...], ...] = ()  # DRA: the tolerations of each of the VM's NPU requests
    # (none: requests that tolerate no device taint, as rblnctl writes them)

    def __post_init__(self) -> None:
        if not 1 <= self.npus <= C.MAX_VM_NPUS:
            raise InvalidInput(f"the number of NPUs must be 1 to {C.MAX_VM_NPUS}, not {self.npus}")
        if self.count < 1:
            raise InvalidInput(f"the number of VMs must be at least 1, not {self.count}")
        object.__setattr__(self, "resource", npu_choice(self.method, self.resource, self.product))


@dataclass(frozen=True, kw_only=True)
class NodeFit:
    """One NPU node: its NPUs of the VM's kind, how many of the VMs fit there now, and why not more."""

    node: str
    mode: str
    eligible: bool  # the VM may land here (mode, placement, it offers the VM's kind of NPU)
    allocatable: int = 0  # NPUs of the VM's kind
    allocated: int | None = 0  # None: unknown (the pods or claims holding them could not be read)
    free: int | None = 0
    fits: int = 0  # VMs of the asked size that fit here now
    reason: str | Remedy | None = None  # why none fit (or what limits them); a Remedy names the command that helps
    holders: tuple[str, ...] = ()
    tainted: tuple[str, ...] = ()  # DRA: `device (key=value:Effect)` no claim holds whose taint keeps it from the VM


@dataclass(frozen=True, kw_only=True)
class VmFit:
    """The answer: per node, and in total."""

    npus: int
    count: int
    method: str
    kind: str | None  # the sandbox resource, or the DRA DeviceClass; None: none is offered
    nodes: tuple[NodeFit, ...]
    placement: Placement = ANYWHERE
    warnings: tuple[str | Remedy, ...] = ()  # a Remedy: a warning that names the command fixing it
    notes: tuple[str, ...] = ()  # what could not be read
    # container-mode nodes that advertise `kind` too (a name both plugins advertise, Policy.shared_resources): the
    # scheduler may place the VM there, but not counted as fitting
    shared_with: tuple[str, ...] = ()
    shared: Remedy | None = None  # the warning about them (in `warnings` too): shared_warning


    @property
    def fits(self) -> int:
        """VMs of `npus` NPUs that fit now, on every node together."""
        return sum(n.fits for n in self.nodes)

    @property
    def ok(self) -> bool:
        return self.fits >= self.count

    @property
    def known(self) -> bool:
        """Every eligible node's allocated NPUs were read."""
        return all(n.free is not None for n in self.nodes if n.eligible)

    @property
    def most(self) -> tuple[int, str] | None:
        """The most NPUs of the VM's kind one node the VM may land on has at all (free or not), and that node."""
        candidates = [(n.allocatable, n.node) for n in self.nodes if n.eligible and n.allocatable > 0]
        if not candidates:
            return None
        best = max(c[0] for c in candidates)
        return best, min(name for a, name in candidates if a == best)

    @property
    def never(self) -> bool:
        """No node the VM may land on has `npus` NPUs of its kind at all: freeing NPUs would never make it fit."""
        most = self.most
        return most is not None and self.npus > most[0]

    @property
    def where(self) -> str:
        """`on n1 (1), n2 (2)`, or `nowhere`."""
        places = [f"{n.node} ({n.fits})" for n in self.nodes if n.fits]
        return "on " + ", ".join(places) if places else "nowhere"

    def summary(self) -> str:
        """One line: how many of the VMs fit, and where."""
        what = f"{self.count} VM(s) of {self.npus} NPU(s)" + (f" ({self.kind})" if self.kind else "")
        if self.ok:
            return f"{what}: {self.count} fit now ({self.fits} could), {self.where}"
        return f"{what}: only {self.fits} fit now, {self.where}"

    def warning(self) -> str | None:
        """What `vm attach` and `vm manifest` warn when one such VM would not be scheduled now (None: it would,
        or what holds the NPUs could not be read)."""
        most = self.most
        if most is not None and self.never:
            return (f"{self.npus} NPUs: no vm-passthrough node offers that many (the most is {most[0]}, on {most[1]}); "
                    "the VM will not be scheduled until one does")
        offered = [n for n in self.nodes if n.allocatable > 0]
        if offered and not any(n.eligible for n in offered):
            why = "; ".join(f"{n.node}: {n.reason}" for n in offered[:3])
            return (f"{self.npus} NPUs: no node that offers {self.kind} may run the VM ({why}); it will not be "
                    "scheduled until one may")
        if self.fits or most is None or not self.known:
            return None
        free = ", ".join(f"{n.node} {n.free}" for n in self.nodes if n.eligible)
        return (f"{self.npus} NPUs: no node the VM may run on has that many free now (free: {free}); it will not be "
                "scheduled until NPUs are freed (vm fit shows where they go)")


class VmFitFailed(RblnError):
    """`vm fit`: fewer VMs fit than asked; the answer itself was already shown."""


# -- the computation (pure) ------------------------------------------------------------------------------------


def _own(facts: CapacityFacts, own_vmi: str | None) -> tuple[Callable[[PodUse], bool] | None,
                                                            Callable[[Mapping], bool] | None]:
    """Tests for a VMI's own virt-launcher pods and the claims made for them (None: count everything)."""
    if not own_vmi:
        return None, None
    uids = {u.uid for uses in (facts.uses or {}).values() for u in uses if u.launcher_of == own_vmi}

    def pod(u: PodUse) -> bool:
        return u.launcher_of == own_vmi

    def claim(c: Mapping) -> bool:
        owners = {str(o.get("uid")) for o in (c.get("metadata") or {}).get("ownerReferences") or []}
        reserved = {str(r.get("uid")) for r in (c.get("status") or {}).get("reservedFor") or []}
        return bool(uids & (owners | reserved))

    return pod, claim


def _free_npus(c: NodeCapacity) -> str:
    return f"{c.free} of {c.allocatable}" if c.known else f"{c.allocatable} (in use: unknown)"


def _wanted_products(cluster: VmCluster, kind: str | None, product: str | None) -> list[str]:
    """The products a VM of `kind` (or of the asked `product`) runs on ([]: any)."""
    if kind:
        return product_of(kind, cluster.vm_resources)
    if product:
        wanted = product.strip().upper()
        return [wanted if wanted.startswith("RBLN-") else f"RBLN-{wanted}"]
    return []


def _not_vm_mode(node: Mapping, name: str, mode: str, capacity: NodeCapacity, *, cluster: VmCluster, method: str,
                 kind: str | None, product: str | None) -> str | Remedy:
    """Why a container-mode node holds no such VM, and the switch that would change it only when `node set-mode`
    accepts it and the node's NPUs are of the VM's kind: the switch's own blockers (Policy.switch_blockers, the
    rules `node set-mode` refuses by: chart v0.3.0's sandbox resourceList offers no resource for RBLN-CA22) and
    another product than the VM's (a VM asking for ATOM_PT never lands on an RBLN-CA25) name no switch."""
    head = f"in {mode} mode: its NPUs ({_free_npus(capacity)} free) serve containers, not VMs"
    have = node_product(node)
    if cluster.policy is not None:
        blockers = cluster.policy.switch_blockers(C.MODE_VM, product=have, release=cluster.release)
        if blockers:
            return f"{head}; `node set-mode vm` refuses it: {blockers[0].message}"
    wanted = _wanted_products(cluster, kind if method == C.METHOD_SANDBOX else None, product)
    if have and wanted and have.upper() not in wanted:
        return f"{head}; they are {have}, not {' or '.join(wanted)}"
    return Remedy(f"{head}; switching it moves them", Command.own("node", "set-mode", "vm", name))


def node_fit(node: Mapping, capacity: NodeCapacity, *, cluster: VmCluster, method: str, kind: str | None,
             npus: int, placement: Placement = ANYWHERE, product: str | None = None) -> NodeFit:
    """How many VMs of `npus` NPUs of `kind` (`product`: the one asked for) fit on one NPU node now, and why not
    more (pure)."""
    name = str((node.get("metadata") or {}).get("name") or "")
    mode = mode_of(labels_of(node), cluster.policy).effective
    if mode != C.MODE_VM:
        return NodeFit(node=name, mode=mode, eligible=False, reason=_not_vm_mode(
            node, name, mode, capacity, cluster=cluster, method=method, kind=kind, product=product))
    use: ResourceUse | None = capacity.of(kind) if kind else None
    if (use is None or use.allocatable <= 0) and not capacity.known and method == C.METHOD_DRA:
        # its devices may be in ResourceSlices (or claims) that could not be read: what it offers is unknown
        blocked = why_not(node, placement)
        return NodeFit(node=name, mode=mode, eligible=blocked is None, allocatable=use.allocatable if use else 0,
                       allocated=None, free=None, reason=f"excluded by {blocked}" if blocked else
                       f"cannot tell what it offers or what is in use ({capacity.problem or 'not read'})")
    if use is None or use.allocatable <= 0:
        what = kind or "VM resource"
        return NodeFit(node=name, mode=mode, eligible=False, reason=f"advertises no {what}")
    blocked = why_not(node, placement)
    known = capacity.known
    tainted = tuple(f"{t.device} ({t.taint})" for t in use.tainted)
    base = NodeFit(node=name, mode=mode, eligible=blocked is None, allocatable=use.allocatable,
                   allocated=use.allocated if known else None, free=use.free if known else None,
                   holders=use.holders, tainted=tainted)
    if blocked is not None:
        return _with(base, eligible=False, reason=f"excluded by {blocked}")
    if not known:
        return _with(base, reason=f"cannot tell what is in use ({capacity.problem or 'not read'})")
    fits = use.free // npus
    if use.allocatable < npus:
        return _with(base, reason=f"has {use.allocatable} in all, fewer than {npus}")
    if not fits:
        why = []
        if use.holders:
            why.append(f"held by {', '.join(use.holders[:3])}{' ...' if len(use.holders) > 3 else ''}")
        if tainted:
            why.append(f"{len(tainted)} tainted, not tolerated: {', '.join(tainted[:3])}"
                       f"{' ...' if len(tainted) > 3 else ''}")
        held = f" ({'; '.join(why)})" if why else ""
        return _with(base, reason=f"{use.free} free of {use.allocatable}{held}, {npus} needed")
    if tainted:
        return _with(base, fits=fits, reason=f"{len(tainted)} tainted, not tolerated: {', '.join(tainted[:3])}"
                     f"{' ...' if len(tainted) > 3 else ''}")
    return _with(base, fits=fits)


def _with(f: NodeFit, **changes: object) -> NodeFit:
    import dataclasses

    return dataclasses.replace(f, **changes)  # type: ignore[arg-type]


def shared_with(cluster: VmCluster, method: str, kind: str | None) -> tuple[str, ...]:
    """The container-mode NPU nodes that advertise `kind` too, when it is a name both the device plugin and the
    sandbox plugin advertise under the policy (Policy.shared_resources; () otherwise): kube-scheduler may place a VM
    asking for it there, since it only matches the resource name."""
    policy = cluster.policy
    if method != C.METHOD_SANDBOX or not kind or policy is None or kind not in policy.shared_resources:
        return ()
    return tuple(sorted(str((n.get("metadata") or {}).get("name") or "") for n in cluster.nodes
                        if mode_of(labels_of(n), policy).effective == C.MODE_CONTAINER
                        and R.positive(((n.get("status") or {}).get("allocatable") or {}).get(kind, 0))))


def shared_warning(cluster: VmCluster, kind: str, nodes: Sequence[str]) -> Remedy:
    """The warning for a VM resource container-mode `nodes` advertise too (shared_with), with the policy's remedy."""
    assert cluster.policy is not None
    shown = ", ".join(nodes[:3]) + (" ..." if len(nodes) > 3 else "")
    return cluster.policy.shared_warning(
        kind, f"kube-scheduler may also place a VM asking for it on the {len(nodes)} container-mode node(s) offering "
              f"it ({shown}), whose NPUs are not bound to vfio-pci; only vm-passthrough nodes are counted here")


def fit_on(cluster: VmCluster, facts: CapacityFacts, options: FitOptions, *, method: str, kind: str | None,
           warnings: Sequence[str | Remedy] = ()) -> VmFit:
    """The answer over facts already read (pure)."""
    skip_pod, skip_claim = _own(facts, options.own_vmi)
    placement = launcher_placement(options.placement, cluster.kubevirt)  # as virt-controller renders the pod
    rows = tuple(node_fit(n, facts.capacity(n, skip_pod=skip_pod, skip_claim=skip_claim,
                                            device_tolerations=options.device_tolerations),
                          cluster=cluster, method=method, kind=kind, npus=options.npus, placement=placement,
                          product=options.product)
                 for n in cluster.nodes)
    shared = shared_with(cluster, method, kind)
    warned = shared_warning(cluster, kind, shared) if shared and kind else None
    return VmFit(npus=options.npus, count=options.count, method=method, kind=kind, nodes=rows,
                 placement=options.placement, warnings=(*warnings, *([warned] if warned else [])),
                 notes=facts.problems, shared_with=shared, shared=warned)


# -- reading ---------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class FitReader:
    """Answer fit questions over one read of the cluster (reuse it for several questions: vm diagnose asks per
    resource). `cluster` may be handed in (attach and diagnose have read it already)."""

    kube: Kube
    cluster: VmCluster | None = None
    _facts: dict[bool, CapacityFacts] = field(default_factory=dict)

    def facts(self, *, dra: bool) -> CapacityFacts:
        """The capacity facts of the NPU nodes (read once; with DRA's slices and claims when `dra`)."""
        if self.cluster is None:
            self.cluster = read_cluster(self.kube)
        if not dra and True in self._facts:  # the DRA read holds everything the other needs
            return self._facts[True]
        if dra not in self._facts:
            self._facts[dra] = read_facts(self.kube, self.cluster.nodes, self.cluster.policy, dra=dra)
        return self._facts[dra]

    def fit(self, options: FitOptions) -> VmFit:
        """How many VMs of `options.npus` NPUs fit now, and where (reads on first use only)."""
        if self.cluster is None:
            self.cluster = read_cluster(self.kube)
        cluster = self.cluster
        method, chosen = choose_method(options.method, cluster, None)
        warnings: list[str | Remedy] = list(chosen)
        kind: str | None
        if method == C.METHOD_DRA:
            kind = cluster.device_class
        else:
            kind = pick_resource(cluster, resource=options.resource, product=options.product)
            if kind is None and options.product:
                warnings.append(f"no vm-passthrough node advertises an NPU of product {options.product}")
        return fit_on(cluster, self.facts(dra=method == C.METHOD_DRA), options, method=method, kind=kind,
                      warnings=[*warnings, *cluster.notes])


def fit_each(kube: Kube, options: FitOptions) -> list[VmFit]:
    """`vm fit`'s answer: one VmFit, or, when vm-mode nodes advertise several sandbox resources and the options
    name none (a cluster of RBLN-CA12 and RBLN-CA25 nodes in vm mode), one per resource: a VM asks for one, so
    each is its own question (reads once)."""
    reader = FitReader(kube=kube)
    if options.method == C.METHOD_DRA or options.resource or options.product:
        return [reader.fit(options)]
    reader.cluster = cluster = read_cluster(kube)
    method, _ = choose_method(options.method, cluster, None)
    if method != C.METHOD_SANDBOX or len(cluster.advertised) < 2:
        return [reader.fit(options)]
    import dataclasses

    return [reader.fit(dataclasses.replace(options, resource=r)) for r in sorted(cluster.advertised)]


def fit(kube: Kube, options: FitOptions, *, cluster: VmCluster | None = None) -> VmFit:
    """Read the cluster and answer (reads only)."""
    return FitReader(kube=kube, cluster=cluster).fit(options)
