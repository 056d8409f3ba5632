"""rblnctl.host.vfio.steps: which functions are leftovers, and the writes that move one function (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rblnctl.host.pci import PciFunction
from rblnctl.host.vfio import Action, Mode
from rblnctl.host.vfio import steps

SYS = Path("/h/sys")
A = "0000:3b:00.0"


def fn(driver, override) -> PciFunction:
    return PciFunction(bdf=A, vendor=0x1EFF, device=0x1220, class_code=0x120000, driver=driver,
                       driver_override=override, iommu_group="7", numa_node=0, model="CA22", function="PF")


@pytest.mark.parametrize(("driver", "override", "mode", "action", "note"), [
    (None, None, Mode.CONTAINER, Action.RECOVER, "bound to no driver: recover to rebellions"),
    (None, "vfio-pci", Mode.CONTAINER, Action.RECOVER, "bound to no driver (driver_override vfio-pci)"),
    ("rebellions", "vfio-pci", Mode.CONTAINER, Action.RECOVER, "stale driver_override vfio-pci (the mode uses"),
    ("pci-stub", "rebellions", Mode.CONTAINER, Action.RECOVER, "stale driver_override rebellions while bound"),
    ("rebellions", None, Mode.CONTAINER, Action.SKIP, "healthy: on rebellions"),
    ("rebellions", "rebellions", Mode.CONTAINER, Action.SKIP, "healthy: on rebellions (driver_override rebellions)"),
    ("vfio-pci", None, Mode.CONTAINER, Action.SKIP, "on vfio-pci: not a leftover"),
    ("vfio-pci", "vfio-pci", Mode.CONTAINER, Action.RECOVER, "stale driver_override vfio-pci"),
    (None, None, Mode.VM, Action.RECOVER, "bound to no driver: recover to vfio-pci (vm mode)"),
    ("rebellions", "vfio-pci", Mode.VM, Action.RECOVER, "stale driver_override vfio-pci while bound to rebellions"),
    ("vfio-pci", "rebellions", Mode.VM, Action.RECOVER, "stale driver_override rebellions (the mode uses vfio-pci"),
    ("vfio-pci", "vfio-pci", Mode.VM, Action.SKIP, "healthy: on vfio-pci (driver_override vfio-pci)"),
    ("vfio-pci", None, Mode.VM, Action.SKIP, "healthy: on vfio-pci"),
    ("rebellions", None, Mode.VM, Action.SKIP, "on rebellions: not a leftover"),
])
def test_recover_step_classifies_every_driver_and_override(driver, override, mode, action, note):
    d = steps.recover_step(SYS, fn(driver, override), mode)
    assert d.action == action and d.note.startswith(note), d.note
    assert (d.writes == ()) == (action == Action.SKIP)


@pytest.mark.parametrize(("driver", "override", "mode", "writes"), [
    (None, "vfio-pci", Mode.CONTAINER, [("driver_override", "\n"), ("drivers_probe", A)]),
    ("rebellions", "vfio-pci", Mode.CONTAINER, [("driver_override", "\n")]),
    ("vfio-pci", "vfio-pci", Mode.CONTAINER, [("driver_override", "\n"), ("unbind", A), ("drivers_probe", A)]),
    (None, None, Mode.VM, [("driver_override", "vfio-pci"), ("drivers_probe", A)]),
    ("rebellions", "vfio-pci", Mode.VM, [("unbind", A), ("drivers_probe", A)]),
    ("vfio-pci", "rebellions", Mode.VM, [("driver_override", "vfio-pci")]),
])
def test_recover_step_writes_only_what_is_missing(driver, override, mode, writes):
    d = steps.recover_step(SYS, fn(driver, override), mode)
    assert [(Path(w.path).name, w.value) for w in d.writes] == writes


def test_bind_and_unbind_steps():
    d = steps.bind_step(SYS, fn("rebellions", None))
    assert [(w.path, w.value) for w in d.writes] == [
        (f"/h/sys/bus/pci/devices/{A}/driver_override", "vfio-pci"),
        ("/h/sys/bus/pci/drivers/rebellions/unbind", A), ("/h/sys/bus/pci/drivers_probe", A)]
    assert steps.bind_step(SYS, fn("vfio-pci", None)).note == "already bound to vfio-pci (driver_override is empty)"
    d = steps.unbind_step(SYS, fn("vfio-pci", "vfio-pci"), "rebellions", "recorded")
    assert d.note == "to rebellions (recorded)" and [w.why for w in d.writes] == [
        "clear driver_override", "unbind from vfio-pci", "bind rebellions"]
    assert steps.unbind_step(SYS, fn("rebellions", None), None, "kernel default").action == Action.SKIP
