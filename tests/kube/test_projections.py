"""Typed projections of large lists (rblnctl.kube.projections): only the fields rblnctl reads, as plain dicts; a
reply that does not fit is decoded in full."""

from __future__ import annotations

import copy


from rblnctl.kube import NODES, PODS, VMIS, VMS
from rblnctl.kube.projections import NODE, POD, VM, VMI, list_decoder
from tests.fakes import objects as o

MANAGED = [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]


def _managed(obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["managedFields"] = MANAGED
    return obj


def test_node_keeps_what_is_read_of_a_node(apiserver, kube):
    node = o.npu_node("n1", mode="vm-passthrough", labels={"zone": "x"})
    node["status"]["images"] = [{"names": ["registry.example/big:1"], "sizeBytes": 1 << 30}]
    node["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-04T00:00:00Z"
    apiserver.add(_managed(node))
    full = kube.list(NODES)[0]
    projected = kube.list(NODES, projection=NODE)[0]
    assert full["metadata"]["managedFields"] == MANAGED
    del full["metadata"]["managedFields"]
    assert projected["metadata"] == full["metadata"] and projected["spec"] == full["spec"]
    assert projected["status"]["allocatable"] == full["status"]["allocatable"]
    assert projected["status"]["conditions"] == [{"type": c["type"], "status": c["status"]}
                                                 for c in full["status"]["conditions"]]
    assert "images" not in projected["status"] and "nodeInfo" not in projected["status"]


def test_vm_and_vmi_keep_what_the_listing_reads(apiserver, kube):
    """The template's (VMI's) NPU devices and claims, the status, never the volumes: a cloud-init userData is
    often most of a VM."""
    dev = [{"name": "npu1", "deviceName": "rebellions.ai/ATOM_PT"}]
    vm = o.vm("vms", "vm1", host_devices=dev)
    vm["spec"]["template"]["spec"]["volumes"] = [{"name": "ci", "cloudInitNoCloud": {"userData": "x" * 4096}}]
    vmi = o.vmi("vms", "vm1", "n1", host_devices=dev)
    vmi["spec"]["volumes"] = vm["spec"]["template"]["spec"]["volumes"]
    apiserver.add(_managed(vm), _managed(vmi))
    full_vm, full_vmi = kube.list(VMS)[0], kube.list(VMIS)[0]
    got_vm, got_vmi = kube.list(VMS, projection=VM)[0], kube.list(VMIS, projection=VMI)[0]
    from rblnctl.vm import devices as D

    assert D.host_devices(D.vm_spec(got_vm)) == D.host_devices(D.vm_spec(full_vm)) == dev
    assert D.host_devices(D.vmi_spec(got_vmi)) == D.host_devices(D.vmi_spec(full_vmi)) == dev
    assert got_vm["status"].get("printableStatus") == full_vm["status"].get("printableStatus")
    assert got_vm["spec"].get("runStrategy") == full_vm["spec"].get("runStrategy")
    assert got_vm["metadata"] == {k: full_vm["metadata"][k] for k in ("name", "namespace", "uid")
                                  if k in full_vm["metadata"]}
    assert {k: got_vmi["status"].get(k) for k in ("phase", "nodeName")} == \
        {k: full_vmi["status"].get(k) for k in ("phase", "nodeName")}
    assert "volumes" not in D.vm_spec(got_vm) and "volumes" not in D.vmi_spec(got_vmi)
    assert "managedFields" not in got_vm["metadata"] and got_vm["metadata"]["name"] == "vm1"


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
