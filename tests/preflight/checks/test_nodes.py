"""Per-node checks from NFD facts and labels: FAIL on vm-passthrough nodes, WARN on container nodes."""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import VM, nfd_features, seed, run, per_node


def test_node_facts_missing_warn_and_name_local_preflight(apiserver, kube):
    names = seed(apiserver, features=False, nodes=2)
    report = run(kube)
    for id_ in ("node.iommu", "node.vfio-modules", "node.viommu"):
        for name in names:
            r = per_node(report, id_)[name]
            assert r.status == Status.WARN, (id_, r)
            assert "no NodeFeature object for this node" in r.evidence
            assert "rblnctl preflight --local" in r.remedy


def test_fake_default_node_feature_shape(apiserver, kube):
    """Older NFD: modules as kernel.loadedmodule attributes, iommu label, no cpu.cpuid."""
    seed(apiserver, features=False, nodes=1)
    apiserver.add(o.node_feature("npu-0000"))
    report = run(kube)
    assert per_node(report, "node.iommu")["npu-0000"].status == Status.PASS
    assert "iommu-enabled=true" in per_node(report, "node.iommu")["npu-0000"].evidence
    assert per_node(report, "node.vfio-modules")["npu-0000"].status == Status.PASS
    v = per_node(report, "node.viommu")["npu-0000"]
    assert v.status == Status.WARN and "no cpu.cpuid" in v.evidence


def test_node_iommu_off_fails_on_vm_nodes_warns_on_container_nodes(apiserver, kube):
    devices = [{"vendor": "1eff", "device": "1220", "class": "1200"},
               {"vendor": "15b3", "device": "101d", "class": "0200", "iommu_group/type": "DMA"}]
    seed(apiserver, features=False, nodes=0)
    apiserver.add(o.npu_node("vm-1", mode=VM), nfd_features("vm-1", iommu=False, pci_devices=devices),
                  o.npu_node("ct-1", mode="container"), nfd_features("ct-1", iommu=False, pci_devices=devices))
    report = run(kube)
    iommu = per_node(report, "node.iommu")
    assert iommu["vm-1"].status == Status.FAIL and "the NPUs have none" in iommu["vm-1"].evidence
    assert iommu["ct-1"].status == Status.WARN and "container mode" in iommu["ct-1"].evidence
    # The remedy is the kernel's: there is no amd_iommu=on (Documentation/admin-guide/kernel-parameters.txt).
    assert "`intel_iommu=on`" in iommu["vm-1"].remedy and "amd_iommu=on" not in iommu["vm-1"].remedy
    assert "BIOS" in iommu["vm-1"].remedy


def test_node_iommu_unknown_without_any_group_attribute(apiserver, kube):
    seed(apiserver, features=False, nodes=0)
    apiserver.add(o.npu_node("vm-1", mode=VM), nfd_features("vm-1", iommu=False))
    r = per_node(run(kube), "node.iommu")["vm-1"]
    assert r.status == Status.WARN and "older than v0.10" in r.evidence  # never guessed as off


def test_vm_worker_without_viommu(apiserver, kube):
    devices = [{"vendor": "1eff", "device": "1220", "class": "1200"},
               {"vendor": "1af4", "device": "1041", "class": "0200", "iommu_group/type": "DMA"}]
    seed(apiserver, features=False, nodes=0)
    apiserver.add(o.npu_node("vm-1", mode=VM), nfd_features("vm-1", hypervisor=True, iommu=False, pci_devices=devices),
                  o.npu_node("vm-2", mode=VM), nfd_features("vm-2", hypervisor=True))
    report = run(kube)
    v = per_node(report, "node.viommu")
    assert v["vm-1"].status == Status.FAIL and "VM without a vIOMMU" in v["vm-1"].evidence
    assert "intel-iommu" in v["vm-1"].remedy and "amd_iommu=on" not in v["vm-1"].remedy
    assert v["vm-2"].status == Status.PASS and "VM with a vIOMMU" in v["vm-2"].evidence


def test_vfio_modules_missing_on_vm_node(apiserver, kube):
    seed(apiserver, features=False, nodes=0)
    apiserver.add(o.npu_node("vm-1", mode=VM), nfd_features("vm-1", modules=("rebellions", "kvm")),
                  o.npu_node("ct-1", mode="container"), nfd_features("ct-1", modules=("rebellions",)))
    m = per_node(run(kube), "node.vfio-modules")
    assert m["vm-1"].status == Status.FAIL and "vfio, vfio_pci, vfio_iommu_type1 neither loaded nor built in" in \
        m["vm-1"].evidence
    assert m["ct-1"].status == Status.SKIP


def test_invalid_mode_label_and_deploy_skip(apiserver, kube):
    seed(apiserver, features=True, nodes=0)
    apiserver.add(o.npu_node("n-bad", mode="vm"), nfd_features("n-bad"),
                  o.npu_node("n-skip", mode=VM, labels={"rebellions.ai/npu.deploy.skip": "true"}),
                  nfd_features("n-skip"))
    report = run(kube)
    bad = per_node(report, "node.mode-label")["n-bad"]
    assert bad.status == Status.FAIL and "'vm' is not container or vm-passthrough" in bad.evidence
    assert "rblnctl node set-mode" in bad.remedy
    skip = per_node(report, "node.deploy-skip")["n-skip"]
    assert skip.status == Status.WARN and "rebellions.ai/npu.deploy.skip-" in skip.remedy
    assert per_node(report, "node.deploy-skip")["n-bad"].status == Status.PASS

