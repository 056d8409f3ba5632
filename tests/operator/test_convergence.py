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
from rblnctl.constants import OPERATOR_NAMESPACE as NS, MODE_VM as VM

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


# -- a component pod held in an init container (issue 27, finding 7) ---------------------------------------------


def _init_statuses(pod, *states):
    """The pod's init containers and their statuses: (name, state dict[, restartPolicy]) each."""
    p = dict(pod)
    p["spec"] = {**p["spec"], "initContainers": [{"name": s[0], "image": "i", **({"restartPolicy": s[2]}
                                                                                    if len(s) > 2 else {})}
                                                 for s in states]}
    p["status"] = {**p["status"], "phase": "Pending",
                   "initContainerStatuses": [{"name": s[0], "state": s[1], "ready": False, "restartCount": 0,
                                              "started": "running" in s[1]} for s in states]}
    return p


RUN = {"running": {"startedAt": "2026-12-04T06:59:20Z"}}
DONE = {"terminated": {"exitCode": 0, "reason": "Completed"}}
INIT = {"waiting": {"reason": "PodInitializing"}}


def test_kubectl_status_as_kubectl_prints_it():
    """kubernetes/kubernetes pkg/printers/internalversion/printers.go printPod, init container by init container."""
    from rblnctl.operator.components import kubectl_status

    _, pod = comp_pod("sandbox-device-plugin", ready=False)
    assert kubectl_status(_init_statuses(pod, ("driver-ready", RUN), ("vfio-bind-checker", INIT))) == "Init:0/2"
    assert kubectl_status(_init_statuses(pod, ("driver-ready", DONE), ("vfio-bind-checker", RUN))) == "Init:1/2"
    assert kubectl_status(_init_statuses(pod, ("a", {"waiting": {"reason": "CrashLoopBackOff"}}))) == \
        "Init:CrashLoopBackOff"
    assert kubectl_status(_init_statuses(pod, ("a", {"terminated": {"exitCode": 1, "reason": "Error"}}))) == \
        "Init:Error"
    assert kubectl_status(_init_statuses(pod, ("a", {"terminated": {"exitCode": 2}}))) == "Init:ExitCode:2"
    # a started sidecar (restartPolicy Always) does not hold the pod; the next one does
    assert kubectl_status(_init_statuses(pod, ("log", RUN, "Always"), ("b", RUN))) == "Init:1/2"
    assert kubectl_status(_init_statuses(pod, ("a", DONE))) == "Pending"


def test_a_sandbox_plugin_in_driver_ready_on_a_vm_node_is_stuck_and_named():
    """Before, the wait said only `not Running and Ready yet` of the v0.3.0 plugin that can never start there."""
    from rblnctl.operator.components import init_hold

    comp, pod = comp_pod("sandbox-device-plugin", ready=False, release=V0_3_0)
    pod = _init_statuses(pod, ("driver-ready", RUN), ("vfio-bind-checker", INIT))
    hold = init_hold(comp, pod, vm_node=True)
    assert (hold.container, hold.state, hold.status, hold.stuck) == ("driver-ready", "running", "Init:0/2", True)
    assert ".driver-ctr-ready" in hold.waits_for
    out = pending(vm_node(), VM, HYBRID, [comp_pod("vfio-manager"), (comp, pod)])
    (held,) = [p for p in out if p.hold is not None]
    assert held.text == (f"pod {NS}/{pod['metadata']['name']} (sandbox-device-plugin) is stuck in its init container "
                         f"driver-ready (running since 2026-12-04T06:59:20Z, Init:0/2): {hold.waits_for}")
    # vfio-bind-checker waits for what the vfio-manager does: held, not stuck
    later = init_hold(comp, _init_statuses(pod, ("driver-ready", DONE), ("vfio-bind-checker", RUN)), vm_node=True)
    assert (later.container, later.status, later.stuck) == ("vfio-bind-checker", "Init:1/2", False)
    assert "is still in its init container vfio-bind-checker" in later.describe()
    # an init container that failed is stuck whatever it is
    crashed = init_hold("dra-kubelet-plugin", _init_statuses(pod, ("x", {"waiting": {"reason": "CrashLoopBackOff"}})),
                        vm_node=False)
    assert crashed.stuck and crashed.state == "waiting (CrashLoopBackOff)"
    # no init container status yet (not started), or all done: not held
    assert init_hold(comp, comp_pod("sandbox-device-plugin", ready=False)[1], vm_node=True) is None
    assert init_hold(comp, _init_statuses(pod, ("driver-ready", DONE)), vm_node=True) is None


def test_with_logs_adds_the_last_log_line_and_how_long():
    from datetime import UTC, datetime

    from rblnctl.operator.convergence import with_logs

    comp, pod = comp_pod("sandbox-device-plugin", ready=False, release=V0_3_0)
    pod = _init_statuses(pod, ("driver-ready", RUN), ("vfio-bind-checker", INIT))
    out = pending(vm_node(), VM, HYBRID, [comp_pod("vfio-manager"), (comp, pod)])
    now = datetime(2026, 12, 4, 7, 2, 30, tzinfo=UTC)
    logged = with_logs(out, lambda h: "waiting for rbln driver container to be ready", now)
    (held,) = [p for p in logged if p.hold is not None]
    assert "(running for 3m10s, Init:0/2)" in held.text
    assert held.text.endswith("; last log line: 'waiting for rbln driver container to be ready'")
    assert [p.text for p in logged if p.hold is None] == [p.text for p in out if p.hold is None]
    unreadable = with_logs(out, lambda h: None)
    assert [p.text for p in unreadable] == [p.text for p in out]


def test_no_allocator_pod_yet_is_pending_whatever_allocatable_says():
    """The allocator's deploy label is set but its DaemonSet has no pod on the node yet, while allocatable still
    shows the vm resource (left from an earlier switch, or a name both modes advertise): not converged."""
    out = pending(vm_node(), VM, HYBRID, [comp_pod("vfio-manager")])
    assert [p.text for p in out] == ["no sandbox-device-plugin pod on n1 yet"]
