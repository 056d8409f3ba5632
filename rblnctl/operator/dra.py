"""The RBLN DRA driver as the operator deploys it: which DaemonSet is its kubelet plugin, and its version.

The operator runs the plugin as DaemonSet `<spec.name>-dra-kubelet-plugin` (chart v0.3.0
internal/scope/patch/dra_kubelet_plugin.go; later releases always `rbln-dra-kubelet-plugin`); the
standalone chart of RBLN-SW/rbln-k8s-dra-driver names it `<fullname>-kubeletplugin` with image
`rebellions/k8s-dra-driver-npu`. While draKubeletPlugin is enabled the operator creates the DeviceClass
`<driverName>` and deletes it when it is not; v0.3.0 creates only that container class (with
extendedResourceName `rebellions.ai/npu`: dra_kubelet_plugin.go handleDeviceClass, CleanUp), later main also the
passthrough class `vfio-<driverName>` (internal/clusterpolicy/components/dra_kubelet_plugin.go, upgrade
passthroughDeviceClassName; rblnctl.vm.cluster.check_device_class says so when it is missing).
"""

from __future__ import annotations

from collections.abc import Mapping

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rblnctl import constants as C
from rblnctl.versions import image_tag, pod_containers, strict_version, version_from_images, version_from_labels

# The DRA kubelet plugin's init container of the operator code that needs no containerToolkit: `dra-ready` waits for
# toolkit-ready (container nodes) or every NPU bound to vfio-pci (vm-passthrough nodes), and that code deploys the
# plugin with containerToolkit disabled (RBLN-SW/rbln-npu-operator later main cmd/rbln-validator/draready.go;
# internal/clusterpolicy/components/dra_kubelet_plugin_test.go TestDRAKubeletPluginPatch_ContainerToolkitDisabled:
# "Patch() should succeed without containerToolkit"). The code before it - chart v0.3.0
# internal/scope/patch/dra_kubelet_plugin.go and main up to internal/clusterpolicy/components/dra_kubelet_plugin.go
# @1c50676 - refuses ("DRA kubelet plugin requires containerToolkit to be enabled") and gates the plugin on a
# `toolkit-validation` init container instead.
DRA_READY_INIT = "dra-ready"
# The last public release whose operator refuses to deploy the DRA plugin without containerToolkit.
DRA_TOOLKIT_REQUIRED_UP_TO = (0, 3, 0)


def is_dra_daemonset(ds: dict, base_name: str = C.OPERATOR_BASE_NAME) -> bool:
    """The RBLN DRA kubelet plugin: the operator's DaemonSet or one whose name/labels/images say rbln + dra."""
    meta = ds.get("metadata") or {}
    if meta.get("name") in (f"{base_name}-{C.COMP_DRA}", f"{C.OPERATOR_BASE_NAME}-{C.COMP_DRA}"):
        return True
    labels = meta.get("labels") or {}
    text = " ".join([str(meta.get("name", "")), str(labels.get(C.APP_NAME_LABEL, "")),
                     *(str(c.get("image") or "") for c in pod_containers(ds))]).lower()
    return "dra" in text and ("rbln" in text or "rebellions" in text)


def dra_driver_version(ds: dict) -> tuple[str, str] | None:
    """(version, source) of the DRA driver: the image tag first (the operator may label its DaemonSets with
    its own version), then the DaemonSet's version labels."""
    return (version_from_images(ds, prefer="dra")
            or version_from_labels(ds, "rbln-k8s-dra-driver")
            or version_from_labels(ds, "rbln-dra-driver"))


def public_driver_gap(version: tuple[int, int, int] | None) -> str | None:
    """Said plainly when the driver is a public release: none of them has vfio devices, so DRA passthrough gets
    zero devices from it (constants.DRA_DRIVER_PUBLIC_UP_TO); None for a later (non-public) or unknown version."""
    if version is None or version > C.DRA_DRIVER_PUBLIC_UP_TO:
        return None
    return (f"it is a public DRA driver release, and no public release has VFIO passthrough "
            f"({C.DRA_DRIVER_PUBLIC_SOURCE} have no vfio devices): it offers zero devices to VMs; DRA passthrough "
            f"needs a driver >= {'.'.join(map(str, C.MIN_DRA_DRIVER))} from Rebellions, which is not published")


def policy_dra_version(spec: Mapping) -> tuple[str, str] | None:
    """(version, source) of the DRA driver a policy spec makes the operator deploy: `draKubeletPlugin.version`
    (the charts render the image tag there), else the tag of its `image`; None when neither is a version."""
    dra = d if isinstance(d := spec.get("draKubeletPlugin"), Mapping) else {}
    version = str(dra.get("version") or "")
    if strict_version(version):
        return version, "spec.draKubeletPlugin.version"
    tag = image_tag(str(dra.get("image") or ""))
    if strict_version(tag):
        return str(tag), "spec.draKubeletPlugin.image"
    return None


@dataclass(frozen=True, kw_only=True)
class ToolkitRule:
    """Whether the operator the cluster runs deploys its DRA kubelet plugin only while containerToolkit is enabled."""

    needed: bool | None  # None: the cluster does not tell (no DRA DaemonSet, the operator's version unknown or later)
    evidence: str


def dra_toolkit_rule(daemonsets: Sequence[dict] | None, release: Any, base_name: str = C.OPERATOR_BASE_NAME
                     ) -> ToolkitRule:
    """Decide by what the cluster runs: the DRA kubelet plugin DaemonSet's init containers (the operator renders it
    from its own code on every reconcile: `dra-ready` -> not needed; `toolkit-validation` -> needed), else the
    operator's release (<= 0.3.0 -> needed), else unknown. `release`: rblnctl.operator.release.OperatorRelease."""
    for ds in daemonsets or []:
        if not is_dra_daemonset(ds, base_name):
            continue
        meta = ds.get("metadata") or {}
        where = f"DaemonSet {meta.get('namespace', '')}/{meta.get('name', '')}"
        spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        inits = [str(c.get("name") or "") for c in spec.get("initContainers") or []]
        if DRA_READY_INIT in inits:
            return ToolkitRule(needed=False, evidence=(
                f"{where} starts with the {DRA_READY_INIT} init container: this operator deploys its DRA plugin "
                "without containerToolkit (on vm-passthrough nodes it waits for the vfio-pci binding)"))
        return ToolkitRule(needed=True, evidence=(
            f"{where} starts with init container(s) {', '.join(inits) or '<none>'}, not {DRA_READY_INIT}: this "
            "operator refuses to deploy its DRA plugin without containerToolkit"))
    version = getattr(release, "version", None)
    if version is not None and version <= DRA_TOOLKIT_REQUIRED_UP_TO:
        return ToolkitRule(needed=True, evidence=(
            f"{release.describe()} refuses to deploy its DRA plugin without containerToolkit (\"DRA kubelet plugin "
            "requires containerToolkit to be enabled\": v0.3.0 internal/scope/patch/dra_kubelet_plugin.go)"))
    who = release.describe() if version is not None else "the operator (version unknown)"
    return ToolkitRule(needed=None, evidence=(
        f"no DRA plugin DaemonSet runs to show it, and {who} may need containerToolkit: operator v0.3.0 and the "
        f"partition line (its DRA plugin gated by `rbln-validator gate`) refuse to deploy their DRA plugin without "
        f"it, only the untagged line whose plugin starts with the {DRA_READY_INIT} init container does not, so "
        f"rblnctl takes the refusal as the rule"))
