"""The sysfs writes that move one function, per operation (bind, unbind, recover): PciFunction -> DevicePlan; pure.

Every recipe reads nothing: it turns what a function looks like now into the writes, in order,
that move it, or into a skip with the reason. The binder checks, applies and verifies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rblnctl import constants as C
from rblnctl.errors import HostError, InvalidInput
from rblnctl.host import pci
from rblnctl.host.pci import PciFunction
from rblnctl.host.vfio.model import Action, DevicePlan, Mode, Write
from rblnctl.host.vfio.writer import CLEAR

VFIO = C.VFIO_DRIVER
# What each recover mode wants a function on: (driver, driver_override).
MODE_TARGETS = {Mode.CONTAINER: (C.HOST_DRIVER, None), Mode.VM: (VFIO, VFIO)}


def bind_step(sysfs: Path, f: PciFunction) -> DevicePlan:
    """To vfio-pci: set driver_override, unbind the current driver, drivers_probe (as driverctl does)."""
    if f.driver == VFIO:
        note = f"already bound to {VFIO}"
        if f.driver_override != VFIO:
            note += f" (driver_override is {f.driver_override or 'empty'})"
        return device_plan(f, Action.SKIP, VFIO, note=note)
    # driver_override first: from then on only vfio-pci may probe it, so nothing re-grabs it after the unbind
    writes = [override_write(sysfs, f.bdf, VFIO, "set driver_override")]
    if f.driver:
        writes.append(unbind_write(sysfs, f.bdf, f.driver))
    writes.append(probe_write(sysfs, f.bdf, f"probe (binds {VFIO})"))
    note = "half-bound: no driver yet" if f.driver is None and f.driver_override == VFIO else ""
    return device_plan(f, Action.BIND, VFIO, note=note, writes=writes)


def unbind_step(sysfs: Path, f: PciFunction, target: str | None, source: str) -> DevicePlan:
    """Back to `target` (None: the kernel's default): clear the override, unbind vfio-pci, bind or probe.

    `source` says where the target came from (named, recorded, kernel default).
    """
    if f.driver not in (None, VFIO) and f.driver_override != VFIO:
        return device_plan(f, Action.SKIP, f.driver, note=f"on {f.driver}, not {VFIO}: nothing to undo")
    writes = []
    if f.driver_override:
        writes.append(override_write(sysfs, f.bdf, None, "clear driver_override"))
    rebind = f.driver in (None, VFIO) if target is None else f.driver != target
    if rebind and f.driver:
        writes.append(unbind_write(sysfs, f.bdf, f.driver))
    if rebind and target:
        writes.append(bind_write(sysfs, f.bdf, target, f"bind {target}"))
    elif rebind:
        writes.append(probe_write(sysfs, f.bdf, "probe (kernel default driver)"))
    return device_plan(f, Action.UNBIND, target, note=f"to {target or 'the kernel default'} ({source})",
                       writes=writes)


def recover_step(sysfs: Path, f: PciFunction, mode: Mode) -> DevicePlan:
    """To the driver `mode` wants, when `f` is a leftover: set or clear the override, unbind, drivers_probe."""
    want, want_override = MODE_TARGETS[mode]
    problem = leftover(f, want)
    if problem is None:
        return device_plan(f, Action.SKIP, f.driver, note=healthy_note(f, want))
    writes = []
    if f.driver_override != want_override:
        writes.append(override_write(sysfs, f.bdf, want_override,
                                     "set driver_override" if want_override else "clear driver_override"))
    if f.driver is not None and f.driver != want:
        writes.append(unbind_write(sysfs, f.bdf, f.driver))
    if f.driver != want:
        writes.append(probe_write(sysfs, f.bdf, f"probe (binds {want})"))
    return device_plan(f, Action.RECOVER, want, note=f"{problem}: recover to {want} ({mode} mode)", writes=writes)


def leftover(f: PciFunction, want: str) -> str | None:
    """Why a function needs recovery for a mode that wants `want`, or None when it does not.

    A leftover has no driver, or a stale driver_override: one naming a driver the mode does not
    use, or one set while the function is bound to another driver.
    """
    override = f.driver_override
    if f.driver is None:
        return "bound to no driver" + (f" (driver_override {override})" if override else "")
    if override is not None and override != want:
        return f"stale driver_override {override} (the mode uses {want}; bound to {f.driver})"
    if override is not None and f.driver != override:
        return f"stale driver_override {override} while bound to {f.driver}"
    return None


def healthy_note(f: PciFunction, want: str) -> str:
    """Why recover leaves a function that is not a leftover alone."""
    if f.driver == want:
        return f"healthy: on {want}" + (f" (driver_override {f.driver_override})" if f.driver_override else "")
    return f"on {f.driver}: not a leftover (bind or unbind moves it between drivers)"


def device_plan(f: PciFunction, action: Action, to: str | None, *, note: str = "",
                writes: Sequence[Write] = ()) -> DevicePlan:
    """A DevicePlan for `f` as it is now."""
    return DevicePlan(bdf=f.bdf, ids=f.ids, model=f.model, iommu_group=f.iommu_group, action=action,
                      from_driver=f.driver, from_override=f.driver_override, to_driver=to, note=note,
                      writes=tuple(writes))


def override_write(sysfs: Path, bdf: str, value: str | None, why: str) -> Write:
    """`<bdf>/driver_override <- value` (None clears it)."""
    return Write(bdf=bdf, path=str(pci.device_dir(sysfs, bdf) / "driver_override"), value=value or CLEAR, why=why)


def unbind_write(sysfs: Path, bdf: str, driver: str, why: str | None = None) -> Write:
    """`drivers/<driver>/unbind <- bdf`, `driver` the one sysfs shows the function on.

    Raises HostError when that name fails rblnctl's driver-name check (pci.validate_driver_name): the host's name,
    not a usage error of the person who ran the command.
    """
    try:
        path = pci.driver_dir(sysfs, driver) / "unbind"
    except InvalidInput:
        raise HostError(f"function {bdf} is on driver {driver!r}, a name rblnctl will not write to sysfs") from None
    return Write(bdf=bdf, path=str(path), value=bdf, why=why or f"unbind from {driver}",
                 may_block=pci.is_vfio_driver(driver))


def bind_write(sysfs: Path, bdf: str, driver: str, why: str) -> Write:
    """`drivers/<driver>/bind <- bdf`."""
    return Write(bdf=bdf, path=str(pci.driver_dir(sysfs, driver) / "bind"), value=bdf, why=why)


def probe_write(sysfs: Path, bdf: str, why: str) -> Write:
    """`bus/pci/drivers_probe <- bdf`: the kernel binds the override driver, or the first one that matches."""
    return Write(bdf=bdf, path=str(Path(sysfs) / "bus" / "pci" / "drivers_probe"), value=bdf, why=why)


def bounded_unbinds(d: DevicePlan) -> DevicePlan:
    """`d` with every unbind write bounded (Write.may_block): a device whose holders were forced past."""
    writes = tuple(replace(w, may_block=True) if w.path.endswith("/unbind") else w for w in d.writes)
    return replace(d, writes=writes)
