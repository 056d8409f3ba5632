"""The VM guard: KubeVirt VMs on a node that hold its NPUs (a VM with a passed-through NPU cannot live-migrate).

A VMI holds NPUs when its hostDevices name an NPU resource or a DRA claim, or when its
spec.resourceClaims is not empty (DRA). Its virt-launcher pod requesting NPUs counts too: the VMI
list may be forbidden (RBAC) or stale, and the pod is what actually holds the devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import Forbidden, NotFound
from rblnctl.kube import VMIS, Kube
from rblnctl.node.pods import PodEntry
from rblnctl.operator.nodes import labels_of, mode_of
from rblnctl.operator.policy import Policy
from rblnctl.operator.resources import is_npu_resource
from rblnctl.plan import Blocker
from rblnctl.vm import devices as D


@dataclass(frozen=True, kw_only=True)
class NpuVm:
    """A VM on the node holding NPUs, and what shows it."""

    namespace: str
    name: str
    holds: str  # rebellions.ai/RBLN-CA22_PF, claim npu-claim, or the launcher pod
    standalone: bool = False  # a VMI no VirtualMachine owns (deleted, not stopped)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.holds})"


def vmi_npus(vmi: Any) -> list[str]:
    """What in a VMI's spec holds NPUs: NPU host devices, DRA claims of host devices, its resource claims.

    The spec is read through rblnctl.vm.devices, the one module that knows its shape: entries that are not
    objects are skipped, and a field that is not a list of objects (which no admitted VMI has) counts as
    holding NPUs, named as unreadable: the guard refuses what it cannot read rather than crash on it.
    """
    spec = D.vmi_spec(vmi) if isinstance(vmi, Mapping) else {}
    devices = D.host_devices(spec)
    npus = [str(d.get("deviceName")) for d in devices if is_npu_resource(str(d.get("deviceName") or ""))]
    claims = [str(d.get("claimName")) for d in devices if d.get("claimName")]
    claims += [str(c.get("name")) for c in D.resource_claims(spec) if c.get("name")]
    bad = D.malformed(spec) if isinstance(vmi, Mapping) and isinstance(vmi.get("spec", {}), Mapping) else \
        ["the VMI or its spec is not an object"]
    return [*npus, *(f"claim {c}" for c in dict.fromkeys(claims)), *(f"unreadable: {b}" for b in bad)]


def npu_vms(kube: Kube, node: str, entries: list[PodEntry]) -> tuple[list[NpuVm], list[str]]:
    """VMs on `node` holding NPUs (from its VMIs and its NPU-using virt-launcher pods), and warnings."""
    found: dict[tuple[str, str], str] = {}
    standalone: set[tuple[str, str]] = set()
    warnings: list[str] = []
    try:
        vmis = kube.list(VMIS, label_selector=f"{C.VMI_NODE_LABEL}={node}")
    except NotFound:  # KubeVirt not installed
        vmis = []
    except Forbidden as e:
        vmis = []
        warnings.append(f"cannot list VirtualMachineInstances ({e}); judging VMs by their virt-launcher pods only")
    for v in vmis:
        status = v.get("status") if isinstance(v.get("status"), Mapping) else {}
        if (status.get("nodeName") or node) != node:
            continue
        holds = vmi_npus(v)
        if holds:
            key = (v["metadata"].get("namespace", ""), v["metadata"]["name"])
            found[key] = ", ".join(holds)
            owners = v["metadata"].get("ownerReferences") or []
            if not any(o.get("kind") == "VirtualMachine" and o.get("controller") for o in owners):
                standalone.add(key)
    for e in entries:
        if e.npu and e.vmi and (e.namespace, e.vmi) not in found:
            found[(e.namespace, e.vmi)] = f"virt-launcher pod {e.name} requests NPUs"
    return [NpuVm(namespace=ns, name=n, holds=h, standalone=(ns, n) in standalone)
            for (ns, n), h in sorted(found.items())], warnings


def stranded_vms(kube: Kube, policy: Policy | None, leaving: Iterable[str]) -> str | None:
    """The warning when switching `leaving` to container leaves no vm-passthrough node while VMs still ask for NPUs.

    Such VMs (running elsewhere, stopped, or pending) can never be scheduled again until a node is
    switched back: the switch is allowed (the VM guard already protects VMs running on the node), but
    said before it runs. None when a vm-passthrough node remains, none is leaving, or no VM asks for NPUs.
    VMs that cannot be listed (forbidden, KubeVirt absent) count as none.
    """
    # Lazy: rblnctl.vm reads NPU nodes through rblnctl.node.inventory.
    from rblnctl.node.inventory import list_npu_node_objects
    from rblnctl.vm.listing import list_vm_npus

    leaving = set(leaving)
    vm_nodes = [n["metadata"]["name"] for n in list_npu_node_objects(kube)
                if mode_of(labels_of(n), policy).effective == C.MODE_VM]
    if not vm_nodes or not leaving & set(vm_nodes) or set(vm_nodes) - leaving:
        return None
    try:
        listing = list_vm_npus(kube)
    except Forbidden:
        return None
    asking = [str(e.ref) for e in listing.items]
    if not asking:
        return None
    shown = ", ".join(asking[:5]) + (", ..." if len(asking) > 5 else "")
    return (f"no NPU node is left in vm-passthrough mode after this switch, but {len(asking)} VM(s) still ask for NPUs "
            f"({shown}): they cannot be scheduled again until a node is switched back to vm "
            "(`rblnctl vm list -A` lists them)")


def stop_vm_hint(namespace: str, name: str, *, standalone: bool = False) -> str:
    """How to stop a VM holding NPUs: `virtctl stop` (a VM's VMI is named after it), or delete a VMI no VM owns.

    Never "migrate": a VMI with a passed-through host device is not live-migratable (KubeVirt sets
    LiveMigratable=False, reason HostDeviceNotLiveMigratable).
    """
    if standalone:
        return f"delete it first: `kubectl delete vmi {name} -n {namespace}`"
    return f"stop it first: `virtctl stop {name} -n {namespace}`"


def vm_blocker(vm: NpuVm, node: str) -> Blocker:
    """The refusal for one VM: stop it first (it cannot live-migrate), or evict its launcher deliberately."""
    return Blocker(f"VM {vm} holds NPUs on {node} and cannot live-migrate (its NPUs are passed through): "
                   f"{stop_vm_hint(vm.namespace, vm.name, standalone=vm.standalone)}", override="evict_vms")
