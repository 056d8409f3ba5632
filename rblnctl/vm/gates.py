"""The running-VM guard of `kubevirt disable-gates` (rblnctl.vm.guard's rule for a KubeVirt gate change).

rblnctl.kubevirt.gates plans the edit of the KubeVirt CR and knows nothing of VMs (rblnctl.vm sits above
rblnctl.kubevirt: VMs run on what the CR configures); this adds to a GatePlan the VMs that depend on a gate it
turns off, as rblnctl.node.vms does for a node's mode switch.
"""

from __future__ import annotations

import dataclasses

from rblnctl import constants as C
from rblnctl.kube import Kube
from rblnctl.kubevirt.gates import GatePlan, rbln_gates
from rblnctl.vm import guard


def guard_gates(kube: Kube, plan: GatePlan, *, evict_vms: bool = False) -> GatePlan:
    """The plan with the guard's verdict: turning HostDevices or HostDevicesWithDRA off refuses while a running
    VM's NPUs need it (one LIST of every VMI, only when such a gate is turned off); `evict_vms` is the override
    (guard.OVERRIDE), which goes ahead with a warning naming them."""
    npu_gates = [g for g in plan.turns_off if g in rbln_gates(dra=True)]
    if not npu_gates:
        return plan
    host_devices, dra = C.GATE_HOST_DEVICES in npu_gates, C.GATE_HOST_DEVICES_DRA in npu_gates
    vms, unreadable = guard.read(kube, guard.needing_gates(host_devices, dra))
    # KubeVirt v1.9.0 checks HostDevices when it admits a VMI with host devices
    # (pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go), HostDevicesWithDRA too when
    # one of them comes from a DRA claim (pkg/dra/admitter/dra_admitter.go validateDRADevices) and when it
    # renders that device into the virt-launcher pod (pkg/virt-controller/services/template.go): a running
    # VMI keeps its devices, its VM cannot start again with them. virt-api's VirtualMachine validator runs on
    # UPDATE too and checks the template the same way (vms-admitter.go ValidateVirtualMachineSpec; webhooks.go
    # virtualmachine-validator: Create, Update), so while the gate is off every write of such a VM's spec is
    # refused, the runStrategy patch of a `virtctl stop` of an Always VM included
    # (tests/kubevirt_real/test_gate_off_updates.py).
    gates = " and ".join(npu_gates)
    blockers, warnings = guard.verdict(
        vms, unreadable, override=evict_vms,
        why=(f"runs with NPUs that need {gates}: KubeVirt would not start it again with them once "
             f"{'they are' if len(npu_gates) > 1 else 'it is'} off"),
        consequence=f"they keep their NPUs until they stop, then cannot start with them while {gates} "
                    f"{'are' if len(npu_gates) > 1 else 'is'} off, and KubeVirt refuses every change to their VMs "
                    "that keeps those NPUs, a stop included (`virtctl stop` of a runStrategy Always VM patches its "
                    "spec): turn the gate on again to stop them")
    return dataclasses.replace(plan, blockers=[*plan.blockers, *blockers], warnings=[*plan.warnings, *warnings],
                               vms=[str(v) for v in vms])
