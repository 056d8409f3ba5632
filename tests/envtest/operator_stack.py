"""The real RBLN NPU Operator v0.3.0 on a real control plane, started by the suite from KUBEBUILDER_ASSETS.

What ``OperatorStack.start()`` brings up, in order (each piece as a cluster administrator would have it):

1. a ControlPlane of its own (tests/envtest/controlplane.py) with kube-controller-manager running
   ``*,-node-lifecycle-controller,-taint-eviction-controller`` (the DaemonSet, Deployment, ReplicaSet,
   garbage-collector... controllers; the node-lifecycle ones would taint and evict kubelet-less nodes) and
   kube-scheduler (DaemonSet pods are bound by the scheduler);
2. the chart's v0.3.0 CRDs (RBLNClusterPolicy, RBLNDriver: tests/envtest/crds ``operator_crds_v030``) and the
   namespace ``rbln-system``;
3. two NPU nodes labelled as Node Feature Discovery 0.17 labels a host with a Rebellions card (``NODES``):
   ``pci-1200_1eff.present`` (the default class_vendor form) on one, ``pci-1eff.present`` on the other, and the
   ``system-os_release.ID``/``VERSION_ID`` and ``kernel-version.full`` labels the RBLNDriver controller forms
   driver node pools from. Their not-ready taint (TaintNodesByCondition admission) is lifted, as the
   node-lifecycle controller would once they report Ready;
4. the chart's ServiceAccount and controller RBAC (``templates/rbac``), rendered with the helm engine the
   operator vendors (``$KUBEBUILDER_ASSETS/render-chart``), and a TokenRequest token for that ServiceAccount:
   the operator runs with exactly the chart's permissions;
5. what ``helm install`` creates from the chart's templates with ``VALUES``: the operator Deployment (its pod
   runs on some node like any other; the process of step 7 is what really reconciles), the RBLNClusterPolicy
   and the RBLNDriver. The chart is rendered as the release pipeline packages it (``helm package --version``
   / ``--app-version`` of the tag: RBLN-SW/rbln-npu-operator .github/workflows/release.yaml), so the objects
   carry the release's version, not the source tree's ``v0.0.1``; and with the ``meta.helm.sh/release-*``
   annotations Helm stamps on what it installs;
6. NpuKubelet (tests/cluster/npu_kubelet.py) for the two nodes: pods Running/Ready, graceful deletions
   confirmed, the sandbox plugin held in ``Init`` while its node has no Ready driver pod, and the device plugins'
   resources advertised while their pods are Ready;
7. the operator binary as a local process, with the flags and env its Deployment gives it, adapted to run
   outside a pod: ``--leader-elect=false``, the health probe on a loopback port, ``--metrics-bind-address=0``,
   ``OPERATOR_NAMESPACE`` (and ``POD_NAME``/``NODE_NAME``), its ServiceAccount's kubeconfig;
8. readiness: ``/readyz`` of the operator, then every node converged on container mode (``converged``).

``stop()`` stops them in reverse order (operator, kubelet, control plane); every child process dies with the
test process (PR_SET_PDEATHSIG) and the stack is stopped from atexit too. ``reset()`` puts the nodes back as
they were after ``start()`` (container mode, schedulable, no rblnctl annotation or lock) and waits for the
operator to converge them, so tests sharing one stack start alike.

Facts about the nodes' labels and the operator's layout are written out here and in the tests, never
imported from rblnctl: the code under test must not decide what its own tests expect.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.client import Api
from tests.cluster.npu_kubelet import Hardware, NpuKubelet, is_init_blocked
from tests.envtest.controlplane import (
    ASSETS_ENV,
    ControlPlane,
    EnvtestUnavailable,
    Process,
    _die_with_parent,
    _http_ok,
    assets_dir,
    free_ports,
    terminate,
)
from tests.envtest.crds import operator_crds_v030

OPERATOR_BINARY = "rbln-npu-operator-v0.3.0"
OPERATOR_VERSION = "v0.3.0"
CHART = Path("chart") / "rbln-npu-operator"
NEEDS = ("kube-controller-manager", "kube-scheduler", OPERATOR_BINARY, "render-chart")
NAMESPACE = "rbln-system"
RELEASE = "rbln-npu-operator"  # the Helm release name (the chart's README: helm install rbln-npu-operator ...)
SERVICE_ACCOUNT = "rbln-npu-operator"  # templates/_helpers.tpl fullname for that release
VALUES = "vfioManager.enabled=true,sandboxDevicePlugin.enabled=true"
CONTROLLERS = ("*", "-node-lifecycle-controller", "-taint-eviction-controller")
RBAC_TEMPLATES = ("templates/rbac/serviceaccount.yaml", "templates/rbac/clusterrole-controller.yaml",
                  "templates/rbac/clusterrolebinding-controller.yaml", "templates/rbac/role-controller.yaml",
                  "templates/rbac/rolebinding-controller.yaml")
INSTALL_TEMPLATES = ("templates/operator.yaml", "templates/rblnclusterpolicy.yaml", "templates/rblndriver.yaml")

WORKLOAD_LABEL = "rebellions.ai/npu.workload.config"
NPU_PRESENT_LABEL = "rebellions.ai/npu.present"
DEPLOY_PREFIX = "rebellions.ai/npu.deploy."
MODE_CONTAINER, MODE_VM = "container", "vm-passthrough"
# What the operator v0.3.0 deploys per mode (internal/scope/cluster_policy.go rblnComponentLabels), as measured
# (../shared/reference/rbln-operator.md): dra-kubelet-plugin is labelled in container mode even with DRA off.
CONTAINER_LABELS = ("container-toolkit", "device-plugin", "dra-kubelet-plugin", "driver", "metrics-exporter",
                    "npu-feature-discovery", "operator-validator", "rbln-daemon")
VM_LABELS = ("sandbox-device-plugin", "vfio-manager")
SET_MODE_ANNOTATION_PREFIX = "rebellions.ai/rblnctl"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _nfd_labels(name: str, pci_label: str) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
        pci_label: "true",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": "22",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID.minor": "04",
        "feature.node.kubernetes.io/kernel-version.full": "5.15.0-119-generic",
        "feature.node.kubernetes.io/kernel-version.major": "5",
        "feature.node.kubernetes.io/kernel-version.minor": "15",
        "feature.node.kubernetes.io/kernel-version.revision": "0",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
    }


@dataclass(frozen=True)
class NpuNodeSpec:
    name: str
    pci_label: str  # the NFD label that marks the Rebellions card
    hardware: Hardware
    ip: str

    def node(self) -> dict:
        """The Node as its kubelet registered it, with what NPU feature discovery labelled earlier (product,
        count): the cards' facts, which stay on the node whatever its mode."""
        labels = {**_nfd_labels(self.name, self.pci_label), "rebellions.ai/npu.product": self.hardware.product,
                  "rebellions.ai/npu.count": str(self.hardware.count)}
        return {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "labels": labels}, "spec": {},
            "status": {
                "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"},
                "allocatable": {"cpu": "32", "memory": "126Gi", "pods": "110", "ephemeral-storage": "450Gi"},
                "addresses": [{"type": "InternalIP", "address": self.ip}, {"type": "Hostname", "address": self.name}],
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "kubelet is posting ready status"},
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                    {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
                    {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"}],
                "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "osImage": "Ubuntu 22.04.4 LTS",
                             "kernelVersion": "5.15.0-119-generic", "containerRuntimeVersion": "containerd://1.7.20",
                             "kubeletVersion": "v1.36.2", "kubeProxyVersion": "", "machineID": "0" * 32,
                             "systemUUID": "00000000-0000-0000-0000-000000000000", "bootID": "0" * 32},
            },
        }


# Products the chart's default resourceLists cover in both modes (RBLN-CA25: ATOM / ATOM_MAX_PT, RBLN-CA12: ATOM /
# ATOM_PT), so that what rblnctl refuses on this release is the release, not the product.
NODES = (NpuNodeSpec("npu-node-1", "feature.node.kubernetes.io/pci-1200_1eff.present", Hardware("RBLN-CA25", 2),
                     "127.0.10.1"),
         NpuNodeSpec("npu-node-2", "feature.node.kubernetes.io/pci-1eff.present", Hardware("RBLN-CA12", 1),
                     "127.0.10.2"))


def operator_assets() -> Path:
    """KUBEBUILDER_ASSETS when it holds the operator tier's binaries and chart; EnvtestUnavailable (one line)."""
    path = assets_dir()
    missing = [b for b in NEEDS if not os.access(path / b, os.X_OK)]
    if not (path / CHART / "Chart.yaml").is_file():
        missing.append(str(CHART))
    if missing:
        raise EnvtestUnavailable(f"{ASSETS_ENV}={path} lacks {', '.join(missing)} (the operator tier runs the "
                                 f"RBLN NPU Operator {OPERATOR_VERSION} from its bundle)")
    return path


def render_chart(assets: Path, chart: Path, templates: tuple[str, ...], *, values: str = VALUES) -> list[dict]:
    """`helm template`'s output for `templates` of `chart` (release RELEASE in NAMESPACE), as objects."""
    out = subprocess.run([str(assets / "render-chart"), str(chart), RELEASE, NAMESPACE, values, *templates],
                         check=True, capture_output=True, text=True, timeout=60)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def packaged_chart(assets: Path, into: Path, version: str = OPERATOR_VERSION) -> Path:
    """A copy of the bundle's chart with the version the release pipeline packages it with: `helm package
    --version <tag> --app-version <tag>` (the source tree's Chart.yaml says v0.0.1)."""
    dst = into / "rbln-npu-operator"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(assets / CHART, dst)
    chart = yaml.safe_load((dst / "Chart.yaml").read_text())
    chart.update(version=version, appVersion=version)
    (dst / "Chart.yaml").write_text(yaml.safe_dump(chart, sort_keys=False))
    return dst


def helm_stamp(obj: dict) -> dict:
    """What Helm 3 adds to every object it installs (helm/helm pkg/action/validate.go, setMetadataVisitor)."""
    md = obj.setdefault("metadata", {})
    md.setdefault("annotations", {}).update({"meta.helm.sh/release-name": RELEASE,
                                             "meta.helm.sh/release-namespace": NAMESPACE})
    md.setdefault("labels", {})["app.kubernetes.io/managed-by"] = "Helm"
    return obj


@dataclass
class OperatorStack:
    """See the module doc."""

    workdir: Path
    assets: Path = field(default_factory=operator_assets)
    nodes: tuple[NpuNodeSpec, ...] = NODES
    values: str = VALUES
    ready_timeout_s: float = 90.0

    control_plane: ControlPlane = field(init=False)
    api: Api = field(init=False)
    kubelet: NpuKubelet = field(init=False)
    operator: Process | None = field(default=None, init=False)
    operator_kubeconfig: Path = field(init=False)
    health_url: str = field(default="", init=False)
    policy_name: str = field(default="", init=False)
    timings: dict[str, float] = field(default_factory=dict, init=False)
    _kubelet: NpuKubelet | None = field(default=None, init=False)

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "OperatorStack":
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self.control_plane = ControlPlane(self.workdir / "cp", assets=self.assets, controllers=CONTROLLERS,
                                              scheduler=True).start()
            cp = self.control_plane
            self.timings["control_plane_s"] = time.monotonic() - t0
            self.api = Api(cp.url, token=cp.admin_token, ca=str(cp.ca))
            from tests.envtest.fixtures import install_crds

            install_crds(self.api, operator_crds_v030(self.assets))
            self.api.create({"kind": "Namespace", "metadata": {"name": NAMESPACE}})
            for n in self.nodes:
                self._register(n.node())
            chart = packaged_chart(self.assets, self.workdir)
            for obj in render_chart(self.assets, chart, RBAC_TEMPLATES, values=self.values):
                self._create(helm_stamp(obj))
            token = self.api.request(
                "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"expirationSeconds": 24 * 3600}})["status"]["token"]
            self.operator_kubeconfig = cp.write_kubeconfig(
                self.workdir / "operator.kubeconfig", user=f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}",
                token=token)
            for obj in render_chart(self.assets, chart, INSTALL_TEMPLATES, values=self.values):
                created = self._create(helm_stamp(obj))
                if created["kind"] == "RBLNClusterPolicy":
                    self.policy_name = created["metadata"]["name"]
            self._kubelet = NpuKubelet(self.api, {n.name: n.hardware for n in self.nodes}, namespace=NAMESPACE)
            self.kubelet = self._kubelet.start()
            t_op = time.monotonic()
            self._start_operator()
            self.timings["operator_ready_s"] = time.monotonic() - t_op
            for n in self.node_names:
                self.wait_converged(n, MODE_CONTAINER, timeout_s=self.ready_timeout_s)
            self.timings["converged_s"] = time.monotonic() - t_op
        except BaseException:
            self.stop()
            raise
        self.timings["total_s"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Operator, kubelet, control plane: last started first. Idempotent."""
        if self.operator is not None:
            p, self.operator = self.operator, None
            if p.alive():
                terminate(p.popen)
        if self._kubelet is not None:
            self._kubelet.stop()
            self._kubelet = None
        cp = getattr(self, "control_plane", None)
        if cp is not None:
            cp.stop()
        atexit.unregister(self.stop)

    def check_alive(self) -> None:
        """RuntimeError naming a process of the stack that exited, with the end of its log."""
        if self.operator is not None and not self.operator.alive():
            raise RuntimeError(f"the operator exited ({self.operator.popen.returncode}):\n{self.operator.tail()}")
        self.control_plane.check_alive()

    def _register(self, node: dict) -> None:
        """Create a Node as its kubelet registers it, then its status (through the subresource, retried: the
        controllers write to new Nodes at once), then lift the not-ready taint kube-apiserver's
        TaintNodesByCondition admission put on it, as the node-lifecycle controller does once it is Ready."""
        status = node.pop("status")
        name = node["metadata"]["name"]
        self.api.create(node)
        self.api.mutate("Node", name, None, lambda n: n.update(status=status), sub="status")

        def untaint(n: dict) -> None:
            n["spec"]["taints"] = [t for t in n["spec"].get("taints") or [] if t.get("key") != NOT_READY_TAINT]

        self.api.mutate("Node", name, None, untaint)

    def _create(self, obj: dict) -> dict:
        kind = self.api.kind(obj)
        if kind.namespaced:
            obj["metadata"].setdefault("namespace", NAMESPACE)
        return self.api.create(obj)

    def _start_operator(self) -> None:
        (port,) = free_ports(1)
        self.health_url = f"http://127.0.0.1:{port}"
        log = self.workdir / "operator.log"
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        # The Deployment's env (templates/operator.yaml): OPERATOR_NAMESPACE from the pod's namespace, etc.
        env.update(OPERATOR_NAMESPACE=NAMESPACE, POD_NAME=f"{RELEASE}-controller-manager-local", NODE_NAME="localhost")
        argv = [str(self.assets / OPERATOR_BINARY), f"--kubeconfig={self.operator_kubeconfig}", "--leader-elect=false",
                f"--health-probe-bind-address=127.0.0.1:{port}", "--metrics-bind-address=0",
                "--zap-time-encoding=rfc3339nano"]
        with open(log, "ab") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.workdir, env=env, start_new_session=True, preexec_fn=_die_with_parent)
        self.operator = Process("rbln-npu-operator", popen, log)
        deadline = time.monotonic() + self.ready_timeout_s
        while not _http_ok(f"{self.health_url}/readyz"):
            if not self.operator.alive():
                raise RuntimeError(f"the operator exited before /readyz:\n{self.operator.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the operator: no /readyz after {self.ready_timeout_s:g}s:\n{self.operator.tail()}")
            time.sleep(0.05)

    # ---- what the operator has done (judged from first principles, not by rblnctl) ----------------

    def pods_on(self, node: str) -> list[dict]:
        return self.api.list("Pod", NAMESPACE, fields=f"spec.nodeName={node}")

    def pods_for(self, node: str) -> list[dict]:
        """The operator namespace's pods bound to `node`, and DaemonSet pods made for it that the scheduler has not
        bound yet (their node affinity names it): a DaemonSet controller acting on a stale view of the node's
        labels can still create one just after a mode switch, which it deletes again once it sees them."""
        out = []
        for p in self.api.list("Pod", NAMESPACE):
            spec = p.get("spec") or {}
            if spec.get("nodeName"):
                if spec["nodeName"] == node:
                    out.append(p)
                continue
            terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
                      .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
            if any(node in (f.get("values") or []) for t in terms for f in t.get("matchFields") or []
                   if f.get("key") == "metadata.name"):
                out.append(p)
        return out

    def deploy_labels(self, node: str) -> dict[str, str]:
        labels = (self.api.get("Node", node) or {}).get("metadata", {}).get("labels") or {}
        return {k[len(DEPLOY_PREFIX):]: v for k, v in labels.items() if k.startswith(DEPLOY_PREFIX)}

    def not_converged(self, node: str, mode: str) -> list[str]:
        """What keeps `node` from being served in `mode` ([] when it is): the deploy labels are the mode's, every
        DaemonSet pod there is the mode's, Ready and not terminating, and (container) the device plugin's
        resource is advertised. In vm-passthrough the sandbox plugin never gets Ready on v0.3.0: it must be
        held in Init instead."""
        obj = self.api.get("Node", node) or {}
        labels = obj.get("metadata", {}).get("labels") or {}
        out = []
        want = CONTAINER_LABELS if mode == MODE_CONTAINER else VM_LABELS
        deploy = {k[len(DEPLOY_PREFIX):]: v for k, v in labels.items() if k.startswith(DEPLOY_PREFIX)}
        if labels.get(NPU_PRESENT_LABEL) != "true":
            out.append("npu.present is not true")
        if deploy != dict.fromkeys(want, "true"):
            out.append(f"deploy labels {sorted(deploy)} are not {list(want)}")
        apps = set()
        for p in self.pods_for(node):
            md = p["metadata"]
            owner = next((r for r in md.get("ownerReferences") or [] if r.get("kind") == "DaemonSet"), None)
            if owner is None:
                continue
            apps.add(owner["name"])
            if md.get("deletionTimestamp"):
                out.append(f"pod {md['name']} terminating")
            elif mode == MODE_VM and owner["name"].endswith("sandbox-device-plugin"):
                if not is_init_blocked(p):
                    out.append(f"pod {md['name']} not held in Init by driver-ready")
            elif not (p.get("spec") or {}).get("nodeName"):
                out.append(f"pod {md['name']} ({owner['name']}) not bound yet")
            elif not any(c.get("type") == "Ready" and c.get("status") == "True"
                         for c in (p.get("status") or {}).get("conditions") or []):
                out.append(f"pod {md['name']} not Ready")
        expected = len(want) - (1 if mode == MODE_CONTAINER else 0)  # dra-kubelet-plugin is disabled: no pod
        if len(apps) != expected:
            out.append(f"{len(apps)} component DaemonSets have pods here ({sorted(apps)}), not {expected}")
        res = {k for k, v in ((obj.get("status") or {}).get("allocatable") or {}).items()
               if k.startswith("rebellions.ai/") and v not in ("0", "")}
        if mode == MODE_CONTAINER and res != {"rebellions.ai/ATOM"}:
            out.append(f"allocatable rebellions.ai/* is {sorted(res)}, not rebellions.ai/ATOM")
        if mode == MODE_VM and res:
            out.append(f"allocatable still has {sorted(res)}")
        return out

    def wait_converged(self, node: str, mode: str, *, timeout_s: float = 60.0, settle_s: float = 0.5) -> None:
        """Until not_converged() is [] and stays so for `settle_s` (a controller acting on a stale view settles)."""
        deadline = time.monotonic() + timeout_s
        since = None
        while True:
            self.check_alive()
            left = self.not_converged(node, mode)
            if not left:
                since = since or time.monotonic()
                if time.monotonic() - since >= settle_s:
                    return
                time.sleep(0.1)
                continue
            since = None
            if time.monotonic() > deadline:
                errors = f" (kubelet errors: {self.kubelet.errors[-5:]})" if self.kubelet.errors else ""
                raise AssertionError(f"node {node} not converged on {mode} after {timeout_s:g}s: "
                                     f"{'; '.join(left)}{errors}")
            time.sleep(0.1)

    def policy(self) -> dict:
        obj = self.api.get("RBLNClusterPolicy", self.policy_name)
        assert obj is not None, f"RBLNClusterPolicy {self.policy_name} is gone"
        return obj

    # ---- isolation -------------------------------------------------------------------------------

    def reset(self, *, timeout_s: float = 60.0) -> None:
        """Back to the state start() left: each node in container mode (no mode label), schedulable, without
        rblnctl's annotations; rblnctl's Leases and test users gone; the operator converged again."""
        for n in self.node_names:
            def restore(node: dict) -> None:
                md = node["metadata"]
                md["labels"] = {k: v for k, v in (md.get("labels") or {}).items() if k != WORKLOAD_LABEL}
                md["annotations"] = {k: v for k, v in (md.get("annotations") or {}).items()
                                     if not k.startswith(SET_MODE_ANNOTATION_PREFIX)}
                node.setdefault("spec", {}).pop("unschedulable", None)
                node["spec"]["taints"] = [t for t in node["spec"].get("taints") or []
                                          if t.get("key") != "node.kubernetes.io/unschedulable"]

            self.api.mutate("Node", n, None, restore)
        for lease in self.api.list("Lease", NAMESPACE):
            if lease["metadata"]["name"].startswith("rblnctl-"):
                self.api.delete("Lease", lease["metadata"]["name"], NAMESPACE)
        for kind in ("ClusterRoleBinding", "ClusterRole"):
            for o in self.api.list(kind):
                if o["metadata"]["name"].startswith("rblnctl-"):
                    self.api.delete(kind, o["metadata"]["name"])
        for kind in ("RoleBinding", "Role"):
            for o in self.api.list(kind, NAMESPACE):
                if o["metadata"]["name"].startswith("rblnctl-"):
                    self.api.delete(kind, o["metadata"]["name"], NAMESPACE)
        for sa in self.api.list("ServiceAccount", "default"):
            if sa["metadata"]["name"].startswith("rblnctl-"):
                self.api.delete("ServiceAccount", sa["metadata"]["name"], "default")
        for n in self.node_names:
            self.wait_converged(n, MODE_CONTAINER, timeout_s=timeout_s)

    def describe(self) -> dict[str, Any]:
        return {"timings": dict(self.timings), "nodes": self.node_names, "policy": self.policy_name}

