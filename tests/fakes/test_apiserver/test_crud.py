"""Get, create and update: server-set fields, optimistic concurrency, the status subresource, dry run."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.test_apiserver.helpers import KV, err_body, raw


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
    assert body["message"] == 'configmaps "cm" already exists'
    assert body["details"] == {"name": "cm", "kind": "configmaps"}


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


def test_generation_bumps_only_on_spec_change(apiserver, core):
    apiserver.add(o.node("n1"))
    core.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})
    assert apiserver.get("Node", "n1")["metadata"]["generation"] == 1
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    assert apiserver.get("Node", "n1")["metadata"]["generation"] == 2


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
