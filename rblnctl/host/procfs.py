"""Read processes and their open files under a procfs root: who holds a device open; read-only.

Three things a process can hold a PCI function by, each read from procfs: an open file (`fd/<n>`: its link target
and, for a device file, its number), a VFIO device fd (`fd/<n>` -> `anon_inode:[vfio-device]`, which the kernel
attributes to a device in `fdinfo/<n>` from Linux 6.18 only), and a file mapped into its memory (`maps`: a BAR
mapped through sysfs `resourceN`, whose fd may be closed since).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rblnctl.errors import one_line

# What `readlink /proc/<pid>/fd/<n>` shows for a VFIO device fd got from VFIO_GROUP_GET_DEVICE_FD: an anonymous inode
# (torvalds/linux v6.1 drivers/vfio/vfio_main.c vfio_device_open: anon_inode_getfile("[vfio-device]", ...); seen so
# on the kernel tier's 6.1.176). Its fdinfo names the device only from 6.18 on (`vfio-device-syspath: /sys/devices/
# ...`, drivers/vfio/vfio_main.c vfio_device_show_fdinfo, "Applied to vfio next branch for v6.18" on the kvm list);
# on 6.1 it holds pos, flags, mnt_id and ino only, and every anon inode shares one inode, so nothing says which.
VFIO_DEVICE_FD = "anon_inode:[vfio-device]"
_SYSPATH = "vfio-device-syspath:"

# How a holder holds what `Holder.path` names.
OPEN = "open"  # the path is open (an fd)
MAPPED = "mapped"  # the path is mapped into the process's memory (/proc/<pid>/maps), its fd maybe closed since
VFIO_FD = "vfio-device"  # a VFIO device fd; path: the device's sysfs path when the kernel says it, else VFIO_DEVICE_FD

# The longest command a holder shows (Process.command): a VM's qemu command line runs to kilobytes, and it is repeated
# in every message, table cell and record that names the holder. The program and the start of argv stay (what
# identifies a VM: qemu's `-name guest=...` comes early); the cut ends in COMMAND_CUT.
COMMAND_MAX = 100
COMMAND_CUT = "…"


def short_command(text: str) -> str:
    """`text` on one line, at most COMMAND_MAX characters, ending in COMMAND_CUT when cut: the one bounded form of a
    process's command line that holders, tables, refusals and records show."""
    text = one_line(text)
    return text if len(text) <= COMMAND_MAX else text[:COMMAND_MAX - len(COMMAND_CUT)].rstrip() + COMMAND_CUT


@dataclass(frozen=True, kw_only=True)
class Process:
    """One process: pid, `comm`, the command line, the targets of its open file descriptors, the device numbers
    of those that are device files (`("c" or "b", st_rdev, link target)`, from stat of `/proc/<pid>/fd/<n>`), the
    sysfs files mapped into its memory (`/proc/<pid>/maps`), and its VFIO device fds (each the device's sysfs path
    when the kernel's fdinfo names it, else None)."""

    pid: int
    comm: str
    cmdline: str  # argv joined with spaces; empty for kernel threads
    open_paths: tuple[str, ...] = ()
    open_devices: tuple[tuple[str, int, str], ...] = ()
    mapped_paths: tuple[str, ...] = ()
    vfio_devices: tuple[str | None, ...] = ()

    @property
    def command(self) -> str:
        """The command line, or `[comm]` (as ps shows it) when there is none; on one line (whitespace runs folded,
        as a table cell is: an argv holding a newline or CR would otherwise forge lines in a refusal) and bounded
        (short_command)."""
        return short_command(self.cmdline) or f"[{short_command(self.comm)}]"


@dataclass(frozen=True, kw_only=True)
class Holder:
    """A process that holds a path: has it open, has it mapped, or (VFIO_FD) holds a VFIO device fd.

    `certain` is False for a VFIO device fd the kernel does not attribute, of a process that holds no VFIO group or
    device node saying which device it is (rblnctl.host.holders): it may hold another function, so nothing should
    stop or kill it on this function's account alone."""

    pid: int
    command: str
    path: str
    how: str = OPEN
    certain: bool = True

    @property
    def text(self) -> str:
        """`pid N (command) has PATH open` and its kin, on one line (the path folded as the command is)."""
        who = f"pid {self.pid} ({self.command})"
        path = one_line(self.path)
        if self.how == MAPPED:
            return f"{who} has {path} mapped"
        if self.how == VFIO_FD:
            if self.path == VFIO_DEVICE_FD:
                return f"{who} holds a VFIO device fd (which device the kernel does not say)"
            return f"{who} holds the VFIO device fd of {path}"
        return f"{who} has {path} open"


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

    def holders_mapping(self, match: Callable[[str], bool]) -> list[Holder]:
        """Processes with a mapped file for which `match(path)` is true (how MAPPED), by pid."""
        out = [Holder(pid=p.pid, command=p.command, path=path, how=MAPPED)
               for p in self.processes for path in p.mapped_paths if match(path)]
        return sorted(out, key=lambda h: (h.pid, h.path))

    def vfio_device_holders(self) -> list[Holder]:
        """Every VFIO device fd (how VFIO_FD; path the device's sysfs path, or VFIO_DEVICE_FD when the kernel does not
        say which device), one per process and device, by pid."""
        out = {(p.pid, d or VFIO_DEVICE_FD): Holder(pid=p.pid, command=p.command, path=d or VFIO_DEVICE_FD, how=VFIO_FD)
               for p in self.processes for d in p.vfio_devices}
        return sorted(out.values(), key=lambda h: (h.pid, h.path))

    def matching(self, needle: str) -> list[Process]:
        """Processes whose comm or command line contains `needle`."""
        return [p for p in self.processes if needle in p.comm or needle in p.cmdline]


def scan(proc: Path, *, open_files: bool = True) -> ProcessTable:
    """Read every `<proc>/<pid>` once: comm, cmdline and (with open_files) each `fd/*` link target, the `fdinfo` of
    each VFIO device fd and the sysfs files in `maps`.

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
        mapped: tuple[str, ...] = ()
        vfio: tuple[str | None, ...] = ()
        if open_files:
            links = _fd_targets(base / "fd")
            if links is None:
                unreadable += 1
            else:
                paths = tuple(target for _, target in links)
                devices = tuple(dev for dev in (_device(base / "fd" / n, t) for n, t in links) if dev)
                vfio = tuple(_vfio_syspath(base / "fdinfo" / n) for n, t in links if t == VFIO_DEVICE_FD)
                mapped = _sysfs_mappings(base / "maps")
        p = Process(pid=pid, comm=comm, cmdline=cmdline, open_paths=paths, open_devices=devices, mapped_paths=mapped,
                    vfio_devices=vfio)
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


def _vfio_syspath(fdinfo: Path) -> str | None:
    """The `vfio-device-syspath:` a VFIO device fd's fdinfo names (Linux 6.18+), else None."""
    try:
        text = fdinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(_SYSPATH):
            return line[len(_SYSPATH):].strip().rstrip("/") or None
    return None


def _sysfs_mappings(maps: Path) -> tuple[str, ...]:
    """The files under `/sys/` mapped into a process (`maps`: `start-end perms offset dev inode path`), each once.

    A BAR mapped through sysfs `resourceN` shows here as `/sys/devices/<...>/<bdf>/resourceN` for as long as the
    mapping lives, its fd closed or not (fs/proc/task_mmu.c show_map_vma); a line's path may hold spaces, the
    kernel writes a newline in it as `\\012`. Only lines naming `/sys/` are split: the rest is libraries."""
    try:
        data = maps.read_bytes()
    except OSError:
        return ()
    if b" /sys/" not in data:
        return ()
    out: dict[str, None] = {}
    for line in data.decode(errors="replace").splitlines():
        if " /sys/" not in line:
            continue
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/sys/"):
            out[fields[5]] = None
    return tuple(out)


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
