"""The sysfs write seam: every write VfioBinder makes goes through a SysfsWriter."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Protocol

# What `echo > driver_override` writes; the kernel reads it as "no override".
CLEAR = "\n"


class SysfsWriter(Protocol):
    """Writes one value to one sysfs attribute; raises OSError exactly as the kernel refuses it."""

    def write(self, path: Path, value: str) -> None: ...


class FileWriter:
    """The real writer: open the attribute write-only (never create, no final symlink) and write once."""

    def write(self, path: Path, value: str) -> None:
        """Write `value` to `path` in a single write(2), as sysfs store callbacks expect."""
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
