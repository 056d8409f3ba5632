"""The sysfs write seam: every write VfioBinder makes goes through a SysfsWriter."""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path
from typing import Protocol

from rblnctl.errors import HostError

# What `echo > driver_override` writes; the kernel reads it as "no override" (an empty write(2) changes nothing).
CLEAR = "\n"
POLL_S = 0.05  # how often a bounded write looks whether the kernel let it finish


class WriteStillBlocked(HostError):
    """A write that can block in the kernel was still blocked when its bound passed.

    It is not cancelled (the kernel cannot be made to give it up): a child process keeps waiting in the
    write, `pid`, and the write completes once whatever holds the device lets go.
    """

    def __init__(self, message: str, *, pid: int = 0) -> None:
        super().__init__(message)
        self.pid = pid


class SysfsWriter(Protocol):
    """Writes one value to one sysfs attribute; raises OSError exactly as the kernel refuses it.

    `bound_s`: the write can block in the kernel (an unbind from vfio-pci waits until a VFIO user releases the
    device): give up waiting after that many seconds and raise WriteStillBlocked.
    """

    def write(self, path: Path, value: str, *, bound_s: float | None = None) -> None: ...


class FileWriter:
    """The real writer: open the attribute write-only (never create, no final symlink) and write once."""

    def write(self, path: Path, value: str, *, bound_s: float | None = None) -> None:
        """Write `value` to `path` in a single write(2), as sysfs store callbacks expect.

        With `bound_s` the write runs in a forked child and this process waits at most that long: a thread would
        not do, as a process cannot exit while one of its threads sleeps in the kernel, and Ctrl-C must end it.
        """
        if bound_s is None:
            _write_once(path, value)
            return
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the parent's to handle
            code = 0
            try:
                _detach_fds()
                _write_once(path, value)
            except OSError as e:
                code = e.errno if e.errno and 0 < e.errno < 256 else errno.EIO
            except BaseException:
                code = errno.EIO
            os._exit(code)
        deadline = time.monotonic() + bound_s
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                if code == 0:
                    return
                err = code if code > 0 else errno.EINTR
                raise OSError(err, os.strerror(err), str(path))
            if time.monotonic() >= deadline:
                raise WriteStillBlocked(f"still blocked in the kernel after {bound_s:g} s", pid=pid)
            time.sleep(POLL_S)


def _detach_fds() -> None:  # pragma: no cover - the child
    """Let go of everything the child inherited: it may outlive rblnctl, blocked in the kernel until a VFIO user lets
    go, and must not keep rblnctl's stdout/stderr open (a pipe reading rblnctl's output would wait for it) nor the
    state file's lock (every later run would be refused as concurrent). Its result is its exit status."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        if int(name) > 2:
            try:
                os.close(int(name))
            except OSError:
                pass


def _write_once(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        data = value.encode()
        n = os.write(fd, data)
        if n != len(data):
            raise OSError(errno.EIO, f"short write ({n} of {len(data)} bytes)")
    finally:
        os.close(fd)


def default_writer() -> SysfsWriter:
    """The writer used when none is injected: real writes (tests replace this function)."""
    return FileWriter()
