"""coordination.k8s.io/v1 Leases: the optimistic concurrency leader election relies on."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.test_apiserver.helpers import err_body, raw


@pytest.fixture
def leases(api):
    return client.CoordinationV1Api(api)


def test_leases_are_served_namespaced_without_status(apiserver):
    _, body, _ = raw(apiserver, "GET", "/apis/coordination.k8s.io/v1")
    assert [(r["name"], r["namespaced"], r["kind"]) for r in body["resources"]] == [("leases", True, "Lease")]


def test_create_twice_is_409_already_exists(apiserver, leases):
    made = leases.create_namespaced_lease("kube-system", o.lease("kube-system", "rblnctl", holder="a"))
    assert made.spec.holder_identity == "a" and made.metadata.resource_version
    with pytest.raises(ApiException) as exc:
        leases.create_namespaced_lease("kube-system", o.lease("kube-system", "rblnctl", holder="b"))
    body = err_body(exc.value)
    assert exc.value.status == 409 and body["reason"] == "AlreadyExists"
    assert body["message"] == 'leases.coordination.k8s.io "rblnctl" already exists'
    assert body["details"] == {"name": "rblnctl", "group": "coordination.k8s.io", "kind": "leases"}
    assert apiserver.get("Lease", "rblnctl", "kube-system")["spec"]["holderIdentity"] == "a"


def test_update_and_patch_from_a_stale_read_conflict(apiserver, leases):
    apiserver.add(o.lease("kube-system", "rblnctl", holder="a"))
    mine = leases.read_namespaced_lease("rblnctl", "kube-system")
    theirs = leases.read_namespaced_lease("rblnctl", "kube-system")
    theirs.spec.holder_identity, theirs.spec.lease_transitions = "b", 1
    leases.replace_namespaced_lease("rblnctl", "kube-system", theirs)  # b takes over first
    mine.spec.holder_identity = "c"
    with pytest.raises(ApiException) as exc:
        leases.replace_namespaced_lease("rblnctl", "kube-system", mine)
    assert exc.value.status == 409 and err_body(exc.value)["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "rblnctl": the object has been modified; '
        "please apply your changes to the latest version and try again")
    with pytest.raises(ApiException) as exc:
        leases.patch_namespaced_lease("rblnctl", "kube-system", {
            "metadata": {"resourceVersion": mine.metadata.resource_version}, "spec": {"holderIdentity": "c"}})
    assert exc.value.status == 409 and err_body(exc.value)["reason"] == "Conflict"
    assert apiserver.get("Lease", "rblnctl", "kube-system")["spec"]["holderIdentity"] == "b"


def test_delete_with_uid_and_resource_version_preconditions(apiserver, leases):
    apiserver.add(o.lease("kube-system", "rblnctl", holder="a"))
    md = apiserver.get("Lease", "rblnctl", "kube-system")["metadata"]
    stale = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=md["uid"], resource_version="1"))
    with pytest.raises(ApiException) as exc:
        leases.delete_namespaced_lease("rblnctl", "kube-system", body=stale)
    body = err_body(exc.value)
    assert exc.value.status == 409 and body["message"].startswith(
        'Operation cannot be fulfilled on Lease.coordination.k8s.io "rblnctl": the ResourceVersion in the '
        "precondition (1) does not match")
    assert body["details"] == {"name": "rblnctl", "group": "coordination.k8s.io", "kind": "Lease"}
    fresh = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=md["uid"],
                                                                        resource_version=md["resourceVersion"]))
    leases.delete_namespaced_lease("rblnctl", "kube-system", body=fresh)
    assert apiserver.requests[-1].status == 200 and apiserver.get("Lease", "rblnctl", "kube-system") is None
