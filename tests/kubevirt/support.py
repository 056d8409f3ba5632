"""Helpers shared by the KubeVirt library tests: editors on a FakeClock, readers of the stored CR, and the clusters
migrate-resources starts from."""

from __future__ import annotations

from typing import Any

from rblnctl.kubevirt.cr import CrWriteOptions
from rblnctl.kubevirt.devices import DevicePermitter
from rblnctl.kubevirt.gates import GateEditor
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from tests.fakes.releases import NEWER

KV_PATH = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
JSON_PATCH = "application/json-patch+json"
FG = "/spec/configuration/developerConfiguration/featureGates"
DIS = "/spec/configuration/developerConfiguration/disabledFeatureGates"
PCI = "/spec/configuration/permittedHostDevices/pciHostDevices"
NVIDIA = {"pciVendorSelector": "10DE:1EB8", "resourceName": "nvidia.com/TU104GL_Tesla_T4",
          "externalResourceProvider": True}
_OPTION_FIELDS = ("name", "namespace", "force", "server_dry_run", "max_attempts", "retry_backoff_s")


def _split(kw: dict[str, Any]) -> tuple[CrWriteOptions, dict[str, Any]]:
    options = CrWriteOptions(**{k: kw.pop(k) for k in list(kw) if k in _OPTION_FIELDS})
    kw.setdefault("clock", FakeClock())
    return options, kw


def editor(kube: Any, **kw: Any) -> GateEditor:
    """A GateEditor; option fields (force, server_dry_run, ...) go into its CrWriteOptions."""
    options, rest = _split(kw)
    return GateEditor(kube=kube, options=options, **rest)


def permitter(kube: Any, **kw: Any) -> DevicePermitter:
    """A DevicePermitter, likewise."""
    options, rest = _split(kw)
    return DevicePermitter(kube=kube, options=options, **rest)


def stored(apiserver: Any, ns: str = "kubevirt", name: str = "kubevirt") -> dict:
    return apiserver.get("KubeVirt", name, ns)


def gates_of(obj: dict) -> list[str] | None:
    return obj["spec"]["configuration"]["developerConfiguration"].get("featureGates")


def kv_patches(apiserver: Any) -> list:
    return [r for r in apiserver.writes() if r.method == "PATCH" and r.path == KV_PATH]


# -- after an operator upgrade (migrate-resources) ------------------------------------------------------------

OLD = "rebellions.ai/ATOM_MAX_PT"  # chart v0.3.0's VM resource for RBLN-CA25 (its default resourceList)
NEW = "rebellions.ai/RBLN-CA25_PF"  # what later releases advertise for it


def upgraded_cluster(apiserver: Any, *, permitted: Any = (("1EFF:1250", OLD),), product: str = "RBLN-CA25",
                     nodes: int = 2) -> None:
    """After the operator upgrade: vm-passthrough nodes n0.. advertise the per-product name; KubeVirt still the old."""
    apiserver.add(NEWER.policy(vfio_manager=True, sandbox=True))
    for i in range(nodes):
        apiserver.add(o.npu_node(f"n{i}", mode=o.MODE_VM, product=product))
    apiserver.add(o.npu_node("c0", mode=o.MODE_CONTAINER))
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=list(permitted)))


def selector_disagreeing_with_map(apiserver: Any) -> tuple[str, str]:
    """upgraded_cluster() whose KubeVirt CR permits OLD with the selector of another device (1EFF:1220, an
    RBLN-CA22) than the one the site's VMs got through it (RBLN-CA25: the nodes advertise NEW). Derived from the
    CR, OLD maps to RBLN-CA22_PF; the user knows better and gives --map OLD=NEW. Returns (the user's mapping
    item, the name the CR's selector suggests)."""
    upgraded_cluster(apiserver, permitted=(("1EFF:1220", OLD),))
    return f"{OLD}={NEW}", "rebellions.ai/RBLN-CA22_PF"
