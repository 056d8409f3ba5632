"""KubeVirt's virt-launcher pods in a drain: their own emptyDirs, and KubeVirt's eviction webhook.

Every virt-launcher pod carries KubeVirt's emptyDirs (tests/fakes/objects.py LAUNCHER_VOLUMES, as
kubevirt/kubevirt pkg/virt-controller/services/rendervolumes.go renders them). Once the VM override is
given they must not block; the user's data (a VMI emptyDisk, an emptyDir KubeVirt did not add) still does.
"""

from __future__ import annotations

import threading

import pytest

from rblnctl.errors import Refused, WaitTimeout
from rblnctl.node.drain import Drainer
from rblnctl.node.events import NodeEvents
from rblnctl.node.options import DrainOptions
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock

PF = "rebellions.ai/RBLN-CA22_PF"



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


# -- KubeVirt's pod eviction webhook -------------------------------------------------------------------

WEBHOOK = 'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: '


def eviction_replies(apiserver):
    return [r for r in apiserver.requests if r.path.endswith("/eviction")]


def test_the_fake_answers_a_denial_in_the_apiservers_shape(apiserver, kube):
    import json
    import urllib.error
    import urllib.request

    apiserver.kubevirt_eviction_webhook = True
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver, eviction_strategy="LiveMigrate")  # an NPU VMI: LiveMigratable False
    body = json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": "virt-launcher-vm1-abcde", "namespace": "vms"}}).encode()
    req = urllib.request.Request(f"{apiserver.url}/api/v1/namespaces/vms/pods/virt-launcher-vm1-abcde/eviction",
                                 data=body, method="POST", headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req)
    assert exc.value.code == 429
    assert json.loads(exc.value.read()) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": WEBHOOK + "VMI vm1 is configured with an eviction strategy but is not live-migratable",
        "code": 429}


def test_a_vm_kubevirt_will_not_migrate_is_refused_in_the_plan_naming_it(apiserver, kube):
    """Issue 37 finding 8: LiveMigrate on a VMI that is not live-migratable (an NPU passed through): KubeVirt v1.9.0's
    webhook denies the eviction for good and migrates nothing. Before, found by the eviction itself, after the
    cordon; now a blocker of the plan, before any write, naming the VM, the strategy's origin and the way out."""
    apiserver.kubevirt_eviction_webhook = True
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver, eviction_strategy="LiveMigrate")
    drainer = drainer_for(kube, timeout_s=600, **FORCED)
    plan = drainer.plan("n1")
    (b,) = plan.blockers
    assert "\n" not in b.message and "VM vms/vm1" in b.message and "not live-migratable" in b.message
    assert "eviction strategy is LiveMigrate (its VMI's spec.evictionStrategy)" in b.message
    assert "LiveMigratable False, HostDeviceNotLiveMigratable" in b.message
    assert "virtctl stop vm1 -n vms" in b.message and b.override == "disable_eviction"
    with pytest.raises(Refused):
        drainer.apply(plan)
    assert eviction_replies(apiserver) == [] and apiserver.writes() == []


def test_the_kubevirt_crs_live_migrate_default_counts_too_and_a_delete_passes(apiserver, kube):
    """No strategy on the VMI: the KubeVirt CR's spec.configuration.evictionStrategy decides (the webhook's
    VMIEvictionStrategy). --disable-eviction DELETEs the pod, which the eviction webhook never sees."""
    apiserver.kubevirt_eviction_webhook = True
    apiserver.add(o.npu_node("n1"), o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt",
                     fn=lambda k: k["spec"].setdefault("configuration", {}).update(evictionStrategy="LiveMigrate"))
    seed_vm(apiserver)
    (b,) = drainer_for(kube, **FORCED).plan("n1").blockers
    assert "(the KubeVirt CR's spec.configuration.evictionStrategy)" in b.message
    deleting = drainer_for(kube, disable_eviction=True, timeout_s=5, **FORCED)
    plan = deleting.plan("n1")
    assert plan.blockers == [] and [e.name for e in plan.evict] == ["virt-launcher-vm1-abcde"]


def test_a_real_budget_429_still_backs_off(apiserver, kube):
    apiserver.kubevirt_eviction_webhook = True
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver, eviction_strategy="LiveMigrate")
    apiserver.mutate("VirtualMachineInstance", "vm1", "vms", fn=lambda v: v["spec"].pop("evictionStrategy"))
    apiserver.add(o.pdb("vms", "kubevirt-disruption-budget-x", min_available=1,
                        selector={"matchLabels": {"kubevirt.io": "virt-launcher"}}))
    blocked = []
    drainer = Drainer(kube=kube, options=DrainOptions(poll_s=0.01, timeout_s=5, **FORCED), clock=FakeClock(start=0.0),
                      events=NodeEvents(on_pdb_blocked=lambda p, m, n: blocked.append(m)))
    with pytest.raises(WaitTimeout) as exc:
        drainer.apply(drainer.plan("n1"))
    assert "disruption budgets still refuse evicting vms/virt-launcher-vm1-abcde" in "\n".join(exc.value.details)
    assert blocked and all("disruption budget" in m for m in blocked)


def test_an_evacuation_waits_for_the_vmi_to_leave_the_node(apiserver, kube):
    apiserver.kubevirt_eviction_webhook = True
    apiserver.add(o.npu_node("n1"), o.npu_node("n2"))
    seed_vm(apiserver, npu=False, eviction_strategy="LiveMigrate")  # migratable: no host device
    warnings: list[str] = []

    def migrate(event, obj):  # virt-controller's evacuation: the VMI moves to n2, the source pod completes
        if obj.get("kind") == "VirtualMachineInstance" and (obj.get("status") or {}).get("evacuationNodeName"):
            def move(v):
                v["status"].update(nodeName="n2", evacuationNodeName="")
                v["metadata"]["labels"]["kubevirt.io/nodeName"] = "n2"
            threading.Timer(0.2, lambda: (apiserver.mutate("VirtualMachineInstance", "vm1", "vms", fn=move),
                                          apiserver.set_pod_phase("vms", "virt-launcher-vm1-abcde",
                                                                  "Succeeded"))).start()

    apiserver.on_change(migrate)
    drainer = Drainer(kube=kube, options=DrainOptions(poll_s=0.01, timeout_s=30, all_pods=True, **FORCED),
                      events=NodeEvents(on_warning=warnings.append))
    res = drainer.apply(drainer.plan("n1"))
    assert [p.name for p in res.evicted] == ["virt-launcher-vm1-abcde"]
    assert apiserver.get("VirtualMachineInstance", "vm1", "vms")["status"]["nodeName"] == "n2"
    assert any("evacuating VMI vms/vm1" in w for w in warnings) and any("has left node n1" in w for w in warnings)
    assert len(eviction_replies(apiserver)) == 1  # waited on the VMI, not by asking again
    vmi_watches = [r for r in apiserver.requests if r.path.endswith("/virtualmachineinstances")]
    assert vmi_watches and vmi_watches[0].query["labelSelector"] == ["kubevirt.io/nodeName=n1"]


def test_an_evacuation_that_never_ends_times_out_naming_the_vmi(apiserver, kube):
    apiserver.kubevirt_eviction_webhook = True
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver, npu=False, eviction_strategy="LiveMigrate")  # migratable: no host device
    # the system clock: the watch's deadline passes only in real time
    drainer = Drainer(kube=kube, options=DrainOptions(poll_s=0.01, timeout_s=0.5, all_pods=True, **FORCED))
    with pytest.raises(WaitTimeout) as exc:
        drainer.apply(drainer.plan("n1"))
    assert "KubeVirt is still evacuating VMI vms/vm1" in "\n".join(exc.value.details)
    assert apiserver.get("VirtualMachineInstance", "vm1", "vms")["status"]["evacuationNodeName"] == "n1"


def test_a_passing_webhook_denial_is_retried_like_a_budget(apiserver, kube):
    apiserver.kubevirt_eviction_webhook = True
    apiserver.add(o.npu_node("n1"))
    seed_vm(apiserver, npu=False, eviction_strategy="LiveMigrate")  # migratable: no host device
    # the VMI runs elsewhere: this pod is a migration target, which the webhook refuses until that settles
    apiserver.mutate("VirtualMachineInstance", "vm1", "vms", fn=lambda v: v["status"].update(nodeName="n2"))
    blocked = []
    drainer = Drainer(kube=kube, options=DrainOptions(poll_s=0.01, timeout_s=5, all_pods=True, **FORCED),
                      clock=FakeClock(start=0.0), events=NodeEvents(on_pdb_blocked=lambda p, m, n: blocked.append(m)))
    with pytest.raises(WaitTimeout):
        drainer.apply(drainer.plan("n1"))
    assert blocked and blocked[0] == WEBHOOK + "Eviction request for target Pod"
