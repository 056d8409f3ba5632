"""The safety checks a VFIO plan passes before anything is written; each failed check is a blocker (as data)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import HostError
from rblnctl.host import iommu_advice, pci, system
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
        """Refuse the plan (only the named devices, when `bdfs` is given; every change otherwise)."""
        self.blockers.append(DeviceBlocker(message, override, tuple(bdfs)))

    def warn(self, message: str) -> None:
        """Note something that does not refuse the plan."""
        self.warnings.append(message)


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
    """No process may hold a device open (a workload on its /dev node, a VM on its VFIO group, a mapped BAR).

    `overridable` False: the operation cannot be forced, so the blocker names no override.
    """
    found: list[tuple[str, tuple[str, ...]]] = []
    for f in fns:
        for h in finder.holders(f):
            found.append((f"{f.bdf} is in use: pid {h.pid} ({h.command}) has {h.path} open", (f.bdf,)))
    if any(f.driver not in (None, C.VFIO_DRIVER) for f in fns):
        for h in finder.unattributed(pci.npu_bdfs(finder.sysfs)):
            found.append((f"pid {h.pid} ({h.command}) has {h.path} open and rblnctl cannot tell which PCI "
                          "function it belongs to", ()))
    if forced:
        for text, _ in found:
            gate.warn(f"{text}; going ahead because it is forced")
        if any("/vfio/" in t for t, _ in found):
            gate.warn("the kernel waits for a process holding a VFIO device to let go, so a write may block")
    else:
        for text, bdfs in found:
            gate.block(f"{text}; stop it first", bdfs=bdfs, override=FORCE if overridable else None)
    if finder.incomplete:
        gate.warn(f"could not read the open files of {finder.incomplete} processes: holders may be missed")


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
