"""An interrupted `vm attach --restart` starts again the VM it stopped within a bounded clean-up (found by the hostile
tester on KubeVirt v1.9.0: with virt-api unresponsive, its aggregation layer answering 503, the clean-up retried the
start for 45-65 s before the process ended)."""

from __future__ import annotations

import pytest

from rblnctl import constants as C
from rblnctl.errors import Interrupted
from tests.vm.support import NS, attacher
from tests.vm.test_restart import running_vm
from tests.vm.test_restart_races import SUB, STOPPED, VM_PATH, annotations, interrupt_at, puts, run_strategy


def npu_patch(body: object) -> bool:
    """The JSON patch of the VM's template (the NPU change), not the mark's (a JSON patch too: issue 37)."""
    return isinstance(body, list) and any(str(op.get("path", "")).startswith("/spec/template/") for op in body)


def test_an_interrupted_restart_gives_its_start_again_a_bounded_clean_up_and_says_what_is_left(apiserver, kube):
    running_vm(apiserver)
    apiserver.kubevirt_launcher_delay_s = 0.1
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    interrupt_at(kube, "PATCH", VM_PATH, when="before", body=npu_patch)  # SIGTERM at the change
    apiserver.inject_fault(method="PUT", path=SUB + "start$", status=503, reason="ServiceUnavailable",
                           message="service unavailable", times=100)  # virt-api does not answer
    clock = planner.clock
    with pytest.raises(Interrupted):
        planner.apply(plan)
    started = clock.sleeps  # the clean-up's backoffs: all the time it took (the 503s come at once)
    assert 1 <= len(puts(apiserver, "start")) < 5 and sum(started) <= C.CLEANUP_TIMEOUT_S
    (line,) = planner.recovery
    assert line.startswith(f"VM {NS}/v1 is left stopped: rblnctl stopped it to change its NPUs (its NPUs were not "
                           "changed) and could not start it again (not within the 5s an interrupted run gives it: ")
    assert "503" in line and f"`virtctl start v1 -n {NS}`" in line and "re-run this command" in line
    assert run_strategy(apiserver) == "Halted" and STOPPED in annotations(apiserver)  # the next run starts it
    apiserver.clear_faults()
    again = attacher(kube, npus=2, restart=True)
    again.apply(again.plan("v1", NS))
    assert run_strategy(apiserver) == "Always" and STOPPED not in annotations(apiserver)


def test_the_whole_clean_up_shares_the_bound_its_mark_included(apiserver, kube, mocker):
    """The VM started again, the clean-up clears rblnctl's stopped mark within the same bound: it used the command's
    own connection (30 s a request, no deadline), so a VM webhook that hangs kept an interrupted process alive long
    after CLEANUP_TIMEOUT_S (found by a read-through of the bounded clean-up)."""
    from rblnctl.kube import writes

    running_vm(apiserver)
    apiserver.kubevirt_launcher_delay_s = 0.1
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    interrupt_at(kube, "PATCH", VM_PATH, when="before", body=npu_patch)
    settle = mocker.spy(writes, "settle")  # a narrow seam: which connection and deadline each write settles with
    with pytest.raises(Interrupted):
        planner.apply(plan)
    assert run_strategy(apiserver) == "Always" and STOPPED not in annotations(apiserver)  # started, mark cleared
    mark = settle.call_args_list[-1]  # the last write: the mark cleared after the start
    assert mark.args[0].deadline is not None and mark.args[0].read_retries == 0
    assert mark.kwargs["deadline"] is not None and mark.kwargs["clock"] is planner.clock
    (line,) = planner.recovery
    assert "has been started again" in line


def test_a_bounded_lifecycle_times_out_each_request_and_retries_no_read(kube):
    from rblnctl.vm.lifecycle import VmLifecycle
    from tests.fakes.clock import FakeClock

    life = VmLifecycle(kube=kube, clock=FakeClock())
    cleanup = life.bounded(C.CLEANUP_TIMEOUT_S)
    assert cleanup.kube.request_timeout_s == C.CLEANUP_TIMEOUT_S and cleanup.kube.read_retries == 0
    assert cleanup.deadline == life.clock.monotonic() + C.CLEANUP_TIMEOUT_S and life.deadline is None
    assert kube.request_timeout_s != C.CLEANUP_TIMEOUT_S or kube.read_retries != 0  # the command's own is unchanged


def test_a_bounded_clean_up_shares_its_seconds_between_its_requests(apiserver, kube):
    """A hung virt-api used to cost the clean-up CLEANUP_TIMEOUT_S per request (each got the whole bound); now every
    request gets what is left of it, so a request sent past the bound is given the floor, not the bound again."""
    import dataclasses
    import time

    from rblnctl.errors import ClusterTimeout
    from rblnctl.kube import VMS
    from rblnctl.vm.lifecycle import VmLifecycle
    from tests.fakes.clock import FakeClock

    running_vm(apiserver)
    cleanup = VmLifecycle(kube=kube, clock=FakeClock()).bounded(C.CLEANUP_TIMEOUT_S)
    assert cleanup.kube._timeout_now() <= C.CLEANUP_TIMEOUT_S
    spent = dataclasses.replace(cleanup.kube, deadline=time.monotonic() - 1)  # the bound has passed
    assert spent._timeout_now() == 0.1
    apiserver.inject_fault(method="GET", path=VM_PATH, status=None, delay_s=1.0)  # a hung answer
    with pytest.raises(ClusterTimeout, match=r"within 0\.1s"):
        spent.get(VMS, "v1", namespace=NS)


def test_settle_asked_reads_the_vm_once_without_retries(apiserver, kube):
    """The judgement after an interrupt (was the request in flight applied?) is one bounded read: a VM that cannot be
    read is "unknown" at once, not after the client's read retries."""
    from rblnctl.vm.lifecycle import STOP, VmLifecycle, VmState
    from rblnctl.vm.model import VmRef
    from tests.fakes.clock import FakeClock

    running_vm(apiserver)
    life = VmLifecycle(kube=kube, clock=FakeClock())
    life.asked, life.asked_of = STOP, VmState(run_strategy="Always", vmi_phase="Running")
    apiserver.inject_fault(method="GET", path=VM_PATH, status=503, reason="ServiceUnavailable", times=10)
    apiserver.clear_requests()
    assert life.settle_asked(VmRef(namespace=NS, name="v1")) is None
    assert [r.method for r in apiserver.requests if "/virtualmachines/v1" in r.path] == ["GET"]
