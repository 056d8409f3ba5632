"""StateFile: the locked, atomically saved JSON record of each device's original driver."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import HostError, InvalidInput
from rblnctl.host import pci
from rblnctl.host.holders import HolderFinder
from rblnctl.host.root import HostRoot

STATE_VERSION = 1
# A state file holds a few hundred bytes per device; anything this large is not one of ours.
MAX_STATE_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class StateFile:
    """The JSON record of each bound device's original driver; every save is atomic (temp file + rename).

    `{"version": 1, "devices": {bdf: {"driver", "driver_override", "ids", "recorded_at"}}}`.
    """

    path: Path

    def load(self) -> dict[str, dict[str, Any]]:
        """Return `{bdf: record}`; {} when the file does not exist.

        Raises HostError when the file is unreadable or damaged: not a regular file, too large, not
        UTF-8, not JSON, not version 1, a key that is not a canonical BDF, a driver name unsafe in a
        path, or vfio-pci recorded as an original driver (names from it end up in sysfs paths).
        """
        raw = self._read()
        if raw is None:
            return {}
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
                raise ValueError(f"not a version {STATE_VERSION} rblnctl state file")
            devices = data["devices"]
            if not isinstance(devices, dict):
                raise TypeError("devices is not an object")
            out = {}
            for bdf, rec in devices.items():
                if pci.normalize_bdf(bdf) != bdf or not isinstance(rec, dict):
                    raise ValueError(f"bad entry {bdf!r}")
                for key in ("driver", "driver_override"):
                    if rec.get(key) is not None:
                        pci.validate_driver_name(rec[key])
                if rec.get("ids") is not None and not isinstance(rec["ids"], str):
                    raise TypeError(f"{bdf}: ids is not a string")
                if rec.get("driver") == C.VFIO_DRIVER:  # bind never records it: unbind would "restore" vfio-pci
                    raise ValueError(f"{bdf} has {C.VFIO_DRIVER} as its original driver")
                out[bdf] = rec
            return out
        except UnicodeDecodeError as e:
            raise self._damaged(f"not UTF-8 text: byte {e.start}") from e
        except RecursionError as e:  # json.loads of deeply nested brackets
            raise self._damaged("nested too deeply") from e
        except (ValueError, KeyError, TypeError, InvalidInput) as e:
            raise self._damaged(str(e)) from e

    def save(self, devices: dict[str, dict[str, Any]]) -> None:
        """Replace the file atomically: write a temp file in the same directory, fsync, rename, fsync the directory."""
        _atomic_json(self.path, {"version": STATE_VERSION, "devices": dict(sorted(devices.items()))})

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive lock (`<path>.lock`) so two runs cannot interleave their records."""
        lock = self.path.with_name(self.path.name + ".lock")
        with _flock(lock, wait_s=0.0, busy=f"another rblnctl vfio run holds {lock}; wait for it to finish"):
            yield

    def _read(self) -> bytes | None:
        """The file's bytes, None when absent; never blocks on a FIFO and never reads more than MAX_STATE_BYTES + 1."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise HostError(f"cannot read state file {self.path}: {e.strerror or e}") from e
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise HostError(f"cannot read state file {self.path}: Is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise self._damaged("not a regular file")
            chunks, size = [], 0
            while size <= MAX_STATE_BYTES:
                chunk = os.read(fd, MAX_STATE_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as e:
            raise HostError(f"cannot read state file {self.path}: {e.strerror or e}") from e
        finally:
            os.close(fd)
        if size > MAX_STATE_BYTES:
            raise self._damaged(f"larger than {MAX_STATE_BYTES} bytes")
        return b"".join(chunks)

    def _damaged(self, why: str) -> HostError:
        return HostError(f"state file {self.path} is damaged ({why}); fix or move it away")


# --- unbinds left pending in the kernel ------------------------------------------------------------------------

PENDING_NAME = "vfio-pending.json"
# How long a run waits for another run's few-millisecond update of the pending record before it gives up on it.
PENDING_LOCK_WAIT_S = 2.0


@dataclass(frozen=True, kw_only=True)
class PendingUnbind:
    """An unbind rblnctl left blocked in the kernel: its child process `pid` (started at `start`, in clock ticks
    since boot: /proc/<pid>/stat field 22, so a reused pid is not taken for it) still waits in the write."""

    bdf: str
    pid: int
    start: int
    since: str  # ISO time the run gave up waiting
    holders: str = ""  # who held the device then, the certain ones ("pid 123 (qemu); ..."), "" when unknown
    state_file: str = ""  # the run's --state-file, "" for the default: `the same command again` needs it
    # the vfio command that left it, without its BDFs: its verb and own flags (`("recover", "--mode", "vm")`); the
    # unbind that blocked may be a bind's or a recover's, and the same command again is what finishes the device
    command: tuple[str, ...] = ("unbind",)

    @property
    def text(self) -> str:
        """`unbind pending (pid N, since T)`, with what it waits for."""
        who = self.holders or "the VFIO user holding it"
        return (f"unbind pending (pid {self.pid}, since {self.since}): the kernel finishes the unbind when {who} "
                "lets go")


def process_start(proc: Path, pid: int) -> int | None:
    """When `pid` started (clock ticks since boot, /proc/<pid>/stat field 22), None when it is gone or a zombie (a
    finished child nobody reaped: its write is done)."""
    try:
        raw = (proc / str(pid) / "stat").read_bytes().decode(errors="replace")
        fields = raw[raw.rindex(")") + 2:].split()  # after the command, which may hold spaces and parentheses
        return None if fields[0] in ("Z", "X", "x") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True, kw_only=True)
class PendingFile:
    """The pending record: `{"version": 1, "pending": {bdf: {pid, start, since, holders, state_file, command}}}`, at ONE
    fixed place under the host root (C.VFIO_PENDING_FILE, `<root>/run/rblnctl/vfio-pending.json`) whatever
    --state-file a run was given, so every later run finds it (vfio status and preflight --local take no
    --state-file). Under /run because a pending unbind does not survive a reboot, and neither should its record.

    Written atomically under its own lock (`<path>.lock`: the state file's lock is per state file, and two runs with
    different state files share this record) by the run that left an unbind pending; read by every later run, which
    never reads the override of a function whose pending child still lives (that read would wait as long as the
    unbind). A record whose child is gone is ignored, and dropped by the next run that writes the record.

    `legacy`: where releases before this one wrote it (beside the default state file), read as well for one release
    (a record there lives only as long as its child) and removed by the next save; a record an older release wrote
    beside a --state-file elsewhere cannot be found (nothing says where that file was).
    """

    path: Path
    legacy: Path | None = None

    @classmethod
    def of(cls, root: Path | HostRoot) -> PendingFile:
        """The host's pending record (and the legacy one beside the default state file)."""
        host = HostRoot.of(root)
        return cls(path=host.under(C.VFIO_PENDING_FILE), legacy=host.under(C.VFIO_STATE_FILE).with_name(PENDING_NAME))

    def load(self) -> dict[str, PendingUnbind]:
        """Every record (the legacy file's first, this one's over them); {} when absent or not one of ours (it only
        ever spares a read)."""
        out = _load_pending(self.legacy) if self.legacy is not None else {}
        out.update(_load_pending(self.path))
        return out

    def live(self, proc: Path) -> dict[str, PendingUnbind]:
        """The records whose child still waits in the kernel (same pid, same start time, not a zombie)."""
        return {b: r for b, r in self.load().items() if process_start(proc, r.pid) == r.start}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the record's own lock while reading, changing and saving it; waits up to PENDING_LOCK_WAIT_S for
        another run's update (milliseconds), then raises HostError."""
        lock = self.path.with_name(self.path.name + ".lock")
        with _flock(lock, wait_s=PENDING_LOCK_WAIT_S, busy=f"another run keeps {lock} locked"):
            yield

    def save(self, pending: dict[str, PendingUnbind]) -> None:
        """Replace the record (removed when nothing is pending), and remove the legacy one (its live records are in
        `pending`: the caller loaded them). Call with `locked()` held."""
        if not pending:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        else:
            body = {b: {"pid": r.pid, "start": r.start, "since": r.since, "holders": r.holders,
                        "state_file": r.state_file, "command": list(r.command)} for b, r in sorted(pending.items())}
            _atomic_json(self.path, {"version": STATE_VERSION, "pending": body})
        if self.legacy is not None:
            with contextlib.suppress(OSError):
                self.legacy.unlink()


@contextlib.contextmanager
def _flock(lock: Path, *, wait_s: float, busy: str) -> Iterator[None]:
    """Hold an exclusive flock on `lock` (made if missing) for the block; another holder is waited for up to `wait_s`
    (0: not at all), then HostError(`busy`). The one lock of the state file and of the pending record."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise HostError(f"cannot open lock file {lock}: {e.strerror or e}") from e
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as e:
                if time.monotonic() >= deadline:
                    raise HostError(busy) from e
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def _load_pending(path: Path) -> dict[str, PendingUnbind]:
    try:
        raw = StateFile(path=path)._read()
        data = json.loads(raw.decode("utf-8")) if raw else {}
        return {pci.normalize_bdf(b): PendingUnbind(bdf=pci.normalize_bdf(b), pid=int(r["pid"]),
                                                    start=int(r["start"]), since=str(r["since"]),
                                                    holders=str(r.get("holders") or ""),
                                                    state_file=str(r.get("state_file") or ""),
                                                    command=_command(r.get("command")))
                for b, r in (data.get("pending") or {}).items()}
    except (HostError, ValueError, KeyError, TypeError, AttributeError, InvalidInput):
        return {}


def _command(raw: Any) -> tuple[str, ...]:
    """A record's command as written (a vfio verb, then its own flags, all strings); `("unbind",)` for a record
    without one (written before it was kept) or one that is not such a list."""
    if (isinstance(raw, list) and raw and all(isinstance(a, str) for a in raw)
            and raw[0] in ("bind", "unbind", "recover")):
        return tuple(raw)
    return ("unbind",)


def _atomic_json(path: Path, doc: dict[str, Any]) -> None:
    """Write `doc` to `path` atomically: a temp file in the same directory, fsync, rename, fsync the directory."""
    parent = path.parent
    tmp = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
        dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        raise HostError(f"cannot write state file {path}: {e.strerror or e}") from e
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def pending_unbinds(root: Path | HostRoot) -> dict[str, PendingUnbind]:
    """{bdf: record} of the host's live pending unbinds (whatever --state-file the run that left them used)."""
    host = HostRoot.of(root)
    return PendingFile.of(host).live(host.proc)


def held_functions(root: Path | HostRoot, finder: HolderFinder,
                   pending: Mapping[str, PendingUnbind] | None = None) -> dict[str, str]:
    """{bdf: why} of the functions whose `driver_override` a run must not read (pci's `held`): a live pending unbind
    (its record's words), or one a process is blocked reading or writing (HolderFinder.override_busy, from the run's
    one process scan): the read would wait as long, and one more process would be stuck. The one rule for status,
    preflight and the binder; `pending` when the caller read the records already."""
    records = pending_unbinds(root) if pending is None else pending
    return {**finder.override_busy(), **{b: r.text for b, r in records.items()}}
