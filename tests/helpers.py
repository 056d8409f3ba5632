"""Run the CLI in-process (typer's CliRunner) with stdout and stderr kept apart."""

from __future__ import annotations

from typing import Any

import typer.testing
from typer.testing import CliRunner

from rblnctl.cli.app import app

# typer builds the click command tree of an app on every CliRunner.invoke (about 0.1 s for rblnctl's, more than most
# commands take against the fake): built once per app here, as a real `rblnctl` process builds it once.
_build = typer.testing._get_command
_BUILT: dict[Any, Any] = {}


def _get_command_once(typer_app: Any) -> Any:
    if typer_app not in _BUILT:
        _BUILT[typer_app] = _build(typer_app)
    return _BUILT[typer_app]


typer.testing._get_command = _get_command_once


def cli(*args: str, server: str | None = None, input: str | None = None):
    """Invoke `rblnctl ARGS` (with `--server URL` first when given); return the click Result."""
    argv = (["--server", server] if server else []) + [str(a) for a in args]
    return CliRunner().invoke(app, argv, input=input, catch_exceptions=False)


def closed_port_url() -> str:
    """http://127.0.0.1:<port> for a port the OS just handed out and that nothing listens on any more."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def signal_rblnctl(apiserver: Any, argv: list[str], ready: Any, sig: Any, *, grace_s: float = 0.0,
                   exit_within_s: float = 30.0) -> tuple[int, float, str]:
    """Run rblnctl as a real process against `apiserver`, send `sig` once `ready()` holds (then `grace_s` more), and
    return (exit code, seconds from the signal to the exit, stderr). Fails the test when the process is still there
    `exit_within_s` after the signal: only a real process shows what holds it at exit."""
    import subprocess
    import sys
    import time

    import pytest

    proc = subprocess.Popen([sys.executable, "-m", "rblnctl", "--server", apiserver.url, *argv],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not ready():
            assert time.monotonic() < deadline and proc.poll() is None, "rblnctl never got there"
            time.sleep(0.02)
        time.sleep(grace_s)
        sent = time.monotonic()
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=exit_within_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"rblnctl still runs {exit_within_s} s after {sig.name}")
        return proc.returncode, time.monotonic() - sent, err.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def vm_fit_per_product(server: str, npus: int, *lines: str) -> list[dict]:
    """`vm fit --npus N` on a cluster of several products in vm mode (issue 39, finding 4): it answers, each of
    `lines` in its table, and `-o yaml` is a VmFitList; returns its items."""
    import yaml

    r = cli("vm", "fit", "--npus", str(npus), server=server)
    assert r.exit_code == 0, r.stderr
    for line in lines:
        assert line in r.stdout, r.stdout
    doc = yaml.safe_load(cli("vm", "fit", "--npus", str(npus), "-o", "yaml", server=server).stdout)
    assert doc["kind"] == "VmFitList", doc
    return doc["items"]
