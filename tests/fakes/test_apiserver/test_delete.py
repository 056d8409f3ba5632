"""Deletion: answers per kind, preconditions, graceful pod deletion, finalizers."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.test_apiserver.helpers import KV, err_body, raw


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


def test_delete_preconditions_conflict_with_the_message_of_before_delete(apiserver, core):
    apiserver.add(o.pod("default", "p"))
    pod = apiserver.get("Pod", "p", "default")
    uid, rv = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
    for pre, why in ((client.V1Preconditions(uid="0000"),
                      f"the UID in the precondition (0000) does not match the UID in record ({uid}). "
                      "The object might have been deleted and then recreated"),
                     (client.V1Preconditions(resource_version="1"),
                      f"the ResourceVersion in the precondition (1) does not match the ResourceVersion in record "
                      f"({rv}). The object might have been modified")):
        with pytest.raises(ApiException) as exc:
            core.delete_namespaced_pod("p", "default", body=client.V1DeleteOptions(preconditions=pre))
        assert exc.value.status == 409
        assert err_body(exc.value)["message"] == f'Operation cannot be fulfilled on Pod "p": {why}'
        assert err_body(exc.value)["details"] == {"name": "p", "kind": "Pod"}
    core.delete_namespaced_pod("p", "default", body=client.V1DeleteOptions(
        preconditions=client.V1Preconditions(uid=uid, resource_version=rv)))
    assert apiserver.get("Pod", "p", "default") is None


def test_a_delete_with_a_body_ignores_the_querys_dry_run(apiserver):
    """kube-apiserver takes a DELETE's options from its body when there is one (measured on v1.36.2)."""
    from tests.fakes.test_apiserver.helpers import raw

    apiserver.add(o.lease("default", "a"), o.lease("default", "b"))
    status, _, _ = raw(apiserver, "DELETE", "/apis/coordination.k8s.io/v1/namespaces/default/leases/a?dryRun=All",
                       {"kind": "DeleteOptions", "apiVersion": "v1"})
    assert status == 200 and apiserver.get("Lease", "a", "default") is None
    status, _, _ = raw(apiserver, "DELETE", "/apis/coordination.k8s.io/v1/namespaces/default/leases/b?dryRun=All")
    assert status == 200 and apiserver.get("Lease", "b", "default") is not None
    assert [r.dry_run for r in apiserver.writes()] == [False, True]
