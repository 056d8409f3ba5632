"""rblnctl.host.holders: the one holder finder (vfio and preflight --local both use it)."""

from __future__ import annotations

import pytest

from rblnctl.host import pci
from rblnctl.host.holders import HolderFinder
from rblnctl.host.root import HostRoot
from tests.fakes.sysfs import npu_node

A, B, C3 = "0000:3b:00.0", "0000:3c:00.0", "0000:3d:00.0"


def finder(k) -> HolderFinder:
    return HolderFinder.scan(HostRoot(k.root))


def test_a_device_node_the_host_driver_created(tmp_path):
    k = npu_node(tmp_path, 2)
    k.add_process(4242, "rbln-smi", ["/dev/rbln1"], cmdline=["rbln-smi", "-w"])
    f = finder(k)
    assert f.holders(pci.read_function(k.sys, A)) == []
    [h] = f.holders(pci.read_function(k.sys, B))
    assert (h.pid, h.command, h.path) == (4242, "rbln-smi -w", "/dev/rbln1")


def test_a_path_under_the_roots_dev_counts_too(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_process(7, "tool", [str(k.dev / "rbln0")])  # a process inside the capture's own mount namespace
    assert [h.pid for h in finder(k).holders(pci.read_function(k.sys, A))] == [7]


def test_the_vfio_group_node_is_a_running_vm(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_process(3100, "qemu-kvm", ["/dev/vfio/vfio", "/dev/vfio/20"])
    [h] = finder(k).holders(pci.read_function(k.sys, A))
    assert (h.pid, h.path) == (3100, "/dev/vfio/20")  # the container /dev/vfio/vfio is nobody's device


def test_the_vfio_device_cdev_is_a_running_vm_too(tmp_path):
    """An iommufd VMM opens /dev/iommu and /dev/vfio/devices/vfioN, never /dev/vfio/<group>
    (Documentation/driver-api/vfio.rst, "Device cdev Example"): that cdev is found from <bdf>/vfio-dev/."""
    from tests.host.vfio.common import make

    k = npu_node(tmp_path, 2)
    b = make(k)
    assert b.apply(b.plan("bind", [A, B])).ok
    [cdev_b] = pci.vfio_cdev_names(k.sys, B)
    assert (k.dev / "vfio" / "devices" / cdev_b).exists()
    k.add_process(3200, "qemu-kvm", ["/dev/iommu", f"/dev/vfio/devices/{cdev_b}"])
    k.add_process(3300, "tool", [str(k.dev / "vfio" / "devices" / cdev_b)])  # the root's own /dev
    f = finder(k)
    assert f.holders(pci.read_function(k.sys, A)) == []
    assert [(h.pid, h.path) for h in f.holders(pci.read_function(k.sys, B))] == [
        (3200, f"/dev/vfio/devices/{cdev_b}"), (3300, str(k.dev / "vfio" / "devices" / cdev_b))]
    refusal = make(k).plan("unbind", [B])
    assert any(f"has /dev/vfio/devices/{cdev_b} open" in str(x) for x in refusal.blockers), refusal.blockers
    assert make(k).apply(make(k).plan("unbind", [A])).ok and pci.vfio_cdev_names(k.sys, A) == []  # gone with vfio


def test_files_under_the_functions_sysfs_directory_but_not_a_child_functions(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_process(99, "dpdk-app", [f"/sys/devices/pci0000:00/{A}/resource0"])
    k.add_process(98, "other", [f"/sys/devices/pci0000:00/{A}/0000:3c:00.0/config"])  # behind a bridge: not A's
    f = finder(k)
    assert [(h.pid, h.path) for h in f.holders(pci.read_function(k.sys, A))] == [
        (99, f"/sys/devices/pci0000:00/{A}/resource0")]


def test_unattributed_device_nodes(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_process(7, "mystery", ["/dev/rbln9", "/dev/null"])
    k.add_process(8, "smi", ["/dev/rbln0"])
    f = finder(k)
    f.holders(pci.read_function(k.sys, A))
    assert [(h.pid, h.path) for h in f.unattributed([A])] == [(7, "/dev/rbln9")]


def test_incomplete_scan_is_reported(tmp_path, monkeypatch):
    import os

    from rblnctl.host import procfs

    k = npu_node(tmp_path, 1)
    k.add_process(2, "other", ["/dev/rbln0"])
    real = os.listdir

    def listdir(path):
        if str(path) == str(k.proc / "2" / "fd"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(procfs.os, "listdir", listdir)
    f = finder(k)
    assert f.incomplete == 1 and f.holders(pci.read_function(k.sys, A)) == []


def test_only_vfio_cdev_names_are_taken_from_vfio_dev(tmp_path):
    k = npu_node(tmp_path, 1)
    for name in ("vfio3", "noiommu-vfio4", "power", "vfio3x"):
        (k.pci_root / A / "vfio-dev" / name).mkdir(parents=True, exist_ok=True)
    assert pci.vfio_cdev_names(k.sys, A) == ["noiommu-vfio4", "vfio3"]


def test_a_bar_mapped_through_resource_n_and_closed_shows_in_maps(tmp_path):
    """DPDK's uio path mmaps <bdf>/resourceN and closes the fd: only /proc/<pid>/maps still shows it."""
    k = npu_node(tmp_path, 2)
    k.add_process(99, "dpdk-app", mapped=[f"/sys/devices/pci0000:00/{A}/resource0",
                                          f"/sys/devices/pci0000:00/{A}/resource2_wc"])
    k.add_process(98, "other", mapped=[f"/sys/devices/pci0000:00/{A}/0000:3c:00.0/resource0"])  # behind a bridge
    f = finder(k)
    held = f.holders(pci.read_function(k.sys, A))
    assert [(h.pid, h.path, h.how) for h in held] == [
        (99, f"/sys/devices/pci0000:00/{A}/resource0", "mapped"),
        (99, f"/sys/devices/pci0000:00/{A}/resource2_wc", "mapped")]
    assert held[0].text == f"pid 99 (dpdk-app) has /sys/devices/pci0000:00/{A}/resource0 mapped"
    assert f.holders(pci.read_function(k.sys, B)) == []


def test_maps_lines_keep_paths_with_spaces_and_skip_everything_but_sysfs(tmp_path):
    from rblnctl.host import procfs

    k = npu_node(tmp_path, 1)
    k.add_process(5, "app")
    (k.proc / "5" / "maps").write_text(
        "7f00-7f01 r--p 00000000 fd:01 1 /usr/lib/locale/C.utf8/LC_CTYPE\n"
        "7f01-7f02 rw-p 00000000 00:00 0 \n"
        "7f02-7f03 rw-s 00000000 00:05 7 /dev/zero (deleted)\n"
        "7f03-7f04 rw-s fe800000 00:14 11426                      /sys/devices/pci0000:00/x y/resource4\n"
        "7f04-7f05 rw-s fe800000 00:14 11426                      /sys/devices/pci0000:00/x y/resource4\n"
        "7ffd-7ffe r--p 00000000 00:00 0                          [vvar]\n")
    [p] = [p for p in procfs.scan(k.proc).processes if p.pid == 5]
    assert p.mapped_paths == ("/sys/devices/pci0000:00/x y/resource4",)


def test_a_vfio_device_fd_the_kernel_attributes_in_fdinfo_holds_that_function_only(tmp_path):
    """Linux 6.18+ names the device in a VFIO device fd's fdinfo (`vfio-device-syspath:`)."""
    from tests.host.vfio.common import make

    k = npu_node(tmp_path, 2)
    assert make(k).apply(make(k).plan("bind", [A, B])).ok
    k.add_process(3200, "qemu", ["/dev/vfio/vfio"], vfio_devices=[f"/sys/devices/pci0000:00/{B}"])
    f = finder(k)
    assert f.holders(pci.read_function(k.sys, A)) == []
    [h] = f.holders(pci.read_function(k.sys, B))
    assert (h.pid, h.how) == (3200, "vfio-device")
    assert h.text == f"pid 3200 (qemu) holds the VFIO device fd of /sys/devices/pci0000:00/{B}"
    assert any("pid 3200 (qemu) holds the VFIO device fd" in x for x in map(str, make(k).plan("unbind", [B]).blockers))
    assert not make(k).plan("unbind", [A]).blockers


def test_an_unattributed_vfio_device_fd_holds_every_open_function_on_vfio_pci(tmp_path):
    """A VFIO user that closed its group fd after VFIO_GROUP_GET_DEVICE_FD keeps only `anon_inode:[vfio-device]`
    (and the container): on 6.1 its fdinfo does not say which device, so it holds every function on vfio-pci that
    is enabled (open), said honestly; not one whose `enable` is 0, nor one on a host driver."""
    from tests.host.vfio.common import make

    k = npu_node(tmp_path, 3)
    assert make(k).apply(make(k).plan("bind", [A, B])).ok
    (k.pci_root / A / "enable").write_text("1\n")
    (k.pci_root / B / "enable").write_text("0\n")
    k.add_process(4100, "vmm", ["/dev/vfio/vfio"], vfio_devices=[None])
    k.add_process(4200, "qemu", ["/dev/vfio/vfio", "/dev/vfio/20"], vfio_devices=[None])  # A's group: listed once
    f = finder(k)
    held = f.holders(pci.read_function(k.sys, A))
    assert [(h.pid, h.path) for h in held] == [(4100, "anon_inode:[vfio-device]"), (4200, "/dev/vfio/20")]
    assert held[0].text == "pid 4100 (vmm) holds a VFIO device fd (which device the kernel does not say)"
    assert f.holders(pci.read_function(k.sys, B)) == []
    assert f.holders(pci.read_function(k.sys, C3)) == []  # on its host driver
    (k.pci_root / B / "enable").unlink()  # unreadable: it may be open
    # 4100 holds no group node: it may hold B (not certain); 4200 holds A's group node, so its device fd is A's
    assert [(h.pid, h.certain) for h in finder(k).holders(pci.read_function(k.sys, B))] == [(4100, False)]
    plan = make(k).plan("unbind", [A])
    assert any("0000:3b:00.0 is in use: pid 4100 (vmm) holds a VFIO device fd (which device the kernel does not "
               "say); stop it first" == str(x) for x in plan.blockers), plan.blockers
    forced = make(k, force=True).plan("unbind", [A])
    assert any("asks that process every 10 s to release the device" in w for w in forced.warnings), forced.warnings


def test_a_holders_newline_and_escape_never_make_a_second_line(tmp_path):
    """argv is the holder's to choose: a newline (or CR) in it would forge a line of rblnctl's output."""
    from tests.host.vfio.common import make

    k = npu_node(tmp_path, 1)
    k.add_process(4242, "vm\nx", ["/dev/rbln0"], cmdline=["vm\x1b[2J", "a\nb\rc", "--x"])
    [h] = finder(k).holders(pci.read_function(k.sys, A))
    assert h.command == "vm\x1b[2J a b c --x"  # ESC stays for the terminal's escaping (rblnctl.cli.sanitize)
    k.add_process(4243, "we\nird", ["/dev/rbln0"], cmdline=[])
    plan = make(k).plan("bind", [A])
    texts = [str(x) for x in plan.blockers]
    assert texts and all("\n" not in t and "\r" not in t for t in texts), texts
    assert any("pid 4243 ([we ird]) has /dev/rbln0 open" in t for t in texts), texts
    forced = make(k, force=True).plan("bind", [A])
    assert forced.warnings and all("\n" not in w for w in forced.warnings), forced.warnings


@pytest.mark.parametrize("where", [
    "ata1/host0/target0:0:0/0:0:0:0/block/sda",  # an AHCI disk: its partition is 7 below the function
    "host0/port-0:0/expander-0:0/port-0:0:0/end_device-0:0:0/target0:0:0/0:0:0:0/block/sda",  # SAS, expander: 10
])
def test_a_deep_class_devices_number_is_the_functions(tmp_path, where):
    import os

    k = npu_node(tmp_path, 1)
    disk = k.pci_root / A / where
    (disk / "sda1").mkdir(parents=True)
    for d, number in ((disk, "8:0"), (disk / "sda1", "8:1")):
        (d / "dev").write_text(number + "\n")
        os.symlink("../../../../../class/block", d / "subsystem")
    numbers = pci.device_numbers(k.sys, A)
    assert {("b", os.makedev(8, 0)), ("b", os.makedev(8, 1))} <= numbers, numbers


# --- what hostile hosts showed: a kB command line, two VMs' unnamed device fds, rblnctl's own blocked readers ----


def cli_on(k, monkeypatch, mocker):
    """`rblnctl ...` on the simulated host (root, its writer), as tests/cli/test_vfio.py runs it."""
    import rblnctl.host.vfio.writer as vfio_writer
    from tests.fakes.sysfs import guard_real_host
    from tests.helpers import cli

    guard_real_host(monkeypatch)
    monkeypatch.setattr(vfio_writer, "default_writer", lambda: k.writer)
    mocker.patch("os.geteuid", return_value=0)
    return lambda *args: cli(*args, "--root", k.root)


def test_a_vms_kilobytes_of_command_line_is_one_bounded_form_in_every_message(tmp_path, monkeypatch, mocker):
    """A real VM's qemu command line runs to kilobytes: each holder shows its program and the start of its argv
    (`-name guest=...`, what identifies the VM), cut to one bounded form with an ellipsis, in the status table, the
    refusal, the --force warning, the pending record and preflight alike."""
    from rblnctl.preflight.host_facts import gather_host_facts
    from tests.host.vfio.common import make

    k = npu_node(tmp_path, 2)
    assert make(k).apply(make(k).plan("bind", [A])).ok
    argv = ["/usr/libexec/qemu-kvm", "-name", "guest=default_vm-big,debug-threads=on"]
    argv += [a for i in range(200) for a in ("-object", f'{{"qom-type":"memory-backend-file","id":"m{i:03d}"}}')]
    assert len(" ".join(argv)) > 10_000
    k.add_process(3100, "qemu-kvm", ["/dev/vfio/vfio", "/dev/vfio/20"], cmdline=argv)

    [h] = finder(k).holders(pci.read_function(k.sys, A))
    assert len(h.command) <= 100 and h.command.endswith("…"), h.command
    assert h.command.startswith("/usr/libexec/qemu-kvm -name guest=default_vm-big,debug-threads=on -object")
    run = cli_on(k, monkeypatch, mocker)
    status = run("vfio", "status")
    refused = run("vfio", "unbind", A, "--yes", "--state-file", str(k.root / "state.json"))
    assert status.exit_code == 0 and refused.exit_code != 0, (status.stdout, refused.stderr)
    for out in (status.stdout, refused.stdout + refused.stderr):
        assert "guest=default_vm-big" in out and "m199" not in out, out
        assert len(out) < 2_000, out  # not 10 kB, nor 40 lines of one command
    facts = gather_host_facts(k.root)
    [line] = facts.holders[A]
    assert line == f"pid 3100 ({h.command}) has /dev/vfio/20 open"


def test_a_vms_unnamed_device_fd_counts_only_against_its_own_group(tmp_path):
    """Two VMs, each with its group node and a VFIO device fd the 6.1 kernel does not attribute: each is listed on
    its own NPU only (its group node says which device it uses), so unbinding one VM's NPU names that VM alone."""
    from rblnctl.host.vfio import vfio_status
    from tests.host.vfio.common import make

    k = npu_node(tmp_path, 2)
    assert make(k).apply(make(k).plan("bind", [A, B])).ok
    for bdf in (A, B):
        (k.pci_root / bdf / "enable").write_text("1\n")  # open: each VM enabled its device
    k.add_process(5100, "qemu-vmA", ["/dev/vfio/vfio", "/dev/vfio/20"], vfio_devices=[None])
    k.add_process(5200, "qemu-vmB", ["/dev/vfio/vfio", "/dev/vfio/21"], vfio_devices=[None])
    k.add_process(5300, "vmm", ["/dev/vfio/vfio"], vfio_devices=[None])  # no group node: may hold either
    st = vfio_status(root=k.root)
    assert {d.bdf: [h.pid for h in d.holders] for d in st.devices} == {A: [5100, 5300], B: [5200, 5300]}
    assert {d.bdf: [h.certain for h in d.holders] for d in st.devices} == {A: [True, False], B: [True, False]}
    blockers = [str(x) for x in make(k).plan("unbind", [A]).blockers]
    assert any("pid 5100" in b for b in blockers) and not any("pid 5200" in b for b in blockers), blockers


def test_a_process_with_driver_override_open_is_no_holder_and_its_function_is_not_read(tmp_path):
    """A reader (or writer) blocked on a function's driver_override (an unbind in progress holds the device lock;
    rblnctl's own bounded reader is one) does not hold the device: it is not listed, and status reports the
    override unknown from the one procfs scan instead of forking one more reader to block beside it."""
    import os

    from rblnctl.host.vfio import vfio_status
    from tests.host.vfio.common import make

    k = npu_node(tmp_path, 2)
    assert make(k).apply(make(k).plan("bind", [A])).ok
    rel = os.path.relpath(os.path.realpath(k.pci_root / A), os.path.realpath(k.sys))
    k.add_process(288, "rblnctl", [f"/sys/{rel}/driver_override"], cmdline=["/usr/bin/rblnctl", "vfio", "status"])
    f = finder(k)
    assert f.holders(pci.read_function(k.sys, A)) == []
    assert list(f.override_busy()) == [A]
    st = vfio_status(root=k.root)
    a, b = st.devices
    assert a.holders == () and a.driver_override is None and b.driver_override is None
    assert any(w.startswith(f"{A}: unknown") and "pid 288" in w for w in st.warnings), st.warnings
    assert not any(B in w for w in st.warnings), st.warnings  # B's override was read


def test_a_byte_that_is_not_utf8_in_a_captured_attribute_is_malformed_not_a_crash(tmp_path, monkeypatch, mocker):
    k = npu_node(tmp_path, 2)
    (k.pci_root / A / "vendor").write_bytes(b"0x1e\xffff\n")
    (k.pci_root / B / "numa_node").write_bytes(b"\xfe\n")
    run = cli_on(k, monkeypatch, mocker)
    for args in (("vfio", "status"), ("preflight", "--local")):
        r = run(*args)
        assert r.exit_code in (0, 1) and "Traceback" not in r.stdout + r.stderr, (args, r.exit_code, r.stderr)
    assert pci.read_function(k.sys, A).vendor == 0  # rejected as malformed
