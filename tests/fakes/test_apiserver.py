"""The fake API server against the real kubernetes client (v37) and raw HTTP."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer, Resource, apply_strategic_merge_patch

KV = ("kubevirt.io", "v1", "kubevirt", "kubevirts", "kubevirt")


@pytest.fixture
def api(apiserver):
    cfg = client.Configuration(host=apiserver.url)
    cfg.retries = False  # see each failure as it happens
    with client.ApiClient(cfg) as c:
        yield c


@pytest.fixture
def core(api):
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api):
    return client.CustomObjectsApi(api)


def raw(apiserver, method, path, body=None, content_type="application/json", headers=None):
    """(status, parsed body, response headers) for one plain HTTP request."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(apiserver.url + path, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text.strip().startswith(b"{") else text.decode(), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers


def err_body(exc: ApiException) -> dict:
    return json.loads(exc.body)


# --- discovery -------------------------------------------------------------------------------


def test_version_has_every_versioninfo_field(apiserver, api):
    for path in ("/version", "/version/"):
        status, body, headers = raw(apiserver, "GET", path)
        assert status == 200 and headers["Content-Type"] == "application/json"
        for key in ("major", "minor", "gitVersion", "gitCommit", "gitTreeState", "buildDate", "goVersion",
                    "compiler", "platform"):
            assert isinstance(body[key], str) and body[key], key
    assert body["gitVersion"] == "v1.34.1" and (body["major"], body["minor"]) == ("1", "34")
    apiserver.set_version("v1.33.2")
    info = client.VersionApi(api).get_code()
    assert (info.git_version, info.major, info.minor) == ("v1.33.2", "1", "33")


def test_core_and_group_discovery(apiserver, api):
    status, versions, _ = raw(apiserver, "GET", "/api")
    assert versions["kind"] == "APIVersions" and versions["versions"] == ["v1"]
    _, core, _ = raw(apiserver, "GET", "/api/v1")
    by_name = {r["name"]: r for r in core["resources"]}
    assert core["kind"] == "APIResourceList" and core["groupVersion"] == "v1"
    assert by_name["nodes"] == {**by_name["nodes"], "singularName": "node", "namespaced": False, "kind": "Node",
                                "shortNames": ["no"]}
    assert {"get", "list", "patch", "delete", "create", "update", "watch"} <= set(by_name["pods"]["verbs"])
    assert by_name["pods/eviction"]["group"] == "policy" and by_name["pods/eviction"]["version"] == "v1"
    assert by_name["pods/eviction"]["kind"] == "Eviction" and by_name["pods/eviction"]["verbs"] == ["create"]
    assert "nodes/status" in by_name and "pods/status" in by_name

    groups = client.ApisApi(api).get_api_versions()
    names = {g.name: g for g in groups.groups}
    for g in ("apps", "policy", "apiextensions.k8s.io", "kubevirt.io", "rebellions.ai", "nfd.k8s-sigs.io",
              "resource.k8s.io"):
        assert names[g].preferred_version.group_version == names[g].versions[0].group_version
    assert names["rebellions.ai"].preferred_version.version == "v1beta1"
    _, kv, _ = raw(apiserver, "GET", "/apis/kubevirt.io/v1")
    kubevirts = next(r for r in kv["resources"] if r["name"] == "kubevirts")
    assert kubevirts["namespaced"] and kubevirts["kind"] == "KubeVirt" and "kv" in kubevirts["shortNames"]
    _, rcp, _ = raw(apiserver, "GET", "/apis/rebellions.ai/v1beta1")
    assert next(r for r in rcp["resources"] if r["name"] == "rblnclusterpolicies")["namespaced"] is False
    _, res, _ = raw(apiserver, "GET", "/apis/resource.k8s.io/v1")
    assert {r["name"]: r["namespaced"] for r in res["resources"] if "/" not in r["name"]}["deviceclasses"] is False


def test_aggregated_discovery_request_gets_the_legacy_form(apiserver):
    accept = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")
    status, body, headers = raw(apiserver, "GET", "/apis", headers={"Accept": accept})
    assert status == 200 and body["kind"] == "APIGroupList" and headers["Content-Type"] == "application/json"


def test_openapi_and_unknown_paths_are_404_status(apiserver):
    for path in ("/openapi/v2", "/openapi/v3", "/apis/nope.io/v1", "/api/v1/widgets"):
        status, body, _ = raw(apiserver, "GET", path)
        assert status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound", path


def test_removed_resource_is_no_longer_served(apiserver, custom):
    apiserver.remove_resource("kubevirts.kubevirt.io")
    with pytest.raises(ApiException) as exc:
        custom.list_cluster_custom_object("kubevirt.io", "v1", "kubevirts")
    assert exc.value.status == 404
    _, kv, _ = raw(apiserver, "GET", "/apis/kubevirt.io/v1")
    assert "kubevirts" not in {r["name"] for r in kv["resources"]}


def test_a_created_crd_is_served(apiserver, custom, api):
    client.ApiextensionsV1Api(api).create_custom_resource_definition(o.crd("widgets", "example.com", "Widget"))
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets",
                                           {"apiVersion": "example.com/v1", "kind": "Widget",
                                            "metadata": {"name": "w"}})
    assert apiserver.get("Widget", "w", "default")["apiVersion"] == "example.com/v1"


# --- list, selectors, paging ---------------------------------------------------------------------


@pytest.fixture
def labelled_nodes(apiserver):
    apiserver.add(
        o.node("a", labels={"tier": "gpu", "zone": "z1"}),
        o.node("b", labels={"tier": "npu", "zone": "z2"}),
        o.node("c", labels={"tier": "cpu"}, unschedulable=True),
        o.node("d"),
    )


@pytest.mark.parametrize(("selector", "expected"), [
    ("tier=npu", ["b"]),
    ("tier==npu", ["b"]),
    ("tier!=npu", ["a", "c", "d"]),
    ("tier in (gpu,npu)", ["a", "b"]),
    ("tier notin (gpu, npu)", ["c", "d"]),
    ("zone", ["a", "b"]),
    ("!zone", ["c", "d"]),
    ("tier in (gpu,npu),zone=z2", ["b"]),
    ("", ["a", "b", "c", "d"]),
])
def test_label_selectors(labelled_nodes, core, selector, expected):
    assert [n.metadata.name for n in core.list_node(label_selector=selector).items] == expected


def test_bad_label_selector_is_400(labelled_nodes, core):
    with pytest.raises(ApiException) as exc:
        core.list_node(label_selector="tier in gpu")
    assert exc.value.status == 400 and err_body(exc.value)["reason"] == "BadRequest"


def test_field_selectors(labelled_nodes, apiserver, core):
    apiserver.add(o.pod("default", "p1", node="a"), o.pod("kube-system", "p2", node="b", phase="Pending"),
                  o.pod("default", "p3"))
    names = lambda pods: [p.metadata.name for p in pods.items]  # noqa: E731
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=a")) == ["p1"]
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=a")) == ["p3", "p2"]
    assert names(core.list_pod_for_all_namespaces(field_selector="status.phase==Pending")) == ["p2"]
    assert names(core.list_pod_for_all_namespaces(field_selector="metadata.namespace=default,spec.nodeName=")) == ["p3"]
    assert names(core.list_namespaced_pod("default", field_selector="metadata.name=p1")) == ["p1"]
    assert [n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=true").items] == ["c"]
    assert [n.metadata.name for n in core.list_node(field_selector="spec.unschedulable!=true").items] == ["a", "b", "d"]
    with pytest.raises(ApiException) as exc:
        core.list_node(field_selector="status.phase=Running")
    assert exc.value.status == 400 and "field label not supported: status.phase" in err_body(exc.value)["message"]


def test_list_shape_matches_a_real_server(apiserver, labelled_nodes, custom):
    status, body, _ = raw(apiserver, "GET", "/api/v1/nodes")
    assert body["kind"] == "NodeList" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"].isdigit()
    assert all("kind" not in i and "apiVersion" not in i for i in body["items"])  # built-in items: no TypeMeta
    apiserver.add(o.kubevirt())
    kvs = custom.list_cluster_custom_object("kubevirt.io", "v1", "kubevirts")
    assert kvs["kind"] == "KubeVirtList" and kvs["items"][0]["kind"] == "KubeVirt"  # CR items keep it


def test_paging_with_limit_and_continue(apiserver, core):
    apiserver.add(*(o.node(f"n{i}") for i in range(5)))
    first = core.list_node(limit=2)
    assert [n.metadata.name for n in first.items] == ["n0", "n1"]
    assert first.metadata.remaining_item_count == 3 and first.metadata._continue
    second = core.list_node(limit=2, _continue=first.metadata._continue)
    assert [n.metadata.name for n in second.items] == ["n2", "n3"] and second.metadata.remaining_item_count == 1
    third = core.list_node(limit=2, _continue=second.metadata._continue)
    assert [n.metadata.name for n in third.items] == ["n4"]
    assert third.metadata._continue is None and third.metadata.remaining_item_count is None


def test_all_namespace_list_is_ordered_by_namespace_then_name(apiserver, core):
    apiserver.add(o.pod("zeta", "a"), o.pod("alpha", "b"), o.pod("alpha", "a"))
    pods = core.list_pod_for_all_namespaces().items
    assert [(p.metadata.namespace, p.metadata.name) for p in pods] == [("alpha", "a"), ("alpha", "b"), ("zeta", "a")]
    assert {n.metadata.name for n in core.list_namespace().items} == {"alpha", "zeta"}


# --- get / create / update -----------------------------------------------------------------------


def test_get_missing_is_a_real_404_status(apiserver, core):
    status, body, headers = raw(apiserver, "GET", "/api/v1/nodes/x")
    assert status == 404 and headers["Content-Type"] == "application/json"
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": 'nodes "x" not found', "reason": "NotFound",
                    "details": {"name": "x", "kind": "nodes"}, "code": 404}
    _, body, _ = raw(apiserver, "GET", "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kv")
    assert body["message"] == 'kubevirts.kubevirt.io "kv" not found'
    assert body["details"] == {"name": "kv", "group": "kubevirt.io", "kind": "kubevirts"}
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod("p", "default")
    assert exc.value.status == 404 and err_body(exc.value)["message"] == 'pods "p" not found'


def test_create_sets_server_fields_and_rejects_duplicates(apiserver, core):
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    assert created.metadata.generation == 1 and created.metadata.namespace == "default"
    assert apiserver.requests[-1].status == 201
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    body = err_body(exc.value)
    assert exc.value.status == 409 and body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "cm" already exists' and body["details"] == {"name": "cm", "kind": "configmaps"}


def test_create_generate_name_and_namespace_checks(apiserver, core):
    made = core.create_namespaced_config_map("default", {"metadata": {"generateName": "cm-"}})
    assert made.metadata.name.startswith("cm-") and len(made.metadata.name) == 8
    assert apiserver.get("ConfigMap", made.metadata.name, "default") is not None
    status, body, _ = raw(apiserver, "POST", "/api/v1/namespaces/default/configmaps",
                          {"metadata": {"name": "x", "namespace": "other"}})
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = raw(apiserver, "POST", "/api/v1/namespaces/default/configmaps", {"metadata": {}})
    assert status == 422 and body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "metadata.name"


def test_put_with_stale_resource_version_conflicts(apiserver, custom):
    apiserver.add(o.kubevirt())
    kv = custom.get_namespaced_custom_object(*KV)
    kv["spec"]["imagePullPolicy"] = "Always"
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda k: k["metadata"].setdefault("labels", {})
                     .update({"x": "y"}))
    with pytest.raises(ApiException) as exc:
        custom.replace_namespaced_custom_object(*KV, kv)
    body = err_body(exc.value)
    assert exc.value.status == 409 and body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on kubevirts.kubevirt.io "kubevirt": the object has '
                               "been modified; please apply your changes to the latest version and try again")
    fresh = custom.get_namespaced_custom_object(*KV)
    fresh["spec"]["imagePullPolicy"] = "Always"
    out = custom.replace_namespaced_custom_object(*KV, fresh)
    assert int(out["metadata"]["resourceVersion"]) > int(fresh["metadata"]["resourceVersion"])
    assert out["metadata"]["generation"] == 2 and apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"][
        "imagePullPolicy"] == "Always"


def test_put_missing_is_404(apiserver, core):
    with pytest.raises(ApiException) as exc:
        core.replace_node("ghost", {"metadata": {"name": "ghost"}})
    assert exc.value.status == 404


def test_status_subresource_separates_spec_and_status(apiserver, core):
    apiserver.add(o.node("n1"))
    node = core.read_node("n1").to_dict()
    body = {"metadata": {"name": "n1", "labels": {"changed": "yes"}},
            "spec": {"unschedulable": True}, "status": {"allocatable": {"rebellions.ai/npu": "4"}}}
    core.patch_node("n1", body)
    stored = apiserver.get("Node", "n1")
    assert stored["spec"]["unschedulable"] is True and stored["metadata"]["labels"]["changed"] == "yes"
    assert "rebellions.ai/npu" not in stored["status"]["allocatable"]  # main resource ignores status
    core.patch_node_status("n1", body)
    stored = apiserver.get("Node", "n1")
    assert stored["status"]["allocatable"]["rebellions.ai/npu"] == "4"
    assert stored["status"]["allocatable"]["cpu"] == node["status"]["allocatable"]["cpu"]


def test_no_op_update_keeps_resource_version(apiserver, core):
    apiserver.add(o.node("n1", labels={"a": "b"}))
    rv = apiserver.get("Node", "n1")["metadata"]["resourceVersion"]
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert apiserver.get("Node", "n1")["metadata"]["resourceVersion"] == rv


# --- patches -------------------------------------------------------------------------------------


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
    assert apply_strategic_merge_patch(node, {"spec": {"$patch": "replace", "podCIDR": "y"}})["spec"] == {"podCIDR": "y"}
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


def test_generation_bumps_only_on_spec_change(apiserver, core):
    apiserver.add(o.node("n1"))
    core.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})
    assert apiserver.get("Node", "n1")["metadata"]["generation"] == 1
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    assert apiserver.get("Node", "n1")["metadata"]["generation"] == 2


# --- delete, eviction ------------------------------------------------------------------------------


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


def _eviction(name, ns="default"):
    return client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))


def test_eviction_respects_pod_disruption_budgets(apiserver, core):
    apiserver.add(o.pdb("default", "web-pdb", selector={"app": "web"}, min_available=2),
                  *(o.pod("default", f"web-{i}", node="n1", labels={"app": "web"}) for i in range(3)),
                  o.pod("default", "other", node="n1"))
    core.create_namespaced_pod_eviction("web-0", "default", _eviction("web-0"))
    assert apiserver.requests[-1].status == 201 and apiserver.get("Pod", "web-0", "default") is None
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("web-1", "default", _eviction("web-1"))
    body = err_body(exc.value)
    assert exc.value.status == 429 and body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget",
                                          "message": "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}]
    assert apiserver.get("Pod", "web-1", "default") is not None
    core.create_namespaced_pod_eviction("other", "default", _eviction("other"))  # no PDB covers it
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("ghost", "default", _eviction("ghost"))
    assert exc.value.status == 404 and err_body(exc.value)["message"] == 'pods "ghost" not found'


def test_eviction_max_unavailable_percent_and_unready_pods(apiserver, core):
    owned = dict(labels={"app": "db"}, owner_kind="ReplicaSet", owner_name="db")
    apiserver.add(o.replicaset("default", "db", labels={"app": "db"}, replicas=4),
                  o.pdb("default", "pdb", selector={"app": "db"}, max_unavailable="50%"),
                  o.pod("default", "db-0", node="n1", **owned),
                  o.pod("default", "db-1", node="n1", ready=False, **owned),
                  o.pod("default", "db-2", node="n1", **owned),
                  o.pod("default", "db-3", node="n1", **owned))
    # Scale 4 (from the ReplicaSet), maxUnavailable 50% -> 2 must stay healthy; 3 are healthy now.
    core.create_namespaced_pod_eviction("db-1", "default", _eviction("db-1"))  # unready pod may go
    core.create_namespaced_pod_eviction("db-0", "default", _eviction("db-0"))
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("db-2", "default", _eviction("db-2"))
    assert exc.value.status == 429
    assert "needs 2 healthy pods and has 2 currently" in err_body(exc.value)["details"]["causes"][0]["message"]


def test_eviction_hook_and_forbidden_eviction(apiserver, core):
    apiserver.add(o.pod("default", "p", node="n1"))
    apiserver.eviction_hook = lambda pod, body: (429, "not now") if pod["metadata"]["name"] == "p" else None
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("p", "default", _eviction("p"))
    assert exc.value.status == 429 and err_body(exc.value)["message"] == "not now"
    apiserver.eviction_hook = None
    apiserver.forbid("create", "pods/eviction", namespace="default")
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("p", "default", _eviction("p"))
    body = err_body(exc.value)
    assert exc.value.status == 403
    assert body["message"] == ('pods "p" is forbidden: User "fake-user" cannot create resource "pods/eviction" '
                               'in API group "" in the namespace "default"')
    assert apiserver.get("Pod", "p", "default") is not None


def test_graceful_eviction_keeps_pod_until_delay():
    with FakeApiServer(deletion_delay_s=0.2) as fake:
        fake.add(o.pod("default", "p", node="n1"))
        status, body, _ = raw(fake, "POST", "/api/v1/namespaces/default/pods/p/eviction",
                              {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}})
        assert status == 201 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                          "status": "Success", "code": 201}
        assert fake.get("Pod", "p", "default")["metadata"]["deletionTimestamp"]
        deadline = time.monotonic() + 5  # a bound for a slow machine, not the expected time
        while fake.get("Pod", "p", "default") is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake.get("Pod", "p", "default") is None


def test_dry_run_all_changes_nothing(apiserver, core, custom):
    apiserver.add(o.node("n1"), o.pod("default", "p", node="n1"), o.kubevirt())
    before = {k: apiserver.list(k) for k in ("Node", "Pod", "KubeVirt", "ConfigMap")}
    rv_before = apiserver.get("Node", "n1")["metadata"]["resourceVersion"]
    out = core.patch_node("n1", {"spec": {"unschedulable": True}}, dry_run="All")
    assert out.spec.unschedulable is True
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}}, dry_run="All")
    core.delete_namespaced_pod("p", "default", dry_run="All")
    core.create_namespaced_pod_eviction("p", "default", client.V1Eviction(
        metadata=client.V1ObjectMeta(name="p"), delete_options=client.V1DeleteOptions(dry_run=["All"])))
    custom.patch_namespaced_custom_object(*KV, {"spec": {"imagePullPolicy": "Never"}}, dry_run="All")
    assert {k: apiserver.list(k) for k in before} == before
    assert apiserver.get("Node", "n1")["metadata"]["resourceVersion"] == rv_before
    dry = [r for r in apiserver.writes() if r.dry_run]
    assert [r.method for r in dry] == ["PATCH", "POST", "DELETE", "POST", "PATCH"]
    assert dry[3].body["deleteOptions"]["dryRun"] == ["All"]  # eviction: dry run in the body
    assert all(r.query["dryRun"] == ["All"] for r in dry if r is not dry[3])


# --- faults, auth, request log ----------------------------------------------------------------------


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


def test_forbid_list_nodes_matches_real_message(apiserver, core, custom):
    apiserver.forbid("list", "nodes")
    with pytest.raises(ApiException) as exc:
        core.list_node()
    assert exc.value.status == 403
    assert err_body(exc.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'nodes is forbidden: User "fake-user" cannot list resource "nodes" in API group "" at the cluster scope',
        "reason": "Forbidden", "details": {"kind": "nodes"}, "code": 403}
    apiserver.add(o.node("n1"), o.kubevirt())
    assert core.read_node("n1").metadata.name == "n1"  # only list is forbidden
    apiserver.forbid("patch", "kubevirts.kubevirt.io", namespace="kubevirt")
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(*KV, {"spec": {}})
    body = err_body(exc.value)
    assert body["message"] == ('kubevirts.kubevirt.io "kubevirt" is forbidden: User "fake-user" cannot patch resource '
                               '"kubevirts" in API group "kubevirt.io" in the namespace "kubevirt"')
    assert body["details"] == {"name": "kubevirt", "group": "kubevirt.io", "kind": "kubevirts"}
    apiserver.allow_all()
    core.list_node()


def test_require_token_mode(apiserver, core):
    apiserver.require_token = True
    with pytest.raises(ApiException) as exc:
        core.list_node()
    assert exc.value.status == 401 and err_body(exc.value)["reason"] == "Unauthorized"
    cfg = client.Configuration(host=apiserver.url, api_key={"BearerToken": "fake-token"},
                               api_key_prefix={"BearerToken": "Bearer"})
    with client.ApiClient(cfg) as authed:
        assert client.CoreV1Api(authed).list_node().items == []


def test_bearer_scheme_is_case_insensitive(apiserver):
    # kube-apiserver lower-cases the scheme; the python client's in-cluster loader sends "bearer".
    apiserver.require_token = True
    for auth, code in (("bearer fake-token", 200), ("BEARER  fake-token", 200), ("Bearer other", 401),
                       ("Basic fake-token", 401)):
        status, _, _ = raw(apiserver, "GET", "/api/v1/nodes", headers={"Authorization": auth})
        assert status == code, auth


def test_tls_serving_with_ca_and_client_certificates(tls_files, tmp_path):
    from kubernetes import config

    with FakeApiServer(tls_cert=tls_files.cert, tls_key=tls_files.key, client_ca=tls_files.client_cert) as fake:
        assert fake.url.startswith("https://127.0.0.1:")
        path = fake.write_kubeconfig(tmp_path / "kc", ca=tls_files.cert, client_cert=tls_files.client_cert,
                                     client_key=tls_files.client_key)
        with config.new_client_from_config(config_file=str(path)) as api:
            assert client.CoreV1Api(api).list_node().items == []
        untrusted = fake.write_kubeconfig(tmp_path / "kc2")  # no CA: the handshake fails, the server lives on
        with config.new_client_from_config(config_file=str(untrusted)) as api:
            api.configuration.retries = False
            with pytest.raises(urllib3.exceptions.MaxRetryError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
                client.CoreV1Api(api).list_node()
        with config.new_client_from_config(config_file=str(path)) as api:
            assert client.CoreV1Api(api).list_node().items == []


def test_written_kubeconfig_loads_in_the_python_client(apiserver, tmp_path):
    from kubernetes import config

    apiserver.require_token = True
    apiserver.add(o.node("n1"))
    path = apiserver.write_kubeconfig(tmp_path / "kc", context="ctx", namespace="kubevirt")
    contexts, active = config.list_kube_config_contexts(config_file=str(path))
    assert active["name"] == "ctx" and active["context"]["namespace"] == "kubevirt"
    with config.new_client_from_config(config_file=str(path)) as api:
        assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["n1"]
    assert apiserver.requests[-1].headers["authorization"] == "Bearer fake-token"


def test_request_log_records_method_path_query_type_body_status(apiserver, core):
    apiserver.add(o.node("n1"))
    apiserver.clear_requests()
    core.list_node(label_selector="a=b", limit=10)
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    listed, patched = apiserver.requests
    assert (listed.method, listed.path, listed.query) == ("GET", "/api/v1/nodes",
                                                          {"labelSelector": ["a=b"], "limit": ["10"]})
    assert listed.body is None and listed.status == 200 and not listed.is_write
    assert (patched.method, patched.path, patched.status) == ("PATCH", "/api/v1/nodes/n1", 200)
    assert patched.content_type == "application/strategic-merge-patch+json"
    assert patched.body == {"metadata": {"labels": {"a": "b"}}}
    assert apiserver.writes() == [patched]


def test_watch_streams_events_from_a_resource_version(apiserver, core):
    apiserver.add(o.node("n1", labels={"role": "npu"}), o.node("n2"))
    listed = core.list_node()
    got = []

    def consume():
        w = watch.Watch()
        for ev in w.stream(core.list_node, label_selector="role=npu",
                           resource_version=listed.metadata.resource_version, timeout_seconds=2):
            got.append((ev["type"], ev["object"].metadata.name))
            if len(got) == 2:
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    # No wait for the watch to be open: whether it starts before or after these changes, it must send
    # both (live, or replayed from the listed resourceVersion).
    apiserver.mutate("Node", "n2", fn=lambda n: n["metadata"]["labels"].update(role="npu"))
    apiserver.delete_now("Node", "n1")
    t.join(5)
    assert not t.is_alive() and got == [("ADDED", "n2"), ("DELETED", "n1")]


def test_watch_without_resource_version_starts_with_current_objects(apiserver):
    apiserver.add(o.node("n1"))
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    conn.request("GET", "/api/v1/nodes?watch=1&timeoutSeconds=1")
    resp = conn.getresponse()
    lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    conn.close()
    assert resp.status == 200 and [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "n1")]
    assert lines[0]["object"]["kind"] == "Node"


def _watch_lines(apiserver, query):
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    conn.request("GET", "/api/v1/nodes?watch=true&" + query)
    resp = conn.getresponse()
    events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    conn.close()
    return resp.status, events


def test_watch_from_a_pruned_resource_version_gets_410_expired(apiserver):
    apiserver.add(o.node("n1"))
    apiserver._pruned_rv = 5000  # as if the history before 5000 had been compacted
    status, events = _watch_lines(apiserver, "resourceVersion=1001")
    assert status == 200 and len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"


def test_watch_reports_an_object_leaving_the_selector_as_deleted(apiserver):
    apiserver.add(o.node("n1", labels={"a": "1"}))
    rv = apiserver.get("Node", "n1")["metadata"]["resourceVersion"]
    # Changed before the watch opens (no timer racing its 1 s timeout): the event is replayed from `rv`.
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update(a="2"))
    status, events = _watch_lines(apiserver, f"labelSelector=a%3D1&timeoutSeconds=1&resourceVersion={rv}")
    assert status == 200
    assert [(e["type"], e["object"]["metadata"]["labels"]["a"]) for e in events] == [("DELETED", "2")]


def test_on_change_sees_api_and_direct_changes(apiserver, core):
    seen = []
    apiserver.on_change(lambda ev, obj: seen.append((ev, obj["kind"], obj["metadata"]["name"])))
    apiserver.add(o.node("n1"))
    core.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})
    apiserver.delete_now("Node", "n1")
    assert seen == [("ADDED", "Node", "n1"), ("MODIFIED", "Node", "n1"), ("DELETED", "Node", "n1")]
    assert apiserver.errors == []


def test_custom_resource_table_entry(apiserver, custom):
    apiserver.add_resource(Resource("example.com", "v1", "gadgets", "Gadget", False))
    custom.create_cluster_custom_object("example.com", "v1", "gadgets", {"apiVersion": "example.com/v1",
                                                                         "kind": "Gadget", "metadata": {"name": "g"}})
    assert apiserver.get("Gadget", "g")["metadata"]["uid"]


@pytest.mark.parametrize(("obj", "model"), [
    (o.node("n"), "V1Node"),
    (o.npu_node("n", mode="vm-passthrough", unschedulable=True), "V1Node"),
    (o.pod("ns", "p", node="n", owner_kind="DaemonSet", requests={"cpu": "1"}, limits={"cpu": "1"}), "V1Pod"),
    (o.pod("ns", "p", phase="Succeeded"), "V1Pod"),
    (o.virt_launcher("ns", "vm", "n", resources={"rebellions.ai/RBLN-CA22_PF": "1"}), "V1Pod"),
    (o.namespace("ns"), "V1Namespace"),
    (o.daemonset("ns", "ds", node_selector={"a": "b"}, desired=2, ready=1), "V1DaemonSet"),
    (o.replicaset("ns", "rs"), "V1ReplicaSet"),
    (o.pdb("ns", "pdb", selector={"a": "b"}, max_unavailable="25%"), "V1PodDisruptionBudget"),
    (o.deviceclass("npu.rebellions.ai"), "V1DeviceClass"),
    (o.resource_slice("n"), "V1ResourceSlice"),
    (o.crd("kubevirts", "kubevirt.io", "KubeVirt"), "V1CustomResourceDefinition"),
    (o.event("ns", "e", involved=o.pod("ns", "p"), reason="Evicted", message="m"), "CoreV1Event"),
])
def test_builders_match_client_models(obj, model):
    """Built-in objects deserialise into the v37 models (required fields present, right types)."""
    parsed = getattr(client, model).from_dict(obj)
    assert parsed.metadata.name == obj["metadata"]["name"]
