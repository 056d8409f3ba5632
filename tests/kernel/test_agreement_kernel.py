"""The kernel's answers to the raw sysfs writes rblnctl's writer makes, and the fake's (tests/fakes/sysfs.py), held to
one expectation (docs/testing.md "The fake and the real kernel": what the fake is trusted for).

Each step is one write as any program makes it (KernelHost.raw: the fork server writes it in the guest; FakeHost.raw:
the SimKernel's writer), answered "ok" or the errno's name, then NPU0's (driver, driver_override) on the machine.
The kernel's side (Linux 6.1): a write of nothing never reaches the attribute (fs/sysfs/file.c sysfs_kf_write: `if
(!count) return 0`); driver_override takes the value up to the first newline, and an empty one clears it
(drivers/base/driver.c driver_set_override); `drivers/<d>/bind` is ENODEV unless <d> matches the function (with an
override only the driver it names does: drivers/pci/pci-driver.c pci_match_device), then EBUSY if the function has a
driver (drivers/base/bus.c bind_store -> drivers/base/dd.c device_driver_attach, __driver_probe_device);
`drivers/<d>/unbind` is ENODEV unless the function is on <d> (bus.c unbind_store); `drivers_probe` succeeds when
nothing binds (bus.c drivers_probe_store, bus_rescan_devices_helper).
"""

from __future__ import annotations

from rblnctl import constants as C

from tests.kernel.guest import HOST_DRIVER, NPU0

VFIO = C.VFIO_DRIVER
DEV = f"/sys/bus/pci/devices/{NPU0}"
HOST = f"/sys/bus/pci/drivers/{HOST_DRIVER}"
NOBODY = "no-such-driver"  # an override naming a driver neither machine has

# (file, value, the answer, NPU0's (driver, driver_override) after it), in order, from NPU0 on its host driver
STEPS = [
    (f"{HOST}/bind", NPU0, "EBUSY", (HOST_DRIVER, None)),  # a second bind
    (f"{DEV}/driver_override", VFIO, "ok", (HOST_DRIVER, VFIO)),  # as rblnctl writes it: no newline
    (f"{DEV}/driver_override", "\n", "ok", (HOST_DRIVER, None)),  # a newline clears it
    (f"{DEV}/driver_override", f"{NOBODY}\nrest", "ok", (HOST_DRIVER, NOBODY)),  # up to the first newline
    (f"{DEV}/driver_override", "", "ok", (HOST_DRIVER, NOBODY)),  # a write of nothing changes nothing
    (f"{HOST}/bind", NPU0, "ENODEV", (HOST_DRIVER, NOBODY)),  # bound, but not a match: no match comes first
    (f"{HOST}/unbind", NPU0, "ok", (None, NOBODY)),
    (f"{HOST}/unbind", NPU0, "ENODEV", (None, NOBODY)),  # a second unbind
    (f"{HOST}/bind", NPU0, "ENODEV", (None, NOBODY)),  # the override names another driver
    ("/sys/bus/pci/drivers_probe", NPU0, "ok", (None, NOBODY)),  # nothing binds, and that is no error
    (f"{DEV}/driver_override", "\n", "ok", (None, None)),
    (f"{HOST}/bind", NPU0, "ok", (HOST_DRIVER, None)),
]


def test_raw_writes_answer_the_same_on_the_kernel_and_the_fake(host):
    """A fresh fake and the kernel reset by `linux`: NPU0 on its host driver, no override."""
    assert host.on(NPU0) == (HOST_DRIVER, None)
    said = host.raw([(path, value) for path, value, _, _ in STEPS], NPU0)
    assert [(p, v, how, after) for (p, v, _, _), (how, after) in zip(STEPS, said, strict=True)] == STEPS
