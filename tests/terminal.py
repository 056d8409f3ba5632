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



@dataclasses.dataclass(frozen=True)
class Screen:
    text: str  # what the terminal showed, control sequences removed
    code: int
    raw: str = ""  # what the process wrote to the terminal
    stdout: str = ""  # with on_terminal(stdout_pipe=True): what it wrote to stdout, a pipe

    def before_first(self, marker: str) -> str:
        """The screen as it stood just before `marker` was first written (the whole screen without it)."""
        at = self.raw.find(marker)
        if at >= 0:  # from where the frame that writes it starts: rich erases the old frame from `\r ESC[2K` on
            at = max(self.raw.rfind("\r\x1b[2K", 0, at), self.raw.rfind("\n", 0, at) + 1)
        return plain(self.raw if at < 0 else self.raw[:at])

    def before_last(self, marker: str) -> str:
        """The screen as it stood just before the last `marker` was written (e.g. a spinner's last frame, before
        `ESC[?25h` shows the cursor again and the spinner is erased)."""
        at = self.raw.rfind(marker)
        return plain(self.raw if at < 0 else self.raw[:at])

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def widest(self) -> int:
        return max((len(line) for line in self.lines), default=0)


def _env(columns: int, env: Mapping[str, str] | None, *, measure: bool = False) -> dict[str, str]:
    full = dict(os.environ)
    full.pop("KUBECONFIG", None)
    full.update({"COLUMNS": str(columns), "LINES": "24", "TERM": "xterm", "NO_COLOR": "1"})
    if measure:  # the window size alone: rblnctl asks the terminal how wide it is
        del full["COLUMNS"], full["LINES"]
    full.update(env or {})
    return full


def plain(raw: str) -> str:
    """Terminal output as the screen's final text: a small emulator of what rich sends (`\r`, `\n`, cursor up
    `ESC[nA`, erase line `ESC[2K`/`ESC[K`; other sequences dropped), so a spinner redrawn in place is one line."""
    rows: list[list[str]] = [[]]
    row = col = 0
    token = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|\x1b[=>]|\r|\n|[^\x1b\r\n]+")
    for m in token.finditer(raw.replace("\r\n", "\n")):
        text = m.group(0)
        if text == "\n":
            row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
        elif text == "\r":
            col = 0
        elif m.group(2):
            arg, cmd = m.group(1), m.group(2)
            if cmd == "A":
                row = max(0, row - int(arg or 1))
            elif cmd == "K":
                rows[row] = rows[row][:col] if arg in ("", "0") else []
        elif not text.startswith("\x1b"):
            line = rows[row]
            line.extend(" " * (col - len(line)))
            line[col:col + len(text)] = list(text)
            col += len(text)
    return "\n".join("".join(r).rstrip() for r in rows).strip("\n") + "\n"


def on_terminal(args: Sequence[str], *, columns: int = 80, env: Mapping[str, str] | None = None,
                answers: Sequence[str] = (), timeout: float = 90.0, stdout_pipe: bool = False,
                measure: bool = False, ctrl_c_after: str | None = None) -> Screen:
    """`rblnctl ARGS` with stdin, stdout and stderr on a pseudo-terminal `columns` wide and 24 lines high.

    `stdout_pipe`: stdout on a pipe instead (`rblnctl ... > file` at a terminal: progress on the screen, the result in
    `Screen.stdout`); `measure`: no COLUMNS or LINES, only the window size, which rblnctl must read itself.
    `ctrl_c_after`: once the process wrote that text, type Ctrl-C (the pty is its controlling terminal: the line
    discipline echoes `^C` and sends SIGINT, as a person's Ctrl-C does)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))

    def controlling_terminal() -> None:  # in the child, after setsid: the pty becomes its terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-m", "rblnctl", *args], stdin=slave,
                            stdout=subprocess.PIPE if stdout_pipe else slave, stderr=slave,
                            env=_env(columns, env, measure=measure), start_new_session=True, close_fds=True,
                            preexec_fn=controlling_terminal if ctrl_c_after else None)
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
            if ctrl_c_after and ctrl_c_after.encode() in out:
                ctrl_c_after = None
                os.write(master, b"\x03")
            if pending and out.rstrip().endswith(b"[y/N]:"):
                os.write(master, pending.pop(0).encode() + b"\n")
    finally:
        os.close(master)
        try:
            stdout, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
    raw = out.decode(errors="replace")
    return Screen(text=plain(raw), code=proc.returncode, raw=raw, stdout=(stdout or b"").decode(errors="replace"))


def piped(args: Sequence[str], *, columns: int = 80, env: Mapping[str, str] | None = None,
          timeout: float = 90.0) -> tuple[str, str, int]:
    """`rblnctl ARGS | ...`: stdout and stderr on pipes (COLUMNS still set, as in a shell at that terminal)."""
    p = subprocess.run([sys.executable, "-m", "rblnctl", *args], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, env=_env(columns, env), timeout=timeout)
    return p.stdout, p.stderr, p.returncode


def cli_on_terminal(*args: str, server: str | None = None, columns: int = 80, input: str | None = None) -> Screen:
    """`rblnctl ARGS` in this process (click's runner, as tests.helpers.cli) as if stdin, stdout and stderr were a
    terminal `columns` wide: every stream says it is a tty, COLUMNS is set and rblnctl's consoles are built afresh,
    so tables, prose and spinners take the terminal's paths (fold, redraw). A fraction of a pty's cost (no new
    Python, no imports): the screen-wide checks run every scenario this way; `on_terminal` stays the real thing."""
    from unittest import mock

    from rblnctl.cli import console
    from rblnctl.cli.app import app
    from tests.helpers import CliRunner  # typer's, its command tree built once

    argv = (["--server", server] if server else []) + [str(a) for a in args]
    env = {"COLUMNS": str(columns), "LINES": "24", "NO_COLOR": "1", "TERM": "xterm"}
    console.stdout.cache_clear()
    console.stderr.cache_clear()
    try:
        with mock.patch("typer.testing._NamedTextIOWrapper.isatty", return_value=True):
            r = CliRunner(env=env).invoke(app, argv, input=input, catch_exceptions=False, prog_name="rblnctl")
    finally:
        console.stdout.cache_clear()
        console.stderr.cache_clear()
    return Screen(text=plain(r.output), code=r.exit_code, raw=r.output, stdout=r.stdout)
