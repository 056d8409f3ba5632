"""Clusters the VM tests start from, and readers of what the fake API server holds afterwards.

Names are written out (not imported from rblnctl.constants) so a wrong constant cannot pass its own tests.
"""

from __future__ import annotations

from typing import Any

from rblnctl.vm.attach import AttachOptions, AttachPlanner, DetachOptions, DetachPlanner
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from rblnctl.constants import DRA_DEVICECLASS_VM as VFIO_CLASS

CA22 = "rebellions.ai/RBLN-CA22_PF"
CA25 = "rebellions.ai/RBLN-CA25_PF"
NS = "vms"
NVIDIA = {"name": "gpu0", "deviceName": "nvidia.com/TU104GL_Tesla_T4"}
V1_CLAIM = o.vm_claim(NS, "v1")  # rblnctl's pod-level claim name for VM vms/v1


def sandbox_cluster(apiserver: Any, *, gates: tuple[str, ...] = ("HostDevices",), permitted: bool = True,
                    vm_nodes: dict[str, str] | None = None, container_nodes: tuple[str, ...] = ("n9",),
                    npus: int = 2) -> None:
    """KubeVirt 1.9 with `gates`, the sandbox policy, vm-mode nodes (name -> product) advertising their
    RBLN-<product>_PF, and container-mode NPU nodes. `permitted=False`: a permittedHostDevices list without them
    (KubeVirt checks names only when the list exists: rblnctl.kubevirt.devices.names_checked)."""
    vm_nodes = {"n1": "RBLN-CA22"} if vm_nodes is None else vm_nodes
    products = sorted(set(vm_nodes.values()))
    pci = [(f"1EFF:{o.PCI_DEVICE_IDS[p]}", o.vm_resource_name(p)) for p in products] if permitted else []
    apiserver.add(o.kubevirt(feature_gates=list(gates), permitted_pci=pci), o.cluster_policy())
    for name, product in vm_nodes.items():
        apiserver.add(o.npu_node(name, mode="vm-passthrough", product=product, npus=npus))
    for name in container_nodes:
        apiserver.add(o.npu_node(name))


def dra_cluster(apiserver: Any, *, gates: tuple[str, ...] = ("HostDevices", "HostDevicesWithDRA"),
                disabled: tuple[str, ...] | None = None, device_class: bool = True, slices: bool = True) -> None:
    """KubeVirt 1.9, a DRA policy (vm-passthrough, draKubeletPlugin on, sandbox off), vm-mode node n1 whose
    ResourceSlice offers two vfio devices, the vfio-npu.rebellions.ai DeviceClass."""
    apiserver.add(o.kubevirt(feature_gates=list(gates), disabled_gates=disabled),
                  o.cluster_policy(workload_type="vm-passthrough", sandbox=False, dra=True, device_plugin=False),
                  o.npu_node("n1", mode="vm-passthrough", dra=True), o.npu_node("n9"))
    if device_class:
        apiserver.add(o.deviceclass(VFIO_CLASS))
    if slices:
        apiserver.add(o.resource_slice("n1", devices=[vfio_device("0000:3b:00.0"), vfio_device("0000:3c:00.0")]))


def vfio_device(bdf: str) -> dict:
    """A ResourceSlice device as the RBLN DRA plugin publishes a vfio-bound NPU."""
    return {"name": "vfio-" + bdf.replace(":", "-").replace(".", "-"), "attributes": {
        "type": {"string": "vfio"}, "resource.kubernetes.io/pciBusID": {"string": bdf}, "iommuGroup": {"int": 42},
        "pciDeviceID": {"string": "1220"}, "productName": {"string": "RBLN-CA22"}}}


def attacher(kube: Any, **options: Any) -> AttachPlanner:
    return AttachPlanner(kube=kube, options=AttachOptions(**options), clock=FakeClock())


def detacher(kube: Any, **options: Any) -> DetachPlanner:
    return DetachPlanner(kube=kube, detach=DetachOptions(**options), clock=FakeClock())


def template_spec(apiserver: Any, name: str = "v1", ns: str = NS) -> dict:
    return apiserver.get("VirtualMachine", name, ns)["spec"]["template"]["spec"]


def host_devices(apiserver: Any, name: str = "v1", ns: str = NS) -> list[dict]:
    return template_spec(apiserver, name, ns)["domain"]["devices"].get("hostDevices", [])


def claims(apiserver: Any, name: str = "v1", ns: str = NS) -> list[dict]:
    return template_spec(apiserver, name, ns).get("resourceClaims", [])


def vm_writes(apiserver: Any, name: str = "v1", ns: str = NS) -> list:
    return [r for r in apiserver.writes() if r.path == f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}"]


# -- in-between states ---------------------------------------------------------------------------------------

#: VMI phases before Running (kubevirt/kubevirt@v1.9.0 staging/src/kubevirt.io/api/core/v1/types.go): a VMI in any
#: of them, or Unknown (its node stopped reporting), is on its way up or still there: its spec is fixed, so a
#: change to its VM's template reaches it only through a restart. Scheduled has a node; the others have none.
NOT_YET_RUNNING = {"Pending": None, "Scheduling": None, "Scheduled": "n1", "Unknown": "n1"}


def appears_at(apiserver: Any, method: str, path: str, *objs: dict) -> Any:
    """Seed `objs` the moment the first request matching `method` and `path` (a regex) arrives, before the server
    handles it: something another user makes while rblnctl is between two requests of one apply (the objects
    appear between its plan and that request). Returns the function that unsubscribes."""
    import re

    done: list[bool] = []

    def hook(req: Any) -> None:
        if not done and req.method == method and re.search(path, req.path):
            done.append(True)
            apiserver.add(*objs)

    return apiserver.on_request(hook)
