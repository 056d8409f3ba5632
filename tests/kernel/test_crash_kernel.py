"""Crash points from rblnctl's own write log, and the state file across a reboot, on the fake and the real kernel.

Each scenario runs the command once whole through the write seam (tests/kernel/seam.py), which logs every sysfs write
it completes; that log is both checked (the same writes on both machines) and the list of crash points: for each
write N (or the ones a scenario names) the machine is put back, the command runs again and is killed with SIGKILL
right after write N (no rollback, no state-file settling), then the recovery docs/vfio.md "After a crash" names (the
same command again) must leave every function as the whole run did (one driver and a matching override, on the
machine itself) and the state file's records as the whole run left them.
"""

from __future__ import annotations

import pytest

from rblnctl import constants as C

from tests.kernel.guest import HOST_DRIVER, NPU0, NPU1, reboots

VFIO = C.VFIO_DRIVER
BOUND = (VFIO, VFIO)
HOME = (HOST_DRIVER, None)


def _bind_writes(bdf: str) -> list[tuple[str, str]]:
    return [(f"/sys/bus/pci/devices/{bdf}/driver_override", VFIO),
            (f"/sys/bus/pci/drivers/{HOST_DRIVER}/unbind", bdf), ("/sys/bus/pci/drivers_probe", bdf)]


def _unbind_writes(bdf: str) -> list[tuple[str, str]]:
    return [(f"/sys/bus/pci/devices/{bdf}/driver_override", "\n"), (f"/sys/bus/pci/drivers/{VFIO}/unbind", bdf),
            (f"/sys/bus/pci/drivers/{HOST_DRIVER}/bind", bdf)]


# name -> (the machine before: {bdf: driver_override}, bound first (`bind` with these arguments), the command, the
# writes it makes, where (NPU0, NPU1) end, the crash points: after which writes (None: every one))
SCENARIOS = {
    "bind": ({}, (), ("vfio", "bind", NPU0, "--yes"), _bind_writes(NPU0), (BOUND, HOME), None),
    "unbind": ({}, (NPU0,), ("vfio", "unbind", NPU0, "--yes"), _unbind_writes(NPU0), (HOME, HOME), None),
    # what a crashed tool or the operator's vfio-manager leaves: a stale override on the host driver
    "recover": ({NPU0: "pci-stub"}, (), ("vfio", "recover", NPU0, "--mode", "vm", "--yes"), _bind_writes(NPU0),
                (BOUND, HOME), None),
    # Two functions, one run: the points where a cut leaves the functions at different stages, the first one's last
    # write (the first done, its record saved, the second untouched) and the second one's first; the writes before
    # are the one-function scenario's with the other function untouched, the ones after the second function's
    # alone. Each point costs the kernel a reset, the killed run and the run again (4-6 s under TCG, unbind's with a
    # bind first): all six of both would add ~35 s to the tier (docs/testing.md "Running the kernel tier").
    "bind --all": ({}, (), ("vfio", "bind", "--all", "--yes"), _bind_writes(NPU0) + _bind_writes(NPU1),
                   (BOUND, BOUND), (3, 4)),
    # ... and for unbind --all the last one too: both functions back on their host driver with both records left, the
    # run again has nothing to move and must still drop them (its selection takes recorded functions on a host
    # driver: docs/vfio.md "After a crash")
    "unbind --all": ({}, ("--all",), ("vfio", "unbind", "--all", "--yes"), _unbind_writes(NPU0) + _unbind_writes(NPU1),
                     (HOME, HOME), (3, 4, 6)),
}


def _start(host, override: dict, bound: tuple[str, ...]) -> None:
    host.reset(vfio=True, override=override)
    if bound:
        rc, out = host.rblnctl("vfio", "bind", *bound, "--yes")
        assert rc == 0, out


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_killed_after_each_write_the_same_command_again_finishes_the_job(host, scenario):
    override, bound, command, writes, end, points = SCENARIOS[scenario]
    _start(host, override, bound)
    log = host.write_log(scenario.replace(" ", ""))
    rc, out = host.rblnctl(*command, log=log)
    assert rc == 0, out
    assert host.writes(log) == writes
    whole = host.functions()
    assert (whole[NPU0], whole[NPU1]) == end
    recorded = set(host.state())

    for n in points or range(1, len(writes) + 1):
        _start(host, override, bound)
        log = host.write_log(f"{scenario.replace(' ', '')}-{n}")
        rc, out = host.rblnctl(*command, log=log, crash_after=n)
        assert rc == 128 + 9 and host.writes(log) == writes[:n], (n, rc, out)
        cut = (host.on(NPU0), host.on(NPU1), sorted(host.state()))
        rc, out = host.rblnctl(*command)
        assert rc == 0, (n, cut, out)
        assert host.functions() == whole, (n, cut, out)
        assert set(host.state()) == recorded, (n, cut, out)


@reboots
def test_the_state_file_across_a_reboot(host):
    """Bindings do not survive a reboot, the state file does (it is on disk): after one, `unbind` and `recover` find
    the functions back on their host driver and leave them there, and the records of the old binds are dropped, by
    `unbind` of the function and by `unbind --all` alike."""
    host.load_vfio()
    rc, out = host.rblnctl("vfio", "bind", "--all", "--yes")
    assert rc == 0, out
    assert {b: r["driver"] for b, r in host.state().items()} == {NPU0: HOST_DRIVER, NPU1: HOST_DRIVER}
    host.reboot()
    assert host.on(NPU0) == HOME and host.on(NPU1) == HOME  # the boot's drivers,
    assert set(host.state()) == {NPU0, NPU1}  # the old records

    host.load_vfio()
    rc, out = host.rblnctl("vfio", "recover", "--all", "--mode", "vm", "--yes")
    assert rc == 0, out
    assert host.on(NPU0) == HOME and host.on(NPU1) == HOME, out  # not a leftover: recover moves nothing
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes")
    assert rc == 0, out
    assert host.on(NPU0) == HOME and set(host.state()) == {NPU1}, out
    rc, out = host.rblnctl("vfio", "unbind", "--all", "--yes")
    assert rc == 0 and "nothing to do" in out, out
    assert f"{NPU1}: dropped its state record" in out and "its state record dropped" in out, out
    assert host.functions()[NPU1] == HOME and host.state() == {}, out
