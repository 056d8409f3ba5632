"""The sysfs write seam: every write VfioBinder makes goes through a SysfsWriter."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Protocol

from rblnctl.host.bounded import StillBlocked, run_bounded

# What `echo > driver_override` writes; the kernel reads it as "no override" (an empty write(2) changes nothing).
CLEAR = "\n"


# A write still blocked in the kernel when its bound passed (rblnctl.host.bounded: the one bound for reads and writes).
WriteStillBlocked = StillBlocked


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

        With `bound_s` the write runs in a forked child and this process waits at most that long
        (rblnctl.host.bounded.run_bounded: a thread would not do, and Ctrl-C must end rblnctl).
        """
        if bound_s is None:
            _write_once(path, value)
            return
        try:
            run_bounded(lambda: _write_once(path, value), bound_s)
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(path)) from None


def _write_once(path: Path, value: str) -> bytes:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        data = value.encode()
        n = os.write(fd, data)
        if n != len(data):
            raise OSError(errno.EIO, f"short write ({n} of {len(data)} bytes)")
    finally:
        os.close(fd)
    return b""


def default_writer() -> SysfsWriter:
    """The writer used when none is injected: real writes (tests replace this function)."""
    return FileWriter()
