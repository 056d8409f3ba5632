"""Pool progress (rblnctl/cli/pool.py): a live table on a terminal that never cuts a node's name or state, and
piped lines only when a node's state or detail changes (issue 21 item 2).

The terminal tests run rblnctl on a real pseudo-terminal (tests/terminal.py: its window size set, no COLUMNS, the
result on a pipe) against the fake API server and a simulated operator slow enough to be watched.
"""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from rblnctl.cli.pool import PoolProgress, _Row, progress_lines
from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.terminal import on_terminal

NODES = ["npu-worker-a01", "npu-worker-a02", "npu-worker-b17"]
STATES = r"(queued|planning|lock|record|cordon|evict|relabel|wait|uncordon|finish|rollback|done|unchanged|refused|" \
         r"failed|interrupted|skipped)"
ROW = re.compile(rf"^(\S+)\s+{STATES}(\s|$)")
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]")


def _row(state: str, detail: str = "", evicted: int = 0) -> _Row:
    r = _Row()
    r.state, r.detail, r.evicted, r.started = state, detail, evicted, 0.0
    return r


def test_node_and_state_are_never_cut_and_detail_takes_the_rest():
    rows = [("npu-worker-with-a-long-name-0001", _row("wait", "pod rbln-system/rbln-vfio-manager-x not Ready " * 3)),
            ("n2", _row("queued"))]
    for width in (40, 80, 120):
        lines = [t.plain for t in progress_lines("switching 2 node(s) to vm: 1 running, 1 queued", rows, width, 5.0)]
        assert all(len(line) <= width for line in lines), (width, lines)
        assert lines[2].startswith("npu-worker-with-a-long-name-0001  wait")
        # the detail is cut with an ellipsis; with no room left for it at all, it goes
        assert lines[2].endswith("\u2026") if width > 40 else lines[2].split() == ["npu-worker-with-a-long-name-0001",
                                                                                    "wait"]
        assert lines[3].split()[:2] == ["n2", "queued"]
    narrow = [t.plain for t in progress_lines("t", rows, 60, 5.0)]
    assert narrow[1].split() == ["NODE", "STATE", "DETAIL"]  # EVICTED and ELAPSED made room for DETAIL
    wide = [t.plain for t in progress_lines("t", rows, 120, 5.0)]
    assert wide[1].split() == ["NODE", "STATE", "EVICTED", "ELAPSED", "DETAIL"]
    assert wide[2].split()[2:4] == ["0", "5.0s"]


def test_names_wider_than_the_terminal_are_still_whole():
    name = "n" * 50
    lines = [t.plain for t in progress_lines("t", [(name, _row("relabel", "x"))], 30, 1.0)]
    assert lines[2].startswith(name + "  relabel")


def _state(*texts: str, elapsed: float = 1.0):
    from rblnctl.node.events import WaitState
    from rblnctl.operator.convergence import Missing, Pending

    pending = tuple(Pending(kind=Missing.POD, text=t) for t in texts)
    return WaitState(node="n1", target="vm-passthrough", pending=pending, elapsed_s=elapsed, timeout_s=600)


def test_piped_lines_only_when_state_or_detail_changes(monkeypatch):
    """Piped, a wait line only when what it says first changes (not its count, not its times): one short line."""
    buf = io.StringIO()
    p = PoolProgress(["n1"], title="t")
    p.console = Console(file=buf, force_terminal=False, width=200, color_system=None)
    ev = p._node_events("n1")
    ev.on_step("wait", "waiting for the operator to switch node n1 to vm-passthrough")
    for n, missing in enumerate((["a", "b", "c", "d"], ["a", "b", "c", "e"], ["a", "b", "c"], ["b"])):
        ev.on_wait(_state(*missing, elapsed=n * 61.0))
    lines = buf.getvalue().splitlines()
    assert lines == ["n1: wait: waiting for the operator to switch node n1 to vm-passthrough",
                     "n1: waiting 0s, 10m00s left: a (+3 more)", "n1: waiting 3m03s, 6m57s left: b"]
    assert p.rows["n1"].detail == "b"


# -- on a real pseudo-terminal ---------------------------------------------------------------------------------


@pytest.fixture
def slow_pool(apiserver):
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True), o.replicaset("ml", "t"))
    for n in NODES:
        apiserver.add(o.npu_node(n, labels={"pool": "vm"}),
                      o.pod("ml", f"{n}-t", node=n, owner_kind="ReplicaSet", owner_name="t", requests=o.ONE_NPU))
    op = SimulatedOperator(apiserver, ready_delay_s=0.8).start()
    assert op.wait_idle()
    yield apiserver
    op.stop()


@pytest.mark.parametrize("columns", [80, 120])
def test_pool_progress_on_a_pseudo_terminal_names_the_node_on_every_row(slow_pool, columns):
    screen = on_terminal(["--server", slow_pool.url, "node", "set-mode", "vm", "-l", "pool=vm", "--max-unavailable",
                          "2", "-y"], columns=columns, stdout_pipe=True, measure=True, timeout=60)
    text, stdout = screen.raw, screen.stdout  # every frame drawn: each progress row, as it was redrawn
    assert screen.code == 0, text
    screen_lines = [line for chunk in CSI.sub("", text).replace("\r", "\n").split("\n") for line in [chunk.rstrip()]]
    rows = [m for m in (ROW.match(line) for line in screen_lines) if m and m.group(1) != "NODE"]
    assert rows, text
    assert {m.group(1) for m in rows} == set(NODES)  # every progress row starts with a whole node name
    assert {m.group(2) for m in rows} >= {"wait", "queued"}
    progress = [line for line in screen_lines if ROW.match(line)]
    assert all(len(line) <= columns for line in progress), [line for line in progress if len(line) > columns]
    headers = [line.split() for line in screen_lines if line.startswith("NODE ")]
    assert headers and headers[-1] == ["NODE", "STATE", "EVICTED", "ELAPSED", "DETAIL"]
    assert [line.split()[0] for line in stdout.splitlines()[1:]] == NODES  # the result table on stdout
