"""rblnctl.host.holders: the one holder finder (vfio and preflight --local both use it)."""

from __future__ import annotations

from rblnctl.host import pci
from rblnctl.host.holders import HolderFinder
from rblnctl.host.root import HostRoot
from tests.fakes.sysfs import npu_node

A, B = "0000:3b:00.0", "0000:3c:00.0"


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
