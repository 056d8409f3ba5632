"""VfioBinder: plan and apply bind, unbind and recover of PCI functions through driver_override; the only sysfs writer.

`plan()` only reads: it returns the exact writes, the warnings and every blocker. `apply(plan)`
records the original drivers, writes through the SysfsWriter seam, verifies the `driver` link,
and rolls back on failure or on a signal.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock, iso_utc
from rblnctl.errors import ConfigError, HostError, InvalidInput, NotFound
from rblnctl.host import pci, system
from rblnctl.host.holders import HolderFinder
from rblnctl.host.pci import PciFunction
from rblnctl.host.root import HostRoot
from rblnctl.host.vfio import checks, steps, writer as writers
from rblnctl.host.vfio.checks import Gate
from rblnctl.host.vfio.model import (
    Action,
    DevicePlan,
    DeviceResult,
    Mode,
    Operation,
    Status,
    VfioOutcome,
    VfioPlan,
    Write,
)
from rblnctl.host.procfs import Holder
from rblnctl.host.vfio.state import PendingFile, PendingUnbind, StateFile, held_functions, process_start
from rblnctl.host.vfio.writer import SysfsWriter

log = logging.getLogger(__name__)

VFIO = C.VFIO_DRIVER
SETTLE_POLL_S = 0.02  # how often to look for /dev/vfio/<group> while udev creates it


def _noop(*_: object) -> None:
    return None


@dataclass(kw_only=True)
class VfioBinder:
    """Move PCI functions between their host driver and vfio-pci, checking first and rolling back on failure.

    `root` is the host's filesystem root (`/`, or a captured or simulated tree); sysfs, procfs, /dev
    and /run are read under it. `state_file` None means the default record under that root.
    `load_module` None means the host's modprobe, which is only allowed when root is the live `/`.
    """

    root: Path | HostRoot = HostRoot()
    state_file: Path | None = None
    force: bool = False  # bind/unbind non-RBLN functions and devices held open (never for recover)
    keep_going: bool = False  # on failure keep the devices that did change (and go on with the rest)
    load_modules: bool = False  # modprobe vfio-pci when bind needs it and it is missing
    settle_timeout_s: float = 5.0  # how long to wait for /dev/vfio/<group> after a bind
    write_timeout_s: float = 10.0  # how long a write that can block in the kernel (Write.may_block) may take
    clock: Clock = SYSTEM_CLOCK
    writer: SysfsWriter | None = None  # None: writer.default_writer() (real writes)
    load_module: Callable[[str], None] | None = None
    is_root: Callable[[], bool] = system.is_root
    on_write: Callable[[Write], None] = _noop
    on_event: Callable[[str], None] = _noop  # something went wrong or needs a person's attention
    on_done: Callable[[str], None] = _noop  # something apply() did besides the writes (a module it loaded)
    host: HostRoot = field(init=False, repr=False)
    _state: StateFile = field(init=False, repr=False)
    _blocked: dict[str, str] = field(default_factory=dict, init=False, repr=False)  # bdf -> what still blocks it
    _blocking: Write | None = field(default=None, init=False, repr=False)  # the bounded write now waiting
    _read_before: dict[str, PciFunction] = field(default_factory=dict, init=False, repr=False)  # before its writes
    _pending: PendingFile = field(init=False, repr=False)
    _held: dict[str, str] = field(default_factory=dict, init=False, repr=False)  # bdf -> why its override is unread
    _held_back: list[PciFunction] = field(default_factory=list, init=False, repr=False)  # left out of this plan
    _plan_holders: dict[str, list[Holder]] = field(default_factory=dict, init=False, repr=False)  # found at plan time
    _finish: tuple[str, ...] = field(default=("unbind",), init=False, repr=False)  # apply()'s plan.finish
    _finder: HolderFinder | None = field(default=None, init=False, repr=False)  # plan()'s scan of the processes

    def __post_init__(self) -> None:
        self.host = HostRoot.of(self.root)
        self.state_file = Path(self.state_file) if self.state_file is not None else self.host.under(C.VFIO_STATE_FILE)
        self._state = StateFile(path=self.state_file)
        self._pending = PendingFile.of(self.host)  # one place under the root, whatever the state file

    @property
    def sysfs(self) -> Path:
        """`<root>/sys`."""
        return self.host.sys

    # ---- plan (read-only) ----

    def plan(self, operation: Operation | str, bdfs: Sequence[str] = (), *, all_devices: bool = False,
             driver: str | None = None, mode: Mode | str | None = None) -> VfioPlan:
        """Read the host and return what `operation` would do to the named BDFs (or all); writes nothing.

        bind: to vfio-pci. unbind: back to `driver`, else the driver recorded at bind time, else the
        kernel's default. recover: functions left without a driver or with a stale driver_override
        go to the driver `mode` wants (container: the host driver, the default; vm: vfio-pci).
        Raises InvalidInput/ConfigError for bad arguments, NotFound for devices that do not exist.
        """
        try:
            op = Operation(operation)
        except ValueError:
            raise InvalidInput(f"unknown vfio operation {operation!r}: expected bind, unbind or recover") from None
        if driver is not None and op is not Operation.UNBIND:
            raise ConfigError(f"a target driver applies to unbind, not {op}")
        if mode is not None and op is not Operation.RECOVER:
            raise ConfigError(f"a mode applies to recover, not {op}")
        self.host.checked()
        # never read the override of a function an earlier run left an unbind pending on, or that a process is
        # blocked on (the read would wait as long), and never plan a change of it
        self._finder = None
        self._held = held_functions(self.host, self._procs(), self._pending.live(self.host.proc))
        self._held_back = []
        self._plan_holders = {}
        wanted = Mode.CONTAINER
        if op is Operation.BIND:
            plan = self._plan_bind(bdfs, all_devices)
        elif op is Operation.UNBIND:
            plan = self._plan_unbind(bdfs, all_devices, driver)
        else:
            try:
                wanted = Mode(mode or Mode.CONTAINER)
            except ValueError:
                raise InvalidInput(f"unknown mode {mode!r}: expected container or vm") from None
            plan = self._plan_recover(bdfs, all_devices, wanted)
        # a function held back is a row of its own: skipped by --all (the others go ahead), refused when named
        gate = Gate()
        held = []
        for f in self._held_back:
            if all_devices:
                gate.warn(f"{f.bdf}: {f.override_unknown}; left out of this run")
                held.append(steps.device_plan(f, Action.SKIP, f.driver, note=f"{f.override_unknown}; left out"))
            else:
                gate.block(f"{f.bdf}: {f.override_unknown}; nothing changes it until then (run the command again "
                           "after that)", bdfs=(f.bdf,))
                held.append(steps.device_plan(f, Action(op.value), self._held_target(op, f, driver, wanted),
                                              note=str(f.override_unknown)))
        devices = tuple(sorted((*plan.devices, *held), key=lambda d: d.bdf)) if held else plan.devices
        finish = (op.value, *(("--driver", driver) if driver is not None else ()),
                  *(("--mode", wanted.value) if op is Operation.RECOVER else ()))
        return replace(plan, devices=devices, blockers=(*gate.blockers, *plan.blockers),
                       warnings=(*gate.warnings, *plan.warnings), finish=finish)

    def _held_target(self, op: Operation, f: PciFunction, driver: str | None, mode: Mode) -> str | None:
        """Where the refused change of a held-back function was to take it (its row's TO), as its operation's plan
        would have said: bind vfio-pci, recover the mode's driver, unbind --driver, else the recorded driver, else
        None (the kernel's default)."""
        if op is Operation.BIND:
            return VFIO
        if op is Operation.RECOVER:
            return steps.MODE_TARGETS[mode][0]
        if driver is not None:
            return driver
        try:
            rec = self._state.load().get(f.bdf, {})
        except HostError:
            return None
        return rec.get("driver") if _record_fits(rec, f) else None

    def _plan_bind(self, bdfs: Sequence[str], all_devices: bool) -> VfioPlan:
        fns = self._targets(bdfs, all_devices, select=lambda f: f.is_rbln_npu)
        gate = Gate()
        devices = [steps.bind_step(self.sysfs, f) for f in fns]
        finder = self._procs()
        gate.warnings.extend(system.vfio_manager_warnings(self.host.run, finder.table))
        changes = _changed(devices, fns)
        devices = self._note_holders(finder, changes, devices)
        load: tuple[str, ...] = ()
        if changes:
            checks.check_rbln(gate, fns, "bind", forced=self.force)
            checks.check_root(gate, self.is_root(), "bind")
            checks.check_iommu(gate, self.sysfs, changes)
            load = checks.check_vfio_pci(gate, self.host, load_modules=self.load_modules,
                                         loader_injected=self.load_module is not None)
            checks.check_state(gate, self._state, needed=True)
            checks.check_holders(gate, finder, changes, forced=self.force)
            checks.check_groups(gate, self.sysfs, changes, {f.bdf for f in fns})
        return _plan(Operation.BIND, devices, gate, load)

    def _plan_unbind(self, bdfs: Sequence[str], all_devices: bool, driver: str | None) -> VfioPlan:
        if driver is not None:
            pci.validate_driver_name(driver)
            if driver == VFIO:
                raise InvalidInput(f"the target driver {VFIO} is what bind does; name the host driver to return to")
        gate = Gate()
        records = checks.check_state(gate, self._state, needed=driver is None)
        # all: every NPU on vfio-pci or overridden to it, and every recorded one (on a host driver: its record dropped)
        fns = self._targets(bdfs, all_devices, select=lambda f: f.is_rbln_npu and (
            VFIO in (f.driver, f.driver_override) or f.bdf in records))
        devices = []
        for f in fns:
            rec = records.get(f.bdf, {})
            if not _record_fits(rec, f):
                # The record is for another device (swapped card, state file copied from another host):
                # restoring its driver could bind the wrong driver to this one.
                gate.warn(f"{f.bdf}: the state file recorded device {rec['ids']} here, but the device is {f.ids}; "
                          "ignoring that record (unbind it naming the host driver to choose one)")
                rec = {}
            target = driver or rec.get("driver")
            source = "named" if driver else ("recorded" if target else "kernel default")
            devices.append(steps.unbind_step(self.sysfs, f, target, source))
        # A record outliving its bind (the run was cut after its last write, or the host rebooted): the device is
        # back on a host driver, so there is nothing left to restore; drop it as a finished unbind does.
        forget = tuple(f.bdf for f, d in zip(fns, devices, strict=True)
                       if d.action == Action.SKIP and f.bdf in records and f.driver not in (None, VFIO))
        devices = [replace(d, note=f"{d.note}; its state record dropped") if d.bdf in forget else d for d in devices]
        finder = self._procs()
        gate.warnings.extend(system.vfio_manager_warnings(self.host.run, finder.table))
        changes = _changed(devices, fns)
        devices = self._note_holders(finder, changes, devices)
        if changes:
            checks.check_rbln(gate, fns, "unbind", forced=self.force)
            checks.check_root(gate, self.is_root(), "unbind")
            checks.check_drivers_loaded(gate, self.sysfs, _by_target(devices))
            checks.check_holders(gate, finder, changes, forced=self.force)
        return replace(_plan(Operation.UNBIND, devices, gate), forget=forget)

    def _plan_recover(self, bdfs: Sequence[str], all_devices: bool, mode: Mode) -> VfioPlan:
        gate = Gate()
        # Only a recovery to vfio-pci records anything; to the host driver it only drops records.
        checks.check_state(gate, self._state, needed=mode is Mode.VM)
        fns = self._targets(bdfs, all_devices, select=lambda f: f.is_rbln_npu)
        devices = [steps.recover_step(self.sysfs, f, mode) for f in fns]
        finder = self._procs()
        gate.warnings.extend(system.vfio_manager_warnings(self.host.run, finder.table))
        changes = _changed(devices, fns)
        devices = self._note_holders(finder, changes, devices)
        if changes:
            # recover has no overrides: it repairs, so it never forces past a check (nor loads modules)
            checks.check_rbln(gate, fns, "recover", forced=False, overridable=False)
            checks.check_root(gate, self.is_root(), "recover")
            if mode is Mode.VM:
                checks.check_iommu(gate, self.sysfs, changes)
                checks.check_vfio_pci(gate, self.host, load_modules=False, loader_injected=False, overridable=False)
                checks.check_groups(gate, self.sysfs, changes, {f.bdf for f in changes})
            else:
                checks.check_drivers_loaded(gate, self.sysfs, _by_target(devices), can_name_another=False)
                bound = [f.bdf for f in changes if f.driver == VFIO]
                if bound:
                    # what bind leaves is a leftover only on a container node; a vm-passthrough node needs it
                    gate.warn(f"{', '.join(bound)} on {VFIO} will be unbound from it: if this node is in "
                              "vm-passthrough mode, recover for the vm mode instead")
            checks.check_holders(gate, finder, changes, forced=False, overridable=False)
        return _plan(Operation.RECOVER, devices, gate)

    # ---- apply (writes) ----

    def apply(self, plan: VfioPlan) -> VfioOutcome:
        """Carry out a plan: record original drivers, write, verify, roll back on failure.

        Raises Refused when the plan has blockers (nothing is written). Device failures do not
        raise: they are results (`VfioOutcome.ok` is False). Ctrl-C, SIGTERM and SIGHUP
        (KeyboardInterrupt, rblnctl.errors.Interrupted) restore every device this run touched,
        settle the records, then propagate.
        """
        plan.check()
        self._finish = plan.finish or (plan.operation.value,)
        if plan.noop:
            if plan.forget:
                with self._state.locked():
                    kept = self._state.load()
                    if self._forget(plan, kept):
                        self._state.save(kept)
            return VfioOutcome(results=tuple(plan.preview()))
        to_vfio = any(d.to_driver == VFIO for d in plan.changes)
        with self._state.locked():
            self._prune_pending()
            for module in plan.load_modules:
                self._loader()(module)
                self.on_done(f"loaded kernel module {module} (modprobe {module})")
            if to_vfio and not pci.driver_registered(self.sysfs, VFIO):
                raise HostError(f"{VFIO} is not registered (no {pci.driver_dir(self.sysfs, VFIO)}); "
                                "nothing was changed")
            records: dict[str, dict[str, Any]] | None
            try:
                records = self._state.load()
            except HostError as e:
                if to_vfio:
                    raise
                # the plan let this through (a named or host-driver target): go on, leave the file for a person
                self.on_event(f"{e}; leaving it untouched")
                records = None
            if records is not None:
                self._record(plan, records)
            touched: list[DevicePlan] = []
            try:
                results = self._apply_all(plan, touched)
            except KeyboardInterrupt as interrupt:
                # A signal between an unbind and the probe would leave a device without a driver: undo first.
                blocked = self._blocking
                self._blocking = None
                if blocked is not None:
                    self._blocked[blocked.bdf] = self._still_blocked(blocked, "interrupted while ", scan=False)
                    self._record_pending(blocked.bdf, getattr(interrupt, "blocked_pid", 0))
                self.on_event(f"interrupted: restoring the {len(touched)} device(s) this run changed")
                results = {}
                for d in reversed(touched):
                    if d.bdf in self._blocked:
                        results[d.bdf] = _result(d, plan.operation, Status.PENDING, self._blocked[d.bdf])
                        self.on_event(f"{d.bdf}: {self._blocked[d.bdf]}")
                        continue
                    try:
                        driverless, where = self._restore(d)
                    except KeyboardInterrupt:
                        # a second signal: give up on this device, never on the others (each takes milliseconds)
                        driverless = d.from_driver is not None and pci.current_driver(self.sysfs, d.bdf) is None
                        where = f"a second interrupt stopped its rollback; it is on {self._driver_text(d.bdf)} now"
                    results[d.bdf] = _result(d, plan.operation, Status.DRIVERLESS if driverless else Status.ROLLED_BACK,
                                             f"interrupted; {where}")
                    if driverless:
                        self.on_event(f"{d.bdf}: {where}")
                if records is not None:
                    self._settle_records(plan, results, records)
                raise
            if records is not None:
                self._settle_records(plan, results, records)
        return VfioOutcome(results=tuple(results[d.bdf] for d in plan.devices))

    # ---- internals: targets and writes ----

    def _procs(self) -> HolderFinder:
        """This plan's one scan of the host's processes (holders, and who is blocked on an override)."""
        if self._finder is None:
            self._finder = HolderFinder.scan(self.host)
        return self._finder

    def _targets(self, bdfs: Sequence[str], all_devices: bool, *, select: Callable[[PciFunction], bool]
                 ) -> list[PciFunction]:
        if bdfs and all_devices:
            raise ConfigError("name devices or select all of them, not both")
        if not bdfs and not all_devices:
            raise InvalidInput("name at least one PCI address (DDDD:BB:DD.F), or select all devices")
        if bdfs:
            return self._readable(pci.read_functions(self.sysfs, pci.normalize_bdfs(bdfs), held=self._held))
        every = pci.list_functions(self.sysfs, held=self._held)
        if not every:
            raise NotFound(f"no RBLN NPU (vendor {C.PCI_VENDOR_RBLN:04x}, class {C.PCI_CLASS_NPU:06x}) under "
                           f"{pci.devices_dir(self.sysfs)}")
        return [f for f in self._readable(every) if select(f)]

    def _readable(self, fns: list[PciFunction]) -> list[PciFunction]:
        """The functions whose override was read; the others (an unbind pending, the kernel holding the device) are
        held back: plan() refuses them when named and leaves them out of --all, saying why."""
        self._held_back.extend(f for f in fns if f.override_unknown)
        return [f for f in fns if not f.override_unknown]

    def _note_holders(self, finder: HolderFinder, changes: Sequence[PciFunction],
                      devices: list[DevicePlan]) -> list[DevicePlan]:
        """Keep who holds each changing device (what an interrupt's message names: it does not wait for a scan);
        with --force past them, every unbind write of a held device is bounded (a host driver's remove may wait for
        its users too), not only one from a vfio driver."""
        for f in changes:
            self._plan_holders[f.bdf] = finder.holders(f)
        if not self.force:
            return devices
        return [steps.bounded_unbinds(d) if self._plan_holders.get(d.bdf) else d for d in devices]

    def _loader(self) -> Callable[[str], None]:
        if self.load_module is not None:
            return self.load_module
        if not self.host.is_live:
            raise HostError("refusing to run modprobe: it would change the running kernel, not the tree under "
                            f"{self.host.path}")
        return system.modprobe

    # ---- internals: applying and rolling back ----

    def _write(self, w: Write) -> None:
        self.on_write(w)
        log.debug("write %r > %s (%s %s)", w.value, w.path, w.bdf, w.why)
        writer = self.writer if self.writer is not None else writers.default_writer()
        try:
            if w.may_block:
                self._blocking = w
                writer.write(Path(w.path), w.value, bound_s=self.write_timeout_s)
                self._blocking = None
            else:
                writer.write(Path(w.path), w.value)
        except writers.WriteStillBlocked as e:
            self._blocking = None
            self._blocked[w.bdf] = self._still_blocked(w, "")
            self._record_pending(w.bdf, e.pid)
            raise
        except OSError as e:
            self._blocking = None
            reason = os.strerror(e.errno) if e.errno else str(e)
            raise HostError(f"{w.why}: writing {w.value.strip()!r} to {w.path} failed: {reason}") from e

    def _apply_all(self, plan: VfioPlan, touched: list[DevicePlan]) -> dict[str, DeviceResult]:
        """Apply every device in order; `touched` collects the devices written to (for an interrupt's undo).

        recover treats devices independently (as keep_going does): undoing a repaired device because
        another one failed would only break it again.
        """
        independent = self.keep_going or plan.operation is Operation.RECOVER
        results: dict[str, DeviceResult] = {}
        done: list[DevicePlan] = []
        stopped_by: str | None = None
        failed_groups: dict[str, str] = {}  # independent runs: IOMMU group -> the member that failed
        for d in plan.devices:
            if d.action == Action.SKIP:
                results[d.bdf] = _result(d, plan.operation, Status.SKIPPED, d.note)
                continue
            failed_member = failed_groups.get(d.iommu_group) if d.iommu_group is not None else None
            if stopped_by or failed_member:
                why = stopped_by or f"IOMMU group {d.iommu_group} member {failed_member}"
                results[d.bdf] = _result(d, plan.operation, Status.NOT_ATTEMPTED, f"not attempted: {why} failed")
                continue
            touched.append(d)
            error, wrote = self._apply_one(d)
            if error is None:
                done.append(d)
                results[d.bdf] = _result(d, plan.operation, Status.OK, self._ok_message(d))
                continue
            if d.bdf in self._blocked:
                # the kernel still holds the write: nothing can be rolled back under it, and the others stop
                results[d.bdf] = _result(d, plan.operation, Status.PENDING, error)
                self.on_event(f"{d.bdf}: {error}")
            elif wrote:
                self.on_event(f"{d.bdf}: {error}; rolling it back to {d.from_driver or 'no driver'}")
                driverless, where = self._restore(d)
                results[d.bdf] = _result(d, plan.operation, Status.DRIVERLESS if driverless else Status.FAILED,
                                         f"{error}; {where}")
            else:
                results[d.bdf] = _result(d, plan.operation, Status.FAILED, f"{error}; nothing was changed")
            if independent:
                # a VM can only use a whole group: undo (and stop) the failed device's group mates only
                undo = []
                if d.to_driver == VFIO and d.iommu_group is not None:
                    failed_groups[d.iommu_group] = d.bdf
                    undo = [p for p in done if p.iommu_group == d.iommu_group]
                why = f"IOMMU group {d.iommu_group} member {d.bdf} failed"
            else:
                undo = list(done)
                why = f"{d.bdf} failed"
                stopped_by = d.bdf
            for p in reversed(undo):
                self.on_event(f"{p.bdf}: rolling back ({why})")
                driverless, where = self._restore(p)
                results[p.bdf] = _result(p, plan.operation, Status.DRIVERLESS if driverless else Status.ROLLED_BACK,
                                         f"{why}; {where}")
                done.remove(p)
        return results

    def _apply_one(self, d: DevicePlan) -> tuple[str | None, bool]:
        """Do one device's writes and verify; return (error or None, whether anything was written)."""
        if self._gone(d.bdf):
            return f"{d.bdf} no longer exists (removed since the plan)", False
        now = pci.read_function(self.sysfs, d.bdf)
        self._read_before[d.bdf] = now
        if now.override_unknown:  # an unbind began since the plan (a long prompt): the next write would wait as long
            return f"{now.override_unknown}; nothing was changed", False
        if now.driver != d.from_driver:
            return (f"its driver changed since the plan (now {now.driver or 'none'}, "
                    f"planned from {d.from_driver or 'none'})"), False
        touched = False
        for w in d.writes:
            try:
                touched = True
                self._write(w)
            except writers.WriteStillBlocked:
                return self._blocked[d.bdf], touched
            except HostError as e:
                return str(e), touched
        if self._gone(d.bdf):
            return f"{d.bdf} no longer exists (removed during the run)", touched
        return self._verify(d), touched

    def _still_blocked(self, w: Write, prefix: str, *, scan: bool = True) -> str:
        """What a blocked write waits for (the device's holders now, unless `scan` is off: an interrupt does not
        wait for a scan) and how the person finishes the job."""
        holders = self._plan_holders.get(w.bdf, [])
        f = self._read_before.get(w.bdf)
        if scan and f is not None:
            # never read_function() now: the blocked unbind holds the device lock, which reading driver_override
            # takes too (drivers/pci/pci-sysfs.c driver_override_show), so that read would block as well
            try:
                holders = HolderFinder.scan(self.host).holders(f)
            except HostError:
                pass
        who = "; ".join(h.text for h in holders) or (
            "a VFIO user rblnctl cannot see holds it")
        kill = _kill_hint(holders)
        if kill:
            how = f"stop it, e.g. {kill}"
        else:
            # no pid to name: never a placeholder that reads as a command; say how to find the holder
            group = f.iommu_group if f is not None else None
            node = self.host.dev / "vfio" / group if group else self.host.dev / "vfio"
            how = f"find what holds it (`lsof {node}`{'' if group else '/*'}, or stop the VM using it)"
        waited = f"after {self.write_timeout_s:g} s " if scan else ""
        return (f"{prefix}{w.why}: the kernel is still waiting {waited}for the device to "
                f"be released ({who}); the write is not cancelled and completes when that process lets go ({how}), "
                "then the same command again finishes the device")

    def _record_pending(self, bdf: str, pid: int) -> None:
        """Note the child left waiting in the kernel in the host's pending record (PendingFile, under its own lock), so
        later runs read nothing of this function while it waits, whatever state file they use."""
        start = process_start(self.host.proc, pid) if pid > 0 else None
        if start is None:
            return
        # only the certain ones: an unnamed VFIO fd of a process holding no group may be another device's
        holders = "; ".join(f"pid {h.pid} ({h.command})" for h in self._plan_holders.get(bdf, []) if h.certain)
        own = "" if self.state_file == self.host.under(C.VFIO_STATE_FILE) else str(self.state_file)
        try:
            with self._pending.locked():
                kept = self._pending.live(self.host.proc)
                kept[bdf] = PendingUnbind(bdf=bdf, pid=pid, start=start, since=iso_utc(self.clock.now()),
                                          holders=holders, state_file=own, command=self._finish)
                self._pending.save(kept)
        except HostError as e:
            self.on_event(f"{bdf}: could not note the pending unbind ({e}): until it finishes, runs that read this "
                          "function wait for it")

    def _prune_pending(self) -> None:
        """Drop the records of pending unbinds whose child is gone (the kernel finished them)."""
        try:
            with self._pending.locked():
                every = self._pending.load()
                live = {b: r for b, r in every.items() if process_start(self.host.proc, r.pid) == r.start}
                if live != every:
                    self._pending.save(live)
        except HostError:
            pass

    def _driver_text(self, bdf: str) -> str:
        return "nothing (removed)" if self._gone(bdf) else (pci.current_driver(self.sysfs, bdf) or "no driver")

    def _gone(self, bdf: str) -> bool:
        """Whether the function has vanished from sysfs (hot-unplug, `remove`) since it was read."""
        return not pci.device_dir(self.sysfs, bdf).is_dir()

    def _verify(self, d: DevicePlan) -> str | None:
        f = pci.read_function(self.sysfs, d.bdf)
        if d.to_driver == VFIO:
            if f.driver != VFIO:
                return f"verification failed: driver is {f.driver or 'none'} after the probe, not {VFIO}"
            node = self.host.dev / "vfio" / (f.iommu_group or "")
            if not f.iommu_group or not self._wait_for(node):
                return f"verification failed: {node} did not appear within {self.settle_timeout_s:g} s"
            return None
        if f.driver_override:
            return f"verification failed: driver_override is still {f.driver_override}"
        if d.to_driver is not None and f.driver != d.to_driver:
            return f"verification failed: driver is {f.driver or 'none'}, not {d.to_driver}"
        if d.to_driver is None and f.driver == VFIO:
            return f"verification failed: the kernel probed {VFIO} again"
        return None

    def _wait_for(self, path: Path) -> bool:
        # udev (or devtmpfs) creates /dev/vfio/<group> right after the bind; give it a moment.
        deadline = self.clock.monotonic() + self.settle_timeout_s
        while not path.exists():
            if self.clock.monotonic() >= deadline:
                return False
            self.clock.sleep(SETTLE_POLL_S)
        return True

    def _ok_message(self, d: DevicePlan) -> str:
        if d.to_driver == VFIO:
            return f"bound to {VFIO}; {self.host.dev / 'vfio' / (d.iommu_group or '')} present"
        now = pci.current_driver(self.sysfs, d.bdf)
        if now is None:
            self.on_event(f"{d.bdf}: no driver claimed it after the probe; it has no driver now")
            return "unbound; no driver claimed it (kernel default), so it has no driver now"
        return f"on {now}; driver_override cleared"

    def _restore(self, d: DevicePlan) -> tuple[bool, str]:
        """Best effort: put one device back on its original driver and override.

        Returns (whether it was left without a driver it had, where it ended).
        """
        problems = []
        want = d.from_driver

        def attempt(w: Write) -> bool:
            try:
                self._write(w)
                return True
            except HostError as e:
                problems.append(str(e))
                return False

        if self._gone(d.bdf):
            return False, "it no longer exists under sysfs; nothing to restore"
        now = pci.read_function(self.sysfs, d.bdf)
        # The kernel binds only the driver an override names, so an original override that names another
        # driver (a stale one) is put back last, after the original driver is bound again.
        during = d.from_override if d.from_override in (None, want) else None
        if now.driver_override != during:
            attempt(steps.override_write(self.sysfs, d.bdf, during, "rollback: restore driver_override"))
        if now.driver is not None and now.driver != want:
            try:
                away = steps.unbind_write(self.sysfs, d.bdf, now.driver, why=f"rollback: unbind from {now.driver}")
            except HostError as e:  # a driver name rblnctl will not write: the rollback goes on without it
                problems.append(str(e))
            else:
                attempt(away)
        if want is not None and pci.current_driver(self.sysfs, d.bdf) is None:
            ok = attempt(steps.bind_write(self.sysfs, d.bdf, want, f"rollback: bind {want}"))
            if not ok or pci.current_driver(self.sysfs, d.bdf) is None:
                attempt(steps.probe_write(self.sysfs, d.bdf, "rollback: probe"))
        if during != d.from_override:
            attempt(steps.override_write(self.sysfs, d.bdf, d.from_override, "rollback: restore driver_override"))
        final = pci.current_driver(self.sysfs, d.bdf)
        detail = f" ({'; '.join(problems)})" if problems else ""
        if final == want:
            return False, f"restored to {want or 'no driver (as before)'}{detail}"
        if final is None:
            if want == VFIO:
                how = f"bind it again once {VFIO} works"
            else:
                how = f"once {want} works again, unbind it naming {want} as the host driver, or recover it"
            return True, f"rollback failed{detail}: the device has NO driver now; {how}"
        return False, f"rollback left it on {final}, not {want or 'no driver'}{detail}"

    # ---- internals: state records ----

    def _record(self, plan: VfioPlan, records: dict[str, dict[str, Any]]) -> None:
        """Before the first write: the original driver of every device leaving a host driver (or none) for vfio-pci."""
        stamp = iso_utc(self.clock.now())
        changed = False
        for d in plan.changes:
            if d.to_driver != VFIO or d.from_driver == VFIO:
                continue  # to a host driver nothing needs recording; from vfio-pci the host driver is not known
            if d.from_driver is None and d.bdf in records:
                continue  # half-bound device: the earlier record knows more than "no driver"
            records[d.bdf] = {"driver": d.from_driver, "driver_override": d.from_override, "ids": d.ids,
                              "recorded_at": stamp}
            changed = True
        if changed:
            self._state.save(records)

    def _forget(self, plan: VfioPlan, records: dict[str, dict[str, Any]]) -> bool:
        """Drop the records `plan.forget` names; whether any was there."""
        dropped = [b for b in plan.forget if records.pop(b, None) is not None]
        for b in dropped:
            self.on_done(f"{b}: dropped its state record (it is on a host driver: nothing left to restore)")
        return bool(dropped)

    def _settle_records(self, plan: VfioPlan, results: dict[str, DeviceResult],
                        records: dict[str, dict[str, Any]]) -> None:
        """After the writes: drop the records of devices with nothing left to restore."""
        before = dict(records)
        self._forget(plan, records)
        for d in plan.changes:
            if self._gone(d.bdf):
                records.pop(d.bdf, None)  # removed from the host: a new function there starts afresh
            elif plan.operation is Operation.UNBIND:
                if d.bdf in results and results[d.bdf].status == Status.OK:
                    records.pop(d.bdf, None)
            elif pci.current_driver(self.sysfs, d.bdf) not in (None, VFIO):
                records.pop(d.bdf, None)  # on a host driver: nothing left to restore
            # still on vfio-pci, or without a driver: keep the record so unbind can restore it
        if records != before:
            self._state.save(records)


# --- helpers ---------------------------------------------------------------------------------------


def _plan(operation: Operation, devices: list[DevicePlan], gate: Gate, load: tuple[str, ...] = ()) -> VfioPlan:
    return VfioPlan(operation=operation, devices=tuple(devices), blockers=tuple(gate.blockers),
                    warnings=tuple(gate.warnings), load_modules=load)


def _changed(devices: Sequence[DevicePlan], fns: Sequence[PciFunction]) -> list[PciFunction]:
    return [f for d, f in zip(devices, fns, strict=True) if d.action != Action.SKIP]


def _record_fits(rec: dict[str, Any], f: PciFunction) -> bool:
    """Whether a state record can be this function's: it names no device IDs, or this function's."""
    return not rec.get("ids") or rec["ids"] == f.ids


def _by_target(devices: Sequence[DevicePlan]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in devices:
        if d.action != Action.SKIP and d.to_driver:
            out.setdefault(d.to_driver, []).append(d.bdf)
    return out


def _kill_hint(holders: Sequence[Holder]) -> str | None:
    """The `kill PID...` a blocked write's advice names: the pids of the holders found (each once), or None when there
    is none to name. The one place that picks them."""
    pids = dict.fromkeys(h.pid for h in holders if h.certain)  # never a process that may hold another device
    return f"kill {' '.join(map(str, pids))}" if pids else None


def _result(d: DevicePlan, operation: Operation, status: Status, message: str) -> DeviceResult:
    return DeviceResult(bdf=d.bdf, action=operation, from_driver=d.from_driver, to_driver=d.to_driver,
                        status=status, message=message)
