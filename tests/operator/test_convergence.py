"""rblnctl.operator.convergence: every in-between state the operator passes through, one fixture each.

Each state is built here as the API server would show it mid-switch (issue 15: where a branch
handles a state, a fixture produces that state), and each test fails if its branch is removed.
"""

from __future__ import annotations

from rblnctl.operator.capacity import dra_devices
from rblnctl.operator.convergence import Missing, pending
from rblnctl.operator.policy import parse_policy
from tests.fakes import objects as o
from tests.fakes.releases import NEWER, V0_3_0

NS = "rbln-system"
VM = "vm-passthrough"
HYBRID = parse_policy(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True))
DRA = parse_policy(o.cluster_policy(vfio_manager=True, sandbox=False, dra=True, device_plugin=False))
BOTH = parse_policy(o.cluster_policy(vfio_manager=True, sandbox=False, dra=True, device_plugin=True))


def vm_node(**kw):
    return o.npu_node("n1", mode=VM, **kw)


def comp_pod(comp, *, ready=True, terminating=False, release=NEWER):
    p = o.pod(NS, f"{release.daemonset_name(comp)}-n1", node="n1", owner_kind="DaemonSet",
              owner_name=release.daemonset_name(comp), labels=release.pod_labels(comp), ready=ready)
    if terminating:
        p["metadata"]["deletionTimestamp"] = "2026-12-02T12:00:00Z"
    return (comp, p)


def vm_pods(**kw):
    return [comp_pod("vfio-manager", **kw), comp_pod("sandbox-device-plugin", **kw)]


def kinds(items):
    return sorted({p.kind for p in items})


def test_a_converged_vm_node_has_nothing_pending():
    assert pending(vm_node(), VM, HYBRID, vm_pods()) == []


def test_the_mode_label_not_yet_written():
    out = pending(o.npu_node("n1", mode="container"), VM, HYBRID, [])
    assert Missing.MODE in kinds(out)


def test_a_new_mode_pod_terminating_in_a_rollout_is_not_converged():
    out = pending(vm_node(), VM, HYBRID, [comp_pod("vfio-manager"), comp_pod("sandbox-device-plugin",
                                                                              terminating=True)])
    assert [p.text for p in out] == ["pod rbln-system/rbln-sandbox-device-plugin-n1 (sandbox-device-plugin) is "
                                     "terminating"]


def test_a_new_mode_pod_not_ready():
    out = pending(vm_node(), VM, HYBRID, [comp_pod("vfio-manager", ready=False), comp_pod("sandbox-device-plugin")])
    assert ["not Running and Ready" in p.text for p in out] == [True]


def test_an_old_mode_pod_still_on_the_node_even_terminating():
    out = pending(vm_node(), VM, HYBRID, [*vm_pods(), comp_pod("device-plugin", terminating=True)])
    assert [p.kind for p in out] == [Missing.POD] and "old-mode pod" in out[0].text


def test_no_vfio_manager_pod_yet():
    out = pending(vm_node(), VM, HYBRID, [comp_pod("sandbox-device-plugin")])
    assert [p.text for p in out] == ["no vfio-manager pod on n1 yet"]


def test_deploy_labels_of_the_new_mode_missing_and_of_the_old_one_left():
    node = vm_node(deploy=False, labels={"rebellions.ai/npu.deploy.device-plugin": "true"})
    texts = [p.text for p in pending(node, VM, HYBRID, [])]
    assert "deploy label rebellions.ai/npu.deploy.vfio-manager not set yet" in texts
    assert any("sandbox-device-plugin or rebellions.ai/npu.deploy.dra-kubelet-plugin" not in t and
               "sandbox-device-plugin not set yet" in t for t in texts)
    assert "deploy label rebellions.ai/npu.deploy.device-plugin of the old mode still set" in texts


def test_a_paused_label_means_the_operator_is_at_work():
    node = vm_node(labels={"rebellions.ai/npu.deploy.sandbox-device-plugin": "paused-for-driver-upgrade"})
    out = pending(node, VM, HYBRID, [comp_pod("vfio-manager", ready=False)])
    assert kinds(out) == [Missing.PAUSED, Missing.POD]
    assert "driver manager is at work" in next(p.text for p in out if p.kind == Missing.PAUSED)


def test_a_users_opt_out_is_not_required():
    node = vm_node(labels={"rebellions.ai/npu.deploy.vfio-manager": "false"})
    assert pending(node, VM, HYBRID, [comp_pod("sandbox-device-plugin")]) == []


def test_allocatable_without_the_new_resource_and_with_the_old():
    node = vm_node(allocatable={"rebellions.ai/npu": "2"})
    node["status"]["allocatable"].pop("rebellions.ai/RBLN-CA22_PF")
    texts = [p.text for p in pending(node, VM, HYBRID, vm_pods())]
    assert texts == ["allocatable has no rebellions.ai/RBLN-<MODEL>_<PF|VF> (or rebellions.ai/npu_pt) yet",
                     "allocatable still offers the old mode's rebellions.ai/npu"]


def test_v0_3_0_resource_names_come_from_the_policy():
    policy = parse_policy(V0_3_0.policy(vfio_manager=True, sandbox=True))
    node = o.npu_node("n1", mode=VM, product="RBLN-CA25", release=V0_3_0, policy=V0_3_0.policy())
    pods = [comp_pod("vfio-manager", release=V0_3_0), comp_pod("sandbox-device-plugin", release=V0_3_0)]
    assert pending(node, VM, policy, pods) == []  # ATOM_MAX_PT is a VM resource under this policy
    node["status"]["allocatable"]["rebellions.ai/ATOM"] = "2"
    assert [p.text for p in pending(node, VM, policy, pods)] == [
        "allocatable still offers the old mode's rebellions.ai/ATOM"]


def vfio_slice(*names):
    return o.resource_slice("n1", devices=[{"name": n, "attributes": {}} for n in names])


def test_dra_vm_needs_vfio_devices_in_resource_slices_whatever_its_pod_says():
    node = vm_node(dra=True)
    pods = [comp_pod("vfio-manager"), comp_pod("dra-kubelet-plugin")]
    assert [p.kind for p in pending(node, VM, DRA, pods, [])] == [Missing.SLICE]
    assert [p.kind for p in pending(node, VM, DRA, pods, [vfio_slice("rbln0", "rbln1")])] == [Missing.SLICE] * 2
    assert pending(node, VM, DRA, pods, [vfio_slice("vfio-0000-3b-00-0")]) == []


def test_dra_container_needs_container_devices_and_no_vfio_left():
    """The DRA plugin serves both modes, so only the slices tell the switch back to container is done."""
    node = o.npu_node("n1", mode="container", dra=True)
    pods = [comp_pod("dra-kubelet-plugin")]
    out = pending(node, "container", DRA, pods, [vfio_slice("vfio-0000-3b-00-0")])
    assert [p.text for p in out] == [
        "no ResourceSlice of npu.rebellions.ai offers container devices yet",
        "ResourceSlices of npu.rebellions.ai still offer vfio devices (vfio-0000-3b-00-0)"]
    assert pending(node, "container", DRA, pods, [vfio_slice("rbln0")]) == []


def test_vfio_devices_by_name_or_type_attribute():
    typed = o.resource_slice("n1", devices=[{"name": "dev-a", "attributes": {"type": {"string": "vfio"}}},
                                            {"name": "rbln0", "attributes": {"type": {"string": "npu"}}}])
    assert dra_devices([typed]) == (["dev-a"], ["rbln0"])


def test_a_dra_only_container_node_needs_no_extended_resource():
    """The policy enables devicePlugin and DRA; on this container node only the DRA plugin is deployed: its
    container devices in ResourceSlices are the output, and no device plugin is there to advertise rebellions.ai/npu.
    Once the device plugin is deployed there, its resource is required as on any container node."""
    node = o.dra_only_container_node("n1")
    pods = [comp_pod("dra-kubelet-plugin")]
    slices = [vfio_slice("rbln0", "rbln1")]
    assert pending(node, "container", BOTH, pods, slices) == []
    node["metadata"]["labels"]["rebellions.ai/npu.deploy.device-plugin"] = "true"
    out = pending(node, "container", BOTH, [*pods, comp_pod("device-plugin")], slices)
    assert [p.kind for p in out] == [Missing.RESOURCE] and "allocatable has no rebellions.ai/npu" in out[0].text
