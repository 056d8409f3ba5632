"""Patches: JSON patch, merge patch, strategic merge patch, apply patch, unsupported types."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.apiserver import apply_strategic_merge_patch
from tests.fakes.test_apiserver.helpers import KV, err_body, raw


def test_json_patch_ops_and_failing_test(apiserver, core, custom):
    apiserver.add(o.node("n1", labels={"a": "1"}), o.kubevirt(feature_gates=["HostDevices"]))
    rv = apiserver.get("Node", "n1")["metadata"]["resourceVersion"]
    core.patch_node("n1", [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "x"},
        {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/copied"},
        {"op": "move", "from": "/metadata/labels/copied", "path": "/metadata/labels/moved"},
    ])
    assert apiserver.requests[-1].content_type == "application/json-patch+json"
    labels = apiserver.get("Node", "n1")["metadata"]["labels"]
    assert labels["b/c"] == "2" and labels["a"] == "x" and labels["moved"] == "x" and "copied" not in labels

    custom.patch_namespaced_custom_object(*KV, [
        {"op": "add", "path": "/spec/configuration/developerConfiguration/featureGates/-", "value": "GPU"}],
        _content_type="application/json-patch+json")
    gates = apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["developerConfiguration"]
    assert gates["featureGates"] == ["HostDevices", "GPU"]

    before = apiserver.get("Node", "n1")
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                               {"op": "add", "path": "/metadata/labels/never", "value": "1"}])
    body = err_body(exc.value)
    assert exc.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"] == "the server rejected our request due to an error in our request"
    assert "testing value /metadata/resourceVersion failed" in body["details"]["causes"][0]["message"]
    assert apiserver.get("Node", "n1") == before
    for bad in ([{"op": "remove", "path": "/metadata/labels/missing"}],
                [{"op": "replace", "path": "/spec/nothere", "value": 1}],
                [{"op": "add", "path": "/spec/no/such/parent", "value": 1}]):
        with pytest.raises(ApiException) as exc:
            core.patch_node("n1", bad)
        assert exc.value.status == 422, bad


def test_merge_patch_replaces_lists_and_deletes_with_null(apiserver, custom):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices", "Snapshot"], disabled_gates=["X"]))
    custom.patch_namespaced_custom_object(*KV, {"spec": {"configuration": {"developerConfiguration": {
        "featureGates": ["HostDevices", "HostDevicesWithDRA"], "disabledFeatureGates": None}}}})
    assert apiserver.requests[-1].content_type == "application/merge-patch+json"
    dev = apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["developerConfiguration"]
    assert dev == {"featureGates": ["HostDevices", "HostDevicesWithDRA"]}


def test_merge_patch_with_stale_resource_version_conflicts(apiserver, custom):
    apiserver.add(o.kubevirt())
    rv = apiserver.get("KubeVirt", "kubevirt", "kubevirt")["metadata"]["resourceVersion"]
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda k: k["spec"].update(imagePullPolicy="Always"))
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(*KV, {"metadata": {"resourceVersion": rv},
                                                    "spec": {"imagePullPolicy": "Never"}})
    assert exc.value.status == 409 and err_body(exc.value)["reason"] == "Conflict"
    assert apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["imagePullPolicy"] == "Always"


def test_someone_else_edits_between_get_and_patch(apiserver, custom):
    """The on_request hook changes state between the client's GET and its PATCH."""
    apiserver.add(o.kubevirt(feature_gates=["A"]))

    def meddle(req):
        if req.method == "PATCH":
            apiserver.mutate("KubeVirt", "kubevirt", "kubevirt",
                             fn=lambda k: k["spec"]["configuration"]["developerConfiguration"]["featureGates"]
                             .append("B"))

    apiserver.on_request(meddle)
    kv = custom.get_namespaced_custom_object(*KV)
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(*KV, [
            {"op": "test", "path": "/metadata/resourceVersion", "value": kv["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/spec/configuration/developerConfiguration/featureGates", "value": ["A", "C"]}],
            _content_type="application/json-patch+json")
    assert exc.value.status == 422
    gates = apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["developerConfiguration"]
    assert gates["featureGates"] == ["A", "B"]


def test_strategic_merge_patch_merges_containers_by_name(apiserver, core):
    p = o.pod("default", "p", node="n1")
    p["spec"]["containers"].append({"name": "side", "image": "side:1", "env": [{"name": "A", "value": "1"}]})
    apiserver.add(p)
    core.patch_namespaced_pod("p", "default", {"spec": {"containers": [
        {"name": "side", "image": "side:2", "env": [{"name": "B", "value": "2"}]}]},
        "metadata": {"finalizers": ["x/y"], "labels": {"l": "v"}}})
    assert apiserver.requests[-1].content_type == "application/strategic-merge-patch+json"
    stored = apiserver.get("Pod", "p", "default")
    containers = {c["name"]: c for c in stored["spec"]["containers"]}
    assert set(containers) == {"main", "side"} and containers["main"]["image"] == "registry.example/app:1.0"
    assert containers["side"]["image"] == "side:2"
    assert containers["side"]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert stored["metadata"]["finalizers"] == ["x/y"] and stored["metadata"]["labels"] == {"l": "v"}
    core.patch_namespaced_pod("p", "default", {"spec": {"containers": [{"name": "side", "$patch": "delete"}]},
                                                "metadata": {"$deleteFromPrimitiveList/finalizers": ["x/y"]}})
    stored = apiserver.get("Pod", "p", "default")
    assert [c["name"] for c in stored["spec"]["containers"]] == ["main"] and stored["metadata"]["finalizers"] == []


def test_strategic_merge_directives_unit():
    node = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}], "podCIDR": "x"},
            "metadata": {"finalizers": ["a", "b"]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Disk", "status": "False"}]}}
    out = apply_strategic_merge_patch(node, {
        "spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
        "metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]  # taints are atomic in the real API
    assert out["metadata"]["finalizers"] == ["b", "c"]
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"}, {"type": "Disk", "status": "False"}]
    replaced = apply_strategic_merge_patch(node, {"spec": {"$patch": "replace", "podCIDR": "y"}})
    assert replaced["spec"] == {"podCIDR": "y"}
    vol = {"volumes": [{"name": "v", "emptyDir": {}}]}
    out = apply_strategic_merge_patch(vol, {"volumes": [{"name": "v", "hostPath": {"path": "/x"},
                                                         "$retainKeys": ["name", "hostPath"]}]})
    assert out == {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}


def test_unsupported_patch_types_are_415(apiserver, core, custom):
    apiserver.add(o.node("n1"), o.kubevirt())
    status, body, _ = raw(apiserver, "PATCH", "/api/v1/nodes/n1", {"metadata": {}}, content_type="text/plain")
    assert status == 415 and body["reason"] == "UnsupportedMediaType"
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(*KV, {"spec": {}}, _content_type="application/strategic-merge-patch+json")
    body = err_body(exc.value)
    assert exc.value.status == 415 and body["reason"] == "UnsupportedMediaType"
    assert "strategic" not in body["message"] and "application/merge-patch+json" in body["message"]


def test_apply_patch_requires_field_manager_and_creates(apiserver, core):
    status, body, _ = raw(apiserver, "PATCH", "/api/v1/namespaces/default/configmaps/cm",
                          {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}},
                          content_type="application/apply-patch+yaml")
    assert status == 422 and "fieldManager" in body["message"]
    status, body, _ = raw(apiserver, "PATCH", "/api/v1/namespaces/default/configmaps/cm?fieldManager=t",
                          {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}},
                          content_type="application/apply-patch+yaml")
    assert status == 201 and apiserver.get("ConfigMap", "cm", "default")["data"] == {"a": "1"}
