"""Holders no open path shows, on a real kernel (issue 40): a VFIO user that closed its group fd after
VFIO_GROUP_GET_DEVICE_FD (only `anon_inode:[vfio-device]` and the container stay in /proc/<pid>/fd), and a BAR mapped
through sysfs `resourceN` whose fd was closed (only /proc/<pid>/maps shows it). Each refuses `vfio unbind` (or
`bind`) up front, naming the pid, with nothing written. And what the kernel's pending unbind does to a VFIO user
that registered a request channel, as QEMU does: it relays the request to it (the `--force` warning says so).

`linux` only: the fake has no kernel that blocks an unbind on a device fd, maps BARs or signals an eventfd (the
same parsing is tested on the fake procfs in tests/host/test_holders.py).
"""

from __future__ import annotations

from rblnctl import constants as C

from tests.kernel.guest import GROUPS, HOST_DRIVER, NPU0, NPU1, start_holder

BOUND = (C.VFIO_DRIVER, C.VFIO_DRIVER)
HOLDER = "exec python -m tests.kernel.vfio_holder"


def test_a_vfio_user_that_closed_its_group_fd_is_refused_up_front(linux):
    assert linux.rblnctl("vfio", "bind", NPU0, NPU1, "--yes")[0] == 0
    pid = start_holder(linux, "vfio", f"{HOLDER} {NPU0} /dev/vfio/{GROUPS[NPU0]} /run/kt/vfio.ready --close-group")
    fds = linux.sh(f"for f in /proc/{pid}/fd/*; do readlink $f; done; cat /proc/{pid}/fdinfo/*")
    # what 6.1 shows: the device fd is an anon inode, no group node is open, and fdinfo does not name the device
    assert "anon_inode:[vfio-device]" in fds and "/dev/vfio/vfio" in fds, fds
    assert f"/dev/vfio/{GROUPS[NPU0]}" not in fds and "vfio-device-syspath" not in fds, fds
    assert linux.sh(f"cat /sys/bus/pci/devices/{NPU0}/enable /sys/bus/pci/devices/{NPU1}/enable").split() == ["1", "0"]

    before = linux.functions()
    rc, out = linux.rblnctl("vfio", "unbind", NPU0, "--yes")
    assert rc == 1 and f"{NPU0} is in use: pid {pid} (python -m tests.kernel.vfio_holder {NPU0}" in out, out
    assert "holds a VFIO device fd (which device the kernel does not say)" in out and "write:" not in out, out
    assert linux.functions() == before
    # NPU1 is on vfio-pci too, but nobody opened it (its enable count is 0): that fd is not its
    rc, out = linux.rblnctl("vfio", "unbind", NPU1, "--yes")
    assert rc == 0 and linux.on(NPU1) == (HOST_DRIVER, None), out


def test_two_vms_each_hold_their_own_npu_only(linux):
    """Two VFIO users, each with its group node and a device fd 6.1 does not attribute (both enabled): each is listed
    on its own NPU only (its group node says which device it uses), and the holder is certain."""
    assert linux.rblnctl("vfio", "bind", NPU0, NPU1, "--yes")[0] == 0
    pid0 = start_holder(linux, "vm0", f"{HOLDER} {NPU0} /dev/vfio/{GROUPS[NPU0]} /run/kt/vm0.ready")
    pid1 = start_holder(linux, "vm1", f"{HOLDER} {NPU1} /dev/vfio/{GROUPS[NPU1]} /run/kt/vm1.ready")
    assert linux.sh(f"cat /sys/bus/pci/devices/{NPU0}/enable /sys/bus/pci/devices/{NPU1}/enable").split() == ["1", "1"]
    doc = linux.json("vfio", "status")
    held = {d["bdf"]: sorted({h["pid"] for h in d["holders"]}) for d in doc["devices"]}
    assert held == {NPU0: [pid0], NPU1: [pid1]}, doc["devices"]


def test_a_bar_mapped_through_resource_n_and_closed_is_refused_up_front(linux):
    assert linux.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    # a user-space driver maps NPU0's BAR 4 through sysfs and closes the fd (sysfs maps it: vfio-pci has no user)
    pid = start_holder(linux, "map0", f"{HOLDER} --map /sys/bus/pci/devices/{NPU0}/resource4 /run/kt/map0.ready")
    assert "resource" not in linux.sh(f"for f in /proc/{pid}/fd/*; do readlink $f; done")
    before = linux.functions()
    rc, out = linux.rblnctl("vfio", "unbind", NPU0, "--yes")
    assert rc == 1 and f"pid {pid} (python -m tests.kernel.vfio_holder --map" in out, out
    assert f"has /sys/devices/pci0000:00/{NPU0}/resource4 mapped" in out and "write:" not in out, out
    assert linux.functions() == before

    # NPU1 without a driver (virtio-pci holds its BARs busy, so sysfs would not map them), mapped: bind refuses
    linux.sh(f"echo {NPU1} > /sys/bus/pci/drivers/{HOST_DRIVER}/unbind")
    pid = start_holder(linux, "map1", f"{HOLDER} --map /sys/bus/pci/devices/{NPU1}/resource4 /run/kt/map1.ready")
    before = linux.functions()
    rc, out = linux.rblnctl("vfio", "bind", NPU1, "--yes")
    assert rc == 1 and f"{NPU1} is in use: pid {pid} (python -m tests.kernel.vfio_holder --map" in out, out
    assert f"/0000:00:07.0/{NPU1}/resource4 mapped" in out and linux.functions() == before, out


def test_a_pending_unbind_relays_the_request_to_the_vfio_users_request_channel(linux):
    """QEMU registers an eventfd on VFIO_PCI_REQ_IRQ_INDEX and answers it by asking the guest to unplug the device;
    the kernel signals it at once and every 10 s while an unbind waits (so `--force` asks a VM to give its NPU up)."""
    assert linux.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    pid = start_holder(linux, "vfio", f"{HOLDER} {NPU0} /dev/vfio/{GROUPS[NPU0]} /run/kt/vfio.ready --request")
    seen = int(linux.sh("dmesg | wc -l"))  # the session's guest: earlier tests' lines stay in the ring
    rc, out = linux.rblnctl("vfio", "unbind", NPU0, "--yes", "--force", "--timeout", "2s")
    assert rc == 1 and "asks that process every 10 s to release the device" in out, out
    requests = linux.sh(f"cat /run/kt/vfio.ready.requests; dmesg | tail -n +{seen + 1} | grep -i 'request' || true")
    assert requests.split()[0].isdigit() and f"vfio-pci {NPU0}: Relaying device request to user" in requests, requests
    assert "No device request channel registered" not in requests, requests
    linux.let_go(pid)
    assert linux.on(NPU0) == (None, None)  # the pending write completed once the user let go


def test_a_holders_argv_with_a_newline_and_esc_stays_on_one_escaped_line(linux):
    """/proc/<pid>/cmdline is the holder's to choose: its newline and CR must not forge a line of the refusal."""
    argv0 = r"vm\033[2J\nwarning: all clear\rb"  # bash's exec -a sets argv[0]; printf makes the bytes
    pid = start_holder(linux, "argv", f"echo started > /run/kt/argv.ready; "
                                      f"exec bash -c 'exec -a \"$(printf \"{argv0}\")\" sleep 100000' 3</dev/vda")
    linux.sh(f"for i in $(seq 600); do grep -q all /proc/{pid}/cmdline && break; sleep 0.1; done; "
             f"grep -q all /proc/{pid}/cmdline || {{ cat /run/kt/argv.log /proc/{pid}/cmdline; exit 1; }}")
    rc, out = linux.rblnctl("vfio", "bind", NPU0, "--yes")
    assert rc == 1 and f"pid {pid} (vm\\x1b[2J warning: all clear b 100000) has /dev/vda open" in out, out
    assert "\x1b" not in out and "\r" not in out, out
    assert not any(line.startswith("warning: all clear") for line in out.splitlines()), out
