"""`rblnctl vfio status|bind|unbind|recover` end to end on a real kernel: vfio-pci, IOMMU groups, /dev/vfio, errno.

Every check reads the guest kernel's own sysfs (tests/kernel/guest.py `functions()`: every PCI function's driver
and driver_override). The stand-ins' host driver is virtio-pci; the guest has no rebellions driver.
"""

from __future__ import annotations

import json

from rblnctl import constants as C

from tests.kernel.guest import GROUPS, HOST_DRIVER, NPU0, NPU1, NPUS, OTHER, start_holder, vfio_holder

VFIO = C.VFIO_DRIVER
BOUND = (VFIO, VFIO)  # what bind leaves: on vfio-pci, driver_override vfio-pci
HOME = (HOST_DRIVER, None)


def test_bind_status_unbind_end_to_end_and_dry_runs_write_nothing(linux):
    linux.load_vfio()
    before = linux.functions()
    rc, out = linux.rblnctl("vfio", "bind", "--all", "--dry-run")
    assert rc == 0 and out.count("would write:") == 6, out
    assert linux.functions() == before and linux.state() == {}

    rc, out = linux.rblnctl("vfio", "bind", NPU0, "--yes")
    assert rc == 0, out
    fns = linux.functions()
    assert fns[NPU0] == BOUND and fns[NPU1] == HOME
    assert {b: f for b, f in fns.items() if b != NPU0} == {b: f for b, f in before.items() if b != NPU0}
    assert linux.state()[NPU0]["driver"] == HOST_DRIVER
    status = {d["bdf"]: d for d in linux.json("vfio", "status")["devices"]}
    assert status[NPU0]["driver"] == VFIO and status[NPU0]["vfioDevicePresent"] is True
    assert status[NPU0]["iommuGroup"] == GROUPS[NPU0] and status[NPU1]["driver"] == HOST_DRIVER

    rc, out = linux.rblnctl("vfio", "bind", NPU0, "--yes")  # a second bind: nothing to do, nothing written
    assert rc == 0 and "nothing to do" in out and "write:" not in out, out

    bound = linux.functions()
    rc, out = linux.rblnctl("vfio", "unbind", "--all", "--dry-run")
    assert rc == 0 and "would write:" in out and linux.functions() == bound, out

    rc, out = linux.rblnctl("vfio", "unbind", NPU0, "--yes")
    assert rc == 0, out
    assert linux.functions() == before and linux.state() == {}
    assert linux.sh(f"ls /dev/vfio; ls /sys/bus/pci/devices/{NPU0}/virtio*/block") .split() == ["vfio", "vda"]

    rc, out = linux.rblnctl("vfio", "bind", "--all", "--yes")
    assert rc == 0 and all(linux.on(b) == BOUND for b in NPUS), out
    rc, out = linux.rblnctl("vfio", "unbind", "--all", "--yes")
    assert rc == 0 and linux.functions() == before, out


def test_a_function_that_is_no_npu_and_bad_addresses_are_refused(linux):
    linux.load_vfio()
    before = linux.functions()
    rc, out = linux.rblnctl("vfio", "bind", OTHER, "--yes")
    assert rc == 1 and f"{OTHER} (1234:11e8, class 00ff00) is not an RBLN NPU" in out and "--force" in out, out
    rc, out = linux.rblnctl("vfio", "bind", "0000:00:06.7", "--yes")
    assert rc == 1 and "no PCI device 0000:00:06.7" in out, out
    rc, out = linux.rblnctl("vfio", "unbind", "../../x", "--yes")
    assert rc == 2 and "invalid PCI address" in out and "Traceback" not in out, out
    assert linux.functions() == before


def test_load_modules_loads_vfio_pci_and_says_so_as_what_it_did(linux):
    linux.unload_vfio()
    rc, out = linux.rblnctl("vfio", "bind", NPU1, "--yes")
    assert rc == 1 and "vfio-pci is not loaded" in out and "--load-modules" in out, out
    rc, out = linux.rblnctl("vfio", "bind", NPU1, "--yes", "--load-modules")
    assert rc == 0, out
    assert "loaded kernel module vfio-pci" in out and "warning: load" not in out, out
    assert linux.on(NPU1) == BOUND and "vfio_iommu_type1" in linux.sh("cat /proc/modules")


def test_recover_repairs_a_stale_override_for_the_vm_mode_and_container_mode_needs_the_host_driver(linux):
    linux.load_vfio()
    # what a crashed tool leaves: a stale override (a driver this node does not use) on the host driver
    linux.sh(f"echo pci-stub > /sys/bus/pci/devices/{NPU0}/driver_override")
    rc, out = linux.rblnctl("vfio", "recover", "--all", "--yes")
    assert rc == 1 and "driver rebellions is not loaded" in out, out  # no rebellions driver in the guest
    assert linux.on(NPU0) == (HOST_DRIVER, "pci-stub")
    rc, out = linux.rblnctl("vfio", "recover", "--all", "--mode", "vm", "--yes")
    assert rc == 0, out
    assert linux.on(NPU0) == BOUND and linux.on(NPU1) == HOME  # NPU1 was healthy: left alone


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


def test_force_never_waits_forever_for_a_vfio_user_and_ctrl_c_ends_the_wait(linux):
    linux.load_vfio()
    assert linux.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    pid = vfio_holder(linux, NPU0)
    rc, out = linux.rblnctl("vfio", "unbind", NPU0, "--yes", "--force", "--timeout", "3s", "-o", "json",
                            stdout_only=False)
    assert rc == 1, out
    doc = json.loads(out[out.index("{"):out.rindex("}") + 1])
    (r,) = doc["devices"]
    assert r["status"] == "pending" and f"pid {pid} (python -m tests.kernel.vfio_holder" in r["message"], r
    assert f"kill {pid}" in r["message"] and "run `rblnctl vfio unbind 0000:00:06.0 --timeout 3s` to finish" in out, out
    # rblnctl has exited; the kernel still holds its write (and the device lock: reading driver_override would
    # block now). Once the user lets go, the write completes on its own: the device ends without a driver.
    linux.sh(f"kill {pid}; while [ -e /proc/{pid} ]; do sleep 0.1; done")
    assert linux.on(NPU0) == (None, None)
    rc, out = linux.rblnctl("vfio", "unbind", NPU0, "--yes")  # the same command finishes the device
    assert rc == 0 and linux.on(NPU0) == HOME and linux.state() == {}, out

    # Ctrl-C while rblnctl waits for the kernel: it exits 130 at once, saying how the device ends
    assert linux.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    pid = vfio_holder(linux, NPU0)
    out = linux.sh(f"python -m tests.kernel.interrupt 'unbind from vfio-pci' -- rblnctl vfio unbind {NPU0} --yes "
                   "--force --timeout 10m")
    assert "rc=130" in out and "interrupted while unbind from vfio-pci: the kernel is still waiting" in out, out
    linux.sh(f"kill {pid}")
