"""RBAC enforcement (enforce_rbac) and SelfSubjectAccessReviews, through the real client."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.test_apiserver.helpers import KV, err_body, raw

R = o.policy_rule


def forbidden(call, *args, **kwargs) -> dict:
    with pytest.raises(ApiException) as exc:
        call(*args, **kwargs)
    assert exc.value.status == 403
    return err_body(exc.value)


def test_a_cluster_role_allows_its_verbs_and_nothing_else(apiserver, core):
    apiserver.add(o.node("n1"), o.pod("default", "p"))
    apiserver.enforce_rbac([o.cluster_role("node-reader", R(["get", "list", "watch"], ["nodes"]))])
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    assert core.read_node("n1").metadata.name == "n1"
    assert forbidden(core.patch_node, "n1", {"spec": {"unschedulable": True}}) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'nodes "n1" is forbidden: User "fake-user" cannot patch resource "nodes" in API group "" '
                   "at the cluster scope",
        "reason": "Forbidden", "details": {"name": "n1", "kind": "nodes"}, "code": 403}
    assert forbidden(core.list_pod_for_all_namespaces)["message"] == (
        'pods is forbidden: User "fake-user" cannot list resource "pods" in API group "" at the cluster scope')
    assert not apiserver.get("Node", "n1")["spec"].get("unschedulable")


def test_every_user_may_discover_and_read_version_and_health(apiserver, api):
    apiserver.enforce_rbac([])
    for path in ("/api", "/api/v1", "/apis", "/apis/apps/v1", "/version", "/healthz", "/readyz"):
        assert raw(apiserver, "GET", path)[0] == 200, path
    assert client.VersionApi(api).get_code().git_version == "v1.34.1"
    status, body, _ = raw(apiserver, "GET", "/metrics")  # refused before anyone looks whether it exists
    assert (status, body["message"], body["details"]) == (403, 'forbidden: User "fake-user" cannot get path "/metrics"',
                                                          {})
    apiserver.enforce_rbac([o.cluster_role("metrics", R(["get"], urls=["/metrics"]))])
    assert raw(apiserver, "GET", "/metrics")[0] == 404  # now allowed, and not served
    assert raw(apiserver, "POST", "/api", {})[0] == 403  # discovery is get only


def test_a_role_applies_only_in_its_namespace(apiserver, core):
    apiserver.add(o.pod("ns1", "a", node="n1"), o.pod("ns2", "b", node="n1"))
    apiserver.enforce_rbac([o.role("ns1", "drainer", R(["get", "list"], ["pods"]), R(["create"], ["pods/eviction"]))])
    assert [p.metadata.name for p in core.list_namespaced_pod("ns1").items] == ["a"]
    assert forbidden(core.list_namespaced_pod, "ns2")["message"] == (
        'pods is forbidden: User "fake-user" cannot list resource "pods" in API group "" in the namespace "ns2"')
    assert "at the cluster scope" in forbidden(core.list_pod_for_all_namespaces)["message"]
    assert forbidden(core.read_namespaced_pod_status, "b", "ns2")["details"] == {"name": "b", "kind": "pods"}
    core.create_namespaced_pod_eviction("a", "ns1", client.V1Eviction(metadata=client.V1ObjectMeta(name="a")))
    assert apiserver.get("Pod", "a", "ns1") is None
    body = forbidden(core.create_namespaced_pod_eviction, "b", "ns2",
                     client.V1Eviction(metadata=client.V1ObjectMeta(name="b")))
    assert 'cannot create resource "pods/eviction"' in body["message"]


def test_resource_names_subresources_groups_and_wildcards(apiserver, core, custom):
    apiserver.add(o.node("n1"), o.node("n2"), o.kubevirt())
    apiserver.enforce_rbac([
        o.cluster_role("one-node", R(["get", "patch"], ["nodes"], names=["n1"])),
        o.cluster_role("statuses", R(["patch"], ["*/status"])),
        o.cluster_role("kubevirt-admin", R(["*"], ["*"], groups=["kubevirt.io"])),
    ])
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert forbidden(core.patch_node, "n2", {"metadata": {"labels": {"a": "b"}}})["message"].startswith(
        'nodes "n2" is forbidden: User "fake-user" cannot patch resource "nodes"')
    assert "cannot list" in forbidden(core.list_node)["message"]  # resourceNames never grant a list
    core.patch_node_status("n2", {"status": {"capacity": {"rebellions.ai/npu": "2"}}})  # */status
    custom.patch_namespaced_custom_object(*KV, {"spec": {"imagePullPolicy": "Always"}})
    assert forbidden(core.list_namespaced_pod, "kubevirt")["details"] == {"kind": "pods"}
    apiserver.allow_all()
    assert len(core.list_node().items) == 2


def test_forbid_still_denies_under_enforcement(apiserver, core):
    apiserver.add(o.node("n1"))
    apiserver.enforce_rbac([o.cluster_role("admin", R(["*"], ["*"], groups=["*"]))])
    apiserver.forbid("list", "nodes")
    assert forbidden(core.list_node)["message"].startswith("nodes is forbidden")
    assert core.read_node("n1").metadata.name == "n1"


def test_enforce_rbac_takes_roles_only(apiserver):
    with pytest.raises(ValueError):
        apiserver.enforce_rbac([o.node("n1")])


# --- SelfSubjectAccessReview --------------------------------------------------------------------


def review(api, **spec) -> dict:
    out = client.AuthorizationV1Api(api).create_self_subject_access_review(
        {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec})
    return out.to_dict()["status"] if hasattr(out, "to_dict") else out["status"]


def test_access_reviews_answer_from_the_enforced_rules(apiserver, api):
    assert review(api, resourceAttributes={"verb": "delete", "resource": "nodes"})["allowed"] is True  # no rules
    apiserver.enforce_rbac([o.cluster_role("node-reader", R(["list"], ["nodes"])),
                            o.role("ns1", "evictor", R(["create"], ["pods/eviction"]))])
    allowed = review(api, resourceAttributes={"verb": "list", "resource": "nodes"})
    assert allowed["allowed"] is True and allowed["reason"] == (
        'RBAC: allowed by ClusterRoleBinding "node-reader" of ClusterRole "node-reader" to User "fake-user"')
    assert review(api, resourceAttributes={"verb": "delete", "resource": "nodes"}) == {
        "allowed": False, "denied": None, "evaluation_error": None, "reason": None}
    evict = {"verb": "create", "resource": "pods", "subresource": "eviction"}
    assert review(api, resourceAttributes={**evict, "namespace": "ns1"})["reason"] == (
        'RBAC: allowed by RoleBinding "evictor/ns1" of Role "evictor" to User "fake-user"')
    assert review(api, resourceAttributes={**evict, "namespace": "ns2"})["allowed"] is False
    assert review(api, nonResourceAttributes={"verb": "get", "path": "/version"})["allowed"] is True
    assert review(api, nonResourceAttributes={"verb": "get", "path": "/metrics"})["allowed"] is False
    apiserver.forbid("list", "nodes")
    assert review(api, resourceAttributes={"verb": "list", "resource": "nodes"})["denied"] is True


def test_an_access_review_needs_exactly_one_kind_of_attributes(apiserver):
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    status, body, _ = raw(apiserver, "POST", path, {"kind": "SelfSubjectAccessReview", "spec": {}})
    assert status == 422 and body["message"] == (
        'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: '
        '"null": exactly one of nonResourceAttributes or resourceAttributes must be specified')
    status, body, _ = raw(apiserver, "POST", path, {"spec": {"nonResourceAttributes": {"path": "/", "verb": "get"}}})
    assert status == 201 and body["status"] == {"allowed": True} and body["kind"] == "SelfSubjectAccessReview"
    assert raw(apiserver, "GET", path)[0] == 405  # create only, as discovery says
    _, disc, _ = raw(apiserver, "GET", "/apis/authorization.k8s.io/v1")
    # both self-reviews, create only, as kube-apiserver's authorization.k8s.io/v1 discovery lists them
    assert sorted((r["name"], r["verbs"]) for r in disc["resources"]) == [
        ("selfsubjectaccessreviews", ["create"]), ("selfsubjectrulesreviews", ["create"])]


def test_protobuf_bodies_the_fake_cannot_decode_are_415(apiserver):
    pod = b"k8s\x00" + b"\x0a\x09" + b"\x0a\x02v1\x12\x03Pod" + b"\x12\x00"  # runtime.Unknown{typeMeta, raw}
    status, body, _ = raw(apiserver, "POST", "/api/v1/namespaces/default/pods", pod,
                          content_type="application/vnd.kubernetes.protobuf")
    assert status == 415 and "cannot decode protobuf v1 Pod" in body["message"]
    assert apiserver.requests[-1].body == pod and apiserver.list("Pod") == []
