"""Crash points from rblnctl's own write log, and the state file across a reboot, on the fake and the real kernel.

Each scenario runs the command once whole through the write seam (tests/kernel/seam.py), which logs every sysfs write
it completes; that log is both checked (the same writes on both machines) and the list of crash points: for each
write N the machine is put back, the command runs again and is killed with SIGKILL right after write N (no rollback,
no state-file settling), then the recovery docs/vfio.md "After a crash" names (the same command again) must leave
every function as the whole run did: one driver and a matching override, on the machine itself.
"""

from __future__ import annotations

import pytest

from rblnctl import constants as C

from tests.kernel.guest import HOST_DRIVER, NPU0, NPU1, reboots

VFIO = C.VFIO_DRIVER
BOUND = (VFIO, VFIO)
HOME = (HOST_DRIVER, None)
DEV = f"/sys/bus/pci/devices/{NPU0}"


def _bound(host) -> None:
    rc, out = host.rblnctl("vfio", "bind", NPU0, "--yes")
    assert rc == 0, out


# name -> (the machine before: {bdf: driver_override}, bound first, command, the writes it makes, where NPU0 ends)
SCENARIOS = {
    "bind": ({}, False, ("vfio", "bind", NPU0, "--yes"),
             [(f"{DEV}/driver_override", VFIO), (f"/sys/bus/pci/drivers/{HOST_DRIVER}/unbind", NPU0),
              ("/sys/bus/pci/drivers_probe", NPU0)], BOUND),
    "unbind": ({}, True, ("vfio", "unbind", NPU0, "--yes"),
               [(f"{DEV}/driver_override", "\n"), (f"/sys/bus/pci/drivers/{VFIO}/unbind", NPU0),
                (f"/sys/bus/pci/drivers/{HOST_DRIVER}/bind", NPU0)], HOME),
    # what a crashed tool or the operator's vfio-manager leaves: a stale override on the host driver
    "recover": ({NPU0: "pci-stub"}, False, ("vfio", "recover", NPU0, "--mode", "vm", "--yes"),
                [(f"{DEV}/driver_override", VFIO), (f"/sys/bus/pci/drivers/{HOST_DRIVER}/unbind", NPU0),
                 ("/sys/bus/pci/drivers_probe", NPU0)], BOUND),
}


def _start(host, override: dict, bound: bool) -> None:
    host.reset(vfio=True, override=override)
    if bound:
        _bound(host)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_killed_after_each_write_the_same_command_again_finishes_the_job(host, scenario):
    override, bound, command, writes, end = SCENARIOS[scenario]
    _start(host, override, bound)
    log = host.write_log(scenario)
    rc, out = host.rblnctl(*command, log=log)
    assert rc == 0, out
    assert host.writes(log) == writes
    whole = host.functions()
    assert whole[NPU0] == end and whole[NPU1] == HOME
    recorded = set(host.state())

    for n in range(1, len(writes) + 1):
        _start(host, override, bound)
        log = host.write_log(f"{scenario}-{n}")
        rc, out = host.rblnctl(*command, log=log, crash_after=n)
        assert rc == 128 + 9 and host.writes(log) == writes[:n], (n, rc, out)
        cut = host.on(NPU0)
        rc, out = host.rblnctl(*command)
        assert rc == 0, (n, cut, out)
        assert host.functions() == whole, (n, cut, out)
        assert set(host.state()) == recorded, (n, cut, out)


@reboots
def test_the_state_file_across_a_reboot(host):
    """Bindings do not survive a reboot, the state file does (it is on disk): after one, `unbind` and `recover` find
    the function back on its host driver and leave it there, and the record of the old bind is dropped."""
    host.load_vfio()
    _bound(host)
    assert host.state()[NPU0]["driver"] == HOST_DRIVER
    host.reboot()
    assert host.on(NPU0) == HOME and NPU0 in host.state()  # the boot's drivers, the old record

    host.load_vfio()
    rc, out = host.rblnctl("vfio", "recover", "--all", "--mode", "vm", "--yes")
    assert rc == 0, out
    assert host.on(NPU0) == HOME and host.on(NPU1) == HOME, out  # not a leftover: recover moves nothing
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes")
    assert rc == 0, out
    assert host.on(NPU0) == HOME and host.state() == {}, out
