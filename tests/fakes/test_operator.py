"""The simulated RBLN NPU operator, driven through the fake API server's HTTP API."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.operator import SimulatedOperator

NS = "rbln-system"
MODE = "rebellions.ai/npu.workload.config"
DEPLOY = "rebellions.ai/npu.deploy."
CONTAINER = {f"{DEPLOY}{c}" for c in ("driver", "device-plugin", "metrics-exporter", "rbln-daemon",
                                      "npu-feature-discovery", "operator-validator", "container-toolkit")}
VM = {f"{DEPLOY}vfio-manager", f"{DEPLOY}sandbox-device-plugin"}


@pytest.fixture
def core(apiserver):
    with client.ApiClient(client.Configuration(host=apiserver.url)) as api:
        yield client.CoreV1Api(api)


def deploy_labels(server: FakeApiServer, node: str) -> set[str]:
    return {k for k in server.get("Node", node)["metadata"]["labels"] if k.startswith(DEPLOY)}


def component_pods(server: FakeApiServer, node: str) -> dict[str, dict]:
    return {p["metadata"]["labels"]["app.kubernetes.io/component"]: p for p in server.list("Pod", NS)
            if p["spec"].get("nodeName") == node}


def ready(p: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])


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


def test_start_converges_existing_nodes(apiserver):
    apiserver.add(o.npu_node("n1", npus=4, deploy=False), o.node("cpu"))
    with SimulatedOperator(apiserver) as op:
        assert op.wait_idle(3)
        assert deploy_labels(apiserver, "n1") == CONTAINER
        assert set(component_pods(apiserver, "n1")) == {"driver", "device-plugin", "metrics-exporter", "rbln-daemon",
                                                        "npu-feature-discovery", "operator-validator",
                                                        "container-toolkit"}
        assert all(ready(p) for p in component_pods(apiserver, "n1").values())
        assert npu_resources(apiserver, "n1") == {"rebellions.ai/npu": "4"}
        assert op.converged_modes == {"n1": "container"}
        assert deploy_labels(apiserver, "cpu") == set() and component_pods(apiserver, "cpu") == {}
        dp = apiserver.get("Pod", "rbln-device-plugin-n1", NS)
        ref = dp["metadata"]["ownerReferences"][0]
        ds = apiserver.get("DaemonSet", "rbln-device-plugin", NS)
        assert (ref["kind"], ref["name"], ref["uid"]) == ("DaemonSet", "rbln-device-plugin", ds["metadata"]["uid"])
        assert ds["spec"]["template"]["spec"]["nodeSelector"] == {f"{DEPLOY}device-plugin": "true"}
        assert ds["status"]["desiredNumberScheduled"] == 1 and ds["status"]["numberReady"] == 1


def test_mode_switch_through_the_api_and_back(apiserver, core):
    apiserver.add(o.npu_node("n1", npus=2, product="RBLN-CA25"), o.npu_node("n2"))
    with SimulatedOperator(apiserver, ready_delay_s=0.5) as op:
        assert op.wait_idle(3)
        old_uid = apiserver.get("Pod", "rbln-device-plugin-n1", NS)["metadata"]["uid"]
        n2_before = apiserver.get("Node", "n2")["metadata"]["resourceVersion"]

        core.patch_node("n1", {"metadata": {"labels": {MODE: "vm-passthrough"}}})
        # The operator reacts to the PATCH; right after its reconcile the new pods exist but are not Ready.
        assert wait_for(lambda: "vfio-manager" in component_pods(apiserver, "n1"))
        assert deploy_labels(apiserver, "n1") == VM
        pods = component_pods(apiserver, "n1")
        assert set(pods) == {"vfio-manager", "sandbox-device-plugin"}
        assert not any(ready(p) for p in pods.values())
        assert "rebellions.ai/npu" not in npu_resources(apiserver, "n1")

        assert op.wait_idle(3)
        pods = component_pods(apiserver, "n1")
        assert all(ready(p) for p in pods.values())
        assert npu_resources(apiserver, "n1") == {"rebellions.ai/RBLN-CA25_PF": "2"}
        assert op.converged_modes["n1"] == "vm-passthrough"
        assert apiserver.get("Node", "n2")["metadata"]["resourceVersion"] == n2_before  # untouched
        assert apiserver.get("Pod", "rbln-device-plugin-n1", NS) is None

        core.patch_node("n1", {"metadata": {"labels": {MODE: "container"}}})
        assert op.wait_idle(3)
        assert deploy_labels(apiserver, "n1") == CONTAINER
        pods = component_pods(apiserver, "n1")
        assert "vfio-manager" not in pods and all(ready(p) for p in pods.values())
        assert pods["device-plugin"]["metadata"]["uid"] != old_uid
        assert npu_resources(apiserver, "n1") == {"rebellions.ai/npu": "2"}
        assert op.errors == [] and apiserver.errors == []


def test_old_pods_terminate_gracefully_before_replacements():
    with FakeApiServer(deletion_delay_s=0.5) as server:
        server.add(o.npu_node("n1"))
        with SimulatedOperator(server) as op:
            assert op.wait_idle(3)
            server.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "vm-passthrough"}))
            assert wait_for(lambda: "vfio-manager" in component_pods(server, "n1"))
            terminating = [p for p in component_pods(server, "n1").values() if p["metadata"].get("deletionTimestamp")]
            assert {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in terminating} == {
                c.removeprefix(DEPLOY) for c in CONTAINER}
            assert wait_for(lambda: set(component_pods(server, "n1")) == {"vfio-manager", "sandbox-device-plugin"})
            # Flip back while nothing is pending: the container pods come back with new uids.
            server.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "container"}))
            assert wait_for(lambda: set(component_pods(server, "n1")) == {c.removeprefix(DEPLOY) for c in CONTAINER})
            assert op.wait_idle(3)


def test_deploy_skip_removes_every_deploy_label_and_pod(apiserver, core):
    apiserver.add(o.npu_node("n1"))
    with SimulatedOperator(apiserver) as op:
        op.wait_idle(3)
        core.patch_node("n1", {"metadata": {"labels": {"rebellions.ai/npu.deploy.skip": "true"}}})
        assert op.wait_idle(3)
        assert deploy_labels(apiserver, "n1") == {"rebellions.ai/npu.deploy.skip"}
        assert component_pods(apiserver, "n1") == {} and npu_resources(apiserver, "n1") == {}
        assert op.converged_modes["n1"] == "skip"
        core.patch_node("n1", {"metadata": {"labels": {"rebellions.ai/npu.deploy.skip": None}}})
        assert op.wait_idle(3)
        assert deploy_labels(apiserver, "n1") == CONTAINER
        assert npu_resources(apiserver, "n1") == {"rebellions.ai/npu": "2"}


def test_policy_default_dra_and_unknown_label_value(apiserver):
    apiserver.add(o.cluster_policy(workload_type="vm-passthrough", dra=True, sandbox=False, device_plugin=False),
                  o.npu_node("n1", mode=None, deploy=False), o.npu_node("n2", mode="bogus", deploy=False))
    op = SimulatedOperator(apiserver, auto=False).start()
    try:
        for n in ("n1", "n2"):
            assert deploy_labels(apiserver, n) == {f"{DEPLOY}vfio-manager", f"{DEPLOY}dra-kubelet-plugin"}
            assert set(component_pods(apiserver, n)) == {"vfio-manager", "dra-kubelet-plugin"}
            assert npu_resources(apiserver, n) == {}  # DRA publishes ResourceSlices, not extended resources
        # auto=False: label changes wait for step().
        apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "container"}))
        assert deploy_labels(apiserver, "n1") == {f"{DEPLOY}vfio-manager", f"{DEPLOY}dra-kubelet-plugin"}
        op.step()
        assert deploy_labels(apiserver, "n1") == CONTAINER
        assert "device-plugin" not in component_pods(apiserver, "n1")  # disabled in the policy
    finally:
        op.stop()


def test_losing_the_nfd_label_clears_the_node(apiserver):
    apiserver.add(o.npu_node("n1"))
    with SimulatedOperator(apiserver) as op:
        op.wait_idle(3)
        apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].pop(
            "feature.node.kubernetes.io/pci-1200_1eff.present"))
        assert op.wait_idle(3)
        labels = apiserver.get("Node", "n1")["metadata"]["labels"]
        assert labels["rebellions.ai/npu.present"] == "false" and deploy_labels(apiserver, "n1") == set()
        assert component_pods(apiserver, "n1") == {}


def test_stop_cancels_pending_readiness(apiserver):
    apiserver.add(o.npu_node("n1"))
    op = SimulatedOperator(apiserver, ready_delay_s=5).start()
    assert not op.wait_idle(0.1)  # readiness timers pending
    op.stop()
    assert not any(ready(p) for p in component_pods(apiserver, "n1").values())
    # stop() joined the worker and unsubscribed: nothing is left that could reconcile this change.
    assert not [t for t in threading.enumerate() if t.name == "simulated-operator" and t.is_alive()]
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "vm-passthrough"}))
    assert op.wait_idle(0)  # nothing queued: the change reached no reconciler
    assert "vfio-manager" not in component_pods(apiserver, "n1")
    assert deploy_labels(apiserver, "n1") == CONTAINER  # the container-mode labels stay as they were
