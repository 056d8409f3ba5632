"""One Progress class (rblnctl/cli/console.py) for every command's progress: piped, the lines each command's events
print, with what differs per command given as data (the waiting step, the rollback step, a retry's words)."""

from __future__ import annotations

import io

from rich.console import Console

from rblnctl.cli.console import Progress, node_event_lines
from rblnctl.cli.pool import PoolProgress


def _piped(p: Progress | PoolProgress) -> io.StringIO:
    buf = io.StringIO()
    p.console = Console(file=buf, force_terminal=False, width=200, color_system=None)
    return buf


class _St:
    def __init__(self, text: str) -> None:
        self.text = text

    def describe(self) -> str:
        return self.text


def test_a_vm_state_is_a_line_per_change_and_a_step_between_shows_it_again():
    p = Progress(server_dry_run=True)
    buf = _piped(p)
    p.vm_state(_St("Stopping"))
    p.vm_state(_St("Stopping"))
    p.say("stop: requested")
    p.vm_state(_St("Stopping"))
    p.vm_state(_St("Stopped"))
    # the request line says it is a server dry run; the VM's states are what was read, said as they are
    assert buf.getvalue().splitlines() == ["  Stopping", "stop: requested (server dry run)", "  Stopping",
                                           "  Stopped"]


def test_what_differs_per_command_is_data():
    node = Progress(server_dry_run=True, wait_step="wait", rollback_step="rollback")
    policy = Progress(server_dry_run=True, retried="the policy changed (attempt {attempt}); retrying")
    vm = Progress(server_dry_run=True, retry_suffix=False)
    out = [_piped(p) for p in (node, policy, vm)]
    node.step("cordon", "cordoning node n1")
    node.step("wait", "waiting for the operator")  # piped: a line, not a spinner
    policy.method_events().on_retry(2, "409 Conflict")
    vm.vm_events().on_retry(1, "the VM changed")
    vm.vm_events().on_step("patch: 2 NPUs")
    assert out[0].getvalue().splitlines() == ["cordon: cordoning node n1 (server dry run)",
                                              "wait: waiting for the operator (server dry run)"]
    assert out[1].getvalue().splitlines() == ["the policy changed (attempt 2); retrying (server dry run)"]
    assert out[2].getvalue().splitlines() == ["the VM changed; re-reading and retrying",
                                              "patch: 2 NPUs (server dry run)"]


def test_one_node_and_the_pool_say_a_nodes_events_in_the_same_words():
    one = Progress()
    pool = PoolProgress(["n1"], title="t")
    a, b = _piped(one), _piped(pool)
    for events in (one.node_events(), pool._node_events("n1")):
        events.on_step("evict", "evicting 2 pod(s)")
        events.on_evicted("ml/a")
        events.on_gone("ml/a")
        events.on_pdb_blocked("ml/b", "Cannot evict pod", 3)
    assert [f"n1: {line}" for line in a.getvalue().splitlines()] == b.getvalue().splitlines()
    assert a.getvalue().splitlines()[1:3] == ["  evicted ml/a", "  gone    ml/a"]
    assert pool.rows["n1"].detail == node_event_lines("pdb", "ml/b", message="x", attempt=3)[0]
