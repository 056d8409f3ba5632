"""vm attach|detach --restart and vm restart under signals, races and refusals (issues 27 and 28), on the fake API
server's virt-api and simulated virt-controller.

The rule (docs/architecture.md, "VMs rblnctl stops"): rblnctl marks what it is about to stop before the stop is sent,
clears the mark only once it knows the VM is running again or that its own stop never landed, and never starts a VM
it did not stop; a refusal is never "done".

A signal is modelled where it strikes: `interrupt_at` raises what rblnctl's SIGTERM handler raises (Interrupted(15))
in the main thread at one request, before it is sent, after the server applied it (its answer never read), or while
the server is still serving it (the request goes on, on its own thread). The subprocess tests send real signals.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from rblnctl.errors import Conflict, Forbidden, Interrupted, RblnError
from rblnctl.vm.lifecycle import VmLifecycle
from tests.fakes import objects as o
from tests.helpers import cli, signal_rblnctl
from tests.vm.support import CA22, NS, attacher, host_devices, sandbox_cluster
from tests.vm.test_restart import is_npu_patch, running_vm, vm
from rblnctl.constants import VM_STOPPED_ANNOTATION as STOPPED

VM_PATH = rf"/apis/kubevirt\.io/v1/namespaces/{NS}/virtualmachines/v1$"
SUB = rf"/apis/subresources\.kubevirt\.io/v1/namespaces/{NS}/virtualmachines/v1/"


def interrupt_at(kube: Any, method: str, path: str, *, when: str = "after", body: Any = None) -> list[threading.Thread]:
    """SIGTERM at the first `method` request whose path matches `path` (and, with `body`, whose body it accepts):
    `before` it is sent, `after` the server applied it, or `during`: sent and still being served (it goes on, on
    its own thread: the list returned, to join)."""
    real = kube.request
    armed = [True]
    threads: list[threading.Thread] = []

    def request(m: str, p: str, *args: Any, **kw: Any) -> Any:
        if armed[0] and m == method and re.search(path, p) and (body is None or body(kw.get("body"))):
            armed[0] = False
            if when == "before":
                raise Interrupted(15)
            if when == "after":
                real(m, p, *args, **kw)
                raise Interrupted(15)
            t = threading.Thread(target=lambda: _swallow(real, m, p, *args, **kw), daemon=True)
            t.start()
            threads.append(t)
            raise Interrupted(15)
        return real(m, p, *args, **kw)

    kube.request = request
    return threads


def _swallow(fn: Any, *args: Any, **kw: Any) -> None:
    try:
        fn(*args, **kw)
    except RblnError:
        pass


def mark_patch(body: Any) -> bool:
    """The JSON patch that sets or clears the mark (it tests the VM's uid first: issue 37)."""
    key = STOPPED.replace("/", "~1")
    return isinstance(body, list) and any(isinstance(op, dict) and op.get("op") in ("add", "remove") and (
        str(op.get("path")).endswith(key) or STOPPED in (op.get("value") or {})) for op in body)


def annotations(apiserver) -> dict:
    return vm(apiserver)["metadata"].get("annotations") or {}


def run_strategy(apiserver) -> str:
    return vm(apiserver)["spec"]["runStrategy"]


def puts(apiserver, action: str) -> list:
    return [r for r in apiserver.requests if r.method == "PUT" and r.path.endswith("/" + action)]


def by_hand(kube, action: str) -> None:
    """The owner starts or stops v1 through virt-api (as `virtctl start|stop` does) and waits."""
    life = VmLifecycle(kube=kube, timeout_s=30)
    life.apply(life.plan(action, "v1", NS, wait=True))


def vmi_uid(apiserver) -> str | None:
    vmi = apiserver.get("VirtualMachineInstance", "v1", NS)
    return None if vmi is None else vmi["metadata"]["uid"]


# -- issue 28.1: the mark of a VM rblnctl never stopped ------------------------------------------------------------


def test_sigterm_while_the_mark_is_written_leaves_no_mark_and_the_owners_stop_stands(apiserver, kube):
    """Before: the mark landed, `stopped` was not yet set, so nothing took it off; the owner then stopped the VM and
    the next `vm attach` with nothing to change started it ("an earlier rblnctl run stopped this VM")."""
    running_vm(apiserver)
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    interrupt_at(kube, "PATCH", VM_PATH, body=mark_patch)
    with pytest.raises(Interrupted):
        planner.apply(plan)
    assert STOPPED not in annotations(apiserver) and run_strategy(apiserver) == "Always"
    assert puts(apiserver, "stop") == []
    assert planner.recovery == [f"VM {NS}/v1 was not stopped (rblnctl stopped before asking) and its NPUs were not "
                                "changed"]
    by_hand(kube, "stop")  # the owner
    again = attacher(kube, npus=0).plan("v1", NS)  # nothing to change (it has no NPU)
    assert again.noop and not again.start
    attacher(kube, npus=0).apply(again)
    assert run_strategy(apiserver) == "Halted" and puts(apiserver, "start") == []


def test_sigterm_while_its_start_is_served_finishes_the_start_and_takes_the_mark_off(apiserver, kube):
    """Before: a signal during the start PUT kept the mark on a VM that was started; the owner's later stop then
    had the next run start it again."""
    running_vm(apiserver)
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    interrupt_at(kube, "PUT", SUB + "start$", when="after")
    with pytest.raises(Interrupted):
        planner.apply(plan)
    assert run_strategy(apiserver) == "Always" and STOPPED not in annotations(apiserver)
    assert len(host_devices(apiserver)) == 2
    assert planner.recovery == [f"VM {NS}/v1 was stopped by rblnctl and has been started again (the NPU change was "
                                "made)"]
    by_hand(kube, "stop")
    again = attacher(kube, npus=2).plan("v1", NS)
    assert again.noop and not again.start


def test_a_signal_before_the_stop_is_asked_starts_nothing_and_says_the_vm_was_not_stopped(apiserver, kube):
    running_vm(apiserver)
    generation = vm(apiserver)["metadata"]["generation"]
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    interrupt_at(kube, "PATCH", VM_PATH, when="before", body=mark_patch)
    with pytest.raises(Interrupted):
        planner.apply(plan)
    assert STOPPED not in annotations(apiserver) and vm(apiserver)["metadata"]["generation"] == generation
    assert puts(apiserver, "start") == [] and "was not stopped" in planner.recovery[0]


# -- issue 28.2: interrupted while its stop is being served ------------------------------------------------------


def test_interrupted_while_its_stop_is_served_the_recovery_it_prints_is_true(apiserver, kube):
    """The stop lands after rblnctl read the VM back. Before: the read-back saw the VM running, took the mark off,
    and said the same command starts a VM rblnctl stopped; the stop landed and the same command left it stopped."""
    running_vm(apiserver)
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    apiserver.inject_fault(method="PUT", path=SUB + "stop$", status=None, delay_s=0.5, times=1)  # a slow virt-api
    served = interrupt_at(kube, "PUT", SUB + "stop$", when="during")
    with pytest.raises(Interrupted):
        planner.apply(plan)
    assert run_strategy(apiserver) == "Always"  # rblnctl read it back before the stop landed
    served[0].join(10)
    assert run_strategy(apiserver) == "Halted"  # ...and then it landed
    (line,) = planner.recovery
    assert "may have reached virt-api and had not taken effect" in line and f"`virtctl start v1 -n {NS}`" in line
    assert not planner.left_stopped  # a re-run is not said to start it: it cannot tell this stop from another's
    assert annotations(apiserver)[STOPPED].endswith(" stopping")
    again = attacher(kube, npus=2, restart=True).plan("v1", NS)
    assert not again.start and again.stale_mark
    assert any("interrupted before it saw its stop land" in str(w) for w in again.warnings)
    result = attacher(kube, npus=2, restart=True).apply(again)
    assert result.changed and not result.restarted and run_strategy(apiserver) == "Halted"
    assert STOPPED not in annotations(apiserver)


def test_interrupted_while_its_stop_is_served_and_landed_starts_the_vm_again(apiserver, kube):
    """The same interruption, the stop applied before the read-back: it is rblnctl's, so it starts the VM again."""
    running_vm(apiserver)
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    interrupt_at(kube, "PUT", SUB + "stop$", when="after")
    with pytest.raises(Interrupted):
        planner.apply(plan)
    assert run_strategy(apiserver) == "Always" and STOPPED not in annotations(apiserver)
    assert planner.recovery == [f"VM {NS}/v1 was stopped by rblnctl and has been started again (its NPUs were not "
                                "changed)"]


def test_sigterm_while_its_stop_is_served_real_signal(apiserver):
    """The CLI under a real SIGTERM, virt-api slow to serve the stop: what it prints is what happens."""
    import signal

    running_vm(apiserver)
    apiserver.inject_fault(method="PUT", path=SUB + "stop$", status=None, delay_s=1.5, times=1)
    argv = ["vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes"]
    code, _, err = signal_rblnctl(apiserver, argv, lambda: puts(apiserver, "stop"), signal.SIGTERM, grace_s=0.2)
    assert code == 143, err
    wait_for(lambda: run_strategy(apiserver) == "Halted")  # the stop lands after rblnctl has gone
    assert "Traceback" not in err
    assert f"`virtctl start v1 -n {NS}`" in err and "(the same command) starts" not in err
    assert "stopped by rblnctl and has been started again" not in err


# -- issue 28.3: a refused restart is not a restart --------------------------------------------------------------


@pytest.mark.parametrize("wait", [False, True])
def test_a_restart_virt_api_refuses_is_an_error_not_a_success(apiserver, wait):
    """Another admin stops the VM just before rblnctl's restart reaches virt-api: 409 "RunStategy Halted does not
    support manual restart requests". Before: exit 0 "restart requested" (no VMI at all counted as a new one);
    with --wait, the whole timeout."""
    running_vm(apiserver)

    def other_admin(req):
        if req.method == "PUT" and req.path.endswith("/restart"):
            apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"].__setitem__("runStrategy", "Halted"))

    apiserver.on_request(other_admin)
    args = ["vm", "restart", "v1", "-n", NS, "--yes", *(["--wait", "--timeout", "20s"] if wait else [])]
    r = cli(*args, server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    assert "RunStategy Halted does not support manual restart requests" in r.stderr
    assert f"virt-api refused to restart VM {NS}/v1" in r.stderr and "restart requested" not in r.stderr
    assert "did not become Ready" not in r.stderr


# -- issue 28.4: the owner stopped it between the plan and the stop ---------------------------------------------


def test_a_vm_its_owner_stopped_after_the_plan_is_changed_and_left_stopped(apiserver, kube):
    """Before: `stopped = True` whenever the plan restarts, so the VM its owner stopped (the window includes the
    confirmation prompt) was started."""
    running_vm(apiserver)
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    assert plan.restart
    by_hand(kube, "stop")  # the owner, while rblnctl asks [y/N]
    apiserver.clear_requests()
    result = planner.apply(plan)
    assert run_strategy(apiserver) == "Halted" and puts(apiserver, "start") == []
    assert len(host_devices(apiserver)) == 2 and result.changed and not result.restarted
    assert "stopped by someone else before rblnctl stopped it" in result.not_restarted
    assert STOPPED not in annotations(apiserver)
    assert [r for r in apiserver.writes() if r.method == "PUT"] == []  # rblnctl asked virt-api nothing


def test_the_cli_says_the_vm_was_not_restarted(apiserver):
    running_vm(apiserver)

    def owner_stops(req):  # between the plan's reads and the mark
        if req.method == "PATCH" and mark_patch(req.body) and run_strategy(apiserver) == "Always":
            apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"].__setitem__("runStrategy", "Halted"))

    apiserver.on_request(owner_stops)
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    import json

    doc = json.loads(r.stdout)
    assert doc["result"]["restarted"] is False and "stopped by someone else" in doc["result"]["notRestarted"]
    assert "not restarted: VM" in r.stderr and "restarted and Ready" not in r.stderr
    assert run_strategy(apiserver) == "Halted"


# -- issue 27.2: a refused stop is not a stop ----------------------------------------------------------------------


@pytest.mark.parametrize("fault", [
    {"status": 403, "reason": "Forbidden", "message": 'virtualmachines.subresources.kubevirt.io "v1" is forbidden: '
     'User "u" cannot update resource "virtualmachines/stop"'},
    {"status": 406, "body": "406: Not Acceptable", "content_type": "text/plain"},
], ids=["403", "406"])
def test_a_refused_stop_says_nothing_was_stopped(apiserver, kube, fault):
    """Before: "VM ... was stopped by rblnctl and has been started again" about a VM never stopped."""
    running_vm(apiserver)
    before = (vm(apiserver)["metadata"]["generation"], vmi_uid(apiserver))
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    apiserver.inject_fault(method="PUT", path=SUB + "stop$", times=1, **fault)
    with pytest.raises(RblnError) as err:
        planner.apply(plan)
    assert not any("started again" in d for d in err.value.details)
    assert f"VM {NS}/v1 was not stopped (its stop was refused) and its NPUs were not changed" in err.value.details
    assert (vm(apiserver)["metadata"]["generation"], vmi_uid(apiserver)) == before
    assert run_strategy(apiserver) == "Always" and STOPPED not in annotations(apiserver)
    assert puts(apiserver, "start") == []
    if fault["status"] == 403:
        assert isinstance(err.value, Forbidden)


# -- issue 27.4: virt-controller's writes after the stop ----------------------------------------------------------


def test_attach_restart_patches_once_and_reports_no_earlier_run(apiserver):
    """virt-api's stop writes the VM (runStrategy), and virt-controller its status, right after. Before: the
    resourceVersion-guarded patch conflicted every time, the re-plan took the run's own mark for an earlier run's
    ("an earlier rblnctl run stopped this VM and could not start it again"), and "patching VM" came twice."""
    running_vm(apiserver)
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("patching VM") == 1 and "changed under us" not in r.stderr
    assert "earlier rblnctl run" not in r.stdout + r.stderr
    npu_patches = [w for w in apiserver.writes() if is_npu_patch(w)]
    assert [w.status for w in npu_patches] == [200]
    assert len(host_devices(apiserver)) == 2 and run_strategy(apiserver) == "Always"


# -- issue 27.9: --wait's verdict is the state it waited for -------------------------------------------------------


def test_stop_wait_says_stopped_only_once_the_vm_says_so(apiserver):
    """virt-controller writes printableStatus Stopped after the VMI and its virt-launcher are gone. Before: `vm stop
    --wait` printed "stopped: its NPUs are free" over a table saying Stopping."""
    import json

    running_vm(apiserver)
    apiserver.kubevirt_launcher_delay_s = 0.3
    r = cli("vm", "stop", "v1", "-n", NS, "--yes", "--wait", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    state = json.loads(r.stdout)["result"]["state"]
    assert state["printableStatus"] == "Stopped" and state["vmi"] is None and not state["ready"]
    assert "stopped: its NPUs are free" in r.stderr


def test_start_wait_of_a_vm_already_starting_speaks_of_the_state_it_waited_for(apiserver):
    """`kubectl apply` of a running VM, then `vm start --wait`: nothing to ask. Before: "nothing to ask: already
    running (VMI Scheduled)" while the same output showed it Running."""
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver)
    apiserver.kubevirt_launcher_delay_s = 0.5
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22], running=False, node="n1"))
    apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"].__setitem__("runStrategy", "Always"))
    assert apiserver.get("VirtualMachineInstance", "v1", NS)["status"]["phase"] == "Scheduled"
    r = cli("vm", "start", "v1", "-n", NS, "--wait", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "Scheduled" not in r.stdout and "already running (VMI Scheduled)" not in r.stderr
    assert f"VM {NS}/v1: already running (VMI Running); nothing to ask; it is Ready on n1 with 1 NPU(s) attached" \
        in r.stderr
    assert " Running " in r.stdout.splitlines()[-1]


# -- helpers --------------------------------------------------------------------------------------------------------


def wait_for(cond: Any, timeout_s: float = 10) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.02)


def test_conflict_is_raised_for_refused_restart_in_the_library(apiserver, kube):
    """VmLifecycle: the same refusal through the library (a Conflict naming what virt-api said and the VM now)."""
    running_vm(apiserver)
    life = VmLifecycle(kube=kube, timeout_s=5)
    plan = life.plan("restart", "v1", NS)
    apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"].__setitem__("runStrategy", "Halted"))
    with pytest.raises(Conflict) as e:
        life.apply(plan)
    assert "RunStategy Halted does not support manual restart requests" in str(e.value)
    assert "the VM now: status Stopped" in str(e.value)


def test_a_start_refused_because_the_vm_started_meanwhile_says_so(apiserver):
    """Another admin (or KubeVirt) started the VM between rblnctl's read and its start: virt-api's 409 "VM is already
    running" is no request of rblnctl's that went through, and no failure either: said as it is, then waited on."""
    running_vm(apiserver)
    assert cli("vm", "stop", "v1", "-n", NS, "--yes", "--wait", server=apiserver.url).exit_code == 0

    def other_admin(req):
        if req.method == "PUT" and req.path.endswith("/start") and run_strategy(apiserver) == "Halted":
            apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"].__setitem__("runStrategy", "Always"))

    apiserver.on_request(other_admin)
    r = cli("vm", "start", "v1", "-n", NS, "--wait", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    import json

    result = json.loads(r.stdout)["result"]
    assert result["changed"] is False and "VM is already running" in result["overtaken"]
    assert "virt-api refused the start" in r.stderr and "the VM got there meanwhile; it is Ready on n1" in r.stderr


def test_a_new_rerun_on_failure_vm_is_started_by_kubevirt_itself():
    """virt-controller starts a RerunOnFailure VM without a VMI whose status.runStrategy is not yet its own (a new
    VM; kubevirt/kubevirt@v1.9.0 pkg/virt-controller/watch/vm/vm.go syncRunStrategy); one it stopped needs a Start.
    Before: rblnctl asked for a start of the new one, and virt-api answered 409 "VM is already running"."""
    from rblnctl.vm.lifecycle import START, VmState, decide

    new = VmState(run_strategy="RerunOnFailure", status_run_strategy="")
    stopped = VmState(run_strategy="RerunOnFailure", status_run_strategy="RerunOnFailure")
    assert decide(START, new)[0] is None and "by itself" in decide(START, new)[1]
    assert decide(START, stopped)[0] == "start"


# -- found on real KubeVirt by the hostile review: interrupted while the VM is still stopping --------------------


def test_interrupted_while_the_vm_is_still_stopping_sends_no_start_bound_to_be_refused(apiserver, kube, mocker):
    """Ctrl-C while `--restart` waits for its stop: the old VMI is still going, so virt-api refuses a start ("VM is
    already running", KubeVirt v1.9.0). Before, the clean-up sent that start and reported the refusal; now it sends
    none, ends at once and says the VM is left stopped under rblnctl's mark, which the same command then starts."""
    running_vm(apiserver)
    apiserver.kubevirt_launcher_delay_s = 5  # the guest takes its time to shut down
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    mocker.patch.object(VmLifecycle, "wait_stopped", side_effect=KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        planner.apply(plan)
    assert puts(apiserver, "stop") and puts(apiserver, "start") == []
    assert run_strategy(apiserver) == "Halted" and re.search(r"\buid=\S+ generation=\d+ observed=\S+ run=Halted$",
                                                             annotations(apiserver)[STOPPED])
    (line,) = planner.recovery
    assert f"VM {NS}/v1 is left stopped" in line and "is still stopping" in line and "re-run this command" in line
    mocker.stopall()
    apiserver.kubevirt_launcher_delay_s = 0.2
    again = attacher(kube, npus=2, restart=True)
    again.apply(again.plan("v1", NS))  # the printed recovery: waits for the stop, starts it, takes the mark off
    assert run_strategy(apiserver) == "Always" and STOPPED not in annotations(apiserver)


def test_a_failure_while_the_vm_is_still_stopping_waits_for_the_stop_then_starts_it(apiserver, kube, mocker):
    """Not interrupted (an API error after the stop): nothing hurries the clean-up, so it waits for the old VMI to go
    and starts the VM again, as the rule says."""
    running_vm(apiserver)
    apiserver.kubevirt_launcher_delay_s = 0.3
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    real_wait, calls = VmLifecycle.wait_stopped, []

    def first_fails(self, ref):
        calls.append(ref)
        if len(calls) == 1:
            raise Forbidden("pods is forbidden")
        return real_wait(self, ref)
    mocker.patch.object(VmLifecycle, "wait_stopped", first_fails)
    with pytest.raises(Forbidden):
        planner.apply(plan)
    assert len(puts(apiserver, "start")) == 1
    assert planner.recovery == [f"VM {NS}/v1 was stopped by rblnctl and has been started again (its NPUs were not "
                                "changed)"]


# -- found by the domain review: virt-api refuses every start of a VM that needs manual recovery -------------------

RECOVERY = {"type": "ManualRecoveryRequired", "status": "True", "reason": "VolumesUpdateError"}


def test_a_vm_that_needs_manual_recovery_is_not_stopped_to_be_left_stopped(apiserver, kube):
    """kubevirt/kubevirt@v1.9.0 StartVMRequestHandler answers 409 "VM recovery required" while the condition holds
    (stop and restart it allows): attach --restart would stop the VM and could not start it again. Refused first."""
    running_vm(apiserver)
    apiserver.mutate("VirtualMachine", "v1", NS, fn=lambda v: v.setdefault("status", {}).setdefault(
        "conditions", []).append(RECOVERY))
    plan = attacher(kube, npus=2, restart=True).plan("v1", NS)
    assert any("ManualRecoveryRequired" in b.message for b in plan.blockers)
    with pytest.raises(RblnError):
        attacher(kube, npus=2, restart=True).apply(plan)
    assert puts(apiserver, "stop") == [] and run_strategy(apiserver) == "Always"


def test_vm_start_of_a_vm_that_needs_manual_recovery_asks_nothing_and_says_why(apiserver):
    apiserver.add(o.vm(NS, "v2", run_strategy="Halted"))
    apiserver.mutate("VirtualMachine", "v2", NS, fn=lambda v: v.setdefault("status", {}).setdefault(
        "conditions", []).append(RECOVERY))
    r = cli("vm", "start", "v2", "-n", NS, server=apiserver.url)
    assert r.exit_code != 0 and "ManualRecoveryRequired" in r.stderr and "Traceback" not in r.stderr
    assert puts(apiserver, "start") == []


# -- issue 41.2: virt-api refuses every restart while the VM's VolumesChange condition is True ---------------------

VOLUMES_CHANGE = {"type": "VolumesChange", "status": "True"}


def test_vm_restart_during_a_volume_change_asks_nothing_and_says_why(apiserver):
    """kubevirt/kubevirt@v1.9.0 pkg/virt-api/rest/lifecycle.go RestartVMRequestHandler: 409 "VM recovery required"
    while VolumesChange is True (a start it allows: `vm start` of a stopped VM with it is not refused)."""
    running_vm(apiserver)
    apiserver.mutate("VirtualMachine", "v1", NS, fn=lambda v: v.setdefault("status", {}).setdefault(
        "conditions", []).append(VOLUMES_CHANGE))
    r = cli("vm", "restart", "v1", "-n", NS, "--yes", server=apiserver.url)
    assert r.exit_code != 0 and "VolumesChange" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert puts(apiserver, "restart") == []
    apiserver.add(o.vm(NS, "v3", run_strategy="Halted"))
    apiserver.mutate("VirtualMachine", "v3", NS, fn=lambda v: v.setdefault("status", {}).setdefault(
        "conditions", []).append(VOLUMES_CHANGE))
    r = cli("vm", "start", "v3", "-n", NS, server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert len(puts(apiserver, "start")) == 1
