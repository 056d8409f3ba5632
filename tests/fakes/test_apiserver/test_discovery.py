"""Discovery and the resource table: /version, /api, /apis, CRDs, added and removed resources."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.apiserver import Resource
from tests.fakes.test_apiserver.helpers import raw


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
    for path in ("/openapi/v2", "/openapi/v3", "/api/v1/widgets", "/apis/apps/v9/deployments"):
        status, body, _ = raw(apiserver, "GET", path)
        assert status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound", path


def test_an_unserved_api_group_is_the_muxs_plain_404(apiserver):
    """As kube-apiserver v1.36 answers (measured): nothing is routed under a group no CRD serves."""
    for path in ("/apis/nope.io/v1", "/apis/nope.io", "/apis/nope.io/v1/widgets", "/nope"):
        req = urllib.request.Request(apiserver.url + path)
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=5)
        assert exc.value.code == 404, path
        assert exc.value.headers["Content-Type"] == "text/plain; charset=utf-8", path
        assert exc.value.read() == b"404 page not found\n", path


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


def test_custom_resource_table_entry(apiserver, custom):
    apiserver.add_resource(Resource("example.com", "v1", "gadgets", "Gadget", False))
    custom.create_cluster_custom_object("example.com", "v1", "gadgets", {"apiVersion": "example.com/v1",
                                                                         "kind": "Gadget", "metadata": {"name": "g"}})
    assert apiserver.get("Gadget", "g")["metadata"]["uid"]
