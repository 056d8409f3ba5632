"""What writes nothing, on the fake and the real kernel: the dry runs (`recover --dry-run`, `bind --dry-run
--load-modules`), a refusal for a VFIO user holding the group, and Ctrl-C at the confirmation prompt.

"Nothing" is read on the machine: every PCI function's driver and driver_override, the state file's records, the loaded
modules, and the write seam's log (tests/kernel/seam.py: every write rblnctl's writer completed) empty.
"""

from __future__ import annotations

import os

from rblnctl import constants as C

from tests.kernel.guest import GROUPS, HOST_DRIVER, NPU0, NPU1
from tests.terminal import on_terminal

VFIO = C.VFIO_DRIVER
BOUND = (VFIO, VFIO)
HOME = (HOST_DRIVER, None)
DEV = f"/sys/bus/pci/devices/{NPU0}"


def _machine(host) -> tuple:
    return host.functions(), host.state(), host.modules()


def test_recover_dry_run_writes_nothing_and_says_what_it_would_write(host):
    host.load_vfio()
    assert host.rblnctl("vfio", "bind", NPU1, "--yes")[0] == 0  # a record in the state file, to keep as it is
    host.set_override(NPU0, "pci-stub")  # a stale override: what recover repairs
    before = _machine(host)
    log = host.write_log("recover-dry")
    rc, out = host.rblnctl("vfio", "recover", "--all", "--mode", "vm", "--dry-run", log=log)
    assert rc == 0, out
    assert host.writes(log) == [] and _machine(host) == before, out
    assert set(before[1]) == {NPU1} and before[0][NPU0] == (HOST_DRIVER, "pci-stub")
    would = [line.split("  #")[0] for line in out.splitlines() if line.startswith("would write:")]
    assert would == [f'would write: {DEV}/driver_override <- "{VFIO}"',
                     f'would write: /sys/bus/pci/drivers/{HOST_DRIVER}/unbind <- "{NPU0}"',
                     f'would write: /sys/bus/pci/drivers_probe <- "{NPU0}"'], out
    assert "dry run: nothing was written" in out, out


def test_bind_dry_run_with_load_modules_loads_nothing(host):
    host.unload_vfio()
    before = _machine(host)
    log = host.write_log("bind-dry")
    rc, out = host.rblnctl("vfio", "bind", NPU0, "--dry-run", "--load-modules", log=log)
    assert rc == 0, out
    assert "would run: modprobe vfio-pci" in out and "loaded kernel module" not in out, out
    assert host.writes(log) == [] and _machine(host) == before, out
    assert not {m for m in host.modules() if m.startswith("vfio")}, host.modules()


def test_a_vfio_user_of_the_group_refuses_unbind_naming_it_and_nothing_is_written(host):
    """A VMM holding /dev/vfio/<group> (the kernel: tests/kernel/vfio_holder.py, the group, container and device
    fds; the fake: a process whose fd links name the node): `unbind` without --force refuses up front, naming the
    process by pid and command line and the node it has open."""
    host.load_vfio()
    assert host.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    pid = host.vfio_user(NPU0)
    before = _machine(host)
    log = host.write_log("held")
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", log=log)
    assert rc == 1, out
    node = f"/dev/vfio/{GROUPS[NPU0]}"
    assert f"pid {pid} (python -m tests.kernel.vfio_holder {NPU0} {node}" in out and f"{node} open" in out, out
    assert "--force" in out, out
    assert host.writes(log) == [] and _machine(host) == before and host.on(NPU0) == BOUND, out
    host.let_go(pid)


def test_ctrl_c_at_the_confirmation_prompt_writes_nothing(tmp_path):
    """On the fake only: the kernel tier's commands run with stdin /dev/null (the guest's request agent), and a
    question needs a terminal. Here rblnctl is a real process on a pseudo-terminal (tests/terminal.py) against the fake
    guest's tree (its own writer, so a write would change the tree's files); Ctrl-C typed at `[y/N]` exits 130 before
    the lock is taken and before any write: the whole tree as it was, byte for byte (no lock file, no state file)."""
    from tests.kernel.fakehost import FakeHost

    assert os.geteuid() == 0, "bind asks only a root user (a plan without root is refused before the question)"
    host = FakeHost(tmp_path)
    host.load_vfio()
    before = host.k.checksum()
    screen = on_terminal(["vfio", "bind", NPU0, "--root", str(host.root)], ctrl_c_after="[y/N]:")
    assert screen.code == 130, screen.text
    assert f"{NPU0}" in screen.text and "Bind 1 device(s)? [y/N]:" in screen.text, screen.text
    assert host.k.checksum() == before, screen.text  # every file, link and folder: no lock file, no state file
    assert host.on(NPU0) == HOME
