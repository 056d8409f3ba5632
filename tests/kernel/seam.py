"""Run rblnctl with its sysfs write seam observed: `python -m tests.kernel.seam [--log FILE] [--crash-after N] -- ARGS`.

The kernel tier's crash points come from rblnctl's own writes: the real writer (rblnctl.host.vfio.writer.FileWriter)
is wrapped so that each write it completes is appended to FILE (one JSON line: path, value), and with
`--crash-after N` the process kills itself with SIGKILL right after its N-th completed write, as a power cut or
`kill -9` would stop it: no rollback, no `finally`, no state-file settling. Everything else is the real program
(rblnctl.cli.app.main with ARGS).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path


def observe(log: str | None, crash_after: int | None) -> None:
    """Wrap the real writer: log each completed write to `log`, SIGKILL this process after the `crash_after`-th."""
    import rblnctl.host.vfio.writer as writers

    real = writers.default_writer
    count = [0]

    class Observed:
        def __init__(self) -> None:
            self.inner = real()

        def write(self, path: Path, value: str, **kw: object) -> None:
            self.inner.write(path, value, **kw)  # type: ignore[arg-type]
            count[0] += 1
            if log:
                with open(log, "a") as f:
                    f.write(json.dumps({"path": str(path), "value": value}) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
            if crash_after is not None and count[0] >= crash_after:
                os.kill(os.getpid(), signal.SIGKILL)

    writers.default_writer = Observed  # type: ignore[assignment]


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="seam")
    p.add_argument("--log")
    p.add_argument("--crash-after", type=int)
    p.add_argument("args", nargs=argparse.REMAINDER)
    ns = p.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    observe(ns.log, ns.crash_after)
    from rblnctl.cli.app import main as rblnctl_main

    sys.argv = ["rblnctl", *args]
    rblnctl_main()


if __name__ == "__main__":
    main(sys.argv[1:])
