"""The RBLN DRA driver as the operator deploys it: which DaemonSet is its kubelet plugin, and its version.

The operator runs the plugin as DaemonSet `<spec.name>-dra-kubelet-plugin` (chart v0.3.0
internal/scope/patch/dra_kubelet_plugin.go; later releases always `rbln-dra-kubelet-plugin`); the
standalone chart of RBLN-SW/rbln-k8s-dra-driver names it `<fullname>-kubeletplugin` with image
`rebellions/k8s-dra-driver-npu`. The operator creates the DeviceClasses `<driverName>` and, for VM
passthrough, `vfio-<driverName>` while draKubeletPlugin is enabled, and deletes them when it is not
(v0.3.0 dra_kubelet_plugin.go CleanUp; later main internal/clusterpolicy/components/dra_kubelet_plugin.go,
upgrade passthroughDeviceClassName).
"""

from __future__ import annotations

from collections.abc import Mapping

from rblnctl import constants as C
from rblnctl.versions import image_tag, pod_containers, strict_version, version_from_images, version_from_labels


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


def policy_dra_version(spec: Mapping) -> tuple[str, str] | None:
    """(version, source) of the DRA driver a policy spec makes the operator deploy: `draKubeletPlugin.version`
    (the charts render the image tag there), else the tag of its `image`; None when neither is a version."""
    dra = spec.get("draKubeletPlugin") if isinstance(spec.get("draKubeletPlugin"), Mapping) else {}
    version = str(dra.get("version") or "")
    if strict_version(version):
        return version, "spec.draKubeletPlugin.version"
    tag = image_tag(str(dra.get("image") or ""))
    if strict_version(tag):
        return str(tag), "spec.draKubeletPlugin.image"
    return None
