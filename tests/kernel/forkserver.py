"""rblnctl runs for the kernel tier without paying Python's start-up under TCG each time.

`python -m tests.kernel.forkserver DIR` (started in the guest, in the background, once per boot) imports rblnctl's
command layer and everything `vfio` and `preflight --local` import, writes DIR/ready, then serves requests one at a
time: DIR/<id>.req is JSON `{"argv": [...], "log": FILE|null, "crash_after": N|null, "merge": bool}`. For each it
forks; the child resets SIGINT to Python's default (a background job has it ignored), points stdout (and stderr,
or /dev/null) at DIR/<id>.out, installs the write seam (tests/kernel/seam.py) when asked, and runs rblnctl's own
entry point (rblnctl.cli.app.main) with argv, exactly as the `rblnctl` script does; the parent waits and writes
DIR/<id>.rc (128 + signal for a killed child, like a shell). Each command runs in a fresh child that ran nothing
before it; only the imports are shared. Under TCG that takes a command from 4-6 s to about 1 s.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import NoReturn


def serve(queue: str) -> None:
    import rblnctl.cli.app  # noqa: F401  (the imports every command pays)
    import rblnctl.cli.preflight  # noqa: F401
    import rblnctl.cli.vfio  # noqa: F401
    import rblnctl.host.vfio  # noqa: F401
    import rblnctl.preflight.host  # noqa: F401
    from tests.kernel import seam  # noqa: F401

    with open(os.path.join(queue, "ready"), "w") as f:
        f.write(f"{os.getpid()}\n")
    while True:
        reqs = sorted(n for n in os.listdir(queue) if n.endswith(".req"))
        if not reqs:
            time.sleep(0.02)
            continue
        base = os.path.join(queue, reqs[0][:-4])
        with open(base + ".req") as f:
            req = json.load(f)
        os.unlink(base + ".req")
        pid = os.fork()
        if pid == 0:
            child(req, base + ".out")
        _, status = os.waitpid(pid, 0)
        with open(base + ".tmp", "w") as f:
            f.write(f"{shell_status(status)}\n")
        os.rename(base + ".tmp", base + ".rc")


def shell_status(status: int) -> int:
    """A waitpid status as a shell reports it: the exit code, or 128 + the signal that killed the process."""
    rc = os.waitstatus_to_exitcode(status)
    return 128 - rc if rc < 0 else rc


def child(req: dict, out_path: str, prepare: Callable[[], None] | None = None) -> NoReturn:
    """In a forked child: run rblnctl's entry point with `req` (the queue's JSON request) writing to `out_path`, then
    exit with its status. `prepare` runs first (the fake backend points the program at its tree there)."""
    code = 70
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = out if req.get("merge", True) else os.open(os.devnull, os.O_WRONLY)
        os.dup2(out, 1)
        os.dup2(err, 2)
        # under pytest sys.stdout/stderr are its capture objects, not fds 1 and 2
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        if prepare is not None:
            prepare()
        if req.get("log") or req.get("crash_after") is not None:
            from tests.kernel import seam

            seam.observe(req.get("log"), req.get("crash_after"))
        from rblnctl.cli.app import main

        sys.argv = ["rblnctl", *req["argv"]]
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1])
