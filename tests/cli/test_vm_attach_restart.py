"""`vm attach --restart` through the CLI when the restart does not happen as planned: what it prints is what is true
(the VM left stopped is not said to run), an interrupted run names the command that finishes the job, and `-o json`
still gets the document of what was done."""

from __future__ import annotations

import json

from tests.helpers import cli
from tests.vm.support import NS
from tests.vm.test_restart import running_vm
from tests.vm.test_restart_races import mark_patch, run_strategy


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
