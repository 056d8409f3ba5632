"""The VM guard of a node (rblnctl.vm.guard's rule for set-mode and drain): KubeVirt VMs on a node that hold its
NPUs (a VM with a passed-through NPU cannot live-migrate).

A VMI holds NPUs when its hostDevices name an NPU resource or a DRA claim, or when its
spec.resourceClaims is not empty (DRA). Its virt-launcher pod requesting NPUs counts too: the VMI
list may be forbidden (RBAC) or stale, and the pod is what actually holds the devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from rblnctl import constants as C
from rblnctl.kube import VMIS, Kube
from rblnctl.kube.optional import NOTE, optional
from rblnctl.node.pods import PodEntry
from rblnctl.operator.nodes import labels_of, list_npu_node_objects, mode_of
from rblnctl.operator.policy import Policy
from rblnctl.plan import Blocker
from rblnctl.remedy import Command, Remedy
from rblnctl.vm import guard
from rblnctl.vm.guard import NpuVm, vmi_npus
from rblnctl.vm.listing import list_vm_npus

__all__ = ["NpuVm", "npu_vms", "stop_vm_hint", "stranded_pods", "stranded_vms", "vm_blocker", "vmi_npus"]


def npu_vms(kube: Kube, node: str, entries: list[PodEntry]) -> tuple[list[NpuVm], list[str]]:
    """VMs on `node` holding NPUs (from its VMIs and its NPU-using virt-launcher pods), and warnings."""
    found: dict[tuple[str, str], str] = {}
    standalone: set[tuple[str, str]] = set()
    warnings: list[str] = []
    # KubeVirt not installed: no VMI. Refused: a warning, and the VMs are judged by their launcher pods only.
    vmis = optional(lambda: kube.list(VMIS, label_selector=f"{C.VMI_NODE_LABEL}={node}"), absent=[], notes=warnings,
                    what="list VirtualMachineInstances (judging VMs by their virt-launcher pods only)",
                    on_forbidden=NOTE).value or []
    on_node = [v for v in vmis if ((v.get("status") if isinstance(v.get("status"), Mapping) else {}).get("nodeName")
                                   or node) == node]
    for vm in guard.dependents(on_node, guard.holding_npus):
        found[(vm.namespace, vm.name)] = vm.holds
        if vm.standalone:
            standalone.add((vm.namespace, vm.name))
    for e in entries:
        if e.npu and e.vmi and (e.namespace, e.vmi) not in found:
            found[(e.namespace, e.vmi)] = f"virt-launcher pod {e.name} requests NPUs"
    return [NpuVm(namespace=ns, name=n, holds=h, standalone=(ns, n) in standalone)
            for (ns, n), h in sorted(found.items())], warnings


def stranded_vms(kube: Kube, policy: Policy | None, leaving: Iterable[str]) -> str | Remedy | None:
    """The warning when switching `leaving` to container leaves no vm-passthrough node while VMs still ask for NPUs.

    Such VMs (running elsewhere, stopped, or pending) can never be scheduled again until a node is
    switched back: the switch is allowed (the VM guard already protects VMs running on the node), but
    said before it runs. None when a vm-passthrough node remains, none is leaving, or no VM asks for NPUs.
    KubeVirt absent counts as no VM; VMs that cannot be listed (forbidden) are unknown: the warning says so.
    """
    leaving = set(leaving)
    vm_nodes = [n["metadata"]["name"] for n in list_npu_node_objects(kube)
                if mode_of(labels_of(n), policy).effective == C.MODE_VM]
    if not vm_nodes or not leaving & set(vm_nodes) or set(vm_nodes) - leaving:
        return None
    listing = list_vm_npus(kube)  # a refused list is a note in it, never "no VM"
    asking = [str(e.ref) for e in listing.items]
    if not asking and listing.notes:
        return (f"no NPU node is left in vm-passthrough mode after this switch, and whether VMs still ask for NPUs "
                f"is unknown: {'; '.join(listing.notes)}")
    if not asking:
        return None
    shown = ", ".join(asking[:5]) + (", ..." if len(asking) > 5 else "")
    return Remedy(f"no NPU node is left in vm-passthrough mode after this switch, but {len(asking)} VM(s) still ask "
                  f"for NPUs ({shown}): they cannot be scheduled again until a node is switched back to vm "
                  "({command} lists them)", Command.own("vm", "list", all_namespaces=True))


def stranded_pods(kube: Kube, policy: Policy | None, leaving: Iterable[str],
                  evicted: Sequence[PodEntry]) -> Remedy | None:
    """The warning when switching `leaving` to vm leaves no container-mode NPU node for the NPU pods it evicts.

    The other direction of stranded_vms (issue 28 finding 9): an evicted NPU pod's replacement asks for a
    container-mode NPU resource, which only a container-mode node offers, so it stays Pending until a node is
    switched back. Said before the switch runs; None when a container-mode NPU node remains, or no NPU pod (other
    than a VM's virt-launcher, which stranded_vms and the VM guard speak for) is evicted.
    """
    pods = [e for e in evicted if e.npu and not e.vmi]
    if not pods:
        return None
    leaving = set(leaving)
    left = [n["metadata"]["name"] for n in list_npu_node_objects(kube)
            if mode_of(labels_of(n), policy).effective == C.MODE_CONTAINER and n["metadata"]["name"] not in leaving]
    if left:
        return None
    shown = ", ".join(f"{e.namespace}/{e.name}" for e in pods[:5]) + (", ..." if len(pods) > 5 else "")
    node = sorted(leaving)[0] if leaving else "NODE"
    return Remedy(f"no NPU node is left in container mode after this switch, but it evicts {len(pods)} NPU pod(s) "
                  f"({shown}): what replaces them cannot be scheduled until a node is switched back ({{command}})",
                  Command.own("node", "set-mode", "container", node))


def stop_vm_hint(namespace: str, name: str, *, standalone: bool = False) -> str:
    """How to stop a VM holding NPUs (rblnctl.vm.guard.stop_hint): `virtctl stop`, or delete a VMI no VM owns."""
    return guard.stop_hint(NpuVm(namespace=namespace, name=name, holds="", standalone=standalone))


def vm_blocker(vm: NpuVm, node: str) -> Blocker:
    """The refusal for one VM: stop it first (it cannot live-migrate), or evict its launcher deliberately."""
    return guard.blocker(vm, f"holds NPUs on {node} and cannot live-migrate (its NPUs are passed through)")
