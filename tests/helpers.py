"""Run the CLI in-process (typer's CliRunner) with stdout and stderr kept apart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


def blocked_in(thread: Any, *functions: str) -> bool:
    """`thread` is inside every one of `functions` (its frames name them): it waits there."""
    import sys

    names = set()
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return set(functions) <= names


@contextmanager
def ctrl_c_pending_when(ready: Callable[[], bool]) -> Iterator[None]:
    """Run the block on the main thread; once `ready()` holds (the main thread blocked where the test wants it), make
    SIGINT's handler pending without a signal that interrupts the wait (_thread.interrupt_main): the state a Ctrl-C
    that lands just before the main thread blocks leaves (it lands while the thread hands the GIL over, after the
    interpreter last looked for signals). Fails when the block was still running 10 s later: a real SIGINT then
    interrupts the wait, so the test ends."""
    import _thread
    import signal
    import threading
    import time

    main = threading.main_thread()
    assert threading.current_thread() is main  # where signal handlers run
    returned, stuck = threading.Event(), threading.Event()
    failures: list[str] = []

    def ctrl_c() -> None:
        deadline = time.monotonic() + 5  # a bound for a slow machine, not the expected time
        while not ready():
            if returned.is_set() or time.monotonic() > deadline:
                failures.append("the main thread never waited where the test interrupts it")
                return
            time.sleep(0.01)
        _thread.interrupt_main()
        if not returned.wait(10):  # a bound for a slow machine, not the expected time
            stuck.set()
            signal.pthread_kill(main.ident, signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    try:
        yield
    finally:
        returned.set()
    assert not failures, failures[0]
    assert not stuck.is_set(), "the pending Ctrl-C ran only when a second one interrupted the wait"
