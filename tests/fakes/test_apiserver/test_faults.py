"""Injected faults: Status answers, delays, dropped connections."""

from __future__ import annotations

import http.client

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
