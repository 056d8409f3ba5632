"""Give a VirtualMachine's template N NPUs, or take them away: plan() reads, apply() writes conflict-safely.

Declarative: `npus` is how many NPUs the VM should have, so a re-run is a no-op and another N adds or
removes the difference. Host devices that are not NPUs, and claims that are not rblnctl's, are kept.

- sandbox: hostDevices `npu0..` with `deviceName` the resource the sandbox device plugin advertises
  on vm-mode nodes;
- DRA: rblnctl's `resourceClaims` entry `rbln-npu` names the ResourceClaimTemplate `rbln-npu-<N>`
  (created when missing, shared by the namespace's VMs), and hostDevices `npu0..` carry
  `claimName: rbln-npu`, `requestName: npu<i>` (one device per request: see rblnctl.vm.devices).

Re-expressing a VM's NPUs with the other method (what `policy set-method --convert-vms` needs, per VM):
`AttachPlanner(kube=..., options=AttachOptions(method=M, convert=True)).plan(name, namespace)`; with
`npus=None` the VM keeps its count. One planner reads the cluster once for every VM it plans.

The VM write is a JSON patch whose `test` ops guard exactly the lists the change was decided on (a concurrent edit
of them: 422, re-read, re-plan, retry, bounded; virt-controller's own writes of the VM never conflict with it); a
lost reply is settled by reading the VM back. A running VM is refused unless `restart`: stop through virt-api,
patch, start, wait until Ready (the stopped mark: apply()); or `next_restart`: patch its template only, the VM
keeps running, and the change applies at its next restart (rblnctl.vm.pending).

The package is split as `policy set-method` is (rblnctl.method: plan.py pure, changer.py writes) and vm diagnose
(facts, model): facts.py reads everything a plan judges into a frozen VmFacts; layout.py (the spec lists),
templates.py (the ResourceClaimTemplates) and plan.py plan on those facts, pure; apply.py sequences the writes, each
step a module that writes and settles: template_writes.py (the templates), patcher.py (the VM's NPU patch), marker.py
(the stopped mark; mark.py is its rule), readback.py (the VM read again around them) and recovery.py (the clean-up
after a failure or an interruption); model.py holds the options, plans and results.
"""

from rblnctl.vm.attach.apply import AttachPlanner, DetachPlanner
from rblnctl.vm.attach.facts import VmFacts, VmReader
from rblnctl.vm.attach.layout import express, is_running, layout_for, remove
from rblnctl.vm.attach.mark import (
    MARK_STOPPED,
    MARK_STOPPING,
    MarkHeld,
    StartedMeanwhile,
    mark_holder,
    mark_value,
    released,
    run_identity,
    stale_mark,
    template_left,
)
from rblnctl.vm.attach.model import ATTACH, DETACH, RUN_STATE, AttachOptions, DetachOptions, Target, VmEvents
from rblnctl.vm.attach.model import VmNpuPlan, VmNpuResult, WriteOptions, virtctl_start
from rblnctl.vm.attach.plan import plan_attach, vm_plan

__all__ = ["ATTACH", "DETACH", "MARK_STOPPED", "MARK_STOPPING", "RUN_STATE", "AttachOptions", "AttachPlanner",
           "DetachOptions", "DetachPlanner", "MarkHeld", "StartedMeanwhile", "Target", "VmEvents", "VmFacts",
           "VmNpuPlan", "VmNpuResult", "VmReader", "WriteOptions", "express", "is_running", "layout_for",
           "mark_holder", "mark_value", "plan_attach", "released", "remove", "run_identity", "stale_mark",
           "template_left", "virtctl_start", "vm_plan"]
