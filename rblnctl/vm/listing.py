"""List the VMs and VMIs that hold or request NPUs: status, node, NPUs, method, devices (read-only, paged lists)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.clock import Stop
from rblnctl.errors import RblnError
from rblnctl.kube import VMIS, VMS, Change, Kube, Mirror, Resource, WatchSpec, watch_many
from rblnctl.kube.optional import NOTE, optional
from rblnctl.kube.parallel import start
from rblnctl.kube.projections import VM, VMI
from rblnctl.kube.watch import object_key
from rblnctl.operator.cluster import read_operator
from rblnctl.vm import devices as D
from rblnctl.vm.cluster import ClaimIndex
from rblnctl.vm.model import NpuDevice, VmRef
from rblnctl.vm.pending import RestartRequired, restart_required
from rblnctl.vm.lifecycle import FINAL_PHASES


@dataclass(frozen=True, kw_only=True)
class VmNpuEntry:
    """One VM (or standalone VMI) with NPUs: what its template asks for and what its VMI holds."""

    ref: VmRef
    kind: str  # VirtualMachine | VirtualMachineInstance (a VMI no VM owns)
    status: str  # the VM's printableStatus, or the VMI's phase
    node: str | None  # where the VMI runs
    method: str | None  # sandbox | dra | mixed
    devices: list[NpuDevice]  # the template's (a standalone VMI: its own)
    running_devices: list[NpuDevice] | None  # the VMI's (None: no VMI, or it finished)
    claims: list[str] = field(default_factory=list)  # the DRA driver's per-node keys of its NPU claims (claim_keys)
    collisions: list[str] = field(default_factory=list)  # VMs (ns/name) whose claims share a key with it on its node
    restart_required: RestartRequired | None = None  # the VM's RestartRequired condition (rblnctl.vm.pending)

    @property
    def npus(self) -> int:
        """NPUs the VM asks for."""
        return len(self.devices)

    @property
    def holds(self) -> int:
        """NPUs its VMI passes now (0 without a running VMI)."""
        return len(self.running_devices or [])

    @property
    def restart_pending(self) -> bool:
        """The VMI runs with other NPUs than the template asks for (the VM must restart to get them)."""
        if self.running_devices is None:
            return False
        return sorted(d.source for d in self.devices) != sorted(d.source for d in self.running_devices)

    @property
    def restart_marker(self) -> str | None:
        """What STATUS adds: RestartPending (its NPUs change when it restarts), else RestartRequired (KubeVirt says
        a restart would apply another change of its spec), else None."""
        if self.restart_pending:
            return "RestartPending"
        return C.VM_RESTART_REQUIRED if self.restart_required is not None else None


@dataclass(frozen=True, kw_only=True)
class VmNpuListing:
    """Every VM with NPUs in the namespace (or cluster), sorted, and what could not be read."""

    items: list[VmNpuEntry]
    namespace: str | None  # None: every namespace
    served: bool = True  # False: KubeVirt's APIs are not served (not installed)
    notes: list[str] = field(default_factory=list)  # what could not be read (forbidden); shared claim names

    @property
    def collisions(self) -> list[VmNpuEntry]:
        """The VMs whose NPU claims collide with another VM's on their node (the second one cannot start)."""
        return [e for e in self.items if e.collisions]

    def by_node(self) -> dict[str, list[str]]:
        """Node -> `namespace/name` of the VMs holding NPUs there now."""
        out: dict[str, list[str]] = {}
        for e in self.items:
            if e.node and e.holds:
                out.setdefault(e.node, []).append(str(e.ref))
        return {k: sorted(v) for k, v in sorted(out.items())}


def _list(kube: Kube, res: Resource, namespace: str | None, notes: list[str], what: str,
          selector: str | None = None) -> list[dict] | None:
    """The objects; None when the API is not served (KubeVirt absent); [] with a note when forbidden."""
    # what the listing reads and no more (rblnctl.kube.projections VM, VMI)
    projection = VM if res is VMS else VMI
    read = optional(lambda: kube.list(res, namespace=namespace, label_selector=selector, projection=projection),
                    what=f"list {what}",
                    on_forbidden=NOTE, notes=notes)
    return None if read.absent else read.value or []


def list_vm_npus(kube: Kube, *, namespace: str | None = None, selector: str | None = None) -> VmNpuListing:
    """Read VMs and VMIs (one paged list each; claim templates only when a VM has claims rblnctl did not write).

    `selector` (a label selector, as `kubectl get vm -l`): the VMs whose labels match, with their VMIs (a VMI
    carries its template's labels, not its VM's), and the standalone VMIs whose own labels match (a third list)."""
    notes: list[str] = []
    vmi_notes: list[str] = []
    # the two at once (rblnctl.kube.parallel); notes and errors in the order of the reads one by one
    vmis_read = start(lambda: _list(kube, VMIS, namespace, vmi_notes, "VirtualMachineInstances"))
    vms = _list(kube, VMS, namespace, notes, "VirtualMachines", selector)
    vmis = vmis_read.result()
    notes += vmi_notes
    if vms is None or vmis is None:
        return VmNpuListing(items=[], namespace=namespace, served=False, notes=notes)
    if selector:
        picked = _list(kube, VMIS, namespace, notes, "VirtualMachineInstances", selector) or []
        vmis = selected_vmis(vms, vmis, picked)
    return listing_of(kube, vms, vmis, namespace=namespace, notes=notes)


def selected_vmis(vms: list[dict], vmis: list[dict], picked: list[dict]) -> list[dict]:
    """The VMIs a label selector keeps: those of the VMs it picked, and the ones it picked itself."""
    keep = {object_key(v) for v in vms} | {object_key(v) for v in picked}
    return [v for v in vmis if object_key(v) in keep]


def watch_vm_npus(kube: Kube, *, namespace: str | None = None, selector: str | None = None, stop: Stop | None = None,
                  timeout_s: float | None = None,
                  on_retry: Callable[[RblnError], None] | None = None) -> Iterator[VmNpuListing]:
    """Yield the VMs with NPUs now, then again after every change that alters them: one watch of the VMs and one
    of the VMIs (in `namespace`, None: every namespace), reopened whenever the server ends them.

    Runs until `stop` is set or `timeout_s` passes (None: for ever). Without KubeVirt's API both are empty.
    """
    specs = [WatchSpec(VMS, namespace=namespace, label_selector=selector, missing_ok=True),
             WatchSpec(VMIS, namespace=namespace, missing_ok=True)]
    if selector:  # the standalone VMIs the selector picks (list_vm_npus)
        specs.append(WatchSpec(VMIS, namespace=namespace, label_selector=selector, missing_ok=True))
    mirrors = [Mirror() for _ in specs]
    vms, vmis = mirrors[0], mirrors[1]
    last: VmNpuListing | None = None
    for ev in watch_many(kube, specs, stop=stop, timeout_s=timeout_s, on_retry=on_retry):
        mirrors[ev.source].apply(ev)
        if not all(m.synced for m in mirrors):
            continue
        shown = selected_vmis(vms.items(), vmis.items(), mirrors[2].items()) if selector else vmis.items()
        now = listing_of(kube, vms.items(), shown, namespace=namespace, notes=[])
        if now != last:
            last = now
            yield now


def vm_changes(old: VmNpuListing, new: VmNpuListing) -> list[Change]:
    """What changed between two listings, VM by VM (`virtualmachine/vms/v1 status Stopped -> Running`)."""
    def facts(e: VmNpuEntry) -> dict[str, str]:
        return {"status": e.status + (f",{e.restart_marker}" if e.restart_marker else ""), "node": e.node or "<none>",
                "npus": str(e.npus), "method": e.method or "<none>",
                "devices": ",".join(f"{d.name}={d.source}" for d in e.devices) or "<none>"}

    before = {(e.ref.namespace, e.ref.name): e for e in old.items}
    after = {(e.ref.namespace, e.ref.name): e for e in new.items}
    out: list[Change] = []
    for key in sorted(before.keys() | after.keys()):
        entry = after.get(key) or before[key]
        subject = f"{entry.kind.lower()}/{key[0]}/{key[1]}"
        if key not in before:
            out.append(Change(subject=subject, what="added", new=f"{entry.npus} NPU(s)"))
        elif key not in after:
            out.append(Change(subject=subject, what="removed"))
        else:
            a, b = facts(before[key]), facts(after[key])
            out += [Change(subject=subject, what=k, old=a[k], new=b[k]) for k in a if a[k] != b[k]]
    return out


def listing_of(kube: Kube, vms: list[dict], vmis: list[dict], *, namespace: str | None,
               notes: list[str]) -> VmNpuListing:
    """The VMs with NPUs among these VM and VMI objects (claim templates read only for claims rblnctl did not
    write)."""
    specs = [D.vm_spec(v) for v in vms] + [D.vmi_spec(v) for v in vmis]
    foreign = any(not D.is_managed_claim(c) for spec in specs for c in D.resource_claims(spec))
    policy = read_operator(kube).policy if foreign else None
    classes = {C.DRA_DEVICECLASS_VM} | ({policy.dra_device_class_vm} if policy else set())
    index = ClaimIndex(kube=kube, classes=frozenset(classes))
    by_name = {(v["metadata"].get("namespace", ""), v["metadata"]["name"]): v for v in vmis}
    items: list[VmNpuEntry] = []
    seen: set[tuple[str, str]] = set()
    for vm in vms:
        meta = vm["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        vmi = by_name.get(key)
        seen.add(key)
        test = index.test(key[0])
        devices = list(D.npus_of(D.vm_spec(vm), npu_claim=test).devices)
        running = _running(vmi, test)
        if not devices and not running:
            continue
        held = D.vmi_spec(vmi) if running is not None and vmi is not None else D.vm_spec(vm)
        items.append(VmNpuEntry(ref=VmRef(*key), kind="VirtualMachine",
                                status=str((vm.get("status") or {}).get("printableStatus") or "Unknown"),
                                node=_node(vmi), method=_method(devices or running or []), devices=devices,
                                running_devices=running,
                                claims=claim_keys(held, running if running is not None else devices),
                                restart_required=restart_required(vm) if running is not None else None))
    for key, vmi in sorted(by_name.items()):
        if key in seen:
            continue
        test = index.test(key[0])
        devices = list(D.npus_of(D.vmi_spec(vmi), npu_claim=test).devices)
        if not devices:
            continue
        items.append(VmNpuEntry(ref=VmRef(*key), kind="VirtualMachineInstance",
                                status=str((vmi.get("status") or {}).get("phase") or "Pending"), node=_node(vmi),
                                method=_method(devices), devices=devices, running_devices=_running(vmi, test),
                                claims=claim_keys(D.vmi_spec(vmi), devices)))
    notes.extend(n for n in index.notes if n not in notes)  # a refused claim list: its VMs' NPUs are unknown
    items = with_collisions(items, notes)
    return VmNpuListing(items=sorted(items, key=lambda e: (e.ref.namespace, e.ref.name)), namespace=namespace,
                        notes=notes)


def claim_keys(spec: dict, devices: Iterable[NpuDevice]) -> list[str]:
    """The names the RBLN DRA driver keys its per-node KubeVirt metadata by, for a VMI spec's NPU claims.

    A template claim's pod-level name (KubeVirt copies resourceClaims[].name into the virt-launcher pod), a
    direct claim's own name: both are unique per node only by convention (RBLN-SW/rbln-k8s-dra-driver@37a656f
    cmd/npu-kubelet-plugin/kubevirt_metadata.go kubevirtMetadataClaimDirs; docs/vm.md, Claim names).
    """
    used = {d.claim for d in devices if d.claim}
    out = []
    for c in D.resource_claims(spec):
        name = str(c.get("name") or "")
        if name not in used:
            continue
        out.append(f"resourceclaims/{c['resourceClaimName']}" if c.get("resourceClaimName")
                   else f"resourceclaimtemplates/{name}")
    return sorted(out)


def with_collisions(items: list[VmNpuEntry], notes: list[str]) -> list[VmNpuEntry]:
    """Mark the VMs whose claims share a key on one node (what the running VMIs hold), and note the names
    several VMs share anywhere (two of them on one node would collide)."""
    on_node: dict[tuple[str, str], list[str]] = {}
    shared: dict[str, list[str]] = {}
    for e in items:
        for key in e.claims:
            shared.setdefault(key, []).append(str(e.ref))
            if e.node:
                on_node.setdefault((e.node, key), []).append(str(e.ref))
    out = []
    for e in items:
        others = sorted({r for key in e.claims if e.node for r in on_node.get((e.node, key), []) if r != str(e.ref)})
        out.append(dataclasses.replace(e, collisions=others) if others else e)
    for key, refs in sorted(shared.items()):
        if len(refs) > 1:
            notes.append(f"{len(refs)} VMs share the DRA claim key {key} ({', '.join(sorted(refs)[:5])}"
                         f"{' ...' if len(refs) > 5 else ''}): two of them on one node cannot both start; "
                         "vm attach of each gives it its own name (docs/vm.md, Claim names)")
    return out


def _running(vmi: dict | None, test: D.ClaimTest) -> list[NpuDevice] | None:
    if vmi is None or (vmi.get("status") or {}).get("phase") in FINAL_PHASES:
        return None
    return list(D.npus_of(D.vmi_spec(vmi), npu_claim=test).devices)


def _node(vmi: dict | None) -> str | None:
    if vmi is None or (vmi.get("status") or {}).get("phase") in FINAL_PHASES:
        return None
    return ((vmi.get("status") or {}).get("nodeName")) or None


def _method(devices: Iterable[NpuDevice]) -> str | None:
    methods = {d.method for d in devices}
    if len(methods) > 1:
        return "mixed"
    return next(iter(methods), None)
