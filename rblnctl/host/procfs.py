"""Read processes and their open files under a procfs root: who holds a device open; read-only."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class Process:
    """One process: pid, `comm`, the command line, the targets of its open file descriptors, and the device numbers
    of those that are device files (`("c" or "b", st_rdev, link target)`, from stat of `/proc/<pid>/fd/<n>`)."""

    pid: int
    comm: str
    cmdline: str  # argv joined with spaces; empty for kernel threads
    open_paths: tuple[str, ...] = ()
    open_devices: tuple[tuple[str, int, str], ...] = ()

    @property
    def command(self) -> str:
        """The command line, or `[comm]` (as ps shows it) when there is none."""
        return self.cmdline or f"[{self.comm}]"


@dataclass(frozen=True, kw_only=True)
class Holder:
    """A process that has a path open."""

    pid: int
    command: str
    path: str


@dataclass(frozen=True, kw_only=True)
class ProcessTable:
    """Every process readable under a procfs root.

    `unreadable` counts processes whose open files could not be read (not root, or gone mid-scan
    for reasons other than exiting); when it is non-zero, holder lists may be incomplete.
    """

    processes: tuple[Process, ...] = ()
    unreadable: int = 0
    _by_path: dict[str, list[Process]] = field(default_factory=dict, repr=False, compare=False)
    _by_device: dict[tuple[str, int], list[tuple[Process, str]]] = field(default_factory=dict, repr=False,
                                                                         compare=False)

    def holders_of_devices(self, devices: Iterable[tuple[str, int]]) -> list[Holder]:
        """Processes with a device file open whose (kind "c"/"b", st_rdev) is one of `devices`, whatever its name."""
        out: list[Holder] = []
        for key in dict.fromkeys(devices):
            out.extend(Holder(pid=p.pid, command=p.command, path=path) for p, path in self._by_device.get(key, ()))
        return sorted(out, key=lambda h: (h.pid, h.path))

    def holders(self, paths: Iterable[str]) -> list[Holder]:
        """Processes with any of `paths` open (exact match on the fd link target), by pid."""
        out: list[Holder] = []
        for path in dict.fromkeys(paths):
            out.extend(Holder(pid=p.pid, command=p.command, path=path) for p in self._by_path.get(path, ()))
        return sorted(out, key=lambda h: (h.pid, h.path))

    def holders_where(self, match: Callable[[str], bool]) -> list[Holder]:
        """Processes with an open path for which `match(path)` is true, by pid."""
        out = [Holder(pid=p.pid, command=p.command, path=path)
               for path, procs in self._by_path.items() if match(path) for p in procs]
        return sorted(out, key=lambda h: (h.pid, h.path))

    def matching(self, needle: str) -> list[Process]:
        """Processes whose comm or command line contains `needle`."""
        return [p for p in self.processes if needle in p.comm or needle in p.cmdline]


def scan(proc: Path, *, open_files: bool = True) -> ProcessTable:
    """Read every `<proc>/<pid>` once: comm, cmdline and (with open_files) each `fd/*` link target.

    `proc` is the host's procfs (`HostRoot.proc`); a missing one is an empty table.

    Processes that exit during the scan are skipped; fd directories we may not read (another
    user's process when not root) are counted in `unreadable`, never an error.
    """
    proc = Path(proc)
    try:
        pids = sorted(int(e) for e in os.listdir(proc) if e.isdigit())
    except FileNotFoundError:
        return ProcessTable()
    processes: list[Process] = []
    by_path: dict[str, list[Process]] = {}
    by_device: dict[tuple[str, int], list[tuple[Process, str]]] = {}
    unreadable = 0
    for pid in pids:
        base = proc / str(pid)
        comm = _read_text(base / "comm")
        if comm is None:
            continue  # exited
        cmdline = _read_cmdline(base / "cmdline")
        paths: tuple[str, ...] = ()
        devices: tuple[tuple[str, int, str], ...] = ()
        if open_files:
            links = _fd_targets(base / "fd")
            if links is None:
                unreadable += 1
            else:
                paths = tuple(target for _, target in links)
                devices = tuple(dev for dev in (_device(base / "fd" / n, t) for n, t in links) if dev)
        p = Process(pid=pid, comm=comm, cmdline=cmdline, open_paths=paths, open_devices=devices)
        processes.append(p)
        for path in dict.fromkeys(paths):
            by_path.setdefault(path, []).append(p)
        for kind, rdev, path in dict.fromkeys(devices):
            by_device.setdefault((kind, rdev), []).append((p, path))
    return ProcessTable(processes=tuple(processes), unreadable=unreadable, _by_path=by_path, _by_device=by_device)


def _device(fd: Path, target: str) -> tuple[str, int, str] | None:
    """(kind, st_rdev, target) when the open file behind `fd` is a character or block device, else None.

    stat() of `/proc/<pid>/fd/<n>` reaches the open file itself (not a file of that name), so a device node is
    recognised by its number whatever it is called or wherever it lies (another mount namespace, a deleted node).
    Only targets that look like files are stat'ed (`/...`): sockets, pipes and anon inodes are never devices.
    """
    if not target.startswith("/"):
        return None
    try:
        st = os.stat(fd)
    except OSError:
        return None
    if stat.S_ISCHR(st.st_mode):
        return "c", st.st_rdev, target
    if stat.S_ISBLK(st.st_mode):
        return "b", st.st_rdev, target
    return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    except PermissionError:
        return ""


def _read_cmdline(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError:
        return ""
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)


def _fd_targets(fd_dir: Path) -> tuple[tuple[str, str], ...] | None:
    """(fd name, link target) of every open fd; None when the directory cannot be read."""
    try:
        names = os.listdir(fd_dir)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return ()
    except PermissionError:
        return None
    out = []
    for name in names:
        try:
            out.append((name, os.readlink(fd_dir / name)))
        except (FileNotFoundError, ProcessLookupError):
            continue  # closed since listdir
        except OSError:
            continue
    return tuple(out)
