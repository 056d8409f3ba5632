"""Issue 39: every screen at 80 columns, generated. Every command's human output, in every scenario world of the
suite's fakes, on an 80-column terminal: no line wider than the terminal, with one exception, a whole command
standing alone on its own line (rblnctl.cli.fold.is_command_line: breaking it would break what a person copies).

The worlds are test_output_schema's (one per `-o json` scenario: the cluster ones on the fake API server with the
simulated operator, the host ones on a simulated host tree), the stuck-init world of operator v0.3.0 (set-mode's
wait, then node list, status and preflight there), a two-product cluster, and every command's `--help`. Each runs
in this process as if on a terminal (tests.terminal.cli_on_terminal: COLUMNS=80, every stream a tty), in the table
and `-o wide` formats, stdout and stderr as the terminal shows them together.
"""

from __future__ import annotations

import pytest

from rblnctl.cli.fold import is_command_line
from tests.cli.test_help import COMMANDS
from tests.cli.test_output_schema import SCENARIOS, Scenario, cluster, host  # noqa: F401 (fixtures)
from tests.fakes import sysfs as ht
from tests.fakes.operator import stack_v030
from tests.terminal import cli_on_terminal, on_terminal, plain

WIDTH = 80


def too_wide(text: str, width: int = WIDTH) -> list[str]:
    """The lines of a screen wider than the terminal that are not a whole command alone on its line."""
    return [line for line in text.splitlines() if len(line) > width and not is_command_line(line)]


def _id(scenario: Scenario) -> str:
    setup = getattr(scenario.setup, "__name__", "")
    return " ".join(scenario.args) + (f" [{setup.strip('_')}]" if setup else "")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_id)
def test_every_scenario_fits_80_columns_as_a_table_and_wide(scenario, request, tmp_path):
    if scenario.cluster:
        apiserver = request.getfixturevalue("cluster")
        if scenario.setup:
            scenario.setup(apiserver)
        args, server = scenario.args, apiserver.url
    else:
        kern = request.getfixturevalue("host")
        if scenario.setup:
            scenario.setup(kern)
        extra = ("--root", str(kern.root))
        if scenario.args[0] == "preflight":
            extra = ("--root", str(ht.build_host(tmp_path / "h", ht.intel_bare_metal()).root))
        elif scenario.args[1] != "status":
            extra += ("--state-file", str(kern.root / "state.json"))
        args, server = (*scenario.args, *extra), None
    mutating = "--dry-run" not in args and scenario.cluster and args[0] not in ("status", "version", "preflight") \
        and args[:2] not in (("vm", "list"), ("vm", "fit"), ("vm", "diagnose"), ("node", "list"),
                             ("node", "history"), ("kubevirt", "status"), ("policy", "show"))
    formats: tuple[tuple[str, ...], ...] = ((),) if mutating or not scenario.cluster and "--yes" in args \
        else ((), ("-o", "wide"))  # a write runs once: its second run would be a no-op in a changed world
    for fmt in formats:
        screen = cli_on_terminal(*args, *fmt, server=server)
        assert "Traceback" not in screen.text, screen.text
        if fmt and screen.code == 2 and "-o " in screen.text:
            continue  # a format this command does not print
        assert too_wide(screen.text) == [], f"{' '.join(args + fmt)}:\n{screen.text}"


def test_the_stuck_plugin_world_fits_80_columns(apiserver):
    """Operator v0.3.0's sandbox plugin held in Init:0/2: set-mode's wait, then every view that shows the node."""
    op = stack_v030(apiserver, ("n1", "n2"))
    try:
        screens = [cli_on_terminal("node", "set-mode", "vm", "n1", "--yes", "--timeout", "1", server=apiserver.url)]
        assert screens[0].code == 5 and op.stuck_in_init, screens[0].text
        for args in (("node", "list"), ("node", "list", "-o", "wide"), ("status",), ("status", "-o", "wide"),
                     ("preflight",), ("node", "history", "n1")):
            screens.append(cli_on_terminal(*args, server=apiserver.url))
    finally:
        op.stop()
    for screen in screens:
        assert too_wide(screen.text) == [], screen.text


def test_a_two_product_cluster_fits_80_columns(apiserver):
    """The issue's stack: operator v0.3.0 on nodes of two products (RBLN-CA12 twice, RBLN-CA22), one of them mid-way
    to vm mode with its plugin held: every read, as a table and -o wide."""
    from tests.fakes import objects as o
    from tests.fakes.releases import V0_3_0

    op = stack_v030(apiserver)
    try:
        (policy,) = apiserver.list("RBLNClusterPolicy")
        apiserver.add(o.npu_node("npu-node-3", product="RBLN-CA22", release=V0_3_0, policy=policy))
        assert op.wait_idle()
        screens = [cli_on_terminal("node", "set-mode", "vm", "npu-node-3", "--yes", server=apiserver.url),
                   cli_on_terminal("node", "set-mode", "vm", "npu-node-1", "--yes", "--timeout", "1",
                                   server=apiserver.url)]
        for args in (("node", "list"), ("status",), ("vm", "fit", "--npus", "2"), ("vm", "fit", "--npus", "1",
                     "--product", "RBLN-CA22"), ("policy", "show"), ("kubevirt", "status"), ("vm", "list", "-A"),
                     ("preflight",), ("vm", "manifest", "my-vm", "-n", "vms", "--npus", "2")):
            for fmt in ((), ("-o", "wide")):
                screens.append(cli_on_terminal(*args, *fmt, server=apiserver.url))
    finally:
        op.stop()
    for screen in screens:
        assert "Traceback" not in screen.text
        assert too_wide(screen.text) == [], screen.text


def test_prose_folds_at_spaces_and_a_command_stands_alone_never_broken():
    """Finding 5: `error:` lines were unfolded, so the terminal split `virtctl stop my-vm -n v` / `ms` and
    `--reverse --timeout 20s --` / `yes`. fold_prose never breaks a word, and a quoted command that does not fit
    where it stands goes on its own line, indented two more; only such a command may be wider than the line."""
    from rblnctl.cli.fold import fold_prose

    text = ("error: refusing to switch node npu-node-1 to vm: VM vms/my-vm holds its NPUs; stop it with `virtctl "
            "stop my-vm -n vms`, or pass --evict-vms; an unfinished switch: `rblnctl node set-mode container "
            "npu-node-1 --reverse --timeout 20s --yes` goes back")
    lines = fold_prose(text, 80, indent=2)
    assert " ".join(" ".join(lines).split()) == " ".join(text.split())  # every word, in order, none broken
    assert all(len(line) <= 80 for line in lines), lines
    assert "    `rblnctl node set-mode container npu-node-1 --reverse --timeout 20s --yes`" in lines, lines
    assert any("`virtctl stop my-vm -n vms`" in line for line in lines), lines
    long = fold_prose("note: run `rblnctl --context production-cluster-in-region node set-mode vm npu-node-1 "
                      "--evict-vms --timeout 20m --yes` then check", 60, indent=2)
    assert [len(line) > 60 for line in long] == [False, True, False], long  # the command: whole, and alone
    assert too_wide("\n".join(long), 60) == []


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda p: " ".join(p) or "rblnctl")
def test_every_help_screen_fits_80_columns_examples_too(path):
    """No exception here: an example's `# comment` goes above it (rblnctl.cli.options.example_lines) and every
    example command is short enough to stand on its line whole."""
    screen = cli_on_terminal(*path, "--help")
    assert screen.code == 0, screen.text
    assert [line for line in screen.lines if len(line) > WIDTH] == [], screen.text


def test_set_mode_help_is_three_screens_at_most():
    """It was 80 lines (issue 39, finding 6): one line or two per option."""
    assert len(cli_on_terminal("node", "set-mode", "--help").lines) <= 3 * 24 - 12


def spinner_frames(raw: str) -> list[str]:
    """Each frame a spinner drew (rich redraws it after `\r ESC[2K`), as the screen shows it, `^C` included."""
    return [plain(frame).rstrip("\n") for frame in raw.split("\r\x1b[2K")[1:] if frame.strip()]


def test_preflight_hosts_spinner_is_one_line_with_room_for_ctrl_c_and_ctrl_c_erases_it(apiserver, tmp_path):
    """Finding 7: the spinner line was 82 columns (the terminal wrapped it, and rich erased one line of two) and the
    `^C` a terminal echoes after an 80-column line wrapped too: a cut spinner line stayed on the screen. Now a
    spinner line ends ECHO_ROOM short of the edge, a real Ctrl-C on a pty erases it, and what is left is the
    interrupted line."""
    from pathlib import Path

    from tests.fakes.hostkubelet import HostKubelet

    op = stack_v030(apiserver)
    kubelet = HostKubelet(apiserver, default=ht.build_host(Path(tmp_path) / "h", ht.intel_bare_metal()).root).start()
    kubelet.hang.update({"npu-node-1", "npu-node-2"})  # the host pods never finish: the spinner spins
    try:
        screen = on_terminal(["--server", apiserver.url, "preflight", "--hosts", "--timeout", "60s"],
                             ctrl_c_after="\u2819", timeout=120)  # on a loaded CI machine 30 s ran out: the
            # pty then closed under the exiting process (SIGHUP) and it died of it  # the spinner's second frame
    finally:
        kubelet.stop()
        op.stop()
    assert screen.code == 130, screen.text
    frames = spinner_frames(screen.raw)
    assert frames and any(f.endswith("^C") for f in frames), screen.raw
    assert max(len(f) for f in frames) <= WIDTH, frames  # the echoed ^C included: nothing wrapped
    assert screen.text.strip() == "interrupted", screen.text  # the spinner erased whole


def _world_id(world) -> str:
    return world.name


def _explorer_worlds():
    from tests.explore.worlds import WORLDS

    return WORLDS


@pytest.mark.parametrize("world", _explorer_worlds(), ids=_world_id)
def test_every_multi_step_command_fits_80_columns_in_its_explorer_world(world):
    """The crash-point explorer's worlds (tests/explore/worlds.py: each multi-step command on the smallest cluster
    that makes it write every kind of write it makes): its dry run, then the command itself, on the terminal."""
    from tests.explore.engine import _Fresh

    with _Fresh(world) as server:
        screens = []
        if "--hosts" not in world.argv:  # preflight --hosts has no dry run: it only reads and cleans up after itself
            screens.append(cli_on_terminal(*[a for a in world.argv if a != "--yes"], "--dry-run", server=server.url))
        screens.append(cli_on_terminal(*world.argv, server=server.url))
    for screen in screens:
        assert "Traceback" not in screen.text, screen.text
        assert too_wide(screen.text) == [], screen.text
