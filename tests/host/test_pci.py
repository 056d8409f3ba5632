"""rblnctl.host.pci: strict BDF validation and read-only discovery of PCI functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from rblnctl.errors import HostError, InvalidInput, NotFound
from rblnctl.host import pci
from tests.fakes.sysfs import SimKernel, npu_node


@pytest.mark.parametrize(
    ("text", "want"),
    [("0000:3b:00.0", "0000:3b:00.0"), ("3b:00.0", "0000:3b:00.0"), ("0000:3B:1F.7", "0000:3b:1f.7"),
     ("abcd:ef:01.2", "abcd:ef:01.2")],
)
def test_normalize_bdf_accepts_full_and_short_forms(text, want):
    assert pci.normalize_bdf(text) == want


@pytest.mark.parametrize(
    "text",
    ["", "../../etc/passwd", "0000:3b:00.0/../../x", "../0000:3b:00.0", "3b:00.*", "*", "0000:3b:00.?",
     "0000:3b:00.0 ", " 3b:00.0", "0000:3b:00.0\n", "3b:00.8", "0000:3b:20.0", "g0:00.0", "0000:3b:00",
     "00000:3b:00.0", "0000:3b:00.0;rm -rf /", "0000/3b/00.0", "０000:3b:00.0"],
)
def test_normalize_bdf_rejects_everything_else(text):
    with pytest.raises(InvalidInput):
        pci.normalize_bdf(text)


@pytest.mark.parametrize("name", ["vfio-pci", "rebellions", "8250_pci", "nvme", "snd_hda_intel", "ahci"])
def test_driver_names_that_are_safe_in_paths(name):
    assert pci.validate_driver_name(name) == name


@pytest.mark.parametrize("name", ["", "..", "../vfio-pci", "a/b", "-rf", "vfio pci", "x" * 80, "a..b"])
def test_driver_names_that_are_not(name):
    with pytest.raises(InvalidInput):
        pci.validate_driver_name(name)


def test_read_function_reports_ids_driver_group_and_numa(tmp_path):
    k = SimKernel(tmp_path)
    k.add_pci_function("0000:3b:00.0", device=0x1250, iommu_group=12, numa_node=1)
    f = pci.read_function(k.sys, "3b:00.0")
    assert (f.bdf, f.ids, f.model, f.function) == ("0000:3b:00.0", "1eff:1250", "CA25", "PF")
    assert (f.driver, f.driver_override, f.iommu_group, f.numa_node) == ("rebellions", None, "12", 1)
    assert f.is_rbln_npu and not f.is_bridge


def test_bridge_means_header_type_1_read_from_config(tmp_path):
    k = SimKernel(tmp_path)
    k.add_pci_function("0000:3a:00.0", vendor=0x10B5, device=0x8747, class_code=0x060400, driver="pcieport")
    k.add_pci_function("0000:00:00.0", vendor=0x8086, device=0x09A2, class_code=0x060000, driver=None)
    k.add_pci_function("0000:00:1f.0", vendor=0x8086, device=0xA1C1, class_code=0x060100, driver="lpc_ich")
    port, host_bridge, isa = (pci.read_function(k.sys, b) for b in ("0000:3a:00.0", "0000:00:00.0", "0000:00:1f.0"))
    assert (port.header_type, port.is_bridge) == (1, True)
    assert (host_bridge.header_type, host_bridge.is_bridge, isa.is_bridge) == (0, False, False)  # class 0x06 too
    cfg = k.pci_root / "0000:3a:00.0" / "config"
    cfg.write_bytes(cfg.read_bytes()[:0x0E] + bytes([0x81]))  # bit 7 is "multi-function", not the type
    assert pci.read_function(k.sys, "0000:3a:00.0").header_type == 1
    cfg.write_bytes(b"\x00" * 8)  # short read: unknown, so not a bridge
    assert pci.read_function(k.sys, "0000:3a:00.0").header_type is None
    cfg.unlink()
    assert pci.read_function(k.sys, "0000:3a:00.0").header_type is None


@pytest.mark.parametrize(("driver", "class_code", "blocks"), [
    (None, 0x020000, None),
    ("vfio-pci", 0x020000, None),
    ("mlx5_vfio_pci", 0x020000, None),  # a vfio-pci variant driver
    ("pci-stub", 0x020000, None),
    ("pcieport", 0x060400, None),
    ("i40e", 0x020000, "on i40e"),
    ("lpc_ich", 0x060100, "on lpc_ich"),  # an ISA bridge is an ordinary device to VFIO
    ("shpchp", 0x060400, "PCI bridge on shpchp, which uses the kernel DMA API"),
])
def test_group_member_blocker_is_the_kernel_rule(tmp_path, driver, class_code, blocks):
    k = SimKernel(tmp_path)
    k.add_pci_function("0000:3b:00.1", vendor=0x8086, device=0x1572, class_code=class_code, driver=driver)
    got = pci.group_member_blocker(pci.read_function(k.sys, "0000:3b:00.1"))
    assert (got or "").startswith(blocks or "") and (got is None) == (blocks is None), got


def test_read_function_of_a_missing_device_is_not_found(tmp_path):
    k = SimKernel(tmp_path)
    with pytest.raises(NotFound):
        pci.read_function(k.sys, "0000:3b:00.0")


def test_list_functions_keeps_npus_unless_all_vendors(tmp_path):
    k = SimKernel(tmp_path)
    k.add_pci_function("0000:3b:00.0")
    k.add_pci_function("0000:00:01.0", vendor=0x8086, device=0x1234, class_code=0x060400, driver="pcieport")
    k.add_pci_function("0000:5e:00.0", vendor=0x1EFF, device=0x9999, class_code=0x020000, driver=None)
    assert [f.bdf for f in pci.list_functions(k.sys)] == ["0000:3b:00.0"]
    every = pci.list_functions(k.sys, all_vendors=True)
    assert [f.bdf for f in every] == ["0000:00:01.0", "0000:3b:00.0", "0000:5e:00.0"]
    assert every[0].is_bridge


def test_group_members_and_count(tmp_path):
    k = SimKernel(tmp_path)
    k.add_pci_function("0000:3b:00.0", iommu_group=7)
    k.add_pci_function("0000:3b:00.1", iommu_group=7)
    k.add_pci_function("0000:5e:00.0", iommu_group=8)
    assert pci.iommu_group_members(k.sys, "7") == ["0000:3b:00.0", "0000:3b:00.1"]
    assert pci.iommu_group_count(k.sys) == 2
    assert pci.iommu_group_of(k.sys, "0000:5e:00.0") == "8"
    with pytest.raises(InvalidInput):
        pci.iommu_group_members(k.sys, "../7")
    k.set_iommu(False)
    assert pci.iommu_group_count(k.sys) == 0 and pci.iommu_group_of(k.sys, "0000:3b:00.0") is None


def test_device_node_names_follow_the_bound_driver(tmp_path):
    k = SimKernel(tmp_path)
    k.load_module("vfio_pci")
    k.add_pci_function("0000:3b:00.0")
    k.add_pci_function("0000:3c:00.0")
    assert pci.device_node_names(k.sys, "0000:3c:00.0") == ["rbln1"]
    k.handle_write(k.sys / "bus/pci/drivers/rebellions/unbind", "0000:3c:00.0")
    assert pci.device_node_names(k.sys, "0000:3c:00.0") == []
    assert pci.current_driver(k.sys, "0000:3c:00.0") is None
    assert pci.driver_registered(k.sys, "vfio-pci") and not pci.driver_registered(k.sys, "nvme")


def test_is_bdf_name_takes_only_the_sysfs_spelling():
    assert pci.is_bdf_name("0000:3b:00.0")
    assert not pci.is_bdf_name("3b:00.0") and not pci.is_bdf_name("resource0") and not pci.is_bdf_name("0000:3B:00.0")


def test_reads_this_machines_real_sysfs():
    """Read-only: whatever PCI functions this host has parse without error."""
    for f in pci.list_functions(Path("/sys"), all_vendors=True):
        assert pci.normalize_bdf(f.bdf) == f.bdf
        assert f.iommu_group is None or f.iommu_group.isdigit()


def test_unreadable_sysfs_attribute_is_a_host_error_naming_it(tmp_path):
    A = "0000:3b:00.0"
    k = npu_node(tmp_path, 1)
    vendor = k.sys / "bus" / "pci" / "devices" / A / "vendor"
    vendor.resolve().unlink()
    vendor.resolve().mkdir()  # reading it fails with EISDIR, not "absent"
    with pytest.raises(HostError, match=f"cannot read .*{A}.*vendor"):
        pci.read_function(k.sys, A)
