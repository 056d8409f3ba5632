"""Run a real `rblnctl` process on a pseudo-terminal of a given size, as a person at an 80x24 terminal sees it.

`on_terminal(args, columns=80)` gives the screen's text (what the terminal received, control sequences taken out,
`\\r\\n` as `\\n`) and the exit code; stdin, stdout and stderr are all the terminal, so rblnctl measures it, may
ask `[y/N]` (answered from `answers`) and draws spinners. `piped(args)` runs the same with stdout and stderr on
pipes, as `rblnctl ... | grep` does. Both pass COLUMNS and the window size, and NO_COLOR (the text stays plain).
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Mapping, Sequence

_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[=>]")


@dataclasses.dataclass(frozen=True)
class Screen:
    text: str  # what the terminal showed, control sequences removed
    code: int

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def widest(self) -> int:
        return max((len(line) for line in self.lines), default=0)


def _env(columns: int, env: Mapping[str, str] | None) -> dict[str, str]:
    full = dict(os.environ)
    full.pop("KUBECONFIG", None)
    full.update({"COLUMNS": str(columns), "LINES": "24", "TERM": "xterm", "NO_COLOR": "1"})
    full.update(env or {})
    return full


def plain(raw: str) -> str:
    """Terminal output as text: control sequences out; a line redrawn after `\\r` or cursor-up keeps its last text."""
    raw = raw.replace("\r\n", "\n")
    raw = _CSI.sub("", raw)
    return "\n".join(line.rsplit("\r", 1)[-1] for line in raw.split("\n"))


def on_terminal(args: Sequence[str], *, columns: int = 80, env: Mapping[str, str] | None = None,
                answers: Sequence[str] = (), timeout: float = 90.0) -> Screen:
    """`rblnctl ARGS` with stdin, stdout and stderr on a pseudo-terminal `columns` wide and 24 lines high."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "rblnctl", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=_env(columns, env), start_new_session=True, close_fds=True)
    os.close(slave)
    out = b""
    pending = list(answers)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            out += chunk
            if pending and out.rstrip().endswith(b"[y/N]:"):
                os.write(master, pending.pop(0).encode() + b"\n")
    finally:
        os.close(master)
        try:
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    return Screen(text=plain(out.decode(errors="replace")), code=code)


def piped(args: Sequence[str], *, columns: int = 80, env: Mapping[str, str] | None = None,
          timeout: float = 90.0) -> tuple[str, str, int]:
    """`rblnctl ARGS | ...`: stdout and stderr on pipes (COLUMNS still set, as in a shell at that terminal)."""
    p = subprocess.run([sys.executable, "-m", "rblnctl", *args], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, env=_env(columns, env), timeout=timeout)
    return p.stdout, p.stderr, p.returncode
