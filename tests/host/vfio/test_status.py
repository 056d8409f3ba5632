"""rblnctl.host.vfio.status: what `vfio status` reports, read-only."""

from __future__ import annotations


import pytest

from rblnctl.errors import InvalidInput
from rblnctl.host import pci
from rblnctl.host.vfio import vfio_status
from tests.fakes.sysfs import SimKernel, npu_node
from tests.host.vfio.common import A, B, make


def test_status_reports_drivers_groups_nodes_and_holders(tmp_path):
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_pci_function(A, iommu_group=7, numa_node=1)
    k.add_pci_function("0000:3a:00.0", vendor=0x10B5, device=0x8747, class_code=0x060400, driver="pcieport",
                       iommu_group=7)
    k.add_pci_function(B, iommu_group=8)
    make(k).apply(make(k).plan("bind", [B]))
    k.add_process(4242, "rbln-smi", ["/dev/rbln0"])
    k.add_process(3100, "qemu-kvm", ["/dev/vfio/8"], cmdline=["qemu-kvm", "-name", "vm1"])
    st = vfio_status(root=k.root)
    a, b = st.devices
    assert (a.bdf, a.model, a.function, a.driver, a.iommu_group, a.numa_node) == (A, "CA22", "PF", "rebellions",
                                                                                  "7", 1)
    assert [(m.bdf, m.driver, m.bridge, m.blocks_group) for m in a.group_members] == [
        ("0000:3a:00.0", "pcieport", True, None)]
    assert [(h.pid, h.command) for h in a.holders] == [(4242, "rbln-smi")] and not a.vfio_device_present
    assert (b.driver, b.driver_override, b.vfio_device_present) == ("vfio-pci", "vfio-pci", True)
    assert [(h.pid, h.command, h.path) for h in b.holders] == [(3100, "qemu-kvm -name vm1", "/dev/vfio/8")]
    assert st.warnings == ()
    only = vfio_status(root=k.root, bdfs=["3c:00.0"])
    assert [d.bdf for d in only.devices] == [B]
    with pytest.raises(InvalidInput):
        vfio_status(root=k.root, bdfs=["../x"])

def test_status_all_vendors_on_this_machines_real_sysfs():
    """Read-only against /sys, /proc and /dev of the machine running the tests: it completes, whatever is there
    (what it must list is checked on simulated trees)."""
    st = vfio_status(all_vendors=True)
    bdfs = [d.bdf for d in st.devices]
    assert bdfs == sorted(set(bdfs)) and all(pci.is_bdf_name(b) for b in bdfs)

def test_status_says_where_it_looked(tmp_path):
    k = SimKernel(tmp_path)
    st = vfio_status(root=k.root)
    assert st.devices == () and st.searched == str(k.sys / "bus" / "pci" / "devices")


def test_an_unread_override_survives_the_document_a_node_pod_prints(tmp_path):
    """`vfio status --node` reads the pod's document back (VfioStatus.from_dict): driverOverrideKnown false stays
    false; a document of an older rblnctl (no such key: it read every override) is read as known."""
    from dataclasses import replace

    from rblnctl.documents import VFIO_STATUS
    from rblnctl.host.vfio.model import VfioStatus

    k = npu_node(tmp_path, 2)
    st = vfio_status(root=k.root)
    st = replace(st, devices=(replace(st.devices[0], driver=None, driver_override_known=False), st.devices[1]))
    doc = VFIO_STATUS(st)
    assert [d["driverOverrideKnown"] for d in doc["devices"]] == [False, True]
    assert VfioStatus.from_dict(doc) == st
    for d in doc["devices"]:
        del d["driverOverrideKnown"]
    assert [d.driver_override_known for d in VfioStatus.from_dict(doc).devices] == [True, True]


def test_how_and_whether_a_holder_is_certain_survive_the_document_a_node_pod_prints(tmp_path):
    """-o json says how each holder holds the function and whether it is certain (an unnamed VFIO fd of a process
    holding no group may be another VM's); `vfio status --node` reads both back; an older document: open, certain."""
    from dataclasses import replace

    from rblnctl.documents import VFIO_STATUS
    from rblnctl.host.procfs import Holder
    from rblnctl.host.vfio.model import VfioStatus

    k = npu_node(tmp_path, 1)
    st = vfio_status(root=k.root)
    held = (Holder(pid=7, command="qemu", path="anon_inode:[vfio-device]", how="vfio-device", certain=False),)
    st = replace(st, devices=(replace(st.devices[0], holders=held),))
    doc = VFIO_STATUS(st)
    assert doc["devices"][0]["holders"] == [{"pid": 7, "command": "qemu", "path": "anon_inode:[vfio-device]",
                                             "how": "vfio-device", "certain": False}]
    assert VfioStatus.from_dict(doc) == st
    for h in doc["devices"][0]["holders"]:
        del h["how"], h["certain"]
    (old,) = VfioStatus.from_dict(doc).devices[0].holders
    assert (old.how, old.certain) == ("open", True)
