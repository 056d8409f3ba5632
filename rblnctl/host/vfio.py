"""VfioBinder: bind/unbind PCI functions to vfio-pci through driver_override; the only module that writes sysfs.

Every write goes through a `SysfsWriter`; the default one opens the attribute and writes it, as
`echo VALUE > PATH` would. Tests hand in a kernel simulator's writer instead, which performs the
write and its kernel effect (tests/fakes/sysfs.py). `plan_*()` only reads; `run()` writes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from rblnctl import constants as C
from rblnctl.errors import ConfigError, HostError, InvalidInput, NotFound, Refused
from rblnctl.host import pci, procfs, system
from rblnctl.host.pci import PciFunction
from rblnctl.host.procfs import Holder, ProcessTable

log = logging.getLogger(__name__)

DEFAULT_DEV = Path("/dev")
DEFAULT_STATE_FILE = Path("/var/lib/rblnctl/vfio-state.json")
STATE_VERSION = 1

BIND = "bind"
UNBIND = "unbind"
SKIP = "skip"

# DeviceResult.status values (a documented contract: docs/vfio.md).
PLANNED = "planned"  # dry run: this would change
OK = "ok"  # changed and verified
SKIPPED = "skipped"  # nothing to do
FAILED = "failed"  # this device failed; `message` says where it ended (normally its original driver)
ROLLED_BACK = "rolled-back"  # changed, then restored because another device failed
NOT_ATTEMPTED = "not-attempted"  # never touched: an earlier device failed and the run stopped
DRIVERLESS = "driverless"  # a rollback failed and the device has no driver now
STATUSES = (PLANNED, OK, SKIPPED, FAILED, ROLLED_BACK, NOT_ATTEMPTED, DRIVERLESS)

CLEAR = "\n"  # what `echo > driver_override` writes; the kernel reads it as "no override"


def _noop(*_: object) -> None:
    return None


# --- the write seam --------------------------------------------------------------------------------


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
    """The writer used when none is injected: real writes."""
    return FileWriter()


# --- data ------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Write:
    """One sysfs write: `value` into `path`, done for `bdf` (`why` says which step it is)."""

    bdf: str
    path: str
    value: str
    why: str


@dataclass(frozen=True, kw_only=True)
class DevicePlan:
    """What one function looks like now and the writes that move it to `to_driver`.

    `to_driver` None on an unbind means the kernel's default (empty override + drivers_probe).
    """

    bdf: str
    ids: str
    model: str | None
    iommu_group: str | None
    action: str  # bind | unbind | skip
    from_driver: str | None
    from_override: str | None
    to_driver: str | None
    note: str = ""
    writes: tuple[Write, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DeviceResult:
    """The outcome for one function (the stable `-o json` schema of bind and unbind)."""

    bdf: str
    action: str
    from_driver: str | None
    to_driver: str | None
    status: str
    message: str


@dataclass(frozen=True, kw_only=True)
class VfioPlan:
    """Everything `run()` would do, and every reason it would refuse to (`blockers`)."""

    operation: str  # bind | unbind
    devices: tuple[DevicePlan, ...]
    blockers: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    load_modules: tuple[str, ...] = ()  # modprobe'd by run() before the first write

    @property
    def changes(self) -> list[DevicePlan]:
        """Devices the run would change."""
        return [d for d in self.devices if d.action != SKIP]

    @property
    def writes(self) -> list[Write]:
        """Every sysfs write, in order."""
        return [w for d in self.devices for w in d.writes]

    def check(self) -> None:
        """Raise Refused, listing every blocker, when the plan must not run."""
        if self.blockers:
            raise Refused(f"vfio {self.operation} refused; nothing was changed", blockers=list(self.blockers))

    def preview(self) -> list[DeviceResult]:
        """The plan as results: `planned` or `skipped` per device (what --dry-run shows)."""
        return [
            DeviceResult(
                bdf=d.bdf,
                action=d.action if d.action != SKIP else self.operation,
                from_driver=d.from_driver,
                to_driver=d.to_driver,
                status=SKIPPED if d.action == SKIP else PLANNED,
                message=d.note or f"{len(d.writes)} sysfs writes",
            )
            for d in self.devices
        ]


@dataclass(frozen=True, kw_only=True)
class VfioOutcome:
    """Per-device results of `run()`, in plan order."""

    results: tuple[DeviceResult, ...]

    @property
    def ok(self) -> bool:
        """True when no device failed or was left without a driver."""
        return not any(r.status in (FAILED, DRIVERLESS, ROLLED_BACK, NOT_ATTEMPTED) for r in self.results)


@dataclass(frozen=True, kw_only=True)
class GroupMember:
    """Another function in the same IOMMU group."""

    bdf: str
    ids: str
    driver: str | None
    bridge: bool


@dataclass(frozen=True, kw_only=True)
class DeviceStatus:
    """One function as `vfio status` reports it."""

    bdf: str
    ids: str
    model: str | None
    function: str | None
    driver: str | None
    driver_override: str | None
    iommu_group: str | None
    group_members: tuple[GroupMember, ...]
    numa_node: int | None
    vfio_device: str | None  # /dev/vfio/<group> (None without a group)
    vfio_device_present: bool
    holders: tuple[Holder, ...]


@dataclass(frozen=True, kw_only=True)
class VfioStatus:
    """`vfio status`: devices plus warnings (VFIO Manager present, incomplete holder scan)."""

    devices: tuple[DeviceStatus, ...]
    warnings: tuple[str, ...] = ()


# --- state file ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StateFile:
    """The JSON record of each bound device's original driver; every save is atomic (temp file + rename)."""

    path: Path

    def load(self) -> dict[str, dict]:
        """Return `{bdf: {"driver", "driver_override", "ids", "recorded_at"}}`; {} when the file does not exist.

        Raises HostError when the file is unreadable or damaged (names from it end up in paths).
        """
        try:
            raw = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise HostError(f"cannot read state file {self.path}: {e.strerror or e}") from e
        try:
            data = json.loads(raw)
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
                if rec.get("driver") == C.VFIO_DRIVER:  # bind never records it: unbind would "restore" vfio-pci
                    raise ValueError(f"{bdf} has {C.VFIO_DRIVER} as its original driver")
                out[bdf] = rec
            return out
        except (ValueError, KeyError, TypeError, InvalidInput) as e:
            raise HostError(f"state file {self.path} is damaged ({e}); fix or move it away") from e

    def save(self, devices: dict[str, dict]) -> None:
        """Replace the file atomically: write a temp file in the same directory, fsync, rename."""
        parent = self.path.parent
        tmp = None
        try:
            parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=parent)
            with os.fdopen(fd, "w") as f:
                json.dump({"version": STATE_VERSION, "devices": dict(sorted(devices.items()))}, f, indent=2)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
            tmp = None
            dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as e:
            raise HostError(f"cannot write state file {self.path}: {e.strerror or e}") from e
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive lock (`<path>.lock`) so two runs cannot interleave their records."""
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise HostError(f"cannot open lock file {lock}: {e.strerror or e}") from e
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise HostError(f"another rblnctl vfio run holds {lock}; wait for it to finish") from e
            yield
        finally:
            os.close(fd)


# --- status ----------------------------------------------------------------------------------------


def vfio_status(
    *,
    sysfs: Path = pci.DEFAULT_SYSFS,
    proc: Path = procfs.DEFAULT_PROC,
    dev: Path = DEFAULT_DEV,
    run_root: Path = system.DEFAULT_RUN,
    bdfs: Sequence[str] = (),
    all_vendors: bool = False,
) -> VfioStatus:
    """Describe RBLN NPUs (all functions with all_vendors, or the named BDFs) for VFIO; read-only, no root needed."""
    wanted = _normalize_all(bdfs)
    if wanted:
        fns = _read_existing(sysfs, wanted)
    else:
        fns = pci.list_functions(sysfs, all_vendors=all_vendors)
    table = procfs.scan(proc)
    finder = _HolderFinder(sysfs=Path(sysfs), dev=Path(dev), table=table)
    warnings = list(_manager_warnings(run_root, table))
    if table.unreadable:
        warnings.append(f"could not read the open files of {table.unreadable} processes (not root): "
                        "holders may be incomplete")
    cache: dict[str, PciFunction] = {f.bdf: f for f in fns}
    out = []
    for f in fns:
        members = []
        if f.iommu_group:
            for m in pci.iommu_group_members(sysfs, f.iommu_group):
                if m == f.bdf:
                    continue
                mf = cache.get(m) or cache.setdefault(m, pci.read_function(sysfs, m))
                members.append(GroupMember(bdf=m, ids=mf.ids, driver=mf.driver, bridge=mf.is_bridge))
        node = str(Path(dev) / "vfio" / f.iommu_group) if f.iommu_group else None
        out.append(DeviceStatus(
            bdf=f.bdf, ids=f.ids, model=f.model, function=f.function, driver=f.driver,
            driver_override=f.driver_override, iommu_group=f.iommu_group, group_members=tuple(members),
            numa_node=f.numa_node, vfio_device=node, vfio_device_present=bool(node and os.path.exists(node)),
            holders=tuple(finder.holders(f)),
        ))
    stray = finder.unattributed(sorted({f.bdf for f in pci.list_functions(sysfs)} | set(cache)))
    for h in stray:
        warnings.append(f"pid {h.pid} ({h.command}) has {h.path} open; no RBLN function under {sysfs} claims it")
    return VfioStatus(devices=tuple(out), warnings=tuple(warnings))


# --- the binder ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class VfioBinder:
    """Move PCI functions between their host driver and vfio-pci, checking first and rolling back on failure.

    Paths default to the live host; point them at a captured or simulated tree to run elsewhere.
    `load_module` None means the host's modprobe, which is only allowed with the real /sys.
    """

    sysfs: Path = pci.DEFAULT_SYSFS
    proc: Path = procfs.DEFAULT_PROC
    dev: Path = DEFAULT_DEV
    run_root: Path = system.DEFAULT_RUN
    state_file: Path | None = None  # None: DEFAULT_STATE_FILE
    force: bool = False  # bind non-RBLN functions; ignore processes holding a device open
    keep_going: bool = False  # on failure keep the devices that did bind (and go on with the rest)
    load_modules: bool = False  # modprobe vfio-pci when it is missing
    settle_timeout_s: float = 5.0  # how long to wait for /dev/vfio/<group> after a bind
    writer: SysfsWriter | None = None  # None: default_writer() (real writes)
    load_module: Callable[[str], None] | None = None
    is_root: Callable[[], bool] = system.is_root
    on_write: Callable[[Write], None] = _noop
    on_event: Callable[[str], None] = _noop
    _state: StateFile = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.sysfs, self.proc, self.dev, self.run_root = (Path(p) for p in (self.sysfs, self.proc, self.dev,
                                                                            self.run_root))
        self.state_file = Path(self.state_file) if self.state_file is not None else DEFAULT_STATE_FILE
        self._state = StateFile(path=self.state_file)

    # ---- plan (read-only) ----

    def plan_bind(self, bdfs: Sequence[str] = (), *, all_devices: bool = False) -> VfioPlan:
        """Read the host and return the bind plan for the named BDFs (or every RBLN NPU); writes nothing."""
        fns = self._targets(bdfs, all_devices, select=lambda f: f.is_rbln_npu)
        blockers: list[str] = []
        warnings: list[str] = []
        devices = []
        for f in fns:
            if f.driver == C.VFIO_DRIVER:
                note = f"already bound to {C.VFIO_DRIVER}"
                if f.driver_override != C.VFIO_DRIVER:
                    note += f" (driver_override is {f.driver_override or 'empty'})"
                devices.append(self._device(f, SKIP, C.VFIO_DRIVER, note=note))
                continue
            writes = [Write(bdf=f.bdf, path=str(pci.device_dir(self.sysfs, f.bdf) / "driver_override"),
                            value=C.VFIO_DRIVER, why="set driver_override")]
            if f.driver:
                writes.append(self._unbind_write(f.bdf, f.driver))
            writes.append(self._probe_write(f.bdf, f"probe (binds {C.VFIO_DRIVER})"))
            note = "half-bound: no driver yet" if f.driver is None and f.driver_override == C.VFIO_DRIVER else ""
            devices.append(self._device(f, BIND, C.VFIO_DRIVER, note=note, writes=writes))
        table = procfs.scan(self.proc)
        warnings.extend(_manager_warnings(self.run_root, table))
        changes = [(d, f) for d, f in zip(devices, fns, strict=True) if d.action != SKIP]
        load: tuple[str, ...] = ()
        if changes:
            self._check_rbln(fns, blockers, warnings, verb="bind")
            self._check_root(blockers, "bind")
            self._check_iommu([f for _, f in changes], blockers)
            load = self._check_vfio_pci(blockers)
            try:
                self._state.load()
            except HostError as e:
                blockers.append(str(e))
            self._check_holders([f for _, f in changes], table, blockers, warnings)
            self._check_groups([f for _, f in changes], {f.bdf for f in fns}, blockers)
        return VfioPlan(operation=BIND, devices=tuple(devices), blockers=tuple(blockers),
                        warnings=tuple(warnings), load_modules=load)

    def plan_unbind(self, bdfs: Sequence[str] = (), *, all_devices: bool = False,
                    driver: str | None = None) -> VfioPlan:
        """Return the plan that gives functions back to a host driver; writes nothing.

        The target is `driver`, else the driver recorded at bind time, else the kernel's default
        (empty driver_override, then drivers_probe).
        """
        if driver is not None:
            pci.validate_driver_name(driver)
            if driver == C.VFIO_DRIVER:
                raise InvalidInput(f"--driver {C.VFIO_DRIVER} is what bind does; name the host driver to return to")
        blockers: list[str] = []
        warnings: list[str] = []
        try:
            records = self._state.load()
        except HostError as e:
            records = {}
            (warnings if driver else blockers).append(str(e))
        # --all: every NPU on vfio-pci or overridden to it, and recorded ones a failed rollback left driverless
        fns = self._targets(bdfs, all_devices, select=lambda f: f.is_rbln_npu and (
            C.VFIO_DRIVER in (f.driver, f.driver_override) or (f.driver is None and f.bdf in records)))
        devices = []
        for f in fns:
            rec = records.get(f.bdf, {})
            if rec.get("ids") and rec["ids"] != f.ids:
                # The record is for another device (swapped card, state file copied from another host):
                # restoring its driver could bind the wrong driver to this one.
                warnings.append(f"{f.bdf}: the state file recorded device {rec['ids']} here, but the device is "
                                f"{f.ids}; ignoring that record (pass --driver NAME to choose the host driver)")
                rec = {}
            target = driver or rec.get("driver")
            source = "--driver" if driver else ("recorded" if target else "kernel default")
            if f.driver not in (None, C.VFIO_DRIVER) and f.driver_override != C.VFIO_DRIVER:
                devices.append(self._device(f, SKIP, f.driver, note=f"on {f.driver}, not {C.VFIO_DRIVER}: "
                                            "nothing to undo"))
                continue
            writes = []
            if f.driver_override:
                writes.append(Write(bdf=f.bdf, path=str(pci.device_dir(self.sysfs, f.bdf) / "driver_override"),
                                    value=CLEAR, why="clear driver_override"))
            rebind = f.driver in (None, C.VFIO_DRIVER) if target is None else f.driver != target
            if rebind and f.driver:
                writes.append(self._unbind_write(f.bdf, f.driver))
            if rebind and target:
                writes.append(Write(bdf=f.bdf, path=str(pci.driver_dir(self.sysfs, target) / "bind"),
                                    value=f.bdf, why=f"bind {target}"))
            elif rebind:
                writes.append(self._probe_write(f.bdf, "probe (kernel default driver)"))
            devices.append(self._device(f, UNBIND, target, note=f"to {target or 'the kernel default'} ({source})",
                                        writes=writes))
        changes = [f for d, f in zip(devices, fns, strict=True) if d.action != SKIP]
        table = procfs.scan(self.proc)
        warnings.extend(_manager_warnings(self.run_root, table))
        if changes:
            self._check_rbln(fns, blockers, warnings, verb="unbind")
            self._check_root(blockers, "unbind")
            for t in sorted({d.to_driver for d in devices if d.action == UNBIND and d.to_driver}):
                if not pci.driver_registered(self.sysfs, t):
                    blockers.append(f"driver {t} is not loaded (no {pci.driver_dir(self.sysfs, t)}): load its "
                                    f"module first, or pass --driver NAME")
            self._check_holders(changes, table, blockers, warnings)
        return VfioPlan(operation=UNBIND, devices=tuple(devices), blockers=tuple(blockers),
                        warnings=tuple(warnings))

    # ---- run (writes) ----

    def run(self, plan: VfioPlan) -> VfioOutcome:
        """Carry out a plan: record original drivers, write, verify, roll back on failure.

        Raises Refused when the plan has blockers (nothing is written). Device failures do not
        raise: they are results (`VfioOutcome.ok` is False).
        """
        plan.check()
        if not plan.changes:
            return VfioOutcome(results=tuple(plan.preview()))
        with self._state.locked():
            for module in plan.load_modules:
                self.on_event(f"loading kernel module {module}")
                self._loader()(module)
            if plan.operation == BIND and not pci.driver_registered(self.sysfs, C.VFIO_DRIVER):
                raise HostError(f"{C.VFIO_DRIVER} is not registered (no {pci.driver_dir(self.sysfs, C.VFIO_DRIVER)}); "
                                "nothing was changed")
            records: dict[str, dict] | None
            try:
                records = self._state.load()
            except HostError as e:
                if plan.operation == BIND:
                    raise
                # plan_unbind let this through only with --driver: go on, and leave the file for a person
                self.on_event(f"{e}; leaving it untouched")
                records = None
            if plan.operation == BIND:
                self._record(plan, records)
            touched: list[DevicePlan] = []
            try:
                results = self._apply_all(plan, touched)
            except KeyboardInterrupt:
                # Ctrl-C between an unbind and the probe would leave a device without a driver: undo first.
                self.on_event(f"interrupted: restoring the {len(touched)} device(s) this run changed")
                results = {}
                for d in reversed(touched):
                    status, where = self._restore(d)
                    results[d.bdf] = _result(d, plan.operation, DRIVERLESS if status == DRIVERLESS else ROLLED_BACK,
                                             f"interrupted; {where}")
                    if status == DRIVERLESS:
                        self.on_event(f"{d.bdf}: {where}")
                if records is not None:
                    self._settle_records(plan, results, records)
                raise
            if records is not None:
                self._settle_records(plan, results, records)
        return VfioOutcome(results=tuple(results[d.bdf] for d in plan.devices))

    # ---- internals: targets and checks ----

    def _targets(self, bdfs: Sequence[str], all_devices: bool, *, select: Callable[[PciFunction], bool]
                 ) -> list[PciFunction]:
        if bdfs and all_devices:
            raise ConfigError("name devices or pass --all, not both")
        if not bdfs and not all_devices:
            raise InvalidInput("name at least one PCI address (DDDD:BB:DD.F) or pass --all")
        if bdfs:
            return _read_existing(self.sysfs, _normalize_all(bdfs))
        every = pci.list_functions(self.sysfs)
        if not every:
            raise NotFound(f"no RBLN NPU (vendor {C.PCI_VENDOR_RBLN:04x}, class {C.PCI_CLASS_NPU:06x}) under "
                           f"{pci.devices_dir(self.sysfs)}")
        return [f for f in every if select(f)]

    def _device(self, f: PciFunction, action: str, to: str | None, *, note: str = "",
                writes: Sequence[Write] = ()) -> DevicePlan:
        return DevicePlan(bdf=f.bdf, ids=f.ids, model=f.model, iommu_group=f.iommu_group, action=action,
                          from_driver=f.driver, from_override=f.driver_override, to_driver=to, note=note,
                          writes=tuple(writes))

    def _unbind_write(self, bdf: str, driver: str) -> Write:
        return Write(bdf=bdf, path=str(pci.driver_dir(self.sysfs, driver) / "unbind"), value=bdf,
                     why=f"unbind from {driver}")

    def _probe_write(self, bdf: str, why: str) -> Write:
        return Write(bdf=bdf, path=str(Path(self.sysfs) / "bus" / "pci" / "drivers_probe"), value=bdf, why=why)

    def _check_rbln(self, fns: Sequence[PciFunction], blockers: list[str], warnings: list[str], *, verb: str) -> None:
        for f in fns:
            if f.is_rbln_npu:
                continue
            text = f"{f.bdf} ({f.ids}, class {f.class_code:06x}) is not an RBLN NPU"
            if self.force:
                warnings.append(f"{text}; continuing because of --force")
            else:
                blockers.append(f"{text}; pass --force to {verb} it anyway")

    def _check_root(self, blockers: list[str], verb: str) -> None:
        if not self.is_root():
            blockers.append(f"{verb} writes sysfs and needs root: rerun as root (sudo) on the node")

    def _check_iommu(self, fns: Sequence[PciFunction], blockers: list[str]) -> None:
        if pci.iommu_group_count(self.sysfs) == 0:
            blockers.append(f"the IOMMU is off ({self.sysfs}/kernel/iommu_groups is empty) and vfio-pci needs it: "
                            "enable VT-d/AMD-Vi in firmware, boot with intel_iommu=on or amd_iommu=on, reboot")
            return
        for f in fns:
            if not f.iommu_group:
                blockers.append(f"{f.bdf} has no IOMMU group; vfio-pci cannot take it")

    def _check_vfio_pci(self, blockers: list[str]) -> tuple[str, ...]:
        if pci.driver_registered(self.sysfs, C.VFIO_DRIVER) or system.module_loaded(self.sysfs, "vfio_pci"):
            return ()
        where = f"no {pci.driver_dir(self.sysfs, C.VFIO_DRIVER)} or {self.sysfs}/module/vfio_pci"
        if not self.load_modules:
            blockers.append(f"{C.VFIO_DRIVER} is not loaded ({where}): run `modprobe vfio-pci` or pass --load-modules")
            return ()
        if self.load_module is None and Path(self.sysfs) != pci.DEFAULT_SYSFS:
            blockers.append(f"--load-modules runs the host's modprobe, which changes the running kernel, not the tree "
                            f"under {self.sysfs}")
            return ()
        return ("vfio-pci",)

    def _check_holders(self, fns: Sequence[PciFunction], table: ProcessTable, blockers: list[str],
                       warnings: list[str]) -> None:
        finder = _HolderFinder(sysfs=self.sysfs, dev=self.dev, table=table)
        found: list[str] = []
        for f in fns:
            for h in finder.holders(f):
                found.append(f"{f.bdf} is in use: pid {h.pid} ({h.command}) has {h.path} open")
        if any(f.driver not in (None, C.VFIO_DRIVER) for f in fns):
            for h in finder.unattributed([g.bdf for g in pci.list_functions(self.sysfs, all_vendors=False)]):
                found.append(f"pid {h.pid} ({h.command}) has {h.path} open and rblnctl cannot tell which PCI "
                             "function it belongs to")
        if self.force:
            warnings.extend(f"{text}; continuing because of --force" for text in found)
            if any("/vfio/" in t for t in found):
                warnings.append("the kernel waits for a process holding a VFIO device to let go, so a write may block")
        else:
            blockers.extend(f"{text} (stop it, or pass --force)" for text in found)
        if table.unreadable:
            warnings.append(f"could not read the open files of {table.unreadable} processes: holders may be missed")

    def _check_groups(self, fns: Sequence[PciFunction], requested: set[str], blockers: list[str]) -> None:
        seen: set[str] = set()
        for f in fns:
            if not f.iommu_group or f.iommu_group in seen:
                continue
            seen.add(f.iommu_group)
            members = pci.iommu_group_members(self.sysfs, f.iommu_group)
            offenders = []
            for m in members:
                if m in requested:
                    continue
                mf = pci.read_function(self.sysfs, m)
                if mf.driver in (None, C.VFIO_DRIVER) or mf.is_bridge:
                    continue
                offenders.append(f"{m} ({mf.ids}) on {mf.driver}")
            if offenders:
                named = sorted(requested & set(members))
                everyone = sorted(set(named) | {o.split(" ", 1)[0] for o in offenders})
                blockers.append(
                    f"IOMMU group {f.iommu_group} of {', '.join(named)} is not viable: {'; '.join(offenders)} "
                    f"stays on a host driver. Name every member to bind the whole group "
                    f"(rblnctl vfio bind {' '.join(everyone)})"
                )

    def _loader(self) -> Callable[[str], None]:
        if self.load_module is not None:
            return self.load_module
        if Path(self.sysfs) != pci.DEFAULT_SYSFS:
            raise HostError("refusing to run modprobe: it would change the running kernel, not the tree under "
                            f"{self.sysfs}")
        return system.modprobe

    # ---- internals: applying and rolling back ----

    def _write(self, w: Write) -> None:
        self.on_write(w)
        log.debug("write %r > %s (%s %s)", w.value, w.path, w.bdf, w.why)
        writer = self.writer if self.writer is not None else default_writer()
        try:
            writer.write(Path(w.path), w.value)
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else str(e)
            raise HostError(f"{w.why}: writing {w.value.strip()!r} to {w.path} failed: {reason}") from e

    def _apply_all(self, plan: VfioPlan, touched: list[DevicePlan]) -> dict[str, DeviceResult]:
        """Apply every device in order; `touched` collects the devices written to (for an interrupt's undo)."""
        results: dict[str, DeviceResult] = {}
        done: list[DevicePlan] = []
        stopped_by: str | None = None
        failed_groups: dict[str, str] = {}  # with --keep-going: IOMMU group -> the member that failed
        for d in plan.devices:
            if d.action == SKIP:
                results[d.bdf] = _result(d, plan.operation, SKIPPED, d.note)
                continue
            if stopped_by or d.iommu_group in failed_groups:
                why = stopped_by or f"IOMMU group {d.iommu_group} member {failed_groups[d.iommu_group]}"
                results[d.bdf] = _result(d, plan.operation, NOT_ATTEMPTED, f"not attempted: {why} failed")
                continue
            touched.append(d)
            error, wrote = self._apply(d)
            if error is None:
                done.append(d)
                results[d.bdf] = _result(d, plan.operation, OK, self._ok_message(d))
                continue
            if wrote:
                self.on_event(f"{d.bdf}: {error}; rolling it back to {d.from_driver or 'no driver'}")
                status, where = self._restore(d)
                results[d.bdf] = _result(d, plan.operation, DRIVERLESS if status == DRIVERLESS else FAILED,
                                         f"{error}; {where}")
            else:
                results[d.bdf] = _result(d, plan.operation, FAILED, f"{error}; nothing was changed")
            if self.keep_going:
                # a VM can only use a whole group: undo (and stop) the failed device's group mates only
                undo = []
                if plan.operation == BIND and d.iommu_group is not None:
                    failed_groups[d.iommu_group] = d.bdf
                    undo = [p for p in done if p.iommu_group == d.iommu_group]
                why = f"IOMMU group {d.iommu_group} member {d.bdf} failed"
            else:
                undo = list(done)
                why = f"{d.bdf} failed"
                stopped_by = d.bdf
            for p in reversed(undo):
                self.on_event(f"{p.bdf}: rolling back ({why})")
                status, where = self._restore(p)
                results[p.bdf] = _result(p, plan.operation, DRIVERLESS if status == DRIVERLESS else ROLLED_BACK,
                                         f"{why}; {where}")
                done.remove(p)
        return results

    def _apply(self, d: DevicePlan) -> tuple[str | None, bool]:
        """Do one device's writes and verify; return (error or None, whether anything was written)."""
        if self._gone(d.bdf):
            return f"{d.bdf} no longer exists (removed since the plan)", False
        now = pci.read_function(self.sysfs, d.bdf)
        if now.driver != d.from_driver:
            return (f"its driver changed since the plan (now {now.driver or 'none'}, "
                    f"planned from {d.from_driver or 'none'})"), False
        touched = False
        for w in d.writes:
            try:
                touched = True
                self._write(w)
            except HostError as e:
                return str(e), touched
        if self._gone(d.bdf):
            return f"{d.bdf} no longer exists (removed during the run)", touched
        return self._verify(d), touched

    def _gone(self, bdf: str) -> bool:
        """Whether the function has vanished from sysfs (hot-unplug, `remove`) since it was read."""
        return not pci.device_dir(self.sysfs, bdf).is_dir()

    def _verify(self, d: DevicePlan) -> str | None:
        f = pci.read_function(self.sysfs, d.bdf)
        if d.action == BIND:
            if f.driver != C.VFIO_DRIVER:
                return f"verification failed: driver is {f.driver or 'none'} after the probe, not {C.VFIO_DRIVER}"
            node = Path(self.dev) / "vfio" / (f.iommu_group or "")
            if not f.iommu_group or not self._wait_for(node):
                return f"verification failed: {node} did not appear within {self.settle_timeout_s:g} s"
            return None
        if f.driver_override:
            return f"verification failed: driver_override is still {f.driver_override}"
        if d.to_driver is not None and f.driver != d.to_driver:
            return f"verification failed: driver is {f.driver or 'none'}, not {d.to_driver}"
        if d.to_driver is None and f.driver == C.VFIO_DRIVER:
            return f"verification failed: the kernel probed {C.VFIO_DRIVER} again"
        return None

    def _wait_for(self, path: Path) -> bool:
        # udev (or devtmpfs) creates /dev/vfio/<group> right after the bind; give it a moment.
        deadline = time.monotonic() + self.settle_timeout_s
        while not path.exists():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def _ok_message(self, d: DevicePlan) -> str:
        if d.action == BIND:
            return f"bound to {C.VFIO_DRIVER}; {Path(self.dev) / 'vfio' / (d.iommu_group or '')} present"
        now = pci.current_driver(self.sysfs, d.bdf)
        if now is None:
            self.on_event(f"{d.bdf}: no driver claimed it after the probe; it has no driver now")
            return "unbound; no driver claimed it (kernel default), so it has no driver now"
        return f"on {now}; driver_override cleared"

    def _restore(self, d: DevicePlan) -> tuple[str, str]:
        """Best effort: put one device back on its original driver and override; return (status, where it ended)."""
        problems = []
        want = d.from_driver
        base = pci.device_dir(self.sysfs, d.bdf)

        def attempt(w: Write) -> bool:
            try:
                self._write(w)
                return True
            except HostError as e:
                problems.append(str(e))
                return False

        if self._gone(d.bdf):
            return "gone", "it no longer exists under sysfs; nothing to restore"
        now = pci.read_function(self.sysfs, d.bdf)
        if now.driver_override != d.from_override:
            attempt(Write(bdf=d.bdf, path=str(base / "driver_override"), value=d.from_override or CLEAR,
                          why="rollback: restore driver_override"))
        if now.driver is not None and now.driver != want:
            attempt(Write(bdf=d.bdf, path=str(pci.driver_dir(self.sysfs, now.driver) / "unbind"), value=d.bdf,
                          why=f"rollback: unbind from {now.driver}"))
        if want is not None and pci.current_driver(self.sysfs, d.bdf) is None:
            ok = attempt(Write(bdf=d.bdf, path=str(pci.driver_dir(self.sysfs, want) / "bind"), value=d.bdf,
                               why=f"rollback: bind {want}"))
            if not ok or pci.current_driver(self.sysfs, d.bdf) is None:
                attempt(self._probe_write(d.bdf, "rollback: probe"))
        final = pci.current_driver(self.sysfs, d.bdf)
        detail = f" ({'; '.join(problems)})" if problems else ""
        if final == want:
            return "restored", f"restored to {want or 'no driver (as before)'}{detail}"
        if final is None:
            return DRIVERLESS, (f"rollback failed{detail}: the device has NO driver now; "
                                f"recover with `rblnctl vfio unbind {d.bdf} --driver {want}`" if want else
                                f"rollback failed{detail}: the device has no driver")
        return "elsewhere", f"rollback left it on {final}, not {want or 'no driver'}{detail}"

    # ---- internals: state records ----

    def _record(self, plan: VfioPlan, records: dict[str, dict]) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        changed = False
        for d in plan.changes:
            if d.from_driver is None and d.bdf in records:
                continue  # half-bound device: the earlier record knows more than "no driver"
            records[d.bdf] = {"driver": d.from_driver, "driver_override": d.from_override, "ids": d.ids,
                              "recorded_at": stamp}
            changed = True
        if changed:
            self._state.save(records)

    def _settle_records(self, plan: VfioPlan, results: dict[str, DeviceResult], records: dict[str, dict]) -> None:
        before = json.dumps(records, sort_keys=True)
        for d in plan.changes:
            if self._gone(d.bdf):
                records.pop(d.bdf, None)  # removed from the host: a new function there starts afresh
            elif plan.operation == UNBIND:
                if d.bdf in results and results[d.bdf].status == OK:
                    records.pop(d.bdf, None)
            elif pci.current_driver(self.sysfs, d.bdf) not in (None, C.VFIO_DRIVER):
                records.pop(d.bdf, None)  # back on a host driver: nothing left to restore
            # still on vfio-pci, or without a driver: keep the record so unbind can restore it
        if json.dumps(records, sort_keys=True) != before:
            self._state.save(records)


# --- helpers ---------------------------------------------------------------------------------------


def _result(d: DevicePlan, operation: str, status: str, message: str) -> DeviceResult:
    return DeviceResult(bdf=d.bdf, action=operation, from_driver=d.from_driver, to_driver=d.to_driver,
                        status=status, message=message)


def _normalize_all(bdfs: Sequence[str]) -> list[str]:
    """Validate every BDF before any path is built; report all the bad ones at once. Duplicates collapse."""
    good, bad = [], []
    for text in bdfs:
        try:
            good.append(pci.normalize_bdf(text))
        except InvalidInput:
            bad.append(repr(text))
    if bad:
        raise InvalidInput(f"invalid PCI address {', '.join(bad)}: expected DDDD:BB:DD.F or BB:DD.F in hex")
    return list(dict.fromkeys(good))


def _read_existing(sysfs: Path, bdfs: Sequence[str]) -> list[PciFunction]:
    missing = [b for b in bdfs if not pci.device_dir(sysfs, b).is_dir()]
    if missing:
        raise NotFound(f"no PCI device {', '.join(missing)} under {pci.devices_dir(sysfs)}")
    return [pci.read_function(sysfs, b) for b in bdfs]


def _manager_warnings(run_root: Path, table: ProcessTable) -> list[str]:
    signs = system.vfio_manager_signs(run_root, table)
    if not signs:
        return []
    return [f"the RBLN NPU Operator's VFIO Manager manages this node ({'; '.join(signs)}): it may undo manual "
            "changes; prefer `rblnctl node set-mode`, or disable the operator's vfioManager first"]


@dataclass(kw_only=True)
class _HolderFinder:
    """Map a PCI function to the open files that pin it: its /dev nodes, its VFIO group, its sysfs files."""

    sysfs: Path
    dev: Path
    table: ProcessTable
    _claimed: set[str] = field(default_factory=set, init=False)
    _char_cache: dict[str, set[str]] | None = field(default=None, init=False)

    def holders(self, f: PciFunction) -> list[Holder]:
        names = set(pci.device_node_names(self.sysfs, f.bdf)) | self._char_nodes().get(f.bdf, set())
        self._claimed.update(names)
        exact = [p for n in sorted(names) for p in (f"/dev/{n}", str(self.dev / n))]
        if f.iommu_group:
            exact += [f"/dev/vfio/{f.iommu_group}", str(self.dev / "vfio" / f.iommu_group)]
        found = self.table.holders(exact)
        prefixes = self._sysfs_prefixes(f.bdf)
        if prefixes:

            def under(path: str) -> bool:
                for pre in prefixes:
                    if path.startswith(pre):
                        # a file of a function behind this one (a bridge's child) is not this function's
                        return not pci.is_bdf_name(path[len(pre):].split("/", 1)[0])
                return False

            seen = {(h.pid, h.path) for h in found}
            found += [h for h in self.table.holders_where(under) if (h.pid, h.path) not in seen]
        return sorted(found, key=lambda h: (h.pid, h.path))

    def unattributed(self, bdfs: Sequence[str]) -> list[Holder]:
        """Holders of /dev/rbln*|rsd* nodes that none of `bdfs` claims."""
        claimed = set(self._claimed)
        for b in bdfs:
            claimed.update(pci.device_node_names(self.sysfs, b))
            claimed.update(self._char_nodes().get(b, set()))
        dev_dirs = {"/dev", str(self.dev)}

        def stray(path: str) -> bool:
            head, _, name = path.rpartition("/")
            return head in dev_dirs and name not in claimed and pci.is_device_node_name(name)

        return self.table.holders_where(stray)

    def _sysfs_prefixes(self, bdf: str) -> tuple[str, ...]:
        try:
            real = os.path.realpath(pci.device_dir(self.sysfs, bdf))
            rel = os.path.relpath(real, os.path.realpath(self.sysfs))
        except OSError:
            return ()
        return tuple(dict.fromkeys((real + "/", f"/sys/{rel}/")))

    def _char_nodes(self) -> dict[str, set[str]]:
        """BDF -> names of the rbln*/rsd* character devices whose sysfs device lies under that function."""
        if self._char_cache is not None:
            return self._char_cache
        out: dict[str, set[str]] = {}
        try:
            entries = list(os.scandir(self.dev))
        except OSError:
            entries = []
        for e in entries:
            if not pci.is_device_node_name(e.name):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISCHR(st.st_mode):
                continue
            link = Path(self.sysfs) / "dev" / "char" / f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            real = os.path.realpath(link)
            for part in reversed(Path(real).parts):
                try:
                    bdf = pci.normalize_bdf(part)
                except InvalidInput:
                    continue
                out.setdefault(bdf, set()).add(e.name)
                break
        self._char_cache = out
        return out
