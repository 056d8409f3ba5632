"""`vm attach --restart` through the CLI when the restart does not happen as planned: what it prints is what is true
(the VM left stopped is not said to run), an interrupted run names the command that finishes the job, and `-o json`
still gets the document of what was done."""

from __future__ import annotations

import json

from rblnctl.vm.lifecycle import VmLifecycle
from tests.helpers import cli
from tests.vm.support import NS, host_devices
from tests.vm.test_restart import is_running, running_vm
from tests.vm.test_restart_races import mark_patch, run_strategy
from tests.vm.test_stopped_mark import left_stopped


def _owner_stops_it_after_the_plan(apiserver) -> None:
    def owner_stops(req):  # between the plan's reads and the mark
        if req.method == "PATCH" and mark_patch(req.body) and run_strategy(apiserver) == "Always":
            apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"].__setitem__("runStrategy", "Halted"))

    apiserver.on_request(owner_stops)


def test_a_vm_left_stopped_by_its_owner_is_not_said_to_run(apiserver):
    """Before: `VirtualMachine vms/v1: 0 -> 2 NPU(s) (...); running on n1` above `not restarted: ... it is left
    stopped`."""
    running_vm(apiserver)
    _owner_stops_it_after_the_plan(apiserver)
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert run_strategy(apiserver) == "Halted"
    head = r.stdout.splitlines()[0]
    assert head.startswith(f"VirtualMachine {NS}/v1: 0 -> 2 NPU(s)") and "running" not in head, r.stdout
    assert head.endswith("; stopped"), head
    assert "not restarted: VM" in r.stdout
    doc = json.loads(cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", "--dry-run", "-o",
                         "json", server=apiserver.url).stdout)
    assert doc["plan"]["running"] is False  # what a re-plan reads agrees


def _interrupt_the_first_mark(mocker) -> list:
    """Ctrl-C as the run is about to write its first mark (nothing written yet by this run)."""
    from rblnctl.vm.attach import AttachPlanner

    real, calls = AttachPlanner._mark, []

    def mark(self, plan, state, **kw):
        calls.append(state)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(self, plan, state, **kw)

    mocker.patch.object(AttachPlanner, "_mark", mark)
    return calls


def test_a_rerun_interrupted_before_any_write_names_the_command_that_finishes_the_job(apiserver, kube, mocker):
    """An earlier run left v1 stopped (its mark on it); the re-run is interrupted before it writes anything: it starts
    the VM again (it is rblnctl's) with its NPUs unchanged. Before, it said only that: no command finishes the job."""
    running_vm(apiserver)
    left_stopped(apiserver, kube)
    _interrupt_the_first_mark(mocker)
    args = ("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes")
    r = cli(*args, server=apiserver.url)
    assert r.exit_code == 130, r.stderr
    assert "has been started again (its NPUs were not changed)" in r.stderr
    assert (f"`rblnctl --server {apiserver.url} --namespace {NS} vm attach --npus 2 --restart --yes v1` (the same "
            f"command) changes the NPUs of VM {NS}/v1") in r.stderr
    mocker.stopall()
    assert cli(*args, server=apiserver.url).exit_code == 0  # ...and it does
    assert len(host_devices(apiserver)) == 2 and is_running(apiserver)


def test_an_interrupted_restart_prints_the_document_of_what_was_done(apiserver, mocker):
    """-o json of an interrupted `vm attach --restart`: stdout got nothing. Now the VmNpuChange document of what was
    done (docs/output.md): here its NPUs not changed, the VM stopped and started again."""
    running_vm(apiserver)
    mocker.patch.object(VmLifecycle, "wait_stopped", side_effect=KeyboardInterrupt)  # after its stop landed
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", "-o", "json", server=apiserver.url)
    assert r.exit_code == 130, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "VmNpuChange" and doc["plan"]["npusAfter"] == 2
    result = doc["result"]
    assert (result["changed"], result["restarted"], result["leftStopped"]) == (False, True, False)
    assert is_running(apiserver) and host_devices(apiserver) == []


def test_an_interrupted_restart_that_leaves_the_vm_stopped_documents_how_to_start_it(apiserver, mocker):
    running_vm(apiserver)
    mocker.patch.object(VmLifecycle, "wait_stopped", side_effect=KeyboardInterrupt)
    mocker.patch.object(VmLifecycle, "start", side_effect=KeyboardInterrupt)  # a second Ctrl-C cuts the start
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", "-o", "json", server=apiserver.url)
    assert r.exit_code == 130, r.stderr
    result = json.loads(r.stdout)["result"]
    assert (result["changed"], result["restarted"], result["leftStopped"]) == (False, False, True)
    assert result["startCommand"] == f"virtctl start v1 -n {NS}"
    assert "(the same command) starts VM" in r.stderr and not is_running(apiserver)
