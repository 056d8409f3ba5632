"""vm manifest (library): a complete VirtualMachine with its NPUs, and for DRA its ResourceClaimTemplate."""

from __future__ import annotations

import pytest
from kubernetes import client

from rblnctl.errors import Ambiguous, InvalidInput, NotFound
from rblnctl.vm import devices as D
from tests.fakes import objects as o
from rblnctl.vm.manifest import ManifestOptions, build_manifest, resolve
from tests.vm.support import CA22, CA25, NS, VFIO_CLASS, dra_cluster, sandbox_cluster


def test_sandbox_manifest():
    (vm,) = build_manifest(ManifestOptions(name="v1", namespace=NS, npus=2, resource=CA22))
    assert (vm["apiVersion"], vm["kind"], vm["metadata"]) == ("kubevirt.io/v1", "VirtualMachine",
                                                              {"name": "v1", "namespace": NS})
    spec = vm["spec"]["template"]["spec"]
    assert vm["spec"]["runStrategy"] == "Always"
    assert spec["domain"]["devices"]["hostDevices"] == [{"name": "npu0", "deviceName": CA22},
                                                        {"name": "npu1", "deviceName": CA22}]
    volumes = {v["name"] for v in spec["volumes"]}
    disks = {d["name"] for d in spec["domain"]["devices"]["disks"]}
    assert volumes == disks == {"rootdisk", "cloudinit"}
    assert {n["name"] for n in spec["networks"]} == {i["name"] for i in spec["domain"]["devices"]["interfaces"]}
    assert D.npus_of(spec).count == 2 and "resourceClaims" not in spec


def test_dra_manifest_names_its_template_and_requests():
    tpl, vm = build_manifest(ManifestOptions(name="v1", npus=2, method="dra"))
    client.V1ResourceClaimTemplate.from_dict(tpl)
    spec = vm["spec"]["template"]["spec"]
    assert "namespace" not in vm["metadata"] and "namespace" not in tpl["metadata"]
    (entry,) = spec["resourceClaims"]
    # the claim name of VM default/v1: no -n, so the namespace `kubectl apply` uses when the context names none
    assert entry == {"name": o.vm_claim("default", "v1"), "resourceClaimTemplateName": tpl["metadata"]["name"]}
    requests = {r["name"] for r in tpl["spec"]["spec"]["devices"]["requests"]}
    devices = spec["domain"]["devices"]["hostDevices"]
    assert all(d["claimName"] == entry["name"] and "deviceName" not in d for d in devices)
    assert {d["requestName"] for d in devices} == requests == {"npu0", "npu1"}  # one device per request


@pytest.mark.parametrize("kwargs", [{"name": "Bad_Name"}, {"name": "v1", "npus": 0}, {"name": "v1", "method": "x"},
                                    {"name": "v1", "image": "has space"}])
def test_bad_options(kwargs):
    with pytest.raises(InvalidInput):
        ManifestOptions(**kwargs)


def test_sandbox_needs_a_resource():
    with pytest.raises(InvalidInput):
        build_manifest(ManifestOptions(name="v1"))


def test_resolve_from_the_cluster(apiserver, kube):
    sandbox_cluster(apiserver)
    assert resolve(kube, method=None, resource=None) == ("sandbox", CA22, VFIO_CLASS)


def test_resolve_dra_from_the_policy(apiserver, kube):
    dra_cluster(apiserver)
    assert resolve(kube, method=None, resource=None) == ("dra", None, VFIO_CLASS)


def test_resolve_refuses_to_guess(apiserver, kube):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA25"})
    with pytest.raises(Ambiguous):
        resolve(kube, method=None, resource=None)
    assert resolve(kube, method="sandbox", resource=None, product="RBLN-CA25")[1] == CA25
    with pytest.raises(NotFound):
        resolve(kube, method="sandbox", resource=None, product="RBLN-CR03")
