"""`vm start|stop|restart` (rblnctl.vm.lifecycle) on the fake API server's virt-api and simulated virt-controller:
idempotent, settled when a reply is lost, --wait until the VMI is Ready with its NPUs attached (or, stop, gone
with its virt-launcher), dry runs that send nothing."""

from __future__ import annotations

import json

import pytest

from rblnctl.vm.lifecycle import RESTART, START, STOP, VmState, decide
from tests.fakes import objects as o
from tests.helpers import cli, signal_rblnctl
from tests.vm.support import CA22, NS, dra_cluster, sandbox_cluster

SUB = rf"/apis/subresources\.kubevirt\.io/v1/namespaces/{NS}/virtualmachines/v1/"


# -- what to ask (pure) ------------------------------------------------------------------------------------------


def state(rs: str, phase: str | None = None, requests: tuple[str, ...] = ()) -> VmState:
    return VmState(run_strategy=rs, vmi_phase=phase, vmi_uid="u1" if phase is not None else None, requests=requests)


@pytest.mark.parametrize("action, st, send, blocked", [
    (STOP, state("Always", "Running"), "stop", False),
    (STOP, state("Halted"), None, False),  # stopped: nothing to ask
    (STOP, state("Halted", "Running"), None, False),  # its stop is under way (virt-api: 409 "Halted only ...")
    (STOP, state("Always"), "stop", False),  # no VMI yet, but KubeVirt would start one: Halted
    (STOP, state("Manual", "Running"), "stop", False),
    (STOP, state("Manual", "Succeeded"), None, False),
    (STOP, state("RerunOnFailure", "Succeeded"), None, False),  # done: KubeVirt runs it no more
    (STOP, state("RerunOnFailure", "Failed"), None, True),  # KubeVirt reruns it; virt-api's stop: 409 "not running"
    (STOP, state("RerunOnFailure", "Running", ("Stop",)), None, False),  # already requested
    (START, state("Halted"), "start", False),
    (START, state("Always", "Running"), None, False),  # running: nothing to ask
    (START, state("Always"), None, False),  # KubeVirt starts it itself (virt-api: 409 "Always does not support...")
    (START, state("Manual", "Succeeded"), "start", False),
    (START, state("RerunOnFailure", "Succeeded"), "start", False),
    (START, state("RerunOnFailure", "Failed"), None, False),  # KubeVirt reruns it
    (START, state("Once", "Succeeded"), None, True),  # virt-api refuses: it ran once
    (START, state("Halted", "Unknown"), "start", False),  # virt-api: a VMI in phase Unknown is not running
    (START, state("Halted", "Running"), "start", False),  # stopping: started once stopped (not "already running")
    (START, state("Manual", "Running", ("Stop",)), "start", False),  # a Stop under way: the same
    (RESTART, state("Halted", "Running"), "start", False),  # stopping: virt-api refuses Halted restarts
    (RESTART, state("Always", "Running"), "restart", False),
    (RESTART, state("Halted"), "start", False),  # not running: started, as systemctl restart does
    (RESTART, state("Once", "Running"), None, True),
])
def test_what_is_asked_follows_virt_api(action, st, send, blocked):
    got, why, blocker = decide(action, st)
    assert (got, blocker is not None) == (send, blocked), (why, blocker)


# -- on the simulated KubeVirt -------------------------------------------------------------------------------------


@pytest.fixture
def cluster(apiserver):
    """The simulated virt-controller; vm-mode n1 (4 RBLN-CA22_PF); VM vms/v1 with 2 NPUs, stopped, runs on n1."""
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver, npus=4)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22, CA22], running=False, node="n1"))
    return apiserver


def puts(apiserver, action=None):
    return [r for r in apiserver.requests if r.method == "PUT" and "subresources.kubevirt.io" in r.path
            and (action is None or r.path.endswith("/" + action))]


def launchers(apiserver):
    return [p for p in apiserver.list("Pod", NS) if p["metadata"]["labels"].get("kubevirt.io") == "virt-launcher"]


def node_npus(apiserver, name="n1"):
    doc = json.loads(cli("node", "list", name, "-o", "json", server=apiserver.url).stdout)
    (n,) = doc["items"]
    return n["npuAllocated"], n["npuFree"]


def test_start_wait_then_stop_wait_and_each_again_is_a_no_op(cluster):
    r = cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert len(puts(cluster, "start")) == 1 and cluster.get("VirtualMachine", "v1", NS)["spec"]["runStrategy"] == \
        "Always"
    assert "VM vms/v1 is Ready on n1 with 2 NPU(s) attached" in r.stderr
    (pod,) = launchers(cluster)
    assert pod["status"]["phase"] == "Running" and node_npus(cluster) == (2, 2)  # node list sees the launcher

    cluster.clear_requests()
    again = cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url)
    assert again.exit_code == 0, again.stderr
    assert cluster.writes() == [] and "already running" in again.stderr

    r = cli("vm", "stop", "v1", "-n", NS, "--wait", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert len(puts(cluster, "stop")) == 1 and cluster.get("VirtualMachineInstance", "v1", NS) is None
    assert launchers(cluster) == [] and node_npus(cluster) == (0, 4)
    assert "VM vms/v1 stopped: its NPUs are free" in r.stderr

    cluster.clear_requests()
    again = cli("vm", "stop", "v1", "-n", NS, server=cluster.url)  # nothing to ask: no --yes needed
    assert again.exit_code == 0, again.stderr
    assert cluster.writes() == [] and "already stopped" in again.stderr


def test_start_wait_waits_for_the_launcher_and_its_npus(cluster):
    cluster.kubevirt_launcher_delay_s = 0.5
    r = cli("vm", "start", "v1", "-n", NS, "--wait", "-o", "json", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert "is Pending" in r.stderr  # the progress showed the wait
    doc = json.loads(r.stdout)
    assert doc["kind"] == "VmLifecycle" and doc["result"]["waited"] is True
    assert doc["result"]["state"]["npus"] == {"wanted": 2, "held": 2, "launcherPod": launchers(cluster)[0]["metadata"]
                                              ["name"], "attached": True, "missing": [], "pendingChange": None}


def test_stop_wait_waits_until_the_vmi_and_its_launcher_are_gone(cluster):
    assert cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url).exit_code == 0
    cluster.kubevirt_launcher_delay_s = 0.5  # the guest takes that long to shut down
    r = cli("vm", "stop", "v1", "-n", NS, "--wait", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert "status Stopping, VMI Running on n1" in r.stderr  # it waited through the shutdown
    assert cluster.get("VirtualMachineInstance", "v1", NS) is None and launchers(cluster) == []
    assert node_npus(cluster) == (0, 4)


@pytest.mark.parametrize("run_strategy", ["Halted", "Manual"])
def test_a_finished_vmi_whose_launcher_still_runs_is_not_stopped(apiserver, run_strategy):
    """The VMI finished, but its virt-launcher pod is still there (terminating, its NPUs still requested): the node's
    NPUs are not free yet, so `vm stop --wait` waits for the pod, and says so when it does not go.

    Manual is the case only the launcher rule decides: a Halted VM's finished VMI is itself a leftover (issue 39),
    while a Manual VM keeps its finished VMI (virt-controller starts and stops a Manual VM's VMIs through the API
    endpoints only, and virt-api's start of a Manual VM with a final VMI is a restart request:
    kubevirt/kubevirt@v1.9.0 pkg/virt-controller/watch/vm/vm.go syncRunStrategy, pkg/virt-api/rest/subresource.go
    StartVMRequestHandler)."""
    sandbox_cluster(apiserver, npus=4)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22, CA22], running=False, run_strategy=run_strategy, node="n1"),
                  o.vmi(NS, "v1", "n1", [CA22, CA22], phase="Succeeded"),
                  o.virt_launcher(NS, "v1", "n1", resources={CA22: "2"}))
    r = cli("vm", "stop", "v1", "-n", NS, "--wait", "--timeout", "1s", server=apiserver.url)
    assert r.exit_code == 5, r.stderr
    assert "VM vms/v1 did not stop within 1s" in r.stderr and "virt-launcher virt-launcher-v1-abcde still there" in \
        r.stderr
    assert apiserver.writes() == []


def test_start_of_a_vm_still_stopping_starts_it_once_stopped(cluster):
    """`vm stop` (no wait) then `vm start`: the VMI is still shutting down (runStrategy Halted, phase Running). The
    start is not "already running" (exit 0, the VM then stops): it waits for the stop, then asks virt-api."""
    assert cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url).exit_code == 0
    cluster.kubevirt_launcher_delay_s = 0.5
    assert cli("vm", "stop", "v1", "-n", NS, "--yes", server=cluster.url).exit_code == 0
    r = cli("vm", "start", "v1", "-n", NS, "--wait", "--timeout", "20s", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert "already running" not in r.stdout + r.stderr and "it is stopping" in r.stdout
    assert cluster.get("VirtualMachine", "v1", NS)["spec"]["runStrategy"] == "Always"
    assert cluster.get("VirtualMachineInstance", "v1", NS)["status"]["phase"] == "Running"
    assert [r.status for r in puts(cluster, "start")][-1] == 202  # sent once the old VMI was gone: no 409


def test_a_slow_restart_waits_for_the_new_vmi(cluster):
    assert cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url).exit_code == 0
    old = cluster.get("VirtualMachineInstance", "v1", NS)["metadata"]["uid"]
    cluster.kubevirt_launcher_delay_s = 0.3
    r = cli("vm", "restart", "v1", "-n", NS, "--wait", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    vmi = cluster.get("VirtualMachineInstance", "v1", NS)
    assert vmi["metadata"]["uid"] != old and vmi["status"]["phase"] == "Running"
    assert [p["status"]["phase"] for p in launchers(cluster)] == ["Running"]


def test_restart_wait_gets_a_new_vmi_with_its_npus(cluster):
    assert cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url).exit_code == 0
    old = cluster.get("VirtualMachineInstance", "v1", NS)["metadata"]["uid"]
    (old_pod,) = launchers(cluster)
    r = cli("vm", "restart", "v1", "-n", NS, "--wait", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert len(puts(cluster, "restart")) == 1
    assert cluster.get("VirtualMachineInstance", "v1", NS)["metadata"]["uid"] != old
    (pod,) = launchers(cluster)
    assert pod["metadata"]["name"] != old_pod["metadata"]["name"] and node_npus(cluster) == (2, 2)


def test_npus_changed_after_the_start_come_with_a_restart(cluster):
    """A running VM whose template now asks for 3 NPUs: start --wait judges the NPUs its VMI passes (and warns);
    restart --wait brings the 3."""
    assert cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url).exit_code == 0
    cluster.mutate("VirtualMachine", "v1", NS, lambda vm: vm["spec"]["template"]["spec"]["domain"]["devices"]
                   .update(hostDevices=[{"name": f"npu{i}", "deviceName": CA22} for i in range(3)]))
    r = cli("vm", "start", "v1", "-n", NS, "--wait", "--timeout", "10s", "-o", "json", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert "a restart applies them (`vm restart v1 -n vms`)" in r.stderr
    npus = json.loads(r.stdout)["result"]["state"]["npus"]
    assert (npus["held"], npus["wanted"], npus["attached"]) == (2, 3, True) and npus["pendingChange"]
    r = cli("vm", "restart", "v1", "-n", NS, "--wait", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert "with 3 NPU(s) attached" in r.stderr and node_npus(cluster) == (3, 1)


def test_a_start_without_wait_shows_the_vm_as_it_is_now(cluster):
    doc = json.loads(cli("vm", "start", "v1", "-n", NS, "-o", "json", server=cluster.url).stdout)
    assert doc["before"]["printableStatus"] == "Stopped" and doc["result"]["state"]["printableStatus"] == "Running"


def test_restart_of_a_stopped_vm_starts_it(cluster):
    r = cli("vm", "restart", "v1", "-n", NS, "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert [p.path.rsplit("/", 1)[-1] for p in puts(cluster)] == ["start"]
    assert "not running, so it is started" in r.stdout


def test_a_lost_reply_is_settled_by_reading_the_vm_back(cluster):
    cluster.inject_fault(method="PUT", path=SUB + "start$", lose_reply=True)
    r = cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert len(puts(cluster, "start")) == 1  # applied, reply lost: not sent again
    cluster.inject_fault(method="PUT", path=SUB + "stop$", status=503, times=1)  # refused before it applied
    r = cli("vm", "stop", "v1", "-n", NS, "--yes", "--wait", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert len(puts(cluster, "stop")) == 2  # read back: not stopped, so asked again


def test_dry_runs(cluster):
    r = cli("vm", "start", "v1", "-n", NS, "--wait", "--dry-run", server=cluster.url)
    assert r.exit_code == 0 and cluster.writes() == []
    assert r.stdout.startswith("VirtualMachine vms/v1: start: runStrategy Halted -> Always")
    r = cli("vm", "start", "v1", "-n", NS, "--wait", "--dry-run=server", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    (put,) = puts(cluster)
    assert put.body == {"dryRun": ["All"]} and cluster.get("VirtualMachine", "v1", NS)["spec"]["runStrategy"] == \
        "Halted"


def test_not_ready_in_time_is_exit_5_saying_what_is_missing(cluster):
    cluster.mutate("VirtualMachine", "v1", NS, lambda vm: vm["metadata"]["annotations"].clear())  # nowhere to run
    r = cli("vm", "start", "v1", "-n", NS, "--wait", "--timeout", "1s", server=cluster.url)
    assert r.exit_code == 5, r.stderr
    assert "VM vms/v1 did not become Ready within 1s (status Starting, VMI Scheduling" in r.stderr
    assert f"see why it is not running: `rblnctl --server {cluster.url} vm diagnose v1 -n vms`" in \
        " ".join(r.stderr.split())  # issue 39, finding 12: the next step is named


def test_dra_npus_are_attached_when_the_launchers_claim_is_allocated(apiserver):
    apiserver.simulate_kubevirt = True
    dra_cluster(apiserver)  # n1 publishes two vfio devices
    entry = o.template_claim(o.vm_claim(NS, "v1"), "rbln-npu-2")
    devices = [o.dra_host_device(f"npu{i}", claim=o.vm_claim(NS, "v1"), request=f"npu{i}") for i in range(2)]
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-2", npus=2),
                  o.vm(NS, "v1", host_devices=devices, resource_claims=[entry], running=False, node="n1"))
    r = cli("vm", "start", "v1", "-n", NS, "--wait", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["result"]["state"]["npus"]["attached"] is True
    assert node_npus(apiserver) == (2, 0)  # its claim holds both vfio devices
    # a second VM asking for two more: its claim cannot be allocated, so it is never attached
    apiserver.add(o.vm(NS, "v2", host_devices=devices, resource_claims=[entry], running=False, node="n1"))
    r = cli("vm", "start", "v2", "-n", NS, "--wait", "--timeout", "1s", server=apiserver.url)
    assert r.exit_code == 5 and "is not allocated" in r.stderr


def test_a_launcher_that_does_not_request_the_npus_has_none_attached():
    from rblnctl.vm.lifecycle import attachment

    vm = o.vm(NS, "v1", host_devices=[CA22, CA22])
    vmi = o.vmi(NS, "v1", "n1", [CA22, CA22])
    pod = o.virt_launcher(NS, "v1", "n1", resources={CA22: "1"})
    assert attachment(vm, vmi, [pod], []).missing == (
        f"virt-launcher pod virt-launcher-v1-abcde requests 1 {CA22}, not 2",)
    pod = o.virt_launcher(NS, "v1", "n1", resources={CA22: "2"})
    assert attachment(vm, vmi, [pod], []).attached
    other = o.virt_launcher(NS, "other", "n1", resources={CA22: "2"})  # another VMI's launcher is not its own
    assert attachment(vm, vmi, [other], []).missing == ("no virt-launcher pod yet",)


def test_a_vm_that_runs_once_is_refused(cluster):
    cluster.add(o.vm(NS, "once", run_strategy="Once", running=False))
    cluster.add(o.vmi(NS, "once", "n1", phase="Succeeded"))
    r = cli("vm", "start", "once", "-n", NS, server=cluster.url)
    assert r.exit_code == 1 and "ran once" in r.stderr and cluster.writes() == []


def test_stop_and_restart_ask_first_start_does_not(cluster):
    assert cli("vm", "start", "v1", "-n", NS, server=cluster.url).exit_code == 0
    for action in ("stop", "restart"):
        r = cli("vm", action, "v1", "-n", NS, server=cluster.url)  # no terminal, no --yes
        assert r.exit_code == 2 and "pass --yes" in r.stderr
    assert len(puts(cluster)) == 1


def test_bad_input_and_a_missing_vm(cluster):
    from tests.helpers import closed_port_url

    assert cli("vm", "start", "Bad_Name", server=closed_port_url()).exit_code == 2
    assert cli("vm", "stop", "v1", "--timeout", "soon", server=closed_port_url()).exit_code == 2
    r = cli("vm", "start", "ghost", "-n", NS, server=cluster.url)
    assert r.exit_code == 1 and 'VirtualMachine "ghost" not found' in r.stderr


def test_a_rerun_on_failure_vm_whose_vmi_failed_is_not_called_stopped(apiserver):
    """virt-api answers its stop "VM is not running", but virt-controller runs it again: refused (exit 1) with the
    patch that does keep it stopped, nothing sent."""
    sandbox_cluster(apiserver, npus=4)
    vm = o.vm(NS, "v1", host_devices=[CA22], node="n1")
    vm["spec"].pop("running", None)
    vm["spec"]["runStrategy"] = "RerunOnFailure"
    apiserver.add(vm, o.vmi(NS, "v1", "n1", [CA22], phase="Failed"))
    r = cli("vm", "stop", "v1", "-n", NS, "--yes", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    assert "already stopped" not in r.stderr and "has KubeVirt run it again" in r.stderr
    assert f"kubectl patch vm v1 -n {NS} --type merge -p '{{\"spec\":{{\"runStrategy\":\"Halted\"}}}}'" in r.stderr
    assert apiserver.writes() == []


@pytest.mark.parametrize("in_between", ["deleting", "restart requested"])
def test_start_wait_does_not_call_a_vmi_on_its_way_out_ready(cluster, in_between):
    """A restart under way (the old VMI being deleted, or the Stop and Start requests not yet taken): the old VMI
    still says Ready, but it is not the one the VM keeps. Before: `vm start --wait` said Ready at once."""
    assert cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url).exit_code == 0
    cluster.simulate_kubevirt = False  # the controller is busy: the in-between state stays
    if in_between == "deleting":
        cluster.mutate("VirtualMachineInstance", "v1", NS,
                       lambda vmi: vmi["metadata"].update(deletionTimestamp="2026-12-03T00:00:00Z",
                                                          finalizers=["kubevirt.io/virtualMachineControllerFinalize"]))
    else:
        cluster.mutate("VirtualMachine", "v1", NS, lambda vm: vm.setdefault("status", {}).update(
            stateChangeRequests=[{"action": "Stop", "uid": "x"}, {"action": "Start"}]))
    r = cli("vm", "start", "v1", "-n", NS, "--wait", "--timeout", "1s", server=cluster.url)
    assert r.exit_code == 5, r.stderr
    assert "did not become Ready within 1s" in r.stderr


def test_progress_in_a_pipe_is_one_line_per_change_without_repeats(cluster):
    """`vm restart --wait 2>log`: each progress line says something the one before did not. Before: the VMI's Ready
    condition, the VM's pending Stop/Start requests and a new VMI uid changed the state but not its words, so the
    same line came three times in a row; a restart under way now says which requests are pending."""
    assert cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url).exit_code == 0
    cluster.kubevirt_launcher_delay_s = 0.3
    r = cli("vm", "restart", "v1", "-n", NS, "--wait", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("  ")]
    assert len(lines) >= 3, r.stderr
    assert all(a != b for a, b in zip(lines, lines[1:], strict=False)), r.stderr
    assert any("requested: Stop, Start" in line or "requested: Start" in line for line in lines), r.stderr


def _watching(requests):
    return any(r.method == "GET" and r.query.get("watch") == ["true"] and "virtualmachineinstances" in r.path
               for r in requests)


@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_during_the_wait_says_the_request_was_made_and_how_to_wait_again(cluster, sig, code):
    """Ctrl-C (or `timeout`) during `vm start --wait`: the start was asked and answered, so 'may have been made' (as
    before) is wrong; the command to follow it again is what the user needs."""
    import signal

    cluster.kubevirt_launcher_delay_s = 30  # the launcher stays Pending: rblnctl is waiting when the signal comes
    code_, _, err = signal_rblnctl(cluster, ["vm", "start", "v1", "-n", NS, "--wait"],
                                   lambda: puts(cluster, "start") and _watching(cluster.requests), getattr(signal, sig),
                                   grace_s=0.5)
    assert code_ == code, err
    assert "Traceback" not in err and "may have been made" not in err
    assert f"the start request for VM {NS}/v1 was made" in err
    assert f"vm start v1 -n {NS} --wait" in err  # a start of a starting VM asks nothing and waits


def test_a_signal_while_a_stopping_vm_is_awaited_says_no_start_was_asked(cluster):
    """`vm start --wait` of a VM still stopping waits for the stop before it asks; a signal then leaves the VM to
    stop, and no start was made: saying it 'may have been made' (as before) hid that the VM ends stopped."""
    import signal

    assert cli("vm", "start", "v1", "-n", NS, "--wait", server=cluster.url).exit_code == 0
    cluster.kubevirt_launcher_delay_s = 30  # the guest takes long to shut down
    assert cli("vm", "stop", "v1", "-n", NS, "--yes", server=cluster.url).exit_code == 0
    cluster.clear_requests()
    code, _, err = signal_rblnctl(cluster, ["vm", "start", "v1", "-n", NS, "--wait"],
                                  lambda: _watching(cluster.requests), signal.SIGTERM, grace_s=0.5)
    assert code == 143, err
    assert puts(cluster) == []
    assert "may have been made" not in err and f"no start was asked for VM {NS}/v1" in err
    assert f"vm start v1 -n {NS}" in err


def test_the_conditions_every_vm_with_npus_has_are_not_named_as_holding_it_back():
    """virt-handler sets LiveMigratable and StorageLiveMigratable False on every VMI with a PCI host device (measured
    on real KubeVirt v1.9.0: tests/kubevirt_real/test_listing_real.py); `vm start --wait` named them as if they held
    the VM back. A False condition that does (Synchronized, PodScheduled) is still named."""
    from rblnctl.vm.lifecycle import judge

    vm = o.vm(NS, "v1", host_devices=[CA22])
    vmi = o.vmi(NS, "v1", "n1")
    vmi["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "PodNotReady"},
        {"type": "LiveMigratable", "status": "False", "reason": "HostDeviceNotLiveMigratable",
         "message": "VMI specifies non-migratable generic PCI host device"},
        {"type": "StorageLiveMigratable", "status": "False", "reason": "HostDeviceNotLiveMigratable"},
        {"type": "Synchronized", "status": "False", "reason": "FailedCreate", "message": "quota exceeded"}]
    assert judge(vm, vmi).conditions == ("Synchronized: FailedCreate quota exceeded",)


def test_stop_wait_ends_when_the_vm_says_stopped_not_on_a_failed_vmi_it_still_reports(apiserver):
    """Issue 39, finding 10: a VM stuck ErrorUnschedulable, stopped: its VMI turns Failed before virt-controller
    deletes it and writes printableStatus Stopped. `vm stop --wait` said "stopped", then printed the stale table
    (ErrorUnschedulable, VMI Failed); it waits for the VM's own word now, and its table shows that."""
    import threading
    import time

    sandbox_cluster(apiserver, npus=4)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22] * 8, running=False, printable_status="ErrorUnschedulable"),
                  o.vmi(NS, "v1", None, [CA22] * 8, phase="Failed"))

    def virt_controller() -> None:  # what KubeVirt does next for a Halted VM with a final VMI
        time.sleep(0.6)
        apiserver.delete("VirtualMachineInstance", "v1", NS)
        apiserver.mutate("VirtualMachine", "v1", NS, lambda vm: vm["status"].update(printableStatus="Stopped"))

    t = threading.Thread(target=virt_controller)
    t.start()
    r = cli("vm", "stop", "v1", "-n", NS, "--wait", "--yes", "--timeout", "20s", server=apiserver.url)
    t.join()
    assert r.exit_code == 0, r.stderr
    assert "ErrorUnschedulable" not in r.stdout and "Failed" not in r.stdout, r.stdout
    assert "Stopped" in r.stdout, r.stdout
