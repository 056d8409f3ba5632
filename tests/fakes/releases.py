"""What each supported RBLN NPU Operator release really puts in a cluster: conformance fixtures.

Two layouts, read from RBLN-SW/rbln-npu-operator (see docs/operator.md for the fact table):

* ``V0_3_0``: the public chart v0.3.0 (tag v0.3.0 = commit cd771db). DaemonSets ``<spec.name>-<component>``
  (``rbln-daemon`` unprefixed) select ``app: <ds name>`` (internal/scope/patch/*.go,
  internal/utils/k8s/daemonset.go); resources from the policy's ``resourceList``
  (``rebellions.ai/ATOM``/``REBEL`` in container mode, ``ATOM_PT``/``ATOM_MAX_PT``/``REBEL_PT`` in vm
  mode: deployments/rbln-npu-operator/values.yaml); vm-passthrough nodes get only vfio-manager and
  sandbox-device-plugin (internal/scope/cluster_policy.go); no ``npu.deploy.skip``, no label pausing; the
  sandbox plugin never leaves Init on a vm-passthrough node (its ``driver-ready`` init container waits for the
  driver pod's ``.driver-ctr-ready``: internal/scope/patch/sandbox-device-plugin.go, driver_manager.go). What the
  real operator v0.3.0 was seen doing is modelled too (``measured``; tests/envtest/test_operator_v030.py compares
  the simulation with it): every enabled component's DaemonSet exists whether a node selects it or not, each
  with its init containers; the driver DaemonSet is ``rbln-driver-<os><version>-<kernel>`` per node pool,
  selecting the pool's NFD labels; the policy's ``status.components[]`` carries a DaemonSetReady condition per
  DaemonSet while every ``state`` (and the top-level one) says ready.
* ``NEWER``: the operator's later main (the documentation's v0.4.4+/v0.6.0+): DaemonSets always
  ``rbln-<component>``, pods labelled ``app.kubernetes.io/name=rbln-npu-operator`` and
  ``app.kubernetes.io/component=<component>`` (the device plugin keeps ``app: rbln-device-plugin``);
  ``rebellions.ai/npu`` in container mode and ``rebellions.ai/RBLN-<MODEL>_PF`` in vm mode;
  ``rbln-smd`` instead of ``rbln-daemon``; dra-kubelet-plugin in both modes; ``npu.deploy.skip``;
  vfio-manager's driver-manager init container pauses deploy labels (``paused-for-driver-upgrade``)
  while it works.

Names are written out here, not imported from rblnctl, so a wrong constant in the code under test
cannot make its own tests pass.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

CONTAINER_V03 = ("driver", "device-plugin", "dra-kubelet-plugin", "metrics-exporter", "rbln-daemon",
                 "npu-feature-discovery", "operator-validator", "container-toolkit")
CONTAINER_NEWER = ("driver", "device-plugin", "dra-kubelet-plugin", "metrics-exporter", "rbln-smd",
                   "npu-feature-discovery", "operator-validator", "container-toolkit")
# Product card -> PCI device IDs (pci.ids, vendor 1eff): PF first.
DEVICE_IDS = {"RBLN-CA12": ("1120", "1121"), "RBLN-CA22": ("1220", "1221"), "RBLN-CA25": ("1250", "1251"),
              "RBLN-CR03": ("2030", "2031"), "RBLN-CR13": ("2130", "2131")}
# Component -> RBLNClusterPolicy spec key.
POLICY_KEYS = {"device-plugin": "devicePlugin", "sandbox-device-plugin": "sandboxDevicePlugin",
               "vfio-manager": "vfioManager", "dra-kubelet-plugin": "draKubeletPlugin",
               "metrics-exporter": "metricsExporter", "npu-feature-discovery": "npuFeatureDiscovery",
               "container-toolkit": "containerToolkit", "rbln-daemon": "rblnDaemon", "rbln-smd": "rblnDaemon",
               "driver": "driver", "operator-validator": None}

# Init containers of each v0.3.0 component DaemonSet, as the real operator v0.3.0 renders them (checked against the
# running operator by tests/envtest/test_operator_v030.py; internal/scope/patch/*.go). The sandbox plugin's
# `driver-ready` is what keeps it in Init on a vm-passthrough node.
V03_INIT_CONTAINERS = {
    "driver": ("k8s-driver-manager",), "device-plugin": ("toolkit-validation",),
    "metrics-exporter": ("toolkit-validation",), "rbln-daemon": ("toolkit-validation",),
    "npu-feature-discovery": ("toolkit-validation",), "container-toolkit": ("driver-validation",),
    "operator-validator": ("driver-validation", "toolkit-validation"),
    "sandbox-device-plugin": ("driver-ready", "vfio-bind-checker"), "vfio-manager": (),
}
# The NFD labels the v0.3.0 RBLNDriver controller forms driver node pools from: one DaemonSet per pool, named
# <RBLNDriver name>-<os_release.ID><VERSION_ID>-<kernel-version.full> and selecting those labels (as the real
# operator v0.3.0 did: tests/envtest/test_operator_v030.py).
NFD_OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
NFD_OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
NFD_KERNEL = "feature.node.kubernetes.io/kernel-version.full"
V03_DRIVER_NAME = "rbln-driver"  # the chart's RBLNDriver (templates/rblndriver.yaml)

# chart v0.3.0 values.yaml resourceList defaults.
V03_DEVICE_PLUGIN_RESOURCES = [
    {"productCardNames": ["RBLN-CA12", "RBLN-CA22", "RBLN-CA25"], "resourceName": "ATOM",
     "resourcePrefix": "rebellions.ai"},
    {"productCardNames": ["RBLN-CR03"], "resourceName": "REBEL", "resourcePrefix": "rebellions.ai"},
]
V03_SANDBOX_RESOURCES = [
    {"productCardNames": ["RBLN-CA12"], "resourceName": "ATOM_PT", "resourcePrefix": "rebellions.ai"},
    {"productCardNames": ["RBLN-CA25"], "resourceName": "ATOM_MAX_PT", "resourcePrefix": "rebellions.ai"},
    {"productCardNames": ["RBLN-CR03"], "resourceName": "REBEL_PT", "resourcePrefix": "rebellions.ai"},
]


def _component(enabled: bool, **extra: Any) -> dict:
    return {"enabled": enabled, "registry": "docker.io", "imagePullPolicy": "IfNotPresent", **extra}


@dataclass(frozen=True)
class Release:
    """One operator release's layout."""

    name: str
    container_components: tuple[str, ...]
    dra_in_vm: bool  # vm-passthrough nodes get dra-kubelet-plugin too
    has_deploy_skip: bool
    pauses_labels: bool  # vfio-manager's driver manager pauses deploy labels while it binds
    # The sandbox plugin's init containers include `driver-ready`, which loops until the driver pod has
    # written /run/rbln/validations/.driver-ctr-ready; vm-passthrough nodes get no driver pod, so there the
    # plugin stays in Init (RBLN-SW/rbln-npu-operator@v0.3.0 internal/scope/patch/sandbox-device-plugin.go).
    sandbox_waits_for_driver: bool = False
    # What the real v0.3.0 operator was seen doing (tests/envtest/test_operator_v030.py): a DaemonSet for every
    # enabled component whether a node selects it or not, and the policy's status.components[] with a
    # DaemonSetReady condition per DaemonSet under a top-level state that always says ready.
    measured: bool = False

    @property
    def daemon(self) -> str:
        return "rbln-daemon" if "rbln-daemon" in self.container_components else "rbln-smd"

    def vm_components(self) -> tuple[str, ...]:
        return ("vfio-manager", "sandbox-device-plugin", "dra-kubelet-plugin") if self.dra_in_vm else \
            ("vfio-manager", "sandbox-device-plugin")

    def components(self, mode: str) -> tuple[str, ...]:
        return self.vm_components() if mode == "vm-passthrough" else self.container_components

    # -- objects ---------------------------------------------------------------------------------

    def daemonset_name(self, comp: str, base: str = "rbln", node: dict | None = None) -> str:
        if comp == "driver":  # <RBLNDriver name>-<node pool>: not <base>-<component>
            return f"{V03_DRIVER_NAME}-{driver_pool(node)}" if self is V0_3_0 else "rbln-driver-ubuntu22.04"
        if self is V0_3_0:
            return "rbln-daemon" if comp == "rbln-daemon" else f"{base}-{comp}"
        return "rbln-driver-smd" if comp == "rbln-smd" else f"rbln-{comp}"

    def init_containers(self, comp: str) -> tuple[str, ...]:
        """The init containers of the component's DaemonSet (only v0.3.0's are modelled)."""
        return V03_INIT_CONTAINERS.get(comp, ()) if self is V0_3_0 else ()

    def node_selector(self, comp: str, node: dict | None = None) -> dict[str, str]:
        """The component DaemonSet's nodeSelector: its deploy label (v0.3.0's driver: and its pool's NFD labels)."""
        sel = {f"rebellions.ai/npu.deploy.{comp}": "true"}
        if comp == "driver" and self is V0_3_0:
            os_id, version, kernel = _pool_parts(node)
            sel.update({NFD_OS_ID: os_id, NFD_OS_VERSION: version, NFD_KERNEL: kernel})
        return sel

    def pod_labels(self, comp: str, base: str = "rbln", node: dict | None = None) -> dict[str, str]:
        if comp == "driver":
            labels = {"app.kubernetes.io/component": "rbln-driver", "rebellions.ai/driver-instance": "rbln-driver"}
            if self is V0_3_0:
                labels["rebellions.ai/driver-node-pool"] = driver_pool(node)
            return labels
        if self is V0_3_0:
            return {"app": self.daemonset_name(comp, base)}
        if comp == "device-plugin":
            return {"app": "rbln-device-plugin"}
        return {"app.kubernetes.io/name": "rbln-npu-operator", "app.kubernetes.io/component": comp}

    def policy(self, name: str = "rbln-cluster-policy", *, workload_type: str | None = None,
               vfio_manager: bool = False, sandbox: bool = False, dra: bool = False, device_plugin: bool = True,
               base_name: str | None = None) -> dict:
        """The RBLNClusterPolicy the release's chart renders, as the API server returns it (CRD defaults
        applied). The defaults are the chart's own: vfioManager, sandboxDevicePlugin and draKubeletPlugin off."""
        if self is V0_3_0:
            spec: dict[str, Any] = {
                "name": base_name or "rbln",
                # The chart renders no workloadType; the CRD default is "container".
                "workloadType": workload_type or "container",
                "driver": {"useRBLNDriverCRD": True, "upgradePolicy": {"autoUpgrade": False}},
                "devicePlugin": _component(device_plugin, image="k8s-device-plugin", version="v0.3.7",
                                           hostBinPath="/usr/bin",
                                           resourceList=copy.deepcopy(V03_DEVICE_PLUGIN_RESOURCES)),
                "draKubeletPlugin": _component(dra, image="k8s-dra-driver-npu", version="v0.1.0",
                                               driverName="npu.rebellions.ai", healthcheckPort=51515),
                "metricsExporter": _component(True, image="rbln-metrics-exporter", version="v0.2.3"),
                "rblnDaemon": _component(True, image="rbln-daemon", version="3.0.0"),
                "npuFeatureDiscovery": _component(True, image="rbln-npu-feature-discovery", version="v0.2.0"),
                "containerToolkit": _component(True, image="rbln-container-toolkit", version="v0.1.0"),
                "sandboxDevicePlugin": _component(sandbox, image="k8s-device-plugin", version="v0.3.7",
                                                  resourceList=copy.deepcopy(V03_SANDBOX_RESOURCES),
                                                  vfioChecker={"image": "rbln-vfio-manager", "version": "latest"}),
                "vfioManager": _component(vfio_manager, image="rbln-vfio-manager", version="latest"),
                "validator": {"image": "rbln-npu-operator-validator", "version": "v0.3.0", "plugin": {},
                              "toolkit": {}, "driver": {}, "vfioPCI": {}},
            }
            labels = {"helm.sh/chart": "rbln-npu-operator-v0.3.0", "app.kubernetes.io/version": "v0.3.0"}
        else:
            spec = {
                "workloadType": workload_type or "container",
                "driver": {"enabled": True},
                "devicePlugin": _component(device_plugin, image="k8s-device-plugin", version="v0.4.2",
                                           useGenericResourceName=True),
                # v0.2.1: the documentation's floor for VFIO passthrough (the chart at op@02a4d9a7 still
                # rendered v0.1.2, which has no vfio support; the release this layout models passes through).
                "draKubeletPlugin": _component(dra, image="k8s-dra-driver-npu", version="v0.2.1",
                                               driverName="npu.rebellions.ai"),
                "metricsExporter": _component(True, image="rbln-metrics-exporter"),
                "npuFeatureDiscovery": _component(True, image="rbln-npu-feature-discovery"),
                "containerToolkit": _component(True, image="rbln-container-toolkit"),
                "sandboxDevicePlugin": _component(sandbox, image="sandbox-device-plugin", version="v0.1.0"),
                "vfioManager": _component(vfio_manager, image="rbln-vfio-manager", version="v1.0.0",
                                          driverManager={"image": "rbln-k8s-driver-manager", "version": "v0.2.1"}),
                "validator": {"image": "rbln-npu-operator-validator"},
            }
            # the release workflow packages the renamed chart with --version "${TAG#v}" (.github/workflows/release.yaml)
            labels = {"helm.sh/chart": "rbln-npu-operator-chart-0.6.0", "app.kubernetes.io/version": "v0.6.0"}
        # Helm stamps its release on what it installs (helm/helm pkg/action/validate.go, setMetadataVisitor).
        helm = {"meta.helm.sh/release-name": "rbln-npu-operator", "meta.helm.sh/release-namespace": "rbln-system"}
        return {"apiVersion": "rebellions.ai/v1beta1", "kind": "RBLNClusterPolicy",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "rbln-npu-operator",
                                                      "app.kubernetes.io/instance": "rbln-npu-operator",
                                                      "app.kubernetes.io/managed-by": "Helm", **labels},
                             "annotations": helm, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": spec, "status": {"state": "ready"}}

    def operator_deployment(self, namespace: str = "rbln-system") -> dict:
        """The operator's Deployment as the release's chart renders it (templates/operator.yaml, _helpers.tpl)."""
        version = "v0.3.0" if self is V0_3_0 else "v0.6.0"
        chart = "rbln-npu-operator" if self is V0_3_0 else "rbln-npu-operator-chart"
        chart_version = version if self is V0_3_0 else version.lstrip("v")  # release.yaml: --version "${TAG#v}"
        labels = {"helm.sh/chart": f"{chart}-{chart_version}", "app.kubernetes.io/name": "rbln-npu-operator",
                  "app.kubernetes.io/instance": "rbln-npu-operator", "app.kubernetes.io/version": version,
                  "app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/component": "controller-manager",
                  "control-plane": "controller-manager"}
        sel = {"app.kubernetes.io/name": "rbln-npu-operator", "app.kubernetes.io/instance": "rbln-npu-operator",
               "control-plane": "controller-manager"}
        return {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "rbln-npu-operator-controller-manager", "namespace": namespace,
                             "labels": labels},
                "spec": {"replicas": 1, "selector": {"matchLabels": sel},
                         "template": {"metadata": {"labels": sel}, "spec": {"containers": [
                             {"name": "manager", "image": f"docker.io/rebellions/rbln-npu-operator:{version}",
                              "env": [{"name": "OPERATOR_NAMESPACE",
                                       "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}]}}},
                "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}}

    # -- what the plugins advertise -------------------------------------------------------------

    def container_resource(self, policy: dict | None, product: str) -> str | None:
        if self is V0_3_0:
            return _from_list(((policy or {}).get("spec") or {}).get("devicePlugin"), product)
        return "rebellions.ai/npu"

    def vm_resource(self, policy: dict | None, product: str) -> str | None:
        if self is V0_3_0:
            return _from_list(((policy or {}).get("spec") or {}).get("sandboxDevicePlugin"), product)
        p = product if product.startswith("RBLN-") else f"RBLN-{product}"
        return f"rebellions.ai/{p}_PF"

    def resource_names(self, policy: dict | None) -> set[str]:
        """Every resource name this release's plugins could advertise under the policy."""
        if self is V0_3_0:
            spec = (policy or {}).get("spec") or {}
            entries = [e for key in ("devicePlugin", "sandboxDevicePlugin")
                       for e in (spec.get(key) or {}).get("resourceList") or []]
            return {f"{e.get('resourcePrefix', 'rebellions.ai')}/{e['resourceName']}" for e in entries}
        return {"rebellions.ai/npu"} | {self.vm_resource(None, p) for p in DEVICE_IDS}


def _pool_parts(node: dict | None) -> tuple[str, str, str]:
    """(os ID, VERSION_ID, kernel) of a node: NFD's labels, else (nodes built without them) its nodeInfo."""
    md = (node or {}).get("metadata") or {}
    labels = md.get("labels") or {}
    info = ((node or {}).get("status") or {}).get("nodeInfo") or {}
    image = str(info.get("osImage") or "Ubuntu 22.04").split()
    os_id = labels.get(NFD_OS_ID) or image[0].lower()
    version = labels.get(NFD_OS_VERSION) or (".".join(image[1].split(".")[:2]) if len(image) > 1 else "22.04")
    kernel = labels.get(NFD_KERNEL) or str(info.get("kernelVersion") or "5.15.0-105-generic")
    return os_id, version, kernel


def driver_pool(node: dict | None) -> str:
    """The v0.3.0 driver node pool a node belongs to: `ubuntu22.04-5.15.0-119-generic`."""
    os_id, version, kernel = _pool_parts(node)
    return f"{os_id}{version}-{kernel}"


def _from_list(spec: dict | None, product: str) -> str | None:
    for e in (spec or {}).get("resourceList") or []:
        if product in (e.get("productCardNames") or []):
            return f"{e.get('resourcePrefix') or 'rebellions.ai'}/{e['resourceName']}"
    return None


V0_3_0 = Release("v0.3.0", CONTAINER_V03, dra_in_vm=False, has_deploy_skip=False, pauses_labels=False,
                 sandbox_waits_for_driver=True, measured=True)
NEWER = Release("newer", CONTAINER_NEWER, dra_in_vm=True, has_deploy_skip=True, pauses_labels=True)
RELEASES = (V0_3_0, NEWER)
