"""`rblnctl vfio status|bind|unbind|recover` end to end on a real kernel: vfio-pci, IOMMU groups, /dev/vfio, errno.

Every check reads the machine's own sysfs (`functions()`: every PCI function's driver and driver_override). The
stand-ins' host driver is virtio-pci; the guest has no rebellions driver. Tests taking `host` run twice with one
expectation: on the fake sysfs (tests/kernel/fakehost.py) and on the real kernel (docs/testing.md "The fake and
the real kernel"); those taking `linux` need what only the kernel has (device numbers, a blocked write, Ctrl-C).
"""

from __future__ import annotations

import json

from rblnctl import constants as C

from tests.kernel.guest import GROUPS, HOST_DRIVER, NPU0, NPU1, NPUS, OTHER, STATE, start_holder, vfio_holder

VFIO = C.VFIO_DRIVER
BOUND = (VFIO, VFIO)  # what bind leaves: on vfio-pci, driver_override vfio-pci
HOME = (HOST_DRIVER, None)


def test_bind_status_unbind_end_to_end_and_dry_runs_write_nothing(host):
    host.load_vfio()
    before = host.functions()
    rc, out = host.rblnctl("vfio", "bind", "--all", "--dry-run")
    assert rc == 0 and out.count("would write:") == 6, out
    assert host.functions() == before and host.state() == {}

    rc, out = host.rblnctl("vfio", "bind", NPU0, "--yes")
    assert rc == 0, out
    fns = host.functions()
    assert fns[NPU0] == BOUND and fns[NPU1] == HOME
    assert {b: f for b, f in fns.items() if b != NPU0} == {b: f for b, f in before.items() if b != NPU0}
    assert host.state()[NPU0]["driver"] == HOST_DRIVER
    status = {d["bdf"]: d for d in host.json("vfio", "status")["devices"]}
    assert status[NPU0]["driver"] == VFIO and status[NPU0]["vfioDevicePresent"] is True
    assert status[NPU0]["iommuGroup"] == GROUPS[NPU0] and status[NPU1]["driver"] == HOST_DRIVER

    rc, out = host.rblnctl("vfio", "bind", NPU0, "--yes")  # a second bind: nothing to do, nothing written
    assert rc == 0 and "nothing to do" in out and "write:" not in out, out

    bound = host.functions()
    rc, out = host.rblnctl("vfio", "unbind", "--all", "--dry-run")
    assert rc == 0 and "would write:" in out and host.functions() == bound, out

    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes")
    assert rc == 0, out
    assert host.functions() == before and host.state() == {}
    assert host.vfio_nodes() == ["vfio"]

    rc, out = host.rblnctl("vfio", "bind", "--all", "--yes")
    assert rc == 0 and all(host.on(b) == BOUND for b in NPUS), out
    rc, out = host.rblnctl("vfio", "unbind", "--all", "--yes")
    assert rc == 0 and host.functions() == before, out


def test_a_function_that_is_no_npu_and_bad_addresses_are_refused(host):
    host.load_vfio()
    before = host.functions()
    rc, out = host.rblnctl("vfio", "bind", OTHER, "--yes")
    assert rc == 1 and f"{OTHER} (1234:11e8, class 00ff00) is not an RBLN NPU" in out and "--force" in out, out
    rc, out = host.rblnctl("vfio", "bind", "0000:00:06.7", "--yes")
    assert rc == 1 and "no PCI device 0000:00:06.7" in out, out
    rc, out = host.rblnctl("vfio", "unbind", "../../x", "--yes")
    assert rc == 2 and "invalid PCI address" in out and "Traceback" not in out, out
    assert host.functions() == before


def test_load_modules_loads_vfio_pci_and_says_so_as_what_it_did(host):
    host.unload_vfio()
    rc, out = host.rblnctl("vfio", "bind", NPU1, "--yes")
    assert rc == 1 and "vfio-pci is not loaded" in out and "--load-modules" in out, out
    rc, out = host.rblnctl("vfio", "bind", NPU1, "--yes", "--load-modules")
    assert rc == 0, out
    assert "loaded kernel module vfio-pci" in out and "warning: load" not in out, out
    assert host.on(NPU1) == BOUND and "vfio_iommu_type1" in host.modules()


def test_recover_repairs_a_stale_override_for_the_vm_mode_and_container_mode_needs_the_host_driver(host):
    host.load_vfio()
    # what a crashed tool leaves: a stale override (a driver this node does not use) on the host driver
    host.set_override(NPU0, "pci-stub")
    rc, out = host.rblnctl("vfio", "recover", "--all", "--yes")
    assert rc == 1 and "driver rebellions is not loaded" in out, out  # no rebellions driver in the guest
    assert host.on(NPU0) == (HOST_DRIVER, "pci-stub")
    rc, out = host.rblnctl("vfio", "recover", "--all", "--mode", "vm", "--yes")
    assert rc == 0, out
    assert host.on(NPU0) == BOUND and host.on(NPU1) == HOME  # NPU1 was healthy: left alone


def test_holders_of_the_functions_own_nodes_refuse_bind_and_unbind_up_front(linux):
    linux.load_vfio()
    # the stand-in's disk, /dev/vda: a node rblnctl knows only from NPU0's sysfs subtree (virtio0/block/vda/dev)
    pid = start_holder(linux, "vda", "exec sh -c 'exec 3</dev/vda; echo x > /run/kt/vda.ready; exec sleep 100000'")
    before = linux.functions()
    rc, out = linux.rblnctl("vfio", "bind", NPU0, "--yes")
    assert rc == 1 and f"pid {pid} (sleep 100000) has /dev/vda open" in out, out
    assert linux.functions() == before
    linux.sh(f"kill {pid}")

    assert linux.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    # a VFIO user that opened the group through a node of another name: found by its device number
    rdev = linux.sh(f"stat -c '%t %T' /dev/vfio/{GROUPS[NPU0]}").split()
    linux.sh(f"mknod /run/kt/g c {int(rdev[0], 16)} {int(rdev[1], 16)}")
    pid = vfio_holder(linux, NPU0, "/run/kt/g")
    rc, out = linux.rblnctl("vfio", "unbind", NPU0, "--yes")
    assert rc == 1 and f"pid {pid} (python -m tests.kernel.vfio_holder {NPU0} /run/kt/g" in out, out
    assert "/run/kt/g open" in out and linux.on(NPU0) == BOUND
    status = {d["bdf"]: d for d in linux.json("vfio", "status")["devices"]}
    assert [h["pid"] for h in status[NPU0]["holders"]] == [pid] and status[NPU1]["holders"] == []


def test_force_never_waits_forever_for_a_vfio_user(host):
    host.load_vfio()
    assert host.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    pid = host.vfio_user(NPU0)
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", "--force", "--timeout", "3s", "-o", "json")
    assert rc == 1, out
    doc = json.loads(out[out.index("{"):out.rindex("}") + 1])
    (r,) = doc["devices"]
    assert r["status"] == "pending" and f"pid {pid} (python -m tests.kernel.vfio_holder" in r["message"], r
    assert f"kill {pid}" in r["message"] and "run `rblnctl vfio unbind 0000:00:06.0 --timeout 3s` to finish" in out, out
    # rblnctl has exited; the kernel still holds its write (and the device lock: reading driver_override would
    # block now). A run about another function reads nothing of this one, so it goes ahead:
    rc, out = host.rblnctl("vfio", "bind", NPU1, "--yes", timeout=60)
    assert rc == 0 and host.on(NPU1) == BOUND, out
    # Once the user lets go, the write completes on its own: the device ends without a driver.
    host.let_go(pid)
    assert host.on(NPU0) == (None, None)
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes")  # the same command finishes the device
    assert rc == 0 and host.on(NPU0) == HOME and NPU0 not in host.state(), out


def test_ctrl_c_while_the_kernel_blocks_an_unbind_exits_at_once(linux):
    linux.load_vfio()
    assert linux.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    pid = vfio_holder(linux, NPU0)
    # rblnctl as a separate process (Ctrl-C reaches it as a terminal's would), waiting for the kernel: it exits 130
    # at once, saying how the device ends
    out = linux.sh(f"python -m tests.kernel.interrupt 'unbind from vfio-pci' -- rblnctl vfio unbind {NPU0} --yes "
                   "--force --timeout 10m")
    assert "rc=130" in out and "interrupted while unbind from vfio-pci: the kernel is still waiting" in out, out
    assert "output-held-open" not in out, out  # the blocked write's child let go of rblnctl's stdout
    # ... and of the state file's lock: the next run is not refused as concurrent while the kernel still waits
    linux.sh(f"flock -n {STATE}.lock true")
    linux.let_go(pid)
