"""A change a running VM holds for its next restart: its template asks for other NPUs than its VMI passes, and
KubeVirt's RestartRequired condition says so (vm attach|detach --next-restart, vm list, vm diagnose).

What KubeVirt does with a running VM's template change (kubevirt/kubevirt@v1.9.0):

- the VM admission webhook accepts it: hostDevices and resourceClaims are validated as on any update, and the
  feature-gate check runs on create only (pkg/virt-api/webhooks/validating-webhook/admitters/vms-admitter.go Admit);
- virt-controller compares the template with the spec the VMI was started from (the VM's ControllerRevision
  `revision-start-vm-<uid>-<generation>`, getLastVMRevisionSpec) and, when a field differs that it cannot update
  live, sets the VM condition `RestartRequired` (status True, no reason, message "a non-live-updatable field was
  changed in the template spec"; pkg/virt-controller/watch/vm/vm.go syncRestartRequired, setRestartRequired). Live
  fields are only CPU sockets, guest memory, nodeSelector, affinity and tolerations (rollout strategy LiveUpdate,
  the default: pkg/virt-config/virt-config.go DefaultVMRolloutStrategy), hot-pluggable volumes and disks, and
  interfaces; host devices and resource claims never are, so an NPU change always asks for a restart;
- the condition goes when the VMI is stopped or a new one is started (stopVMI, startVMI: cleanupRestartRequired),
  or when the template is put back; the next start renders the virt-launcher pod from the template as it is then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rblnctl import constants as C
from rblnctl.vm import devices as D
from rblnctl.vm.lifecycle import FINAL_PHASES
from rblnctl.remedy import Command
from rblnctl.vm.model import NpuDevice, VmNpus, VmRef


@dataclass(frozen=True, kw_only=True)
class RestartRequired:
    """KubeVirt's RestartRequired condition on a VM (status True)."""

    message: str
    since: str | None = None  # its lastTransitionTime


def restart_required(vm: Mapping | None) -> RestartRequired | None:
    """The VM's RestartRequired condition when it is True, else None (pure)."""
    for c in ((vm or {}).get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == C.VM_RESTART_REQUIRED and c.get("status") == "True":
            return RestartRequired(message=str(c.get("message") or ""), since=c.get("lastTransitionTime") or None)
    return None


def running(vmi: Mapping | None) -> bool:
    """A VMI exists and has not finished (what its VM's template changes wait for)."""
    return vmi is not None and (vmi.get("status") or {}).get("phase") not in FINAL_PHASES


def held_npus(vmi: Mapping | None, *, npu_claim: D.ClaimTest = D.is_managed_claim) -> VmNpus | None:
    """The NPUs a running VMI passes (None: no running VMI) (pure)."""
    return D.npus_of(D.vmi_spec(vmi), npu_claim=npu_claim) if vmi is not None and running(vmi) else None


def differ(a: Iterable[NpuDevice], b: Iterable[NpuDevice]) -> bool:
    """Two sets of NPU devices pass different NPUs (resources or claims, counted), whatever their names."""
    return sorted(d.source for d in a) != sorted(d.source for d in b)


def restart_command(ref: VmRef) -> Command:
    """The command that applies a staged change now: restart the VM and wait."""
    return Command.own("vm", "restart", ref.name, namespace=ref.namespace, wait=True)


def staged_words(held: int, wanted: int) -> str:
    """The staged change in words: `its spec asks for 4 NPU(s), its running VMI passes 2 until it restarts`."""
    return f"its spec asks for {wanted} NPU(s), its running VMI passes {held} until it restarts"


def vmi_naming(vmi: Mapping | None, template: str) -> list[str]:
    """`VirtualMachineInstance NAME` when this running VMI's spec names the ResourceClaimTemplate (its virt-launcher's
    claim was made from it, and a migration would make another), else nothing (pure)."""
    if vmi is None or not running(vmi) or template not in D.templates_used(D.vmi_spec(vmi)):
        return []
    return [f"VirtualMachineInstance {(vmi.get('metadata') or {}).get('name')}"]
