"""NpuKubelet: SimKubelet plus what the nodes of the real RBLN NPU Operator v0.3.0 need from a kubelet.

SimKubelet (tests/cluster/kubelet.py) reports every pod of its nodes Running/Ready and finishes graceful
deletions. On NPU hardware two more things happen that the operator's consumers (and rblnctl) see:

* **The sandbox device plugin waits for the driver.** Chart v0.3.0 gives the sandbox-device-plugin DaemonSet an
  init container ``driver-ready`` that loops until ``/run/rbln/validations/.driver-ctr-ready`` exists, a file
  only a Ready driver pod writes on that node (its preStop removes it): RBLN-SW/rbln-npu-operator@v0.3.0
  internal/scope/patch/sandbox-device-plugin.go, driver_manager.go. ``init_start_s`` after such a pod is bound
  (when its first container would start) it is reported Pending, ``Init:0/N`` (``driver-ready`` running, the
  rest waiting) unless its node has a Ready, non-terminating driver pod (label
  ``app.kubernetes.io/component=rbln-driver``) that the node's labels still select (``driver_serving``), and
  runs once one is Ready there. On a vm-passthrough node, where the operator deploys no driver, it stays so.
* **A device plugin advertises its resources.** A real device plugin registers with the kubelet, which then
  shows the plugin's resources in the node's capacity and allocatable; when the plugin goes, they go. The
  stand-in plays that for the operator's two plugins: while a pod controlled by the DaemonSet
  ``<policy spec.name>-device-plugin`` (or ``-sandbox-device-plugin``) in the operator's namespace is Ready and
  not terminating on a node, the node advertises the resource the policy's ``resourceList`` names for the
  node's product (chart v0.3.0: ``devicePlugin.resourceList`` -> ``rebellions.ai/ATOM`` for RBLN-CA12/CA22/CA25,
  ``rebellions.ai/REBEL`` for RBLN-CR03; RBLN-SW/rbln-k8s-device-plugin: ``resourcePrefix + "/" +
  resourceName``), as many as the node has NPUs. When the plugin goes, its resource goes the kubelet's way: its
  devices turn unhealthy at once (allocatable ``0``, capacity kept) and the resource is dropped after
  ``stop_grace_s`` (the kubelet's endpointStopGracePeriod, 5 minutes). A product no entry lists is advertised
  under no name, as the plugin does.

The hardware (product and NPU count per node) is given to the kubelet: it is what the machine has, not
something read back from the cluster. Names are written out here, not imported from rblnctl, so that the
code under test cannot prepare its own world.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.cluster.client import Api, ApiFailure
from tests.cluster.kubelet import SimKubelet

DRIVER_READY_INIT = "driver-ready"
DRIVER_LABEL = ("app.kubernetes.io/component", "rbln-driver")
RESOURCE_PREFIX = "rebellions.ai/"
# How long the kubelet keeps a resource whose device plugin went away, its devices unhealthy (allocatable 0) but still
# in capacity, before it drops it (kubernetes/kubernetes pkg/kubelet/cm/devicemanager: endpointStopGracePeriod,
# markResourceUnhealthy, GetCapacity).
ENDPOINT_STOP_GRACE_S = 300.0
# Plugin component -> the policy spec key whose resourceList it advertises (chart v0.3.0).
PLUGINS = {"device-plugin": "devicePlugin", "sandbox-device-plugin": "sandboxDevicePlugin"}


@dataclass(frozen=True)
class Hardware:
    """What an NPU node has: the product card (`RBLN-CA25`) and how many."""

    product: str
    count: int


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(pod: Mapping) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _controller(pod: Mapping) -> str | None:
    ref = next((r for r in (pod.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)
    return ref.get("name") if ref and ref.get("kind") == "DaemonSet" else None


def init_blocked_status(pod: Mapping, node_ip: str = "127.0.0.1") -> dict:
    """What a kubelet reports while a pod's first init container (`driver-ready`) runs and never ends."""
    now = _now()
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or []

    def cs(c: Mapping, state: dict, i: int, *, started: bool) -> dict:
        out = {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False, "started": started,
               "restartCount": 0, "state": state}
        if "running" in state:
            out["containerID"] = f"containerd://{i + 1:064d}"
        return out

    return {
        "phase": "Pending", "hostIP": node_ip, "hostIPs": [{"ip": node_ip}], "startTime": now,
        "qosClass": (pod.get("status") or {}).get("qosClass") or "BestEffort",
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized", "lastTransitionTime": now,
             "message": "containers with incomplete status: [" + " ".join(c["name"] for c in inits) + "]"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        ],
        "initContainerStatuses": [
            cs(c, {"running": {"startedAt": now}} if i == 0 else {"waiting": {"reason": "PodInitializing"}}, i,
               started=i == 0) for i, c in enumerate(inits)],
        "containerStatuses": [cs(c, {"waiting": {"reason": "PodInitializing"}}, 100 + i, started=False)
                              for i, c in enumerate(spec.get("containers") or [])],
    }


def is_init_blocked(pod: Mapping) -> bool:
    """The pod's `driver-ready` init container is running (the status init_blocked_status wrote)."""
    st = pod.get("status") or {}
    first = next(iter(st.get("initContainerStatuses") or []), {})
    return st.get("phase") == "Pending" and first.get("name") == DRIVER_READY_INIT and "running" in (
        first.get("state") or {})


class NpuKubelet(SimKubelet):
    """SimKubelet for NPU nodes of the operator v0.3.0: see the module doc."""

    def __init__(self, api: Api, hardware: Mapping[str, Hardware], *, namespace: str = "rbln-system",
                 poll_s: float = 1.0, init_start_s: float = 0.5, stop_grace_s: float = ENDPOINT_STOP_GRACE_S,
                 **kw: Any) -> None:
        super().__init__(api, hardware.keys(), **kw)
        self.init_start_s = init_start_s
        self.stop_grace_s = stop_grace_s
        self._gone: dict[str, dict[str, float]] = {}  # node -> resource -> when its plugin went
        self.hardware = dict(hardware)
        self.namespace = namespace
        self.poll_s = poll_s
        self.blocked: set[tuple[str, str]] = set()  # pods held in Init by driver-ready
        self._blocked_node: dict[tuple[str, str], str] = {}
        self._drivers: dict[str, set[tuple[str, str]]] = {}  # node -> its Ready, non-terminating driver pods
        self._state = threading.Lock()
        self._kick = threading.Event()
        self.advertised: dict[str, dict[str, str]] = {}  # node -> what the stand-in last made it advertise

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "NpuKubelet":
        super().start()
        t = threading.Thread(target=self._plugin_loop, name="npu-kubelet-plugins", daemon=True)
        self._threads.append(t)
        t.start()
        return self

    def stop(self) -> None:
        self._kick.set()
        super().stop()

    # ---- driver-ready ----------------------------------------------------------------------------

    def driver_ready_on(self, node: str) -> bool:
        with self._state:
            return bool(self._drivers.get(node))

    def _consider(self, pod: dict) -> None:
        md, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName")
        if node not in self.nodes:
            return
        key = (md.get("namespace", ""), md.get("name", ""))
        if md.get("namespace") == self.namespace:
            self._kick.set()
        labels = md.get("labels") or {}
        if labels.get(DRIVER_LABEL[0]) == DRIVER_LABEL[1]:
            self._track_driver(node, key, _ready(pod) and not md.get("deletionTimestamp"))
        inits = [c.get("name") for c in spec.get("initContainers") or []]
        if DRIVER_READY_INIT not in inits or md.get("deletionTimestamp"):
            with self._state:
                self.blocked.discard(key)
                self._blocked_node.pop(key, None)
            super()._consider(pod)
            return
        if is_init_blocked(pod):
            if self.driver_ready_on(node):
                self._later(0.0, key, self._init_done)
            return
        if (pod.get("status") or {}).get("phase") in (None, "", "Pending"):
            # driver-ready looks for the file when its container starts, a moment after the pod is bound
            # (by then a driver pod the same DaemonSet sync let go is terminating, its preStop ran)
            self._later(self.init_start_s, key, self._start_init)

    def _track_driver(self, node: str, key: tuple[str, str], ready: bool) -> None:
        with self._state:
            was = bool(self._drivers.get(node))
            pods = self._drivers.setdefault(node, set())
            (pods.add if ready else pods.discard)(key)
            now = bool(pods)
            waiting = [k for k, n in self._blocked_node.items() if n == node] if now and not was else []
        for k in waiting:  # the driver wrote .driver-ctr-ready: driver-ready ends, the pod starts
            self._later(0.0, k, self._init_done)

    def still_selected(self, pod: Mapping) -> bool:
        """Whether the pod's node still carries the labels its nodeSelector asks for. A DaemonSet pod whose node
        they no longer select is about to be deleted by the DaemonSet controller, which on hardware wins the
        race against a container start (image, sandbox, container: seconds); here both are API-speed, so the
        harness settles such races the way hardware does."""
        node = self.api.get("Node", (pod.get("spec") or {}).get("nodeName") or "")
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in ((pod.get("spec") or {}).get("nodeSelector") or {}).items())

    def driver_serving(self, node: str) -> bool:
        """Whether /run/rbln/validations/.driver-ctr-ready is there when an init container looks: a driver pod on
        the node is Ready, not terminating, and still selected by the node's labels (still_selected)."""
        for p in self.api.list("Pod", fields=f"spec.nodeName={node}"):
            md = p.get("metadata") or {}
            if (md.get("labels") or {}).get(DRIVER_LABEL[0]) != DRIVER_LABEL[1] or md.get("deletionTimestamp"):
                continue
            if _ready(p) and self.still_selected(p):
                return True
        return False

    def _start_init(self, key: tuple[str, str]) -> None:
        """driver-ready starts: it ends at once when the node has a Ready driver pod, else it waits (Init:0/N)."""
        ns, name = key
        pod = self.api.get("Pod", name, ns)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        node = pod["spec"]["nodeName"]
        if self.driver_serving(node):
            self._init_done(key)
            return
        with self._state:
            self.blocked.add(key)
            self._blocked_node[key] = node

        def edit(p: dict) -> None:
            if p["metadata"].get("deletionTimestamp") or (p.get("status") or {}).get("phase") not in (None, "",
                                                                                                    "Pending"):
                return
            p["status"] = init_blocked_status(p)

        self.api.mutate("Pod", name, ns, edit, sub="status")
        self.acted += 1

    def _init_done(self, key: tuple[str, str]) -> None:
        """driver-ready found the file: the pod starts, unless it is on its way out (still_selected)."""
        pod = self.api.get("Pod", key[1], key[0])
        if pod is None or pod["metadata"].get("deletionTimestamp") or not self.still_selected(pod):
            return
        with self._state:
            self.blocked.discard(key)
            self._blocked_node.pop(key, None)
        self._run(key, True)

    def _finish_deletion(self, key: tuple[str, str], uid: str | None) -> None:
        super()._finish_deletion(key, uid)
        with self._state:
            self.blocked.discard(key)
            self._blocked_node.pop(key, None)
            for pods in self._drivers.values():
                pods.discard(key)
        self._kick.set()

    # ---- the device plugins ----------------------------------------------------------------------

    def _plugin_loop(self) -> None:
        while not self._stop.is_set():
            self._kick.wait(self.poll_s)
            self._kick.clear()
            if self._stop.is_set():
                return
            try:
                self.sync_plugins()
            except Exception as e:  # noqa: BLE001 - reported through errors; the next round retries
                self.errors.append(f"device plugins: {type(e).__name__}: {e}")

    def sync_plugins(self) -> None:
        """Make each node advertise what its Ready device plugin pods register (one round)."""
        policy = self._policy()
        pods = self.api.list("Pod", self.namespace) if policy is not None else []
        now = time.monotonic()
        for node in sorted(self.nodes):
            want = self.wanted_resources(node, policy, pods)
            obj = self.api.get("Node", node)
            if obj is None:
                continue
            st = obj.get("status") or {}
            have = {f: {k: v for k, v in (st.get(f) or {}).items() if k.startswith(RESOURCE_PREFIX)}
                    for f in ("capacity", "allocatable")}
            gone = self._gone.setdefault(node, {})
            capacity, allocatable = dict(want), dict(want)
            for res, n in have["capacity"].items():
                if res in want:
                    continue
                since = gone.setdefault(res, now)
                if now - since < self.stop_grace_s:  # unregistered: unhealthy (0) until the grace period ends
                    capacity[res], allocatable[res] = n, "0"
            for res in list(gone):
                if res in want or res not in capacity:
                    del gone[res]
            self.advertised[node] = want
            if have["capacity"] == capacity and have["allocatable"] == allocatable:
                continue
            patch = {f: {**{k: None for k in have[f] if k not in new}, **new}
                     for f, new in (("capacity", capacity), ("allocatable", allocatable))}
            self.api.patch("Node", node, {"status": patch}, sub="status")

    def wanted_resources(self, node: str, policy: Mapping | None, pods: Iterable[Mapping]) -> dict[str, str]:
        if policy is None:
            return {}
        spec = policy.get("spec") or {}
        base = spec.get("name") or "rbln"
        hw = self.hardware[node]
        want: dict[str, str] = {}
        for comp, key in PLUGINS.items():
            ds = f"{base}-{comp}"
            serving = any((p.get("spec") or {}).get("nodeName") == node and _controller(p) == ds and _ready(p)
                          and not (p.get("metadata") or {}).get("deletionTimestamp") for p in pods)
            if not serving:
                continue
            for entry in (spec.get(key) or {}).get("resourceList") or []:
                if hw.product in (entry.get("productCardNames") or []):
                    want[f"{entry.get('resourcePrefix') or 'rebellions.ai'}/{entry['resourceName']}"] = str(hw.count)
                    break
        return want

    def _policy(self) -> dict | None:
        try:
            items = self.api.list("RBLNClusterPolicy")
        except ApiFailure as e:
            if e.status == 404:
                return None
            raise
        live = [p for p in items if (p.get("status") or {}).get("state") != "ignored"] or items
        live.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
        return live[0] if live else None
