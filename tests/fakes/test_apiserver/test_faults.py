"""Injected faults: Status answers, delays, dropped connections, lost replies, malformed bodies, throttling."""

from __future__ import annotations

import http.client
import json

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.test_apiserver.helpers import err_body, raw


def test_injected_status_fault_then_normal(apiserver, core):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(method="GET", path=r"/nodes/n1$", status=503, message="etcd is sad", times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            core.read_node("n1")
        assert exc.value.status == 503
        assert err_body(exc.value) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                       "message": "etcd is sad", "reason": "ServiceUnavailable", "code": 503}
    assert core.read_node("n1").metadata.name == "n1"
    assert [r.status for r in apiserver.requests] == [503, 503, 200]


def test_injected_delay_trips_client_timeout(apiserver, core):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(path="/api/v1/nodes", status=None, delay_s=0.6)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        core.read_node("n1", _request_timeout=0.2)
    assert core.read_node("n1", _request_timeout=5).metadata.name == "n1"  # times=1: used up
    # A delay within the client's timeout delays the answer; it does not replace it.
    apiserver.inject_fault(path="/api/v1/nodes", status=None, delay_s=0.2)
    apiserver.clear_requests()
    assert core.read_node("n1", _request_timeout=5).metadata.name == "n1"
    assert [(r.path, r.status) for r in apiserver.requests] == [("/api/v1/nodes/n1", 200)]


def test_injected_drop_closes_the_connection(apiserver):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(method="GET", path="nodes", drop=True)
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    conn.request("GET", "/api/v1/nodes/n1")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        conn.getresponse()
    conn.close()
    assert apiserver.requests[-1].status == 0
    assert raw(apiserver, "GET", "/api/v1/nodes/n1")[0] == 200


def test_drop_fault_surfaces_through_the_kubernetes_client(apiserver, core):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(method="PATCH", drop=True)
    with pytest.raises(urllib3.exceptions.ProtocolError) as exc:
        core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert isinstance(exc.value.args[1], http.client.RemoteDisconnected)
    assert "a" not in (apiserver.get("Node", "n1")["metadata"].get("labels") or {})


# --- lost replies: the change is made, the client cannot know -------------------------------------


def test_lost_reply_commits_the_change_then_drops_the_connection(apiserver, core):
    apiserver.add(o.node("n1"))
    seen = []
    apiserver.on_change(lambda ev, obj: seen.append((ev, obj["metadata"]["name"])))
    apiserver.inject_fault(method="PATCH", path="/nodes/n1$", lose_reply=True)
    with pytest.raises(urllib3.exceptions.ProtocolError) as exc:
        core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert isinstance(exc.value.args[1], http.client.RemoteDisconnected)
    assert apiserver.get("Node", "n1")["metadata"]["labels"]["a"] == "b"  # applied all the same
    assert seen == [("MODIFIED", "n1")]
    lost = apiserver.requests[-1]
    assert (lost.method, lost.status, lost.applied, lost.reply_lost) == ("PATCH", 200, True, True)


def test_lost_reply_of_a_create_makes_the_retry_conflict(apiserver, core):
    apiserver.inject_fault(method="POST", lose_reply=True)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    with pytest.raises(ApiException) as exc:  # the retry a client makes after an unknown outcome
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    assert exc.value.status == 409 and err_body(exc.value)["reason"] == "AlreadyExists"
    assert [(r.status, r.applied, r.reply_lost) for r in apiserver.requests] == [(201, True, True), (409, True, False)]


def test_lost_reply_with_delay_commits_before_the_client_times_out(apiserver, core):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(method="PATCH", lose_reply=True, delay_s=0.6)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        core.patch_node("n1", {"spec": {"unschedulable": True}}, _request_timeout=0.2)
    assert apiserver.get("Node", "n1")["spec"]["unschedulable"] is True


def test_lose_reply_does_not_combine_with_an_answer(apiserver):
    for bad in ({"status": 500}, {"drop": True}, {"body": "x"}):
        with pytest.raises(ValueError):
            apiserver.inject_fault(lose_reply=True, **bad)


# --- malformed replies: what a proxy or a broken server sends --------------------------------------


def test_raw_body_faults_answer_exactly_those_bytes(apiserver, core):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(path="/nodes/n1$", status=502, body="<html><body>502 Bad Gateway</body></html>",
                           content_type="text/html")
    with pytest.raises(ApiException) as exc:
        core.read_node("n1")
    assert exc.value.status == 502 and exc.value.body == "<html><body>502 Bad Gateway</body></html>"
    assert exc.value.headers["Content-Type"] == "text/html"
    apiserver.inject_fault(path="/nodes/n1$", body=b'{"kind": "Node", "metadata": {"name": ')  # 200, cut short
    with pytest.raises(json.JSONDecodeError):
        core.read_node("n1")
    apiserver.inject_fault(path="/nodes/n1$", body=[{"kind": "Node"}])  # a JSON list where an object belongs
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    conn.request("GET", "/api/v1/nodes/n1")
    resp = conn.getresponse()
    assert (resp.status, resp.getheader("Content-Type")) == (200, "application/json")
    assert resp.read() == b'[{"kind": "Node"}]'
    conn.close()
    assert [(r.status, r.applied) for r in apiserver.requests] == [(502, False), (200, False), (200, False)]
    assert core.read_node("n1").metadata.name == "n1"  # each fault was used once


# --- throttling -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "reason"), [(429, "TooManyRequests"), (503, "ServiceUnavailable")])
def test_throttling_sends_retry_after_header_and_details(apiserver, core, code, reason):
    apiserver.inject_fault(path="/api/v1/nodes", status=code, message="please try again later", retry_after_s=3)
    with pytest.raises(ApiException) as exc:
        core.list_node()
    assert exc.value.status == code and exc.value.headers["Retry-After"] == "3"
    assert err_body(exc.value) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                   "message": "please try again later", "reason": reason,
                                   "details": {"retryAfterSeconds": 3}, "code": code}


def test_priority_and_fairness_style_429_is_plain_text_with_retry_after(apiserver):
    # The max-in-flight and APF filters answer with http.Error, not a Status
    # (k8s.io/apiserver/pkg/server/filters/maxinflight.go tooManyRequests).
    apiserver.inject_fault(status=429, body="Too many requests, please try again later.\n",
                           content_type="text/plain; charset=utf-8", retry_after_s=1)
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    conn.request("GET", "/api/v1/nodes")
    resp = conn.getresponse()
    assert (resp.status, resp.getheader("Retry-After"), resp.read()) == (
        429, "1", b"Too many requests, please try again later.\n")
    conn.close()
