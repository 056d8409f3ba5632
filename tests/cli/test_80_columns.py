"""Issue 30: every screen readable on an 80-column terminal (folded at word boundaries, never mid-word) and still one
line per row when piped (grep finds a row whole); a node mid-switch marked where nodes are listed; dry-run counts
that say how many nodes really change; set-mode's wait naming the pod state with elapsed and remaining time."""

from __future__ import annotations

import json
import re

import pytest

from rblnctl.cli.output import Table, fold
from tests.fakes import objects as o
from tests.fakes import sysfs as ht
from tests.fakes.operator import SimulatedOperator, stack_v030
from tests.helpers import cli
from tests.terminal import cli_on_terminal, on_terminal, piped
from rblnctl.constants import OPERATOR_NAMESPACE as OPS

RECORD = json.dumps({"target": "vm-passthrough", "from": "container", "started": "2026-12-04T10:00:00Z",
                     "cordoned_by_rblnctl": True, "step": "wait", "by": "alice"})


def words(text: str) -> set[str]:
    return set(text.replace(",", " ").split())


# -- folding -----------------------------------------------------------------------------------------------------


def test_fold_breaks_at_spaces_and_after_commas_never_inside_a_word():
    text = "VM (hypervisor CPU flag set; no DMI strings) without a vIOMMU: no IOMMU groups"
    lines = fold(text, 20)
    assert all(len(line) <= 20 for line in lines)
    assert " ".join(lines).split() == text.split()  # every word whole, in order
    assert fold("a,bb,ccc,dddd", 6) == ["a,bb,", "ccc,", "dddd"]
    assert fold("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]  # only a word wider than the line is cut
    assert fold("  FAIL host.virt: give this VM a vIOMMU", 20, indent=4) == ["  FAIL host.virt:", "    give this VM a",
                                                                            "    vIOMMU"]


def test_a_table_folds_its_widest_column_to_the_terminal_and_keeps_names_whole():
    t = Table("NAME", "REASON")
    t.add_row("rbln-npu-feature-discovery-npu-node-1", "RBLN operator component npu-feature-discovery: the operator "
              "replaces it")
    piped_text = t.render()
    assert len(piped_text.splitlines()) == 2  # no width: one line per row, whatever its length
    lines = t.render(width=64).splitlines()
    assert all(len(line) <= 64 for line in lines) and len(lines) > 2
    assert lines[1].startswith("rbln-npu-feature-discovery-npu-node-1   RBLN")  # the name is never cut
    assert words(" ".join(lines[1:])) == words(t.rows[0][0] + " " + t.rows[0][1])


# -- preflight --local, the README's first command ----------------------------------------------------------------


def test_preflight_local_at_80_columns_folds_evidence_at_words_and_piped_keeps_a_row_a_line(tmp_path):
    root = str(ht.build_host(tmp_path / "host", ht.vm_without_viommu()).root)
    screen = on_terminal(["preflight", "--local", "--root", root])
    assert screen.code == 1, screen.text
    assert [line for line in screen.lines if len(line) > 80] == []  # the `error:` line folds too (issue 39)
    report = json.loads(piped(["preflight", "--local", "--root", root, "-o", "json"])[0])
    for check in report["checks"]:
        assert words(check["evidence"]) <= words(screen.text), check["id"]  # no word broken by the terminal
        assert words(check["title"]) <= words(screen.text)
    out, _, code = piped(["preflight", "--local", "--root", root])
    assert code == 1
    for check in report["checks"]:  # `| grep TITLE` finds the whole row
        (row,) = [line for line in out.splitlines() if check["title"] in line]
        assert check["evidence"] in row


# -- node list, status ---------------------------------------------------------------------------------------------


@pytest.fixture
def mid_switch(apiserver):
    """npu-node-1: vm-passthrough, cordoned, with the record of a switch rblnctl has not finished (as Ctrl-C leaves
    it); npu-node-2: container."""
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True),
                  o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"),
                  o.npu_node("npu-node-1", mode="vm-passthrough", unschedulable=True,
                             annotations={"rebellions.ai/rblnctl.set-mode": RECORD}),
                  o.npu_node("npu-node-2"))
    return apiserver


def test_node_list_and_status_mark_a_node_mid_switch(mid_switch):
    for args in (("node", "list"), ("status",)):
        r = cli(*args, server=mid_switch.url)
        assert r.exit_code == 0, r.stderr
        (row,) = [line for line in r.stdout.splitlines() if line.startswith("npu-node-1 ")]
        assert "Ready,SchedulingDisabled,Switching" in row.split()
        (other,) = [line for line in r.stdout.splitlines() if line.startswith("npu-node-2 ")]
        assert "Switching" not in other
        (note,) = [line for line in r.stderr.splitlines() if "Switching" in line]
        assert "container -> vm-passthrough" in note and "alice" in note and "step wait" in note
        assert "rblnctl node history npu-node-1" in note and "rblnctl node set-mode vm npu-node-1" in note
    items = json.loads(cli("node", "list", "-o", "json", server=mid_switch.url).stdout)["items"]
    assert {i["name"]: i["switch"] for i in items} == {
        "npu-node-1": {"from": "container", "to": "vm-passthrough", "step": "wait", "started": "2026-12-04T10:00:00Z",
                       "user": "alice"}, "npu-node-2": None}


def test_node_list_and_status_fit_80_columns_and_wide_has_the_rest(mid_switch):
    for args in (["node", "list"], ["status"]):
        screen = on_terminal(["--server", mid_switch.url, *args])
        assert screen.code == 0, screen.text
        assert screen.widest() <= 80, [line for line in screen.lines if len(line) > 80]
    status = on_terminal(["--server", mid_switch.url, "status"]).text
    # the Policy line folds between its words, under its value, never `sandbox\nDevicePlugin`
    assert "sandboxDevicePlugin=true" in status and "(components in rbln-system)" in status
    (policy,) = [i for i, line in enumerate(status.splitlines()) if line.startswith("Policy:")]
    assert status.splitlines()[policy + 1].startswith(" " * len("Policy:      ") + "")
    out, _, _ = piped(["--server", mid_switch.url, "node", "list"])
    assert out.splitlines()[0].split() == ["NAME", "MODE", "STATUS", "NPUS", "ALLOCATED", "FREE"]
    wide, _, _ = piped(["--server", mid_switch.url, "node", "list", "-o", "wide"])
    assert "RESOURCES" in wide.splitlines()[0] and len(wide.splitlines()) == 3  # piped: a node a line


# -- set-mode: the plan, the dry-run counts, the wait --------------------------------------------------------------


@pytest.fixture
def v030(apiserver):
    """Operator v0.3.0 on two RBLN-CA12 nodes (its sandbox plugin sits in Init:0/2 on a vm node for good)."""
    op = stack_v030(apiserver)
    yield apiserver
    op.stop()


def test_set_mode_plan_counts_the_operator_pods_in_one_row_and_wide_lists_them(v030):
    screen = on_terminal(["--server", v030.url, "node", "set-mode", "vm", "npu-node-1"], answers=["n"])
    assert screen.code == 1, screen.text
    assert screen.widest() <= 80, [line for line in screen.lines if len(line) > 80]
    assert "(7 operator pods)" in screen.text and "rbln-daemon-npu-node-1" not in screen.text
    shown = screen.text.split("[y/N]")[0].splitlines()
    assert len(shown) <= 24  # the warning, the plan and the question on one 80x24 screen
    wide = cli("node", "set-mode", "vm", "npu-node-1", "--dry-run", "-o", "wide", server=v030.url)
    assert "rbln-daemon-npu-node-1" in wide.stdout and "operator pods)" not in wide.stdout


def test_continue_on_error_dry_run_counts_only_the_nodes_that_change_and_warns_only_about_them(v030):
    v030.mutate("Node", "npu-node-1", fn=lambda n: n["metadata"].setdefault("annotations", {}).update(
        {"rebellions.ai/rblnctl.set-mode": RECORD}))
    r = cli("node", "set-mode", "container", "npu-node-1", "npu-node-2", "--continue-on-error", "--dry-run",
            server=v030.url)
    assert r.exit_code == 0, r.stderr
    assert "switch 0 of 2 node(s) (1 unchanged, 1 skipped) to container" in r.stdout
    (row,) = [line for line in r.stdout.splitlines() if line.startswith("npu-node-1 ")]
    assert row.split()[3] == "skipped"
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warnings and all("npu-node-1" not in w or "is skipped" in w for w in warnings), warnings
    r = cli("node", "set-mode", "vm", "npu-node-1", "npu-node-2", "--continue-on-error", "--dry-run", server=v030.url)
    assert "switch 2 node(s) to vm" in r.stdout  # both change: no count to qualify


def test_the_wait_names_the_init_state_and_its_times_and_piped_prints_a_line_per_change(v030):
    v030.forbid("get", "pods/log", OPS)
    r = cli("node", "set-mode", "vm", "npu-node-1", "--yes", "--timeout", "3", server=v030.url)
    assert r.exit_code == 5, r.stderr
    waits = [line for line in r.stderr.splitlines() if line.startswith("waiting ")]
    assert waits and all(re.match(r"waiting \d+s, \d+s left: ", w) for w in waits), waits
    assert all(len(w) <= 300 for w in waits)
    firsts = [w.split(" left: ", 1)[1].split(" (+")[0] for w in waits]
    assert len(firsts) == len(set(firsts))  # a line only when what it says changes
    # issue 39, finding 11: the known pattern (driver-ready waits for the driver), not "its log cannot be read"
    assert "Init:0/2, stuck in init container driver-ready: it waits for " in waits[-1], waits
    assert "which only the driver pod writes" in waits[-1] and "cannot be read" not in waits[-1], waits


def test_the_wait_on_a_terminal_ticks_its_times_beside_the_spinner(v030):
    screen = on_terminal(["--server", v030.url, "node", "set-mode", "vm", "npu-node-1", "--yes", "--timeout", "3"])
    assert screen.code == 5, screen.text
    ticks = set(re.findall(r"waiting (\d+)s, (\d+)s left: Init:0/2", screen.raw))  # every frame drawn
    assert len(ticks) >= 2, screen.text  # the same state, its elapsed time moving on


def test_the_pool_detail_column_puts_the_reason_first():
    """The live pool table cuts DETAIL at the terminal's edge: the held pod's state comes before its long name."""
    from rblnctl.cli.pool import PoolProgress, progress_lines
    from rblnctl.node.events import WaitState
    from rblnctl.operator.components import InitHold
    from rblnctl.operator.convergence import Missing, Pending

    hold = InitHold(namespace=OPS, pod="rbln-sandbox-device-plugin-npu-node-1", component="sandbox-device-plugin",
                    container="driver-ready", state="running", started=None, status="Init:0/2", stuck=True)
    p = PoolProgress(["npu-node-1"], title="switch 1 node(s) to vm")
    ev = p._node_events("npu-node-1")
    ev.on_step("wait", "waiting for the operator to switch node npu-node-1 to vm-passthrough")
    ev.on_wait(WaitState(node="npu-node-1", target="vm-passthrough", timeout_s=600, pending=(
        Pending(kind=Missing.RESOURCE, text="allocatable has no rebellions.ai/ATOM_PT yet"),
        Pending(kind=Missing.POD, text=hold.describe(), hold=hold))))
    (row,) = [t.plain for t in progress_lines("t", list(p.rows.items()), 80, 1.0)][2:]
    assert len(row) <= 80 and row.split()[:2] == ["npu-node-1", "wait"]
    assert row.split("   ")[-1].strip().startswith("Init:0/2, stuck in init container driver-"), row


def test_single_node_result_does_not_wrap_at_80_columns(apiserver):
    """The header read `... CORDONED UNCORDONED` and wrapped (`UNCORDONE`/`D`) for an ordinary node name."""
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True),
                  o.npu_node("npu-worker-a01"))
    op = SimulatedOperator(apiserver).start()
    try:
        assert op.wait_idle()
        r = cli("node", "set-mode", "vm", "npu-worker-a01", "--yes", server=apiserver.url)
    finally:
        op.stop()
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NODE", "FROM", "TO", "RESULT", "DURATION", "EVICTED"]  # as the pool's table
    assert lines[1].split()[:4] == ["npu-worker-a01", "container", "vm-passthrough", "done"]
    assert max(len(line) for line in lines) <= 80, lines


def test_node_history_fits_80_columns_a_run_a_line_and_wide_has_from_and_to(apiserver):
    """Issue 39: the history table was 87 columns (FROM and TO as label values): at 80 a column went under every row.
    A run is named as the command that ran it (`set-mode vm`); FROM and TO as the label says them are -o wide's."""
    apiserver.user = "alice@example.com"  # docs/node.md's example user
    apiserver.add(o.cluster_policy(), o.npu_node("npu-worker-a01"))
    op = SimulatedOperator(apiserver).start()
    try:
        assert op.wait_idle()
        for args in (("set-mode", "vm"), ("drain",), ("set-mode", "container")):
            r = cli("node", *args, "npu-worker-a01", "--yes", server=apiserver.url)
            assert r.exit_code == 0, r.stderr
    finally:
        op.stop()
    screen = cli_on_terminal("node", "history", "npu-worker-a01", server=apiserver.url)
    assert screen.code == 0, screen.text
    lines = screen.text.splitlines()
    assert [line.split()[1:] for line in lines] == [
        ["ACTION", "RESULT", "USER"], ["set-mode", "vm", "done", "alice@example.com"],
        ["drain", "done", "alice@example.com"], ["set-mode", "container", "done", "alice@example.com"]], screen.text
    assert max(len(line) for line in lines) <= 80
    wide, _, _ = piped(["--server", apiserver.url, "node", "history", "npu-worker-a01", "-o", "wide"])
    header, switch, *_ = wide.splitlines()
    assert header.split()[4:7] == ["FROM", "TO", "FINISHED"]
    assert switch.split()[1:7] == ["set-mode", "vm", "done", "alice@example.com", "container", "vm-passthrough"]
