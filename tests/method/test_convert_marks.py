"""`policy set-method --convert-vms` calls into the vm attach library, so it follows its rule on VMs rblnctl stops
(docs/architecture.md, "VMs rblnctl stops"): it starts only a VM rblnctl stopped, and says so (issue 28.1)."""

from __future__ import annotations

import pytest

from rblnctl.errors import Forbidden, Interrupted
from tests.fakes import objects as o
from tests.method.support import SANDBOX_RES, changer, cluster
from tests.vm.support import attacher
from tests.vm.test_restart_races import VM_PATH, by_hand, interrupt_at, mark_patch, puts, run_strategy

NS = "vms"



def running(apiserver) -> None:
    apiserver.simulate_kubevirt = True
    apiserver.add(o.vm(NS, "v1", host_devices=[SANDBOX_RES], node="vm0"), o.vmi(NS, "v1", "vm0", [SANDBOX_RES]))


def test_a_vm_whose_restart_was_interrupted_at_the_mark_and_then_stopped_by_its_owner_is_not_started(apiserver, kube):
    """Before: SIGTERM while `vm attach --restart` wrote the mark left it on the VM; the owner stopped the VM, and
    `policy set-method sandbox --convert-vms` converted it and started it, silently."""
    op = cluster(apiserver)
    running(apiserver)
    planner = attacher(kube, npus=2, restart=True, method="sandbox")
    plan = planner.plan("v1", NS)
    interrupt_at(kube, "PATCH", VM_PATH, body=mark_patch)
    with pytest.raises(Interrupted):
        planner.apply(plan)
    by_hand(kube, "stop")  # the owner
    apiserver.clear_requests()
    ch = changer(kube, op, convert_vms=True)
    (outcome,) = ch.apply(ch.plan("dra")).conversions
    assert outcome.state == "done" and outcome.reason == ""
    assert run_strategy(apiserver) == "Halted" and puts(apiserver, "start") == []


def test_a_vm_rblnctl_left_stopped_is_converted_started_and_reported(apiserver, kube):
    op = cluster(apiserver)
    running(apiserver)
    planner = attacher(kube, npus=2, restart=True, method="sandbox")
    plan = planner.plan("v1", NS)

    def npu_patch_forbidden(req):  # the change is refused, and so is the start that follows: left stopped
        if req.method == "PATCH" and isinstance(req.body, list) and any(  # the template's, not the mark's
                str(op.get("path", "")).startswith("/spec/template/") for op in req.body):
            apiserver.inject_fault(method="PATCH", path=VM_PATH, status=403, reason="Forbidden", times=1,
                                   message='virtualmachines.kubevirt.io "v1" is forbidden: User "u" cannot patch')
            apiserver.inject_fault(method="PUT", path="/start$", status=403, reason="Forbidden", times=1,
                                   message="cannot update virtualmachines/start")

    unhook = apiserver.on_request(npu_patch_forbidden)
    with pytest.raises(Forbidden):
        planner.apply(plan)
    unhook()
    assert run_strategy(apiserver) == "Halted"
    ch = changer(kube, op, convert_vms=True)
    (outcome,) = ch.apply(ch.plan("dra")).conversions
    assert outcome.state == "done" and "started again: an earlier rblnctl run had stopped it" in outcome.reason
    assert run_strategy(apiserver) == "Always"


def test_a_manual_vm_its_owner_started_and_stopped_since_is_converted_and_not_started(apiserver, kube):
    """Issue 37.1 through `policy set-method --convert-vms` (the same path as vm attach): the owner's start and stop
    of a Manual VM rblnctl had left stopped write only status.stateChangeRequests. Before: converted and started."""
    op = cluster(apiserver)
    apiserver.simulate_kubevirt = True
    apiserver.add(o.vm(NS, "v1", host_devices=[SANDBOX_RES], node="vm0", run_strategy="Manual",
                       printable_status="Running"), o.vmi(NS, "v1", "vm0", [SANDBOX_RES]))
    planner = attacher(kube, npus=2, restart=True, method="sandbox")
    plan = planner.plan("v1", NS)
    apiserver.inject_fault(method="PUT", path="/start$", status=403, reason="Forbidden", times=5,
                           message='virtualmachines.kubevirt.io "v1" is forbidden: User "u" cannot update resource '
                                   '"virtualmachines/start"')
    with pytest.raises(Forbidden):
        planner.apply(plan)
    apiserver.clear_faults()
    by_hand(kube, "start")  # the owner: a Start request, a VMI
    by_hand(kube, "stop")
    apiserver.clear_requests()
    ch = changer(kube, op, convert_vms=True)
    (outcome,) = ch.apply(ch.plan("dra")).conversions
    assert outcome.state == "done" and "started again" not in outcome.reason
    assert apiserver.get("VirtualMachineInstance", "v1", NS) is None and puts(apiserver, "start") == []
