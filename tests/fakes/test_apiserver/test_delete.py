"""Deletion: answers per kind, graceful pod deletion, finalizers."""

from __future__ import annotations

import time


from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.test_apiserver.helpers import KV, raw


def test_delete_returns_object_for_pods_and_status_for_nodes(apiserver, core):
    apiserver.add(o.node("n1"), o.pod("default", "p"))
    pod = core.delete_namespaced_pod("p", "default")
    assert pod.metadata.name == "p" and apiserver.get("Pod", "p", "default") is None
    status, body, _ = raw(apiserver, "DELETE", "/api/v1/nodes/n1")
    assert status == 200 and body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == "n1" and apiserver.get("Node", "n1") is None


def test_graceful_pod_deletion_with_delay():
    with FakeApiServer(deletion_delay_s=0.3) as fake:
        fake.add(o.pod("default", "p", node="n1"), o.pod("default", "unscheduled"))
        events = []
        fake.on_change(lambda ev, obj: events.append((ev, obj["metadata"]["name"])))
        status, body, _ = raw(fake, "DELETE", "/api/v1/namespaces/default/pods/p")
        assert status == 200 and body["metadata"]["deletionTimestamp"]
        assert body["metadata"]["deletionGracePeriodSeconds"] == 30
        assert fake.get("Pod", "p", "default")["metadata"]["deletionTimestamp"]
        raw(fake, "DELETE", "/api/v1/namespaces/default/pods/unscheduled")
        assert fake.get("Pod", "unscheduled", "default") is None  # never scheduled: removed at once
        deadline = time.monotonic() + 3
        while fake.get("Pod", "p", "default") is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake.get("Pod", "p", "default") is None
        assert events == [("MODIFIED", "p"), ("DELETED", "unscheduled"), ("DELETED", "p")]


def test_per_pod_deletion_delay_annotation_and_force(apiserver):
    apiserver.add(o.pod("default", "slow", node="n1", annotations={"fake.rblnctl.io/deletion-delay-s": "5"}))
    raw(apiserver, "DELETE", "/api/v1/namespaces/default/pods/slow")
    assert apiserver.get("Pod", "slow", "default")["metadata"]["deletionTimestamp"]
    raw(apiserver, "DELETE", "/api/v1/namespaces/default/pods/slow", {"gracePeriodSeconds": 0})
    assert apiserver.get("Pod", "slow", "default") is None


def test_finalizers_hold_deletion_until_removed(apiserver, custom):
    kv = o.kubevirt()
    kv["metadata"]["finalizers"] = ["foregroundDeleteKubeVirt"]
    apiserver.add(kv)
    custom.delete_namespaced_custom_object(*KV)
    assert apiserver.get("KubeVirt", "kubevirt", "kubevirt")["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(*KV, {"metadata": {"finalizers": None}})
    assert apiserver.get("KubeVirt", "kubevirt", "kubevirt") is None
