"""Typed projections of large lists (rblnctl.kube.projections): only the fields rblnctl reads, as plain dicts; a
reply that does not fit is decoded in full."""

from __future__ import annotations

import copy


from rblnctl.kube import NODES, PODS
from rblnctl.kube.projections import OBJECT, POD, list_decoder
from tests.fakes import objects as o

MANAGED = [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]


def _managed(obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["managedFields"] = MANAGED
    return obj


def test_object_keeps_every_field_but_managed_fields(apiserver, kube):
    node = o.npu_node("n1", mode="vm-passthrough", labels={"zone": "x"})
    apiserver.add(_managed(node))
    full = kube.list(NODES)[0]
    projected = kube.list(NODES, projection=OBJECT)[0]
    assert full["metadata"]["managedFields"] == MANAGED
    del full["metadata"]["managedFields"]
    assert projected == full


def test_pod_keeps_what_capacity_and_init_holds_read(apiserver, kube):
    pod = o.pod("ns", "p", node="n1", labels={"app": "x"}, owner_kind="DaemonSet", owner_name="ds",
                requests={"rebellions.ai/ATOM": "2"}, volumes=[{"name": "v", "emptyDir": {}}])
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    pod["spec"]["initContainers"] = [{"name": "init", "image": "i", "restartPolicy": "Always",
                                      "resources": {"requests": {"rebellions.ai/ATOM": "1"}}}]
    pod["status"]["initContainerStatuses"] = [{"name": "init", "started": True, "state": {"running": {}}}]
    apiserver.add(_managed(pod))
    full = kube.list(PODS)[0]
    got = kube.list(PODS, projection=POD)[0]
    assert "managedFields" not in got["metadata"]
    assert {k: got["metadata"][k] for k in ("name", "namespace", "labels", "ownerReferences")} == \
        {k: full["metadata"][k] for k in ("name", "namespace", "labels", "ownerReferences")}
    assert got["spec"]["nodeName"] == "n1"
    assert got["spec"]["containers"] == [{"name": "main", "image": full["spec"]["containers"][0]["image"],
                                          "resources": full["spec"]["containers"][0]["resources"]}]
    assert got["spec"]["initContainers"] == full["spec"]["initContainers"]
    assert "volumes" not in got["spec"]
    assert got["status"]["phase"] == full["status"]["phase"]
    assert got["status"]["initContainerStatuses"] == full["status"]["initContainerStatuses"]


def test_capacity_is_the_same_from_the_projection():
    from rblnctl.operator.capacity import holds_node_resources, pod_requests

    pod = o.pod("ns", "p", node="n1", requests={"rebellions.ai/ATOM": "2"})
    pod["spec"]["initContainers"] = [{"name": "side", "restartPolicy": "Always",
                                      "resources": {"requests": {"rebellions.ai/ATOM": "1"}}}]
    import json

    projected = list_decoder(POD)(json.dumps({"items": [pod]}).encode())["items"][0]
    assert pod_requests(projected) == pod_requests(pod) == {"rebellions.ai/ATOM": 3}
    assert holds_node_resources(projected) and holds_node_resources(pod)


def test_a_reply_that_does_not_fit_is_decoded_in_full(apiserver, kube):
    pod = o.pod("ns", "odd", node="n1")
    pod["spec"]["containers"] = "not a list"  # no real server sends this; the projection must not fail on it
    apiserver.add(pod)
    got = kube.list(PODS, projection=POD)
    assert got[0]["spec"]["containers"] == "not a list"
