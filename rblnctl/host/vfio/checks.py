"""The safety checks a VFIO plan passes before anything is written; each failed check is a blocker (as data)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import HostError, one_line
from rblnctl.host import iommu_advice, pci, procfs, system
from rblnctl.host.holders import HolderFinder
from rblnctl.host.pci import PciFunction
from rblnctl.host.root import HostRoot
from rblnctl.host.vfio.model import DeviceBlocker
from rblnctl.host.vfio.state import StateFile
from rblnctl.plan import Blocker

# Options-field names a blocker may name as its override (the CLI spells them as flags).
FORCE = "force"
LOAD_MODULES = "load_modules"


@dataclass
class Gate:
    """Collects the blockers and warnings of one plan while its checks run."""

    blockers: list[Blocker] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def block(self, message: str, *, bdfs: Sequence[str] = (), override: str | None = None) -> None:
        """Refuse the plan (only the named devices, when `bdfs` is given; every change otherwise). One line: host
        text in it (a holder's argv) may hold a newline, which would forge a line of its own on a terminal."""
        self.blockers.append(DeviceBlocker(one_line(message), override, tuple(bdfs)))

    def warn(self, message: str) -> None:
        """Note something that does not refuse the plan (one line, as a blocker is)."""
        self.warnings.append(one_line(message))


def check_rbln(gate: Gate, fns: Sequence[PciFunction], verb: str, *, forced: bool, overridable: bool = True) -> None:
    """Only RBLN NPUs move unless forced (and the operation allows forcing)."""
    for f in fns:
        if f.is_rbln_npu:
            continue
        text = f"{f.bdf} ({f.ids}, class {f.class_code:06x}) is not an RBLN NPU"
        if not overridable:
            gate.block(f"{text}; {verb} handles RBLN NPUs only", bdfs=(f.bdf,))
        elif forced:
            gate.warn(f"{text}; going ahead with {verb} because it is forced")
        else:
            gate.block(text, bdfs=(f.bdf,), override=FORCE)


def check_root(gate: Gate, is_root: bool, verb: str) -> None:
    """Writing sysfs needs an effective uid of 0."""
    if not is_root:
        gate.block(f"{verb} writes sysfs and needs root: rerun as root (sudo) on the node")


def check_iommu(gate: Gate, sysfs: Path, fns: Sequence[PciFunction]) -> None:
    """vfio-pci needs the IOMMU on and every device in a group."""
    if pci.iommu_group_count(sysfs) == 0:
        gate.block(iommu_advice.vfio_needs_iommu(f"{sysfs}/kernel/iommu_groups"))
        return
    for f in fns:
        if not f.iommu_group:
            gate.block(f"{f.bdf} has no IOMMU group; vfio-pci cannot take it", bdfs=(f.bdf,))


def check_vfio_pci(gate: Gate, host: HostRoot, *, load_modules: bool, loader_injected: bool,
                   overridable: bool = True) -> tuple[str, ...]:
    """vfio-pci must be registered (or its module present); return the modules apply() should load first.

    `overridable` False: the operation cannot load modules, so the blocker names no override.
    """
    sysfs = host.sys
    if (pci.driver_registered(sysfs, C.VFIO_DRIVER)
            or system.module_state(sysfs, "vfio_pci") is not system.ModuleState.MISSING):
        return ()
    text = (f"{C.VFIO_DRIVER} is not loaded (no {pci.driver_dir(sysfs, C.VFIO_DRIVER)} or {sysfs}/module/vfio_pci): "
            "load it with `modprobe vfio-pci`")
    if not load_modules:
        gate.block(text, override=LOAD_MODULES if overridable else None)
        return ()
    if not loader_injected and not host.is_live:
        gate.block(f"loading {C.VFIO_DRIVER} runs the host's modprobe, which changes the running kernel, not the "
                   f"tree under {host.path}")
        return ()
    return ("vfio-pci",)


def check_drivers_loaded(gate: Gate, sysfs: Path, targets: Mapping[str, Sequence[str]], *,
                         can_name_another: bool = True) -> None:
    """Each target host driver must be registered (`targets`: driver -> the devices going to it)."""
    for driver in sorted(targets):
        if not pci.driver_registered(sysfs, driver):
            advice = "load its module first" + (", or name another host driver" if can_name_another else "")
            gate.block(f"driver {driver} is not loaded (no {pci.driver_dir(sysfs, driver)}): {advice}",
                       bdfs=tuple(targets[driver]))


def check_holders(gate: Gate, finder: HolderFinder, fns: Sequence[PciFunction], *, forced: bool,
                  overridable: bool = True) -> None:
    """No process may hold a device (a workload on its /dev node, a VM on its VFIO group or device fd, a mapped BAR).

    `overridable` False: the operation cannot be forced, so the blocker names no override.
    """
    found: list[tuple[str, tuple[str, ...]]] = []
    vfio_users = False
    for f in fns:
        for h in finder.holders(f):
            found.append((f"{f.bdf} is in use: {h.text}", (f.bdf,)))
            vfio_users = vfio_users or h.how == procfs.VFIO_FD or "/vfio/" in h.path
    if any(f.driver not in (None, C.VFIO_DRIVER) for f in fns):
        for h in finder.unattributed(pci.npu_bdfs(finder.sysfs)):
            found.append((f"{h.text} and rblnctl cannot tell which PCI function it belongs to", ()))
    if forced:
        for text, _ in found:
            gate.warn(f"{text}; going ahead because it is forced")
        if vfio_users:
            gate.warn(FORCED_VFIO_USER)
    else:
        for text, bdfs in found:
            gate.block(f"{text}; stop it first", bdfs=bdfs, override=FORCE if overridable else None)
    if finder.incomplete:
        gate.warn(f"could not read the open files of {finder.incomplete} processes: holders may be missed")


# While a VFIO user holds the device, the kernel's unbind waits for it, and every 10 s asks it to let go: it calls the
# driver's request op (torvalds/linux v6.1 drivers/vfio/vfio_main.c vfio_unregister_group_dev), which for vfio-pci
# signals the request eventfd the user registered (VFIO_PCI_REQ_IRQ_INDEX; drivers/vfio/pci/vfio_pci_core.c
# vfio_pci_core_request: dmesg "Relaying device request to user", or "No device request channel registered" once
# when there is none). QEMU registers one and answers by asking the guest to hot-unplug the device (qemu/qemu
# hw/vfio/pci.c vfio_req_notifier_handler -> qdev_unplug), so forcing takes the NPU out of a running VM.
FORCED_VFIO_USER = ("the kernel waits for a process holding a VFIO device to let go, so a write may block; meanwhile "
                    "it asks that process every 10 s to release the device, and a VM (QEMU) answers by asking its "
                    "guest to hot-unplug the NPU: forcing takes it away from the running VM")


def check_groups(gate: Gate, sysfs: Path, fns: Sequence[PciFunction], requested: set[str]) -> None:
    """Every other member of a device's IOMMU group must keep it viable (pci.group_member_blocker) or move too."""
    seen: set[str] = set()
    for f in fns:
        if not f.iommu_group or f.iommu_group in seen:
            continue
        seen.add(f.iommu_group)
        members = pci.iommu_group_members(sysfs, f.iommu_group)
        offenders = []
        for m in members:
            if m in requested:
                continue
            mf = pci.read_function(sysfs, m)
            why = pci.group_member_blocker(mf)
            if why is not None:
                offenders.append((m, f"{m} ({mf.ids}) {why}"))
        if offenders:
            named = sorted(requested & set(members))
            everyone = sorted(set(named) | {m for m, _ in offenders})
            gate.block(f"IOMMU group {f.iommu_group} of {', '.join(named)} is not viable: "
                       f"{'; '.join(t for _, t in offenders)} stays on a host driver. Name every member to bind "
                       f"the whole group together ({' '.join(everyone)})", bdfs=tuple(named))


def check_state(gate: Gate, state: StateFile, *, needed: bool) -> dict[str, dict[str, Any]]:
    """Read the records; a damaged file blocks a plan that needs it and is only a warning otherwise."""
    try:
        return state.load()
    except HostError as e:
        if needed:
            gate.block(str(e))
        else:
            gate.warn(f"{e}; going ahead without it and leaving it untouched")
        return {}
