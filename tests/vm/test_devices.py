"""The VM spec shape: reading NPU host devices, and the entries and templates rblnctl writes."""

from __future__ import annotations

from kubernetes import client

from rblnctl.vm import devices as D
from tests.fakes import objects as o
from tests.vm.support import CA22, NVIDIA, VFIO_CLASS


def _spec(host_devices=(), claims=()):
    return {"domain": {"devices": {"hostDevices": list(host_devices)}}, "resourceClaims": list(claims)}


def test_npus_of_splits_by_method_and_keeps_the_rest():
    spec = _spec([NVIDIA, {"name": "npu0", "deviceName": CA22},
                  {"name": "npu1", "claimName": "rbln-npu", "requestName": "npu0"},
                  {"name": "gpu1", "claimName": "gpu", "requestName": "g"}],
                 [{"name": "rbln-npu", "resourceClaimTemplateName": "rbln-npu-1"},
                  {"name": "gpu", "resourceClaimTemplateName": "gpu-t"}])
    have = D.npus_of(spec)
    assert [d.name for d in have.sandbox] == ["npu0"] and [d.name for d in have.dra] == ["npu1"]
    assert have.other_devices == ("gpu0", "gpu1") and have.method == "mixed" and have.count == 2
    assert have.managed_template == "rbln-npu-1" and have.dra[0].managed
    with_gpu_as_npu = D.npus_of(spec, npu_claim=lambda e: e["name"] == "gpu")
    assert [d.name for d in with_gpu_as_npu.dra] == ["npu1", "gpu1"]


def test_free_names_skip_used_ones():
    assert D.free_names(["npu0", "npu2", "gpu0"], 3) == ["npu1", "npu3", "npu4"]


def test_the_claim_template_is_a_valid_resource_claim_template():
    tpl = D.claim_template(3, VFIO_CLASS, namespace="vms")
    parsed = client.V1ResourceClaimTemplate.from_dict(tpl)  # strict models: unknown fields fail
    requests = parsed.spec.spec.devices.requests
    assert [r.name for r in requests] == ["npu0", "npu1", "npu2"]
    assert {(r.exactly.device_class_name, r.exactly.allocation_mode, r.exactly.count) for r in requests} == {
        (VFIO_CLASS, "ExactCount", 1)}
    assert D.template_fits(tpl, 3, VFIO_CLASS) and not D.template_fits(tpl, 2, VFIO_CLASS)
    assert D.claim_requests(tpl) == [("npu0", VFIO_CLASS, 1), ("npu1", VFIO_CLASS, 1), ("npu2", VFIO_CLASS, 1)]


def test_a_template_with_selectors_is_not_rblnctls():
    tpl = D.claim_template(1, VFIO_CLASS)
    tpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": "true"}}]
    assert not D.template_fits(tpl, 1, VFIO_CLASS)


def test_claim_requests_of_a_claim_and_of_all_and_first_available():
    claim = {"kind": "ResourceClaim", "spec": {"devices": {"requests": [
        {"name": "a", "exactly": {"deviceClassName": "c", "allocationMode": "All"}},
        {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": "d", "count": 2}]}]}}}
    assert D.claim_requests(claim) == [("a", "c", 0), ("b", "d", 2)]


def test_dra_device_keeps_other_keys():
    assert D.dra_device("npu3", 1, {"name": "old", "deviceName": CA22, "tag": "t"}, claim="c") == {
        "tag": "t", "name": "npu3", "claimName": "c", "requestName": "npu1"}


def test_the_claim_name_is_one_per_vm_stable_and_a_dns_label():
    """docs/vm.md, Claim names: derived from namespace and name; the same VM name in two namespaces differs."""
    import re

    names = {D.claim_name(ns, vm) for ns in ("a", "b", "team-x") for vm in ("vm", "vm-2", "x" * 253)}
    assert len(names) == 9
    assert D.claim_name("a", "vm") == D.claim_name("a", "vm") == o.vm_claim("a", "vm")
    assert all(len(n) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n) for n in names)
    assert D.is_managed_claim_name(D.claim_name("a", "vm")) and D.is_managed_claim_name("rbln-npu")
    assert not D.is_managed_claim_name("rbln-npu-2") and not D.is_managed_claim_name("gpu-claim")


def test_the_guarded_patch_tests_what_it_read_and_writes_only_what_changes():
    """Lists present are tested by value, absent ones by null (kube-apiserver's JSON Patch passes a `test` of null on
    a member its object lacks); nothing tests the resourceVersion; an emptied list is removed."""
    base = "/spec/template/spec"
    vm = {"metadata": {"resourceVersion": "42"},
          "spec": {"template": {"spec": {"domain": {"devices": {"hostDevices": [NVIDIA]}}}}}}
    assert D.guarded_patch(vm, [], []) == [
        {"op": "test", "path": f"{base}/domain/devices/hostDevices", "value": [NVIDIA]},
        {"op": "test", "path": f"{base}/resourceClaims", "value": None},
        {"op": "test", "path": f"{base}/domain/devices/gpus", "value": None},
        {"op": "remove", "path": f"{base}/domain/devices/hostDevices"}]
    bare = {"spec": {"template": {"spec": {"domain": {}}}}}
    claims = [{"name": "c", "resourceClaimTemplateName": "t"}]
    assert D.guarded_patch(bare, [NVIDIA], claims) == [
        {"op": "test", "path": f"{base}/domain/devices", "value": None},
        {"op": "test", "path": f"{base}/resourceClaims", "value": None},
        {"op": "add", "path": f"{base}/domain/devices", "value": {}},
        {"op": "add", "path": f"{base}/domain/devices/hostDevices", "value": [NVIDIA]},
        {"op": "add", "path": f"{base}/resourceClaims", "value": claims}]
