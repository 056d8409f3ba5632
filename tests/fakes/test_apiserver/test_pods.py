"""Pods as a kubelet and the scheduler move them: the kubelet hook, phases, logs, binding, FailedScheduling."""

from __future__ import annotations

import copy

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.test_apiserver.helpers import err_body, raw


def bind(core, name: str, node: str):
    """POST pods/NAME/binding. It answers a Status, as BindingREST does, which the python client
    cannot read as the V1Binding it expects: take the raw reply."""
    body = client.V1Binding(metadata=client.V1ObjectMeta(name=name), target=client.V1ObjectReference(kind="Node",
                                                                                                   name=node))
    return core.create_namespaced_pod_binding(name, "default", body, _preload_content=False)


def conditions(pod: dict) -> dict[str, tuple]:
    return {c["type"]: (c["status"], c.get("reason")) for c in pod["status"]["conditions"]}


def test_the_kubelet_runs_pods_that_land_on_a_node(apiserver, core):
    ran = []

    def kubelet(pod):  # a node agent: it sees the committed pod and starts it
        ran.append(pod["metadata"]["name"])
        assert apiserver.get("Pod", pod["metadata"]["name"], "default") is not None
        apiserver.set_pod_phase("default", pod["metadata"]["name"], "Running")

    apiserver.kubelet = kubelet
    made = core.create_namespaced_pod("default", o.pod("default", "api", node="n1"))
    assert made.status.phase == "Pending"  # the create's own answer, as the apiserver stored it
    assert apiserver.get("Pod", "api", "default")["status"]["phase"] == "Running"  # the kubelet ran before it came
    apiserver.add(o.pod("default", "seeded", node="n1"), o.pod("default", "unscheduled", phase="Pending"))
    core.patch_namespaced_pod("api", "default", {"metadata": {"labels": {"a": "b"}}})  # no new node: not again
    assert ran == ["api", "seeded"]
    bind(core, "unscheduled", "n2")
    assert ran == ["api", "seeded", "unscheduled"]
    bound = apiserver.get("Pod", "unscheduled", "default")
    assert bound["spec"]["nodeName"] == "n2" and bound["status"]["phase"] == "Running"
    assert apiserver.errors == []


def test_binding_a_pod_twice_conflicts(apiserver, core):
    apiserver.add(o.pod("default", "p", phase="Pending"))
    reply = bind(core, "p", "n1")
    assert reply.status == 201 and json.loads(reply.data) == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                              "status": "Success", "code": 201}
    assert conditions(apiserver.get("Pod", "p", "default"))["PodScheduled"] == ("True", None)
    with pytest.raises(ApiException) as exc:
        bind(core, "p", "n2")
    assert exc.value.status == 409 and err_body(exc.value)["message"] == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"')


def test_phases_look_like_a_kubelets_report(apiserver):
    apiserver.add(o.pod("default", "p", node="n1", phase="Pending"))
    pulling = apiserver.set_pod_phase("default", "p", "Pending", reason="ErrImagePull")
    waiting = pulling["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ErrImagePull" and "registry.example/app:1.0" in waiting["message"]
    assert conditions(pulling)["Ready"] == ("False", "ContainersNotReady")
    assert next(c for c in pulling["status"]["conditions"] if c["type"] == "Ready")["message"] == (
        "containers with unready status: [main]")

    running = apiserver.set_pod_phase("default", "p", "Running")
    cs = running["status"]["containerStatuses"][0]
    assert "running" in cs["state"] and cs["ready"] and cs["started"] and cs["containerID"].startswith("containerd://")
    assert set(conditions(running).values()) == {("True", None)} and running["status"]["podIP"]

    crashed = apiserver.set_pod_phase("default", "p", "Running", exit_code=1)
    cs = crashed["status"]["containerStatuses"][0]
    assert cs["restartCount"] == 1 and cs["lastState"]["terminated"]["exitCode"] == 1

    oom = apiserver.set_pod_phase("default", "p", "Failed", exit_code=137, reason="OOMKilled")
    term = oom["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (137, "OOMKilled") and oom["status"]["phase"] == "Failed"
    assert conditions(oom)["Ready"] == ("False", "PodFailed")
    done = apiserver.set_pod_phase("default", "p", "Succeeded")
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert client.V1Pod.from_dict(done).status.phase == "Succeeded"  # a valid v1 Pod all along

    apiserver.add(o.pod("default", "nowhere", phase="Pending"))
    with pytest.raises(ValueError, match="no spec.nodeName"):
        apiserver.set_pod_phase("default", "nowhere", "Running")
    with pytest.raises(ValueError, match="not a pod phase"):
        apiserver.set_pod_phase("default", "p", "Crashed")


def test_pod_logs_as_text_and_the_kubelets_refusals(apiserver, core):
    apiserver.add(o.pod("default", "web", node="n1"))
    apiserver.set_pod_log("default", "web", "one\ntwo\nthree\n")
    assert core.read_namespaced_pod_log("web", "default") == "one\ntwo\nthree\n"
    assert core.read_namespaced_pod_log("web", "default", tail_lines=1) == "three\n"
    status, _, headers = raw(apiserver, "GET", "/api/v1/namespaces/default/pods/web/log")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")

    core.create_namespaced_pod("default", o.pod("default", "new", node="n1"))  # no kubelet: Pending
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log("new", "default")
    assert exc.value.status == 400 and err_body(exc.value)["message"] == (
        'container "main" in pod "new" is waiting to start: ContainerCreating')
    apiserver.set_pod_phase("default", "new", "Pending", reason="ErrImagePull")
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log("new", "default")
    assert err_body(exc.value)["message"] == 'container "main" in pod "new" is waiting to start: image can\'t be pulled'

    two = o.pod("default", "two", node="n1")
    two["spec"]["containers"].append({"name": "side", "image": "side:1"})
    apiserver.add(two)
    apiserver.set_pod_log("default", "two", "from side\n", container="side")
    assert core.read_namespaced_pod_log("two", "default", container="side") == "from side\n"
    for container, message in ((None, "a container name must be specified for pod two, choose one of: [main side]"),
                               ("nope", "container nope is not valid for pod two")):
        with pytest.raises(ApiException) as exc:
            core.read_namespaced_pod_log("two", "default", container=container)
        assert exc.value.status == 400 and err_body(exc.value)["message"] == message

    apiserver.add(o.pod("default", "unscheduled", phase="Pending"))
    assert core.read_namespaced_pod_log("unscheduled", "default") == ""  # no node to ask
    apiserver.delete_now("Pod", "web", "default")
    apiserver.add(o.pod("default", "web", node="n1"))
    assert core.read_namespaced_pod_log("web", "default") == ""  # a new pod has a new log


def test_an_unschedulable_pod_gets_the_schedulers_condition_and_event(apiserver, core):
    apiserver.add(o.pod("default", "big", phase="Pending"))
    why = "0/3 nodes are available: 3 Insufficient rebellions.ai/npu. preemption: 0/3 nodes are available: 3 " \
          "No preemption victims found for incoming pod."
    pod = apiserver.mark_unschedulable("default", "big", why)
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == ("False", "Unschedulable", why)
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=big").items
    assert [(e.type, e.reason, e.message, e.reporting_component) for e in events] == [
        ("Warning", "FailedScheduling", why, "default-scheduler")]
    assert events[0].involved_object.uid == pod["metadata"]["uid"] and events[0].event_time


def test_an_extended_resource_needs_its_limit_and_requests_default_to_limits(apiserver):
    """As kube-apiserver validates a new pod (measured on v1.36.2): an NPU cannot be overcommitted."""
    from tests.fakes.test_apiserver.helpers import raw

    base = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {}}]}}
    body = copy.deepcopy(base)
    body["spec"]["containers"][0]["resources"] = {"requests": {"rebellions.ai/npu": "1"}}
    status, out, _ = raw(apiserver, "POST", "/api/v1/namespaces/default/pods", body)
    assert status == 422 and out["message"] == ('Pod "p" is invalid: spec.containers[0].resources.limits: '
                                                "Required value: Limit must be set for non overcommitable resources")
    body["spec"]["containers"][0]["resources"] = {"limits": {"rebellions.ai/npu": "2", "cpu": "1"}}
    status, out, _ = raw(apiserver, "POST", "/api/v1/namespaces/default/pods", body)
    assert status == 201
    assert out["spec"]["containers"][0]["resources"]["requests"] == {"rebellions.ai/npu": "2", "cpu": "1"}
    assert out["status"]["qosClass"] == "Burstable"
