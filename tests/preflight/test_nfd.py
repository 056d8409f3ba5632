"""NFD facts of one node: NodeFeature objects merged with labels, and what they say about the IOMMU."""

from __future__ import annotations

from rblnctl.nfd import features_by_node, iommu_fact, node_nfd
from tests.fakes import objects as o
from tests.preflight.cluster_support import nfd_features

NPU = {"vendor": "1eff", "device": "1220", "class": "1200"}
NIC = {"vendor": "15b3", "device": "101d", "class": "0200"}


def test_features_are_grouped_by_the_node_name_label_then_the_object_name():
    a, b = nfd_features("n1"), nfd_features("n2")
    b["metadata"]["labels"] = {}
    b["metadata"]["name"] = "n2"
    assert {k: len(v) for k, v in features_by_node([a, b, nfd_features("n1")]).items()} == {"n1": 2, "n2": 1}


def test_flags_attributes_instances_and_labels_merge():
    node = o.npu_node("n1", mode="vm-passthrough")
    nfd = node_nfd(node, [nfd_features("n1", hypervisor=True)])
    assert nfd.objects == 1
    assert "HYPERVISOR" in nfd.elements("cpu.cpuid") and "vfio_pci" in nfd.elements("kernel.enabledmodule")
    assert nfd.elements("no.such.feature") is None
    assert nfd.labels["rebellions.ai/npu.workload.config"] == "vm-passthrough"  # the node's own labels win
    assert any(d.get("vendor") == "1eff" for d in nfd.instances["pci.device"])


def test_iommu_fact_from_the_label_and_from_pci_instances():
    assert iommu_fact(node_nfd(o.node("n"), []))[0] is None
    on = node_nfd(o.node("n"), [nfd_features("n", iommu=False, pci_devices=[{**NPU, "iommu_group/type": "DMA"}])])
    assert iommu_fact(on) == (True, "NFD pci.device: the NPUs are in IOMMU groups (iommu_group/type DMA)")
    off = node_nfd(o.node("n"), [nfd_features("n", iommu=False, pci_devices=[NPU, {**NIC, "iommu_group/type": "DMA"}])])
    assert iommu_fact(off)[0] is False
    unknown = node_nfd(o.node("n"), [nfd_features("n", iommu=False, pci_devices=[NPU, NIC])])
    assert iommu_fact(unknown)[0] is None and "older than v0.10" in iommu_fact(unknown)[1]
    no_npu = node_nfd(o.node("n"), [nfd_features("n", iommu=False, pci_devices=[{**NIC, "iommu_group/type": "DMA"}])])
    assert iommu_fact(no_npu) == (None, "NFD pci.device lists no vendor 1eff device")
