"""KubeVirt's virt-launcher pods in a drain: their own emptyDirs, and KubeVirt's eviction webhook.

Every virt-launcher pod carries KubeVirt's emptyDirs (tests/fakes/objects.py LAUNCHER_VOLUMES, as
kubevirt/kubevirt pkg/virt-controller/services/rendervolumes.go renders them). Once the VM override is
given they must not block; the user's data (a VMI emptyDisk, an emptyDir KubeVirt did not add) still does.
"""

from __future__ import annotations

import pytest

from rblnctl.kube import KubeOptions, connect
from rblnctl.node.drain import Drainer
from rblnctl.node.options import DrainOptions
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock

PF = "rebellions.ai/RBLN-CA22_PF"


@pytest.fixture
def kube(apiserver):
    return connect(KubeOptions(server=apiserver.url))


def drainer_for(kube, **options):
    options.setdefault("poll_s", 0.01)
    return Drainer(kube=kube, options=DrainOptions(**options), clock=FakeClock(start=0.0))


def seed_vm(apiserver, name="vm1", *, npu=True, emptydisk=False, extra_volumes=None, **vmi_kw):
    vmi = o.vmi("vms", name, "n1", [PF] if npu else None, **vmi_kw)
    if emptydisk:
        vmi["spec"]["volumes"] = [{"name": "scratch", "emptyDisk": {"capacity": "2Gi"}}]
    apiserver.add(vmi, o.virt_launcher("vms", name, "n1", resources={PF: "1"} if npu else None,
                                       extra_volumes=extra_volumes))


FORCED = {"force": True, "evict_vms": True}


def test_the_fake_launcher_carries_kubevirts_emptydirs():
    p = o.virt_launcher("vms", "vm1", "n1")
    names = {v["name"] for v in p["spec"]["volumes"] if "emptyDir" in v}
    assert {"private", "public", "sockets", "virt-bin-share-dir", "libvirt-runtime", "ephemeral-disks"} <= names


def test_forced_npu_vm_goes_without_delete_emptydir_data(apiserver, kube):
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver)
    plan = drainer_for(kube, **FORCED).plan("n1")
    assert plan.blockers == []
    assert [e.name for e in plan.evict] == ["virt-launcher-vm1-abcde"]
    res = drainer_for(kube, **FORCED).apply(plan)
    assert [p.name for p in res.evicted] == ["virt-launcher-vm1-abcde"]


def test_without_the_override_only_the_vm_blocks_not_kubevirts_emptydirs(apiserver, kube):
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver)
    plan = drainer_for(kube).plan("n1")
    assert [b.override for b in plan.blockers] == ["evict_vms"]


def test_an_emptydisk_still_needs_delete_emptydir_data(apiserver, kube):
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver, emptydisk=True)
    (b,) = drainer_for(kube, **FORCED).plan("n1").blockers
    assert b.override == "delete_emptydir_data"
    assert "VMI vms/vm1 has emptyDisk volume(s) scratch" in str(b) and "libvirt-runtime" in str(b)
    assert drainer_for(kube, delete_emptydir_data=True, **FORCED).plan("n1").blockers == []


def test_an_emptydir_kubevirt_did_not_add_still_blocks(apiserver, kube):
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver, extra_volumes=[{"name": "istio-data", "emptyDir": {}}])
    (b,) = drainer_for(kube, **FORCED).plan("n1").blockers
    assert "istio-data" in str(b) and "private" not in str(b) and b.override == "delete_emptydir_data"


def test_a_downward_metrics_volume_is_kubevirts(apiserver, kube):
    apiserver.add(o.npu_node("n1"))
    vmi = o.vmi("vms", "vm1", "n1", [PF])
    vmi["spec"]["volumes"] = [{"name": "metrics", "downwardMetrics": {}}]
    apiserver.add(vmi, o.virt_launcher("vms", "vm1", "n1", resources={PF: "1"},
                                       extra_volumes=[{"name": "metrics", "emptyDir": {"medium": "Memory"}}]))
    assert drainer_for(kube, **FORCED).plan("n1").blockers == []


def test_an_unreadable_vmi_keeps_the_blocker(apiserver, kube):
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver)
    apiserver.forbid("get", "virtualmachineinstances")
    (b,) = drainer_for(kube, **FORCED).plan("n1").blockers
    assert "VMI vms/vm1 cannot be read" in str(b) and b.override == "delete_emptydir_data"


def test_a_pod_only_labelled_virt_launcher_gets_kubectls_rule(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("vms", "fake"))
    p = o.pod("vms", "virt-launcher-x", node="n1", owner_kind="ReplicaSet", owner_name="fake",
              labels={"kubevirt.io": "virt-launcher"}, requests={PF: "1"}, volumes=list(o.LAUNCHER_VOLUMES))
    apiserver.add(p)
    (b,) = drainer_for(kube, **FORCED).plan("n1").blockers
    assert "has emptyDir volumes whose data would be lost" in str(b)


def test_a_vm_without_npus_needs_the_override_for_kubectls_rule_to_lift(apiserver, kube):
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver, "plain", npu=False)
    (b,) = drainer_for(kube, all_pods=True).plan("n1").blockers
    assert "has emptyDir volumes whose data would be lost" in str(b)
    plan = drainer_for(kube, all_pods=True, **FORCED).plan("n1")
    assert plan.blockers == [] and [e.name for e in plan.evict] == ["virt-launcher-plain-abcde"]
