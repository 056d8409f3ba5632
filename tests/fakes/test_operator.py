"""The simulated RBLN NPU operator, driven through the fake API server's HTTP API, as each release behaves."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.operator import SimulatedOperator
from tests.fakes.releases import NEWER, RELEASES, V0_3_0
from rblnctl.constants import (
    OPERATOR_NAMESPACE as NS,
    WORKLOAD_LABEL as MODE,
    DEPLOY_LABEL_PREFIX as DEPLOY,
    DEPLOY_PAUSED as PAUSED,
)


def labels_for(release, mode):
    return {DEPLOY + c for c in release.components(mode)}


HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}


@pytest.fixture
def core(apiserver):
    with client.ApiClient(client.Configuration(host=apiserver.url)) as api:
        yield client.CoreV1Api(api)


def deploy_labels(server: FakeApiServer, node: str) -> set[str]:
    return {k for k in server.get("Node", node)["metadata"]["labels"] if k.startswith(DEPLOY)}


def deploy_values(server: FakeApiServer, node: str) -> dict[str, str]:
    return {k[len(DEPLOY):]: v for k, v in server.get("Node", node)["metadata"]["labels"].items()
            if k.startswith(DEPLOY)}


def component_pods(server: FakeApiServer, node: str) -> dict[str, dict]:
    """Component -> pod, through the owning DaemonSet (never through labels, which differ per release)."""
    out = {}
    for p in server.list("Pod", NS):
        if p["spec"].get("nodeName") != node:
            continue
        ds = server.get("DaemonSet", p["metadata"]["ownerReferences"][0]["name"], NS)
        out[ds["metadata"]["annotations"]["fake.rblnctl.io/component"]] = p
    return out


def ready(p: dict) -> bool:
    # A pod is created Pending with no condition; its kubelet (here the operator) reports them right after.
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions") or [])


def npu_resources(server: FakeApiServer, node: str) -> dict[str, str]:
    alloc = server.get("Node", node)["status"]["allocatable"]
    return {k: v for k, v in alloc.items() if k.startswith("rebellions.ai/")}


def wait_for(pred, timeout=3.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_without_a_policy_the_operator_does_nothing(apiserver):
    apiserver.add(o.npu_node("n1", npus=4, deploy=False))
    with SimulatedOperator(apiserver) as op:
        assert op.wait_idle(3)
        assert deploy_labels(apiserver, "n1") == set() and component_pods(apiserver, "n1") == {}


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.name)
def test_chart_defaults_deploy_the_container_components_of_the_release(apiserver, release):
    """The chart's values: vfioManager, sandboxDevicePlugin and draKubeletPlugin off; the rest on."""
    policy = release.policy()
    apiserver.add(policy, o.npu_node("n1", npus=4, product="RBLN-CA25", deploy=False), o.node("cpu"))
    with SimulatedOperator(apiserver, release=release) as op:
        assert op.wait_idle(3)
        assert deploy_labels(apiserver, "n1") == labels_for(release, "container")
        pods = component_pods(apiserver, "n1")
        want = {"driver", "device-plugin", "metrics-exporter", release.daemon, "npu-feature-discovery",
                "operator-validator", "container-toolkit"}
        if release is NEWER:
            want.discard(release.daemon)  # the later chart has no rblnDaemon switch: smd rides on the driver
        assert set(pods) == want and all(ready(p) for p in pods.values())
        resource = "rebellions.ai/ATOM" if release is V0_3_0 else "rebellions.ai/npu"
        assert npu_resources(apiserver, "n1") == {resource: "4"}
        assert deploy_labels(apiserver, "cpu") == set() and component_pods(apiserver, "cpu") == {}
        dp = pods["device-plugin"]
        ref = dp["metadata"]["ownerReferences"][0]
        ds = apiserver.get("DaemonSet", "rbln-device-plugin", NS)
        assert (ref["kind"], ref["name"], ref["uid"]) == ("DaemonSet", "rbln-device-plugin", ds["metadata"]["uid"])
        assert ds["spec"]["template"]["spec"]["nodeSelector"] == {f"{DEPLOY}device-plugin": "true"}
        assert ds["status"]["desiredNumberScheduled"] == 1 and ds["status"]["numberReady"] == 1
        if release is V0_3_0:  # `app: <ds name>` selects the pods, as internal/utils/k8s/daemonset.go builds it
            assert ds["spec"]["selector"]["matchLabels"] == {"app": "rbln-device-plugin"}
            assert pods["vfio-manager" if "vfio-manager" in pods else "metrics-exporter"]["metadata"]["labels"] == {
                "app": "rbln-metrics-exporter"}
            assert apiserver.get("DaemonSet", "rbln-daemon", NS) is not None
        else:
            assert pods["metrics-exporter"]["metadata"]["labels"]["app.kubernetes.io/component"] == "metrics-exporter"


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.name)
def test_mode_switch_through_the_api_and_back(apiserver, core, release):
    apiserver.add(release.policy(**HYBRID), o.npu_node("n1", npus=2, product="RBLN-CA25", release=release),
                  o.npu_node("n2", release=release))
    with SimulatedOperator(apiserver, ready_delay_s=0.5, release=release) as op:
        assert op.wait_idle(3)
        old_uid = component_pods(apiserver, "n1")["device-plugin"]["metadata"]["uid"]
        n2_before = apiserver.get("Node", "n2")["metadata"]["resourceVersion"]

        core.patch_node("n1", {"metadata": {"labels": {MODE: "vm-passthrough"}}})
        # The operator reacts to the PATCH; right after its reconcile the new pods exist but are not Ready.
        assert wait_for(lambda: "vfio-manager" in component_pods(apiserver, "n1"))
        assert deploy_labels(apiserver, "n1") == labels_for(release, "vm-passthrough")
        pods = component_pods(apiserver, "n1")
        if release.pauses_labels:  # the driver manager holds the allocator until vfio-manager is Ready
            assert deploy_values(apiserver, "n1")["sandbox-device-plugin"] == PAUSED
            assert set(pods) == {"vfio-manager"}
        else:
            assert set(pods) == {"vfio-manager", "sandbox-device-plugin"}
        assert not any(ready(p) for p in pods.values())
        assert npu_resources(apiserver, "n1") == {}

        assert op.wait_idle(3)
        pods = component_pods(apiserver, "n1")
        if release.sandbox_waits_for_driver:
            # v0.3.0: the sandbox plugin's `driver-ready` init container waits for the driver pod's marker,
            # and vm-passthrough nodes run no driver pod: it stays in Init, nothing is advertised.
            sandbox = pods.pop("sandbox-device-plugin")
            assert sandbox["status"]["phase"] == "Pending" and not ready(sandbox)
            (init, *_), = [sandbox["status"]["initContainerStatuses"]]
            assert init["name"] == "driver-ready" and "running" in init["state"]
            assert all(cs["state"]["waiting"]["reason"] == "PodInitializing"
                       for cs in sandbox["status"]["containerStatuses"])
            assert all(ready(p) for p in pods.values())
            assert npu_resources(apiserver, "n1") == {}
        else:
            assert all(ready(p) for p in pods.values())
            assert npu_resources(apiserver, "n1") == {"rebellions.ai/RBLN-CA25_PF": "2"}
        assert PAUSED not in deploy_values(apiserver, "n1").values()
        assert op.converged_modes["n1"] == "vm-passthrough"
        assert apiserver.get("Node", "n2")["metadata"]["resourceVersion"] == n2_before  # untouched

        core.patch_node("n1", {"metadata": {"labels": {MODE: "container"}}})
        assert op.wait_idle(3)
        assert deploy_labels(apiserver, "n1") == labels_for(release, "container")
        pods = component_pods(apiserver, "n1")
        assert "vfio-manager" not in pods and all(ready(p) for p in pods.values())
        assert pods["device-plugin"]["metadata"]["uid"] != old_uid
        assert npu_resources(apiserver, "n1") == {
            "rebellions.ai/ATOM" if release is V0_3_0 else "rebellions.ai/npu": "2"}
        assert op.errors == [] and apiserver.errors == []


def test_v0_3_0_advertises_nothing_for_a_product_its_resource_list_lacks(apiserver):
    """Chart v0.3.0's sandbox resourceList covers CA12, CA25 and CR03: a CA22 on vfio-pci is never offered."""
    apiserver.add(V0_3_0.policy(**HYBRID), o.npu_node("n1", mode="vm-passthrough", product="RBLN-CA22",
                                                      release=V0_3_0, deploy=False))
    with SimulatedOperator(apiserver, release=V0_3_0) as op:
        assert op.wait_idle(3)
        assert set(component_pods(apiserver, "n1")) == {"vfio-manager", "sandbox-device-plugin"}
        assert npu_resources(apiserver, "n1") == {}


def test_a_users_opt_out_survives_and_keeps_the_component_off(apiserver):
    node = o.npu_node("n1", deploy=False, labels={f"{DEPLOY}metrics-exporter": "false"})
    apiserver.add(o.cluster_policy(), node)
    with SimulatedOperator(apiserver) as op:
        assert op.wait_idle(3)
        assert deploy_values(apiserver, "n1")["metrics-exporter"] == "false"
        assert "metrics-exporter" not in component_pods(apiserver, "n1")


def test_old_pods_terminate_gracefully_before_replacements():
    with FakeApiServer(deletion_delay_s=0.5) as server:
        server.add(o.cluster_policy(), o.npu_node("n1"))
        with SimulatedOperator(server) as op:
            assert op.wait_idle(3)
            before = set(component_pods(server, "n1"))
            server.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "vm-passthrough"}))
            assert wait_for(lambda: "vfio-manager" in component_pods(server, "n1"))
            terminating = {c for c, p in component_pods(server, "n1").items() if p["metadata"].get("deletionTimestamp")}
            assert terminating == before
            assert wait_for(lambda: set(component_pods(server, "n1")) == {"vfio-manager", "sandbox-device-plugin"})
            # Flip back while nothing is pending: the container pods come back with new uids.
            server.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "container"}))
            assert wait_for(lambda: set(component_pods(server, "n1")) == before)
            assert op.wait_idle(3)


def test_deploy_skip_removes_every_deploy_label_and_pod(apiserver, core):
    apiserver.add(o.cluster_policy(), o.npu_node("n1"))
    with SimulatedOperator(apiserver) as op:
        op.wait_idle(3)
        core.patch_node("n1", {"metadata": {"labels": {"rebellions.ai/npu.deploy.skip": "true"}}})
        assert op.wait_idle(3)
        assert deploy_labels(apiserver, "n1") == {"rebellions.ai/npu.deploy.skip"}
        assert component_pods(apiserver, "n1") == {} and npu_resources(apiserver, "n1") == {}
        assert op.converged_modes["n1"] == "skip"
        core.patch_node("n1", {"metadata": {"labels": {"rebellions.ai/npu.deploy.skip": None}}})
        assert op.wait_idle(3)
        assert deploy_labels(apiserver, "n1") == labels_for(NEWER, "container")
        assert npu_resources(apiserver, "n1") == {"rebellions.ai/npu": "2"}


def test_policy_default_dra_and_unknown_label_value(apiserver):
    apiserver.add(o.cluster_policy(workload_type="vm-passthrough", dra=True, sandbox=False, device_plugin=False),
                  o.npu_node("n1", mode=None, deploy=False), o.npu_node("n2", mode="bogus", deploy=False))
    op = SimulatedOperator(apiserver, auto=False).start()
    try:
        for _ in range(3):
            op.step()  # auto=False: each step() is one reconcile
        for n in ("n1", "n2"):
            assert deploy_labels(apiserver, n) == labels_for(NEWER, "vm-passthrough")
            assert set(component_pods(apiserver, n)) == {"vfio-manager", "dra-kubelet-plugin"}
            assert npu_resources(apiserver, n) == {}  # DRA publishes ResourceSlices, not extended resources
        slices = {s["spec"]["nodeName"]: s for s in apiserver.list("ResourceSlice")}
        assert [d["name"] for d in slices["n1"]["spec"]["devices"]] == ["vfio-0000-3b-00-0", "vfio-0000-3b-01-0"]
        # auto=False: label changes wait for step().
        apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "container"}))
        assert deploy_labels(apiserver, "n1") == labels_for(NEWER, "vm-passthrough")
        op.step()
        op.step()
        assert deploy_labels(apiserver, "n1") == labels_for(NEWER, "container")
        assert "device-plugin" not in component_pods(apiserver, "n1")  # disabled in the policy
        slices = {s["spec"]["nodeName"]: s for s in apiserver.list("ResourceSlice")}
        assert [d["name"] for d in slices["n1"]["spec"]["devices"]] == ["rbln0", "rbln1"]
    finally:
        op.stop()


def test_losing_the_nfd_label_clears_the_node(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node("n1"))
    with SimulatedOperator(apiserver) as op:
        op.wait_idle(3)
        apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].pop(
            "feature.node.kubernetes.io/pci-1200_1eff.present"))
        assert op.wait_idle(3)
        labels = apiserver.get("Node", "n1")["metadata"]["labels"]
        assert labels["rebellions.ai/npu.present"] == "false" and deploy_labels(apiserver, "n1") == set()
        assert component_pods(apiserver, "n1") == {}


def test_roll_replaces_a_component_pod(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node("n1", mode="vm-passthrough"))
    with SimulatedOperator(apiserver) as op:
        assert op.wait_idle(3)
        uid = component_pods(apiserver, "n1")["sandbox-device-plugin"]["metadata"]["uid"]
        op.roll("n1", "sandbox-device-plugin")
        assert op.wait_idle(3)
        assert component_pods(apiserver, "n1")["sandbox-device-plugin"]["metadata"]["uid"] != uid


def test_stop_cancels_pending_readiness(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node("n1"))
    op = SimulatedOperator(apiserver, ready_delay_s=5).start()
    assert not op.wait_idle(0.1)  # readiness timers pending
    op.stop()
    assert not any(ready(p) for p in component_pods(apiserver, "n1").values())
    # stop() joined the worker and unsubscribed: nothing is left that could reconcile this change.
    assert not [t for t in threading.enumerate() if t.name == "simulated-operator" and t.is_alive()]
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "vm-passthrough"}))
    assert op.wait_idle(0)  # nothing queued: the change reached no reconciler
    assert "vfio-manager" not in component_pods(apiserver, "n1")
    assert deploy_labels(apiserver, "n1") == labels_for(NEWER, "container")  # the container labels stay


def test_a_policy_switching_sandbox_and_dra_rolls_the_vm_plugins(apiserver):
    """The simulated operator follows sandboxDevicePlugin / draKubeletPlugin on vm-passthrough nodes: the old
    plugin's pod and output go, the new one's come; the DRA DeviceClasses live while draKubeletPlugin is on."""
    apiserver.add(NEWER.policy(vfio_manager=True, sandbox=True), o.npu_node("n1", mode="vm-passthrough"))
    op = SimulatedOperator(apiserver, auto=False, release=NEWER).start()
    try:
        for _ in range(3):
            op.step()
        assert set(component_pods(apiserver, "n1")) == {"vfio-manager", "sandbox-device-plugin"}
        assert npu_resources(apiserver, "n1") == {"rebellions.ai/RBLN-CA22_PF": "2"}
        assert apiserver.list("DeviceClass") == []
        apiserver.mutate("RBLNClusterPolicy", "rbln-cluster-policy", fn=lambda p: p["spec"].update(
            {"sandboxDevicePlugin": {"enabled": False}, "draKubeletPlugin": {"enabled": True}}))
        for _ in range(3):
            op.step()
        assert set(component_pods(apiserver, "n1")) == {"vfio-manager", "dra-kubelet-plugin"}
        assert npu_resources(apiserver, "n1") == {}
        assert sorted(d["metadata"]["name"] for d in apiserver.list("DeviceClass")) == [
            "npu.rebellions.ai", "vfio-npu.rebellions.ai"]
        apiserver.mutate("RBLNClusterPolicy", "rbln-cluster-policy", fn=lambda p: p["spec"].update(
            {"sandboxDevicePlugin": {"enabled": True}, "draKubeletPlugin": {"enabled": False}}))
        for _ in range(3):
            op.step()
        assert set(component_pods(apiserver, "n1")) == {"vfio-manager", "sandbox-device-plugin"}
        assert npu_resources(apiserver, "n1") == {"rebellions.ai/RBLN-CA22_PF": "2"}
        assert apiserver.list("DeviceClass") == [] and apiserver.list("ResourceSlice") == []
    finally:
        op.stop()


def test_device_classes_the_operator_did_not_make_are_left_alone(apiserver):
    apiserver.add(o.cluster_policy(dra=False), o.deviceclass("npu.rebellions.ai"))
    with SimulatedOperator(apiserver, auto=False) as op:
        op.step()
        assert [d["metadata"]["name"] for d in apiserver.list("DeviceClass")] == ["npu.rebellions.ai"]


@pytest.mark.parametrize("auto", [False, True], ids=["stepped", "auto"])
def test_a_lagging_kubelet_reports_the_old_plugins_resource_for_n_more_reconciles(apiserver, auto):
    """kubelet_lag_steps=2: the sandbox plugin's pod goes with the switch to DRA, its resource two reconciles later
    (capacity and allocatable alike). In auto mode the operator reconciles the lagging node again by itself."""
    apiserver.add(NEWER.policy(vfio_manager=True, sandbox=True), o.npu_node("n1", mode="vm-passthrough"))
    op = SimulatedOperator(apiserver, auto=auto, release=NEWER, kubelet_lag_steps=2).start()
    try:
        for _ in range(3):
            op.step()
        assert npu_resources(apiserver, "n1") == {"rebellions.ai/RBLN-CA22_PF": "2"} and op.lagging == {}
        seen = []  # what the kubelet reported late, at each change
        apiserver.on_change(lambda _ev, _obj: seen.append(dict(op.lagging)) if op.lagging else None)
        apiserver.mutate("RBLNClusterPolicy", "rbln-cluster-policy", fn=lambda p: p["spec"].update(
            {"sandboxDevicePlugin": {"enabled": False}, "draKubeletPlugin": {"enabled": True}}))
        if auto:
            assert wait_for(lambda: npu_resources(apiserver, "n1") == {}) and op.wait_idle(3)
            assert seen and all(v in (0, 1) for lag in seen for v in lag.values())
        else:
            op.step()
            assert "sandbox-device-plugin" not in component_pods(apiserver, "n1")
            assert npu_resources(apiserver, "n1") == {"rebellions.ai/RBLN-CA22_PF": "2"}
            assert op.lagging == {("n1", "rebellions.ai/RBLN-CA22_PF"): 1}
            op.step()
            assert npu_resources(apiserver, "n1") == {"rebellions.ai/RBLN-CA22_PF": "2"}
            op.step()
            assert npu_resources(apiserver, "n1") == {}
        assert "rebellions.ai/RBLN-CA22_PF" not in apiserver.get("Node", "n1")["status"]["capacity"]
        assert op.lagging == {} and op.errors == []
    finally:
        op.stop()
