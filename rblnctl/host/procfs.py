"""Read processes and their open files under a procfs root: who holds a device open; read-only."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class Process:
    """One process: pid, `comm`, the command line, and the targets of its open file descriptors."""

    pid: int
    comm: str
    cmdline: str  # argv joined with spaces; empty for kernel threads
    open_paths: tuple[str, ...] = ()

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
    unreadable = 0
    for pid in pids:
        base = proc / str(pid)
        comm = _read_text(base / "comm")
        if comm is None:
            continue  # exited
        cmdline = _read_cmdline(base / "cmdline")
        paths: tuple[str, ...] = ()
        if open_files:
            links = _fd_targets(base / "fd")
            if links is None:
                unreadable += 1
            else:
                paths = links
        p = Process(pid=pid, comm=comm, cmdline=cmdline, open_paths=paths)
        processes.append(p)
        for path in dict.fromkeys(paths):
            by_path.setdefault(path, []).append(p)
    return ProcessTable(processes=tuple(processes), unreadable=unreadable, _by_path=by_path)


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


def _fd_targets(fd_dir: Path) -> tuple[str, ...] | None:
    """Link targets of every open fd; None when the directory cannot be read."""
    try:
        names = os.listdir(fd_dir)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return ()
    except PermissionError:
        return None
    out = []
    for name in names:
        try:
            out.append(os.readlink(fd_dir / name))
        except (FileNotFoundError, ProcessLookupError):
            continue  # closed since listdir
        except OSError:
            continue
    return tuple(out)
