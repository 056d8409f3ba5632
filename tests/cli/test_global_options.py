"""Global options may follow the subcommand (kubectl style); --dry-run=MODE is spelled kubectl's way."""

from __future__ import annotations

import signal

import pytest
import typer

from rblnctl.cli.errors import hoist_global_options


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["kubevirt", "status", "--context", "prod"], ["--context", "prod", "kubevirt", "status"]),
        (["kubevirt", "status", "--context=prod"], ["--context=prod", "kubevirt", "status"]),
        (["--context", "a", "node", "list", "-v"], ["--context", "a", "-v", "node", "list"]),
        (["node", "list", "-vv", "--no-color"], ["-vv", "--no-color", "node", "list"]),
        (["x", "--kubeconfig", "/k", "-o", "json"], ["--kubeconfig", "/k", "x", "-o", "json"]),
        (["kubevirt", "enable-gates", "--dry-run=server"], ["kubevirt", "enable-gates", "--server-dry-run"]),
        (["kubevirt", "enable-gates", "--dry-run=client"], ["kubevirt", "enable-gates", "--dry-run"]),
        (["kubevirt", "enable-gates", "--dry-run=none"], ["kubevirt", "enable-gates"]),
        (["vfio", "bind", "--", "--context"], ["vfio", "bind", "--", "--context"]),
    ],
)
def test_hoist(argv, expected):
    assert hoist_global_options(argv) == expected


def test_bad_dry_run_mode_is_a_usage_error():
    with pytest.raises(typer.BadParameter):
        hoist_global_options(["kubevirt", "enable-gates", "--dry-run=maybe"])


def _root():
    import typer.main

    from rblnctl.cli.app import app

    return typer.main.get_command(app)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # A subcommand option's value that spells a global option stays that option's value.
        (["node", "list", "-l", "--context"], ["node", "list", "-l", "--context"]),
        (["node", "list", "--selector", "-v", "--context", "c"],
         ["--context", "c", "node", "list", "--selector", "-v"]),
        (["node", "drain", "n1", "--grace-period", "5", "-v"], ["-v", "node", "drain", "n1", "--grace-period", "5"]),
        # `--opt=value` carries its value; flags take none; a positional that names a command is a positional.
        (["node", "list", "-l=a", "--no-color"], ["--no-color", "node", "list", "-l=a"]),
        (["node", "set-mode", "status", "vm", "--dry-run", "--context", "c"],
         ["--context", "c", "node", "set-mode", "status", "vm", "--dry-run"]),
        (["-v", "vfio", "status", "-vv", "--", "-v"], ["-v", "-vv", "vfio", "status", "--", "-v"]),
        (["preflight", "--local", "--root", "/r", "--kubeconfig", "k"],
         ["--kubeconfig", "k", "preflight", "--local", "--root", "/r"]),
    ],
)
def test_hoist_knows_the_subcommands_options(argv, expected):
    assert hoist_global_options(argv, _root()) == expected


def test_option_value_equal_to_a_global_option_reaches_the_command(apiserver):
    from tests.helpers import cli

    r = cli("node", "list", "-l", "--context", server=apiserver.url)
    selectors = [q.query.get("labelSelector", [""])[0] for q in apiserver.requests if q.path == "/api/v1/nodes"]
    assert selectors and selectors[0].endswith(",--context")  # sent as the selector (the server rejects it)
    assert r.exit_code == 2 and "bad label selector '--context'" in r.stderr and "Traceback" not in r.stderr


def test_verbose_counts_on_both_sides_of_the_subcommand(apiserver, mocker):
    from rblnctl.cli.app import State
    from tests.helpers import cli

    seen = []
    real = State.__init__

    def spy(self, **kw):
        seen.append(kw["verbose"])
        real(self, **kw)

    mocker.patch.object(State, "__init__", spy)
    cli("-v", "node", "list", "-vv", "-o", "json", server=apiserver.url)
    assert seen == [3]


def test_bad_request_timeout_exits_2():
    from tests.helpers import cli

    r = cli("node", "list", "--request-timeout", "soon")
    assert r.exit_code == 2 and "--request-timeout" in r.stderr


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_at_the_prompt_exits_128_plus_signum_and_changes_nothing(apiserver, sig, code):
    """A real process on a pseudo-terminal: Ctrl-C, `timeout` or a dropped ssh session at [y/N]."""
    import os
    import pty
    import subprocess
    import sys
    import time

    from tests.fakes import objects as o

    apiserver.add(o.npu_node("n1"), o.pod("default", "npu-app", node="n1", owner_kind="ReplicaSet", owner_name="web",
                                          requests={"rebellions.ai/npu": "1"}))
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "rblnctl", "--server", apiserver.url, "node", "drain", "n1"],
                            stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(follower)
    try:
        deadline = time.monotonic() + 30
        while not any(r.method == "GET" and r.path.endswith("/pods") for r in apiserver.requests):
            assert time.monotonic() < deadline and proc.poll() is None, "rblnctl never listed the node's pods"
            time.sleep(0.05)
        time.sleep(0.5)  # past the read, at the prompt
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert b"Aborted" not in err and b"Traceback" not in err
    assert apiserver.writes() == []


def test_end_of_input_at_the_prompt_is_no(apiserver, monkeypatch):
    import rblnctl.cli.console
    from tests.fakes import objects as o
    from tests.helpers import cli

    monkeypatch.setattr(rblnctl.cli.console, "stdin_is_tty", lambda: True)
    apiserver.add(o.npu_node("n1"), o.pod("default", "npu-app", node="n1", owner_kind="ReplicaSet", owner_name="web",
                                          requests={"rebellions.ai/npu": "1"}))
    r = cli("node", "drain", "n1", server=apiserver.url, input="")
    assert r.exit_code == 1 and apiserver.writes() == []
    assert "not confirmed" in r.stderr


@pytest.mark.parametrize(("argv", "first"), [
    (["node", "set-mode", "--bogus"], "error: no such option: --bogus"),
    (["node", "set-mode"], "error: missing argument 'MODE [NODE]...'"),
    (["nod"], "error: no such command 'nod'. Did you mean 'node'?"),
    (["node", "drain", "n1", "--grace-period", "soon"], "error: invalid value for '--grace-period'"),
])
def test_usage_errors_read_like_kubectls(argv, first):
    """One style for every error: `error: ...` in lower case, then where the usage is; no Usage block, exit 2."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "rblnctl", *argv], capture_output=True, text=True, timeout=60)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and r.stdout == ""
    assert lines[0].startswith(first) and len(lines[0]) < 120, lines
    path = "rblnctl" if argv == ["nod"] else f"rblnctl node {argv[1]}"
    assert lines[1:] == [f"See '{path} --help' for usage."]


def test_a_group_without_a_command_prints_its_help_and_exits_0():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "rblnctl", "node"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "set-mode" in r.stdout and r.stderr == ""
