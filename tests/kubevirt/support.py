"""Helpers shared by the KubeVirt library tests: editors on a FakeClock, and readers of the stored CR."""

from __future__ import annotations

from typing import Any

from rblnctl.kubevirt.cr import CrWriteOptions
from rblnctl.kubevirt.devices import DevicePermitter
from rblnctl.kubevirt.gates import GateEditor
from tests.fakes.clock import FakeClock

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
