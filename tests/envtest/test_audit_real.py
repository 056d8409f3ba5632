"""The audit trail on both API servers: rblnctl's Events are what kube-apiserver accepts, and `node history` reads
them back through the field selectors the real server serves.

Each scenario runs on the fake and on a real kube-apiserver (the `backend` fixture); the real one also shows the
same Events through the core v1 API, as `kubectl describe node` and `kubectl events` read them (the fake keeps the
two APIs apart: docs/testing.md).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.cluster.client import ApiFailure
from tests.fakes import objects as o

EVENTS_V1 = "/apis/events.k8s.io/v1/namespaces/default/events"


def whoami(b) -> str:
    reply = b.api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    return reply["status"]["userInfo"]["username"]


def rblnctl_events(b, node: str) -> list[dict]:
    sel = f"regarding.kind=Node,regarding.name={node},reportingController=rblnctl"
    return b.api.request("GET", EVENTS_V1, query={"fieldSelector": sel})["items"]


def test_a_drain_leaves_events_the_server_takes_and_node_history_reads_back(backend):
    backend.api.seed(o.cluster_policy(), o.npu_node("n1"), o.npu_node("n2"))
    r = backend.rblnctl("node", "drain", "n1", "--yes")
    assert r.exit_code == 0, r.stderr
    assert "could not record Event" not in r.stderr
    reasons = sorted(e["reason"] for e in rblnctl_events(backend, "n1"))
    assert reasons == ["DrainStarted", "Drained"] and rblnctl_events(backend, "n2") == []
    uid = backend.api.get("Node", "n1")["metadata"]["uid"]
    assert {e["regarding"]["uid"] for e in rblnctl_events(backend, "n1")} == {uid}
    r = backend.rblnctl("node", "history", "n1", "-o", "json")
    assert r.exit_code == 0, r.stderr
    (item,) = json.loads(r.stdout)["items"]
    assert (item["action"], item["result"], item["user"], item["source"]) == ("drain", "done", whoami(backend),
                                                                              "events")


@pytest.mark.parametrize("missing", ["reportingController", "reportingInstance", "action", "reason", "eventTime"])
def test_both_servers_refuse_an_event_without_what_events_k8s_io_requires(backend, missing):
    body = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "n1.x", "namespace": "default"},
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": "n1"}, "eventTime": "2026-12-02T10:00:00.000000Z",
            "reportingController": "rblnctl", "reportingInstance": "rblnctl@test", "action": "Drain",
            "reason": "DrainStarted", "type": "Normal", "note": "draining"}
    del body[missing]
    with pytest.raises(ApiFailure) as err:
        backend.api.request("POST", EVENTS_V1, body)
    assert err.value.status == 422 and f"{missing}: Required value" in str(err.value)


def test_an_event_about_a_node_lives_in_default_on_both_servers(backend):
    body = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "n1.y", "namespace": "vms"},
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": "n1"}, "eventTime": "2026-12-02T10:00:00.000000Z",
            "reportingController": "rblnctl", "reportingInstance": "rblnctl@test", "action": "Drain",
            "reason": "DrainStarted", "type": "Normal"}
    with pytest.raises(ApiFailure) as err:
        backend.api.request("POST", "/apis/events.k8s.io/v1/namespaces/vms/events", body)
    assert err.value.status == 422
    assert 'involvedObject.namespace: Invalid value: "": does not match event.namespace' in str(err.value)


def test_kubectl_describe_node_shows_the_switch_events(real):
    """The real server serves the events.k8s.io Events as core v1 ones too: `kubectl describe node` (which looks
    them up by the node's uid) and `kubectl get events` show who switched the node."""
    real.api.seed(o.cluster_policy(), o.npu_node("n1"))
    r = real.rblnctl("node", "drain", "n1", "--yes")
    assert r.exit_code == 0, r.stderr
    core = real.api.request("GET", "/api/v1/namespaces/default/events",
                            query={"fieldSelector": "involvedObject.name=n1,reportingComponent=rblnctl"})["items"]
    assert sorted(e["reason"] for e in core) == ["DrainStarted", "Drained"]
    assert all(e["message"].endswith(f"(by {whoami(real)})") for e in core)
    out = subprocess.run(["kubectl", "--kubeconfig", str(real.kubeconfig), "describe", "node", "n1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    events = out.stdout[out.stdout.index("Events:"):]
    assert "Drained" in events and "rblnctl" in events and "drained node n1" in events
