"""What several KubeVirt-tier tests set up the way an administrator would (never through the code under test):
kubectl against the stack, the KubeVirt CR ready for sandbox NPUs, a hand-made DRA world (the DeviceClass and a
node's ResourceSlice the RBLN DRA driver would publish), and the operator's CRDs with a policy."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.envtest.crds import operator_crds_v030
from tests.envtest.fixtures import install_crds
from tests.kubevirt_real.vms import SANDBOX_RESOURCE
from rblnctl.constants import DRA_DEVICECLASS_VM as VFIO_CLASS, DRA_DRIVER

DRA_NODE = "npu-node-2"  # the kubevirt stack's node without a sandbox resource: DRA devices go there
SANDBOX_NODE = "npu-node-1"  # 4 rebellions.ai/RBLN-CA22_PF


def kubectl(kv: Any, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """kubectl as the stack's admin (the user's own tool, for `rblnctl vm manifest | kubectl apply -f -`)."""
    return subprocess.run(["kubectl", "--kubeconfig", str(kv.kubeconfig), *args], input=input, text=True,
                          capture_output=True, timeout=60)


def sandbox_ready(kv: Any, *, gates: tuple[str, ...] = ("HostDevices",), disabled: tuple[str, ...] = ()) -> None:
    """The KubeVirt CR as `enable-gates` and `permit-devices` leave it for npu-node-1's RBLN-CA22 PFs."""
    def edit(o: dict) -> None:
        conf = o["spec"].setdefault("configuration", {})
        conf.setdefault("developerConfiguration", {}).update(featureGates=list(gates),
                                                            disabledFeatureGates=list(disabled))
        conf["permittedHostDevices"] = {"pciHostDevices": [{"pciVendorSelector": "1EFF:1220",
                                                            "resourceName": SANDBOX_RESOURCE,
                                                            "externalResourceProvider": True}]}
    kv.api.mutate("KubeVirt", "kubevirt", "kubevirt", edit)


def vfio_device(i: int) -> dict:
    """A vfio-bound RBLN-CA22 PF as the RBLN DRA kubelet plugin publishes it (RBLN-SW/rbln-k8s-dra-driver
    cmd/npu-kubelet-plugin/vfio.go enumerateVfioDevices: `vfio-<bdf>`, type vfio, PCI bus ID, IOMMU group, device
    ID, product name, vf)."""
    bdf = f"0000:{0x3b + i:02x}:00.0"
    return {"name": "vfio-" + bdf.replace(":", "-").replace(".", "-"), "attributes": {
        "type": {"string": "vfio"}, "resource.kubernetes.io/pciBusID": {"string": bdf}, "iommuGroup": {"int": 40 + i},
        "pciDeviceID": {"string": "1220"}, "productName": {"string": "RBLN-CA22"}, "vf": {"bool": False}}}


def dra_world(kv: Any, *, node: str = DRA_NODE, devices: int = 4) -> None:
    """The DeviceClass vfio-npu.rebellions.ai (the DRA driver chart's: RBLN-SW/rbln-k8s-dra-driver
    deployments/helm/k8s-dra-driver-npu/templates/deviceclass-vfio-npu.yaml) and `node`'s ResourceSlice of `devices`
    vfio NPUs (KvBackend.reset deletes both: cluster-scoped objects the test made)."""
    kv.api.seed(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": VFIO_CLASS},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}" && '
                                                       'device.attributes["npu.rebellions.ai"].type == "vfio"'}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-vfio"},
         "spec": {"driver": DRA_DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                   "resourceSliceCount": 1},
                  "devices": [vfio_device(i) for i in range(devices)]}})


@contextmanager
def operator_crds(kv: Any) -> Iterator[None]:
    """The RBLN NPU Operator v0.3.0's CRDs (its chart's, from the envtest bundle) served for a while, and deleted
    after, with every policy made meanwhile: the kubevirt stack runs no operator, only its API."""
    from tests.envtest.controlplane import assets_dir

    crds = operator_crds_v030(assets_dir())
    install_crds(kv.api, crds)
    try:
        yield
    finally:
        for crd in crds:
            kv.api.delete("CustomResourceDefinition", crd["metadata"]["name"])
        kv.api.wait_for(lambda: all(kv.api.get("CustomResourceDefinition", c["metadata"]["name"]) is None
                                    for c in crds), timeout_s=60, message="the operator's CRDs gone")


def dra_vm(namespace: str, name: str, npus: int, *, run_strategy: str = "Always") -> list[dict]:
    """A ResourceClaimTemplate of `npus` vfio NPUs and a VM passing each to the guest, in the layout `vm manifest
    --method dra` writes (a pod-level claim from the template; one host device per request)."""
    from tests.kubevirt_real.vms import vm

    template = f"{name}-npus"
    tpl = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
           "metadata": {"name": template, "namespace": namespace},
           "spec": {"spec": {"devices": {"requests": [
               {"name": f"npu{i}", "exactly": {"deviceClassName": VFIO_CLASS, "allocationMode": "ExactCount",
                                               "count": 1}} for i in range(npus)]}}}}
    obj = vm(namespace, name, run_strategy=run_strategy)
    spec = obj["spec"]["template"]["spec"]
    spec["domain"]["devices"]["hostDevices"] = [{"name": f"npu{i}", "claimName": "rbln-npu", "requestName": f"npu{i}"}
                                                for i in range(npus)]
    spec["resourceClaims"] = [{"name": "rbln-npu", "resourceClaimTemplateName": template}]
    return [tpl, obj]
