"""Builders and helpers the cluster preflight tests share: a seeded fake cluster, a helm client with no binary.

The fake has no Deployment builder, so `operator_deployment` is here; `nfd_features` extends the
fake's NodeFeature with the flag features newer NFD publishes (kernel.enabledmodule, cpu.cpuid).
`seed` is also what benchmarks/preflight.py and benchmarks/preflight_scale.py fill their clusters with.
"""

from __future__ import annotations

from collections.abc import Sequence

from rblnctl.preflight.cluster import ClusterPreflight
from rblnctl.preflight.helm import CommandResult, HelmClient
from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from rblnctl.constants import MODE_VM as VM

CA22_PF = "rebellions.ai/RBLN-CA22_PF"
CLUSTER_IDS = [
    "cluster.method", "kubernetes.version", "operator.version", "operator.line.sandbox", "operator.line.dra",
    "operator.policy", "kubevirt.installed",
    "kubevirt.version", "kubevirt.gates", "kubevirt.permitted-devices", "dra.driver", "dra.deviceclass",
    "helm.version", "rbac.commands", "nfd.installed", "nfd.npu-nodes", "nodes.vm-mode",
]
NODE_IDS = ["node.iommu", "node.vfio-modules", "node.viommu", "node.mode-label", "node.deploy-skip", "node.vm-npus"]


# -- builders ------------------------------------------------------------------------------------


def operator_deployment(version: str | None = "0.6.0", *, namespace: str = "rbln-system",
                        name: str = "rbln-npu-operator", labels: dict | None = None, image: str | None = None,
                        chart: str = "rbln-npu-operator") -> dict:
    """The operator's Deployment as its Helm chart labels it (the fake has no Deployment builder). `chart`:
    `rbln-npu-operator` (up to v0.3.0) or `rbln-npu-operator-chart` (later releases, pushed as OCI)."""
    lbl = {"app.kubernetes.io/name": "rbln-npu-operator", "app.kubernetes.io/instance": "rbln-npu-operator",
           "app.kubernetes.io/managed-by": "Helm"}
    if version:
        lbl |= {"app.kubernetes.io/version": version, "helm.sh/chart": f"{chart}-{version}"}
    if labels is not None:
        lbl = labels
    image = image or f"docker.io/rebellions/rbln-npu-operator:{'v' + version if version else 'latest'}"
    sel = {"app.kubernetes.io/component": "operator"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": lbl},
        "spec": {"replicas": 1, "selector": {"matchLabels": sel},
                 "template": {"metadata": {"labels": sel},
                              "spec": {"containers": [{"name": "manager", "image": image}]}}},
        "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 1},
    }


def dra_daemonset(version: str = "v0.2.1", *, desired: int = 3, ready: int | None = None) -> dict:
    return o.daemonset("rbln-system", "rbln-dra-kubelet-plugin", desired=desired, ready=ready,
                       image=f"docker.io/rebellions/rbln-k8s-dra-driver:{version}",
                       node_selector={"rebellions.ai/npu.deploy.dra-kubelet-plugin": "true"})


def nfd_features(node: str, *, hypervisor: bool = False, enabled_modules: tuple[str, ...] | None = None,
                 **kw) -> dict:
    """o.node_feature plus the flag features of NFD >= v0.14 (kernel.enabledmodule, cpu.cpuid)."""
    nf = o.node_feature(node, **kw)
    mods = kw.get("modules", ("rebellions", "vfio", "vfio_pci", "vfio_iommu_type1", "kvm", "kvm_intel"))
    cpuid = ["AVX", "AVX2", "AVX512F", "VMX"] + (["HYPERVISOR"] if hypervisor else [])
    nf["spec"]["features"]["flags"] = {
        "cpu.cpuid": {"elements": {f: {} for f in cpuid}},
        "kernel.enabledmodule": {"elements": {m: {} for m in (enabled_modules if enabled_modules is not None
                                                               else mods)}},
    }
    return nf


def seed(apiserver, *, method: str = "sandbox", nodes: int = 3, mode: str | None = VM, policy: dict | None = None,
         kubevirt: dict | None = None, operator: dict | None = None, features: bool = True,
         prefix: str = "npu-", slices: bool = True) -> list[str]:
    """A cluster ready for `method` with `nodes` NPU nodes; every part can be replaced. Returns node names.
    `slices`: DRA vm-passthrough nodes get the ResourceSlice with a vfio device the DRA plugin publishes."""
    dra = method == "dra"
    names = [f"{prefix}{i:04d}" for i in range(nodes)]
    objs: list[dict] = [
        policy or o.cluster_policy(workload_type="container", vfio_manager=True, sandbox=not dra, dra=dra,
                                   device_plugin=not dra),
        operator or operator_deployment("0.6.0"),
        kubevirt or o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"] if dra else ["HostDevices"],
                               version="v1.9.0",
                               permitted_pci=None if dra else [("1EFF:1220", CA22_PF)]),
    ]
    if dra:
        objs += [dra_daemonset(desired=nodes), o.deviceclass("vfio-npu.rebellions.ai"),
                 o.deviceclass("npu.rebellions.ai")]
    for n in names:
        objs.append(o.npu_node(n, mode=mode, dra=dra))
        if features:
            objs.append(nfd_features(n))
        if dra and mode == VM and slices:  # the DRA plugin publishes a vm-passthrough node's NPUs as vfio-* devices
            objs.append(o.resource_slice(n))
    apiserver.add(*objs)
    return names


# -- helm: the runner seam, never a binary ----------------------------------------------------------

NO_HELM = HelmClient(which=lambda _name: None)


def fake_helm(output: str, code: int = 0, *, calls: list | None = None) -> HelmClient:
    """A helm client whose `helm` is at /opt/bin/helm and prints `output` with exit `code` (records argv in calls)."""
    def run(argv: Sequence[str], timeout_s: float) -> CommandResult:
        if calls is not None:
            calls.append((list(argv), timeout_s))
        return CommandResult(returncode=code, stdout=output + "\n", stderr="")

    return HelmClient(which=lambda name: f"/opt/bin/{name}", run=run)


# -- running and reading a report -------------------------------------------------------------------


def run(kube, *, helm: HelmClient = NO_HELM, **kw):
    """ClusterPreflight(...).run() with no helm unless a test gives one; remedies spelt as `rblnctl` says them."""
    from tests.preflight.spelt import spelt

    return spelt(ClusterPreflight(kube=kube, helm=helm, **kw).run())


def cluster(report) -> dict:
    return {c.id: c for c in report.checks if c.scope == "cluster"}


def per_node(report, id_: str) -> dict:
    return {c.scope: c for c in report.checks if c.id == id_}


def problems(report) -> list[tuple[str, str, str]]:
    return [(c.id, c.scope, c.status.value) for c in report.checks if c.status in (Status.WARN, Status.FAIL)]

