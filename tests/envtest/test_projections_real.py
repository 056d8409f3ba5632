"""Typed projections (rblnctl.kube.projections) on the real kube-apiserver: its replies fit them (no fallback to a
full decode), managedFields are left out, and the fields capacity reads come through (issue 31)."""

from __future__ import annotations

import pytest

from rblnctl.kube import NODES, PODS, KubeOptions, connect
from rblnctl.kube.projections import NODE, POD
from rblnctl.operator.capacity import pod_requests
from tests.fakes import objects as o


@pytest.mark.parametrize("from_cache", [False, True])
def test_real_lists_fit_the_projections(real, from_cache, caplog):
    ns, node = f"proj-{int(from_cache)}", f"npu-p{int(from_cache)}"
    real.api.seed(o.npu_node(node, mode="container"))
    real.api.create({"kind": "Namespace", "metadata": {"name": ns}})
    real.api.seed(o.pod(ns, "infer", node=node, requests={"rebellions.ai/ATOM": "2"}))
    kube = connect(KubeOptions(kubeconfig=str(real.kubeconfig)))
    kube.list_from_cache = from_cache
    full = {n["metadata"]["name"]: n for n in kube.list(NODES)}
    assert full[node]["metadata"].get("managedFields")  # the real server writes them
    caplog.set_level("DEBUG", logger="rblnctl.kube")
    pods = {p["metadata"]["name"]: p for p in kube.list(PODS, namespace=ns, projection=POD)}
    del full[node]["metadata"]["managedFields"]
    # NODE: what the readers read of a node, the rest of its status left out
    slim = {n["metadata"]["name"]: n for n in kube.list(NODES, projection=NODE)}[node]
    assert "does not fit its projection" not in caplog.text
    assert slim["metadata"] == full[node]["metadata"] and slim["spec"] == full[node]["spec"]
    assert slim["status"]["allocatable"] == full[node]["status"]["allocatable"]
    assert [c["type"] for c in slim["status"]["conditions"]] == [c["type"] for c in full[node]["status"]["conditions"]]
    assert not {"nodeInfo", "addresses", "daemonEndpoints"} & set(slim["status"])
    assert all(set(c) == {"type", "status"} for c in slim["status"]["conditions"])
    assert "managedFields" not in pods["infer"]["metadata"]
    assert pods["infer"]["spec"]["nodeName"] == node
    assert pod_requests(pods["infer"]) == {"rebellions.ai/ATOM": 2}


def test_real_vms_and_vmis_fit_the_listing_projections(real, caplog):
    """VMs and VMIs as the real server stores them under KubeVirt's CRDs fit VM and VMI (no full decode), and the
    listing reads the same NPUs from them as from the whole objects."""
    from rblnctl.kube import VMIS, VMS
    from rblnctl.kube.projections import VM, VMI
    from rblnctl.vm import devices as D

    dev = [{"name": "npu1", "deviceName": "rebellions.ai/ATOM_PT"}]
    real.api.create({"kind": "Namespace", "metadata": {"name": "proj-vms"}})
    real.api.seed(o.vm("proj-vms", "vm1", host_devices=dev), o.vmi("proj-vms", "vm1", "npu-x", host_devices=dev))
    kube = connect(KubeOptions(kubeconfig=str(real.kubeconfig)))
    caplog.set_level("DEBUG", logger="rblnctl.kube")
    vm, vmi = kube.list(VMS, namespace="proj-vms", projection=VM)[0], \
        kube.list(VMIS, namespace="proj-vms", projection=VMI)[0]
    assert "does not fit its projection" not in caplog.text
    full_vm, full_vmi = kube.list(VMS, namespace="proj-vms")[0], kube.list(VMIS, namespace="proj-vms")[0]
    assert D.npus_of(D.vm_spec(vm)) == D.npus_of(D.vm_spec(full_vm))
    assert D.npus_of(D.vmi_spec(vmi)) == D.npus_of(D.vmi_spec(full_vmi))
    assert (vmi["status"].get("phase"), vmi["status"].get("nodeName")) == \
        (full_vmi["status"].get("phase"), full_vmi["status"].get("nodeName"))
