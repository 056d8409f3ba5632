"""A simulated RBLN NPU operator (plus the DaemonSet controller and the device plugins) against a FakeApiServer.

It behaves like one operator release (``tests/fakes/releases.py``: ``V0_3_0`` or ``NEWER``), so tests
can check rblnctl against each layout. What it does, per node carrying an NFD Rebellions label:

* Mode: the node's ``rebellions.ai/npu.workload.config`` when valid, else the active policy's
  ``workloadType``. Without an RBLNClusterPolicy it does nothing at all, like the real operator.
* Labels: ``npu.present=true``; deploy labels of the mode are filled in as ``"true"`` only where the
  key is missing (a user's ``"false"`` opt-out survives), keys of components the mode does not
  deploy are removed; ``npu.deploy.skip=true`` (releases that have it) removes every deploy label;
  a node whose NFD label went away gets ``npu.present=false`` and loses its deploy labels.
* Pods: one per component of the mode that the policy enables (a missing ``enabled`` is false, as
  the operator's ``IsEnabled()``) and whose deploy label is ``"true"``; named after the release's
  DaemonSet, labelled as the release labels them, owned by that DaemonSet, Running, and Ready after
  ``ready_delay_s`` (per component: ``component_delays``). Pods the labels no longer select are
  deleted (gracefully, by the server's deletion rules).
* Advertising: when the mode's device plugin pod is Ready its resource appears in capacity and
  allocatable (the release's name for the node's product: ``resource_names`` of the release; a
  product the v0.3.0 resourceList does not cover is not advertised); the other mode's resources go
  as soon as the mode changes, and the mode's own go when the policy disables its device plugin (the
  kubelet drops a plugin's devices when it unregisters). With DRA, a Ready dra-kubelet-plugin publishes
  a ResourceSlice of ``rbln<N>`` devices (container) or ``vfio-<pci>`` devices (vm).
* ``kubelet_lag_steps`` (0: none): a kubelet that lags behind the operator. A resource that should go (the
  old mode's or method's plugin left) stays in capacity and allocatable for that many more reconciles of the
  node, as the real kubelet reports its device plugins' resources only at its next node status update
  (``nodeStatusUpdateFrequency``, 10 s by default: kubernetes pkg/kubelet/apis/config/v1beta1/defaults.go; the
  status setters read the device manager's capacity then, pkg/kubelet/nodestatus/setters.go MachineInfo), while
  the plugin's pod is already gone. ``lagging`` holds what is reported late, per (node, resource): the steps left.
  In auto mode a lagging node is reconciled again after ``kubelet_period_s``.
* DeviceClasses: while the policy enables draKubeletPlugin the operator keeps the class named after
  ``driverName`` and (NEWER) the passthrough class ``vfio-<driverName>``; it deletes the ones it made
  when draKubeletPlugin is disabled (v0.3.0 dra_kubelet_plugin.go CleanUp).
* NEWER only: while a vfio-manager pod is not Ready, its driver manager holds the node's other vm
  deploy labels at ``paused-for-driver-upgrade`` and restores them when it is.
* ``roll(node, component)`` deletes and recreates a component pod (a DaemonSet rollout).
* V0_3_0 only (``Release.sandbox_waits_for_driver``): a sandbox-device-plugin pod created while no Ready,
  non-terminating driver pod runs on its node stays in Init for good (phase Pending, init container
  ``driver-ready`` running): chart v0.3.0's init container waits for the driver pod's
  ``/run/rbln/validations/.driver-ctr-ready``, and vm-passthrough nodes never get a driver pod. Its
  resources are then never advertised.
* V0_3_0 only (``Release.measured``, as the real operator v0.3.0 does): every enabled component's DaemonSet is
  created up front (desired 0 where no node selects it), with the release's init containers; the driver's
  DaemonSet is per node pool; the policy's status is written: ``state: ready`` and a Ready condition whatever
  happens, and per policy DaemonSet a ``status.components[]`` entry (``state: ready`` too) whose
  ``DaemonSetReady`` condition follows the DaemonSet (desired > 0, all Ready, none unavailable).

It acts like a controller, only through the API server's REST interface (tests/cluster/client.Api, the
harness's admin client), so the same simulation runs against the project's fake and a real kube-apiserver:
node labels by a resourceVersion-guarded merge PATCH, capacity/allocatable by ``PATCH nodes/NAME/status``,
component pods created (``POST``, then their status by ``PUT pods/NAME/status``: a real server starts every
pod Pending) and deleted (``DELETE``, graceful: a kubelet finishes it, the fake's ``deletion_delay_s`` or a
SimKubelet), DaemonSets and their status, ResourceSlices and DeviceClasses by their REST paths. Its pods carry
the SimKubelet annotation ``EXTERNAL``: it reports their status itself (``ready_delay_s``, stuck in Init), and
a SimKubelet on the same nodes only confirms their deletion.

What it reads and what makes it reconcile: on the fake (a FakeApiServer, or a FakeBackend) the server's
synchronous ``on_change`` hook, which runs before the reply of the write that caused it, so ``wait_idle()``
right after a client call is exact; from that hook it also keeps what it reads (one LIST per kind at start,
then every change: an informer's cache, so a step reads without a request and only its writes go over HTTP).
On any other server (a RealBackend, or an Api) a step LISTs what it reads, and watches of the nodes, the
policies and its namespace's pods (tests/cluster/watcher.py) make it reconcile; ``wait_idle()`` also waits
until no event has arrived for ``settle_s``. A write refused with 409 (someone else wrote first) or 404 (gone
meanwhile) is not an error: the step ends and runs again.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.backend import harness_client
from tests.cluster.client import ApiFailure
from tests.cluster.kubelet import EXTERNAL
from tests.fakes import objects as o
from tests.fakes.releases import DEVICE_IDS, NEWER, POLICY_KEYS, Release

ALL_COMPONENTS = ("driver", "device-plugin", "dra-kubelet-plugin", "metrics-exporter", "rbln-daemon", "rbln-smd",
                  "npu-feature-discovery", "operator-validator", "container-toolkit", "vfio-manager",
                  "sandbox-device-plugin")
SKIP = "skip"
PAUSED = "paused-for-driver-upgrade"
DRA_DRIVER = "npu.rebellions.ai"
COMPONENT_ANNOTATION = "fake.rblnctl.io/component"  # on the DaemonSets (and DeviceClasses) it made


@dataclass
class _Snapshot:
    """What one step reads up front (LISTs), kept current with the step's own writes."""

    nodes: list[dict]
    pods: dict[str, dict]  # the namespace's pods by name
    daemonsets: dict[str, dict]
    slices: dict[str, dict] | None  # None: resource.k8s.io not served
    nodes_by_name: dict[str, dict] = field(default_factory=dict)


class _Retry(Exception):
    """Someone else wrote first (409) or the object went (404): end this step, run another."""


class _Cache:
    """What the operator reads, kept from the fake's change hook as an informer keeps it from a watch: filled by one
    LIST per kind at start, then every committed change (the newer resourceVersion wins: the hook's callbacks of two
    commits may run in either order). Reads cost no request, and a write's own change is in it before its reply."""

    KINDS = ("Node", "Pod", "DaemonSet", "ResourceSlice", "DeviceClass", "RBLNClusterPolicy")

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.served: set[str] = set()  # kinds the server serves (a LIST answered)
        self._objs: dict[tuple[str, str, str], dict] = {}
        self._lock = threading.Lock()

    def wanted(self, obj: dict) -> bool:
        kind = obj.get("kind")
        return kind in self.KINDS and (kind not in ("Pod", "DaemonSet") or
                                       (obj.get("metadata") or {}).get("namespace") == self.namespace)

    def apply(self, event: str, obj: dict) -> None:
        if not self.wanted(obj):
            return
        md = obj["metadata"]
        key = (obj["kind"], md.get("namespace") or "", md["name"])
        rv = int(md.get("resourceVersion") or 0)
        with self._lock:
            cur = self._objs.get(key)
            if cur is not None and int(cur["metadata"].get("resourceVersion") or 0) > rv:
                return  # a later change is in already
            if event == "DELETED":
                self._objs.pop(key, None)
            else:
                self._objs[key] = obj

    def fill(self, api: Any) -> None:
        for kind in self.KINDS:
            try:
                items = api.list(kind, self.namespace if kind in ("Pod", "DaemonSet") else None)
            except ApiFailure as e:
                if e.status != 404:  # not served: a CRD or API group not installed
                    raise
                continue
            self.served.add(kind)
            for obj in items:
                self.apply("ADDED", obj)

    def list(self, kind: str) -> list[dict]:
        with self._lock:
            objs = [copy.deepcopy(o) for (k, _, _), o in self._objs.items() if k == kind]
        return sorted(objs, key=lambda o: o["metadata"]["name"])

    def get(self, kind: str, name: str) -> dict | None:
        with self._lock:
            for (k, _, n), o in self._objs.items():
                if k == kind and n == name:
                    return copy.deepcopy(o)
        return None


class SimulatedOperator:
    def __init__(self, cluster: Any, *, namespace: str = "rbln-system", ready_delay_s: float = 0.0,
                 auto: bool = True, policy_name: str | None = None, release: Release = NEWER,
                 component_delays: dict[str, float] | None = None, settle_s: float = 0.3,
                 kubelet_lag_steps: int = 0, kubelet_period_s: float = 0.05):
        self.api, self.fake = harness_client(cluster)
        self.kubelet_lag_steps = kubelet_lag_steps
        self.kubelet_period_s = kubelet_period_s
        #: (node, resource) -> reconciles left before the lagging kubelet stops reporting it
        self.lagging: dict[tuple[str, str], int] = {}
        self.namespace = namespace
        self.ready_delay_s = ready_delay_s
        self.component_delays = dict(component_delays or {})
        self.auto = auto
        self.policy_name = policy_name
        self.release = release
        self.settle_s = settle_s
        #: node name -> "container" | "vm-passthrough" | "skip" | "absent" (NFD label gone)
        self.converged_modes: dict[str, str] = {}
        self.errors: list[str] = []
        #: sandbox plugin pods created stuck in Init (release.sandbox_waits_for_driver, no driver pod on the node)
        self.stuck_in_init: set[str] = set()
        self._step_lock = threading.RLock()
        self._cond = threading.Condition()
        self._dirty = False
        self._busy = False
        self._timers: set[threading.Timer] = set()
        self._stopped = threading.Event()
        self._worker: threading.Thread | None = None
        self._unsubscribe: Any = None
        self._watchers: list[Any] = []
        self._released: set[tuple[str, str]] = set()  # (node, component) make_ready() let go
        # On the fake: what it reads, kept from the change hook (_Cache); elsewhere a LIST each step.
        self._cache = _Cache(namespace) if self.fake is not None else None

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> "SimulatedOperator":
        self._informed()
        self.step()
        if self.auto:
            if self.fake is None:
                self._start_watches()
            self._worker = threading.Thread(target=self._run, name="simulated-operator", daemon=True)
            self._worker.start()
        return self

    def _informed(self) -> None:
        """On the fake: subscribe to its change hook, then fill the cache (in that order: no change is missed)."""
        if self._cache is not None and self._unsubscribe is None and not self._stopped.is_set():
            self._unsubscribe = self.fake.on_change(self._on_change)
            self._cache.fill(self.api)

    def _start_watches(self) -> None:
        from tests.cluster.watcher import Watcher

        for kind, ns in (("Node", None), ("RBLNClusterPolicy", None), ("Pod", self.namespace)):
            w = Watcher(self.api, kind, self._on_change, namespace=ns, errors=self.errors,
                        name=f"simulated-operator-{kind.lower()}")
            self._watchers.append(w.start())

    def stop(self) -> None:
        self._stopped.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for w in self._watchers:
            w.stop()
        self._watchers.clear()
        with self._cond:
            timers = list(self._timers)
            self._timers.clear()
            self._cond.notify_all()
        for t in timers:
            t.cancel()
        if self._worker is not None:
            self._worker.join(timeout=5)
            self._worker = None

    def __enter__(self) -> "SimulatedOperator":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no reconcile is queued or running and no readiness timer is pending (and, when it learns of
        changes from watches, no event arrived for ``settle_s``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                quiet = self.fake is not None or not self._watchers or \
                    time.monotonic() - max(w.last_event_at for w in self._watchers) >= self.settle_s
                if quiet and not (self._dirty or self._busy or self._timers):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))

    # ---- auto mode ----------------------------------------------------------------------------

    def _on_change(self, event: str, obj: dict) -> None:
        if self._cache is not None:
            self._cache.apply(event, obj)
            if not self.auto:
                return
        kind = obj.get("kind")
        relevant = kind in ("Node", "RBLNClusterPolicy") or (
            kind == "Pod" and event == "DELETED" and obj["metadata"].get("namespace") == self.namespace)
        if relevant and not self._stopped.is_set():
            self._kick()
            if kind == "RBLNClusterPolicy" and self.fake is not None and not self._from_harness():
                self._reconcile_now()

    def _from_harness(self) -> bool:
        req = self.fake.current_request()
        return req is not None and req.from_harness

    def _reconcile_now(self) -> None:
        """On the fake, a policy change by the client under test (or the test) is reconciled before its reply (the
        hook runs on that request's thread): rblnctl polls a policy's rollout once a second, and a reconcile that
        races its first look would cost each such run a second. A few steps, while each queues another at once
        (not the readiness timers); node changes are left to the worker, rblnctl watches those."""
        for _ in range(3):
            with self._cond:
                if not self._dirty:
                    return
                self._dirty = False
                self._busy = True
            self._busy_step()

    def _kick(self) -> None:
        with self._cond:
            self._dirty = True
            self._cond.notify_all()

    def _run(self) -> None:
        while not self._stopped.is_set():
            with self._cond:
                while not self._dirty and not self._stopped.is_set():
                    self._cond.wait(0.1)
                if self._stopped.is_set():
                    return
                self._dirty = False
                self._busy = True
            self._busy_step()

    def _busy_step(self) -> None:
        """One reconcile step taken by a caller that raised `_busy` (wait_idle waits it out), lowered after."""
        try:
            self._step_quietly()
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _step_quietly(self) -> None:
        try:
            self.step()
        except Exception:  # noqa: BLE001 - recorded in .errors by step()
            pass

    # ---- reconcile ----------------------------------------------------------------------------

    def policy(self) -> dict | None:
        if self._cache is not None:
            policies = self._cache.list("RBLNClusterPolicy")
        else:
            try:
                policies = self.api.list("RBLNClusterPolicy")
            except ApiFailure as e:
                if e.status == 404:  # the CRD is not installed
                    return None
                raise
        if self.policy_name:
            policies = [p for p in policies if p["metadata"]["name"] == self.policy_name]
        live = [p for p in policies if (p.get("status") or {}).get("state") != "ignored"] or policies
        live.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "~", p["metadata"]["name"]))
        return live[0] if live else None

    def step(self) -> None:
        """Converge every node once (synchronously)."""
        with self._step_lock:
            self._informed()
            try:
                policy = self.policy()
                if policy is None:
                    return
                snap = self._snapshot()
                for node in snap.nodes:
                    self._converge(node, policy, snap)
                if self.release.measured:  # the real v0.3.0 creates every enabled component's DaemonSet up front
                    for comp in self._policy_components(policy):
                        self._ensure_daemonset(comp, self._base(policy), snap)
                self._sync_daemonsets(snap)
                if self.release.measured:
                    self._sync_policy_status(policy, snap)
                self._sync_device_classes(policy)
            except _Retry:
                self._kick()
            except ApiFailure as e:
                if e.status in (404, 409):
                    self._kick()
                    return
                self.errors.append(repr(e))
                raise
            except Exception as exc:  # noqa: BLE001 - surfaced through .errors
                self.errors.append(repr(exc))
                raise

    def _snapshot(self) -> _Snapshot:
        if self._cache is not None:
            c = self._cache
            nodes = c.list("Node")
            return _Snapshot(nodes=nodes, pods={p["metadata"]["name"]: p for p in c.list("Pod")},
                             daemonsets={d["metadata"]["name"]: d for d in c.list("DaemonSet")},
                             slices={s["metadata"]["name"]: s for s in c.list("ResourceSlice")}
                             if "ResourceSlice" in c.served else None,
                             nodes_by_name={n["metadata"]["name"]: n for n in nodes})
        try:
            slices: dict[str, dict] | None = {s["metadata"]["name"]: s for s in self.api.list("ResourceSlice")}
        except ApiFailure as e:
            if e.status != 404:
                raise
            slices = None
        nodes = self.api.list("Node")
        return _Snapshot(nodes=nodes,
                         pods={p["metadata"]["name"]: p for p in self.api.list("Pod", self.namespace)},
                         daemonsets={d["metadata"]["name"]: d for d in self.api.list("DaemonSet", self.namespace)},
                         slices=slices, nodes_by_name={n["metadata"]["name"]: n for n in nodes})

    def desired_mode(self, node: dict, policy: dict | None) -> str | None:
        labels = node["metadata"].get("labels") or {}
        if not any(labels.get(k) == "true" for k in o.NFD_NPU_LABELS):
            return None
        if self.release.has_deploy_skip and labels.get(o.DEPLOY_SKIP_LABEL) == "true":
            return SKIP
        default = ((policy or {}).get("spec") or {}).get("workloadType") or o.MODE_CONTAINER
        if default not in (o.MODE_CONTAINER, o.MODE_VM):
            default = o.MODE_CONTAINER
        value = labels.get(o.WORKLOAD_LABEL)
        return value if value in (o.MODE_CONTAINER, o.MODE_VM) else default

    @staticmethod
    def enabled(policy: dict | None, component: str) -> bool:
        key = POLICY_KEYS.get(component)
        if key is None:
            return True
        spec = ((policy or {}).get("spec") or {}).get(key) or {}
        if key == "driver" and "enabled" not in spec:
            return spec.get("useRBLNDriverCRD") is True
        return spec.get("enabled") is True

    def _base(self, policy: dict | None) -> str:
        return ((policy or {}).get("spec") or {}).get("name") or "rbln"

    def _base(self, policy: dict | None) -> str:
        return ((policy or {}).get("spec") or {}).get("name") or "rbln"

    def _converge(self, node: dict, policy: dict, snap: _Snapshot) -> None:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        mode = self.desired_mode(node, policy)
        if mode is None and labels.get(o.NPU_PRESENT_LABEL) != "true" and name not in self.converged_modes:
            return  # never an NPU node
        comps = self.release.components(mode) if mode in (o.MODE_CONTAINER, o.MODE_VM) else ()
        product, count = self._hardware(node)
        base = self._base(policy)

        new_labels = {k: v for k, v in labels.items()
                      if not k.startswith(o.DEPLOY_LABEL_PREFIX) or k == o.DEPLOY_SKIP_LABEL
                      or k[len(o.DEPLOY_LABEL_PREFIX):] in comps}
        for c in comps:
            new_labels.setdefault(o.DEPLOY_LABEL_PREFIX + c, "true")
        new_labels[o.NPU_PRESENT_LABEL] = "false" if mode is None else "true"
        if self.release.pauses_labels and mode == o.MODE_VM:
            self._pause(name, policy, new_labels, snap)

        keep = self._advertised(mode, policy, product)
        keep |= self._lagging_kubelet(name, node, keep)
        if new_labels != labels:
            change: dict[str, str | None] = {k: v for k, v in new_labels.items() if labels.get(k) != v}
            change.update({k: None for k in labels if k not in new_labels})
            node = self.api.patch("Node", name, {"metadata": {"labels": change,
                                                               "resourceVersion": node["metadata"]["resourceVersion"]}})
        stale = {f: {k: None for k in (node.get("status") or {}).get(f) or {}
                     if k.startswith("rebellions.ai/") and k not in keep} for f in ("capacity", "allocatable")}
        if any(stale.values()):  # the kubelet drops a device plugin's resources when it unregisters
            node = self.api.patch("Node", name, {"status": {f: v for f, v in stale.items() if v}}, sub="status")
        snap.nodes_by_name[name] = node
        self.converged_modes[name] = mode if mode is not None else "absent"

        # Pods: delete the ones the node no longer selects, create the missing ones.
        wanted = {c for c in comps if self.enabled(policy, c) and new_labels.get(o.DEPLOY_LABEL_PREFIX + c) == "true"}
        for p in list(snap.pods.values()):
            comp = self._component(p, snap)
            if (p.get("spec") or {}).get("nodeName") != name or comp is None:
                continue
            if comp not in wanted and not p["metadata"].get("deletionTimestamp"):
                self._delete_pod(p["metadata"]["name"], snap)
        for comp in sorted(wanted):
            pod_name = self._pod_name(comp, name, base, snap)
            existing = snap.pods.get(pod_name)
            if existing is not None:
                if self._is_ready(existing) and not existing["metadata"].get("deletionTimestamp"):
                    self._publish(name, comp, policy, snap)
                continue  # running, or still terminating: created after its DELETED event
            self._create_component_pod(comp, name, base, snap)
        self._sync_slices(name, mode, policy, count, wanted, snap)

    def _delete_pod(self, pod_name: str, snap: _Snapshot | None = None) -> None:
        """DELETE with the pod's default grace period; the snapshot then holds what is left (a Terminating pod)."""
        self.api.delete("Pod", pod_name, self.namespace)
        if snap is not None:
            left = self._cache.get("Pod", pod_name) if self._cache is not None else \
                self.api.get("Pod", pod_name, self.namespace)
            if left is None:
                snap.pods.pop(pod_name, None)
            else:
                snap.pods[pod_name] = left

    def _lagging_kubelet(self, name: str, node: dict, keep: set[str]) -> set[str]:
        """The resources that should go but that a lagging kubelet (kubelet_lag_steps) still reports this step."""
        if self.kubelet_lag_steps <= 0:
            return set()
        alloc = (node.get("status") or {}).get("allocatable") or {}
        going = {k for k in alloc if k.startswith("rebellions.ai/") and k not in keep}
        left = {k: self.lagging.get((name, k), self.kubelet_lag_steps) for k in going}
        self.lagging = {key: n for key, n in self.lagging.items() if key[0] != name}
        self.lagging.update({(name, k): n - 1 for k, n in left.items() if n > 0})
        late = {k for k, n in left.items() if n > 0}
        if late and self.auto:
            self._later(self.kubelet_period_s, self._kick)
        return late

    def _pause(self, node: str, policy: dict, labels: dict[str, str], snap: _Snapshot) -> None:
        """NEWER: the vfio-manager's driver manager holds the other vm labels while it is not Ready."""
        vfio = snap.pods.get(self._pod_name("vfio-manager", node, self._base(policy), snap))
        working = self.enabled(policy, "vfio-manager") and (vfio is None or not self._is_ready(vfio))
        for c in ("sandbox-device-plugin", "dra-kubelet-plugin"):
            key = o.DEPLOY_LABEL_PREFIX + c
            if working and labels.get(key) == "true":
                labels[key] = PAUSED
            elif not working and labels.get(key) == PAUSED:
                labels[key] = "true"

    def _advertised(self, mode: str | None, policy: dict, product: str) -> set[str]:
        if mode == o.MODE_CONTAINER and self.enabled(policy, "device-plugin"):
            res = self.release.container_resource(policy, product)
        elif mode == o.MODE_VM and self.enabled(policy, "sandbox-device-plugin"):
            res = self.release.vm_resource(policy, product)
        else:
            res = None
        return {res} if res else set()

    def _sync_device_classes(self, policy: dict) -> None:
        """The DRA DeviceClasses exist while draKubeletPlugin is enabled; the ones the operator made go with it."""
        driver = ((policy.get("spec") or {}).get("draKubeletPlugin") or {}).get("driverName") or DRA_DRIVER
        names = [driver] + ([f"vfio-{driver}"] if self.release.dra_in_vm else [])
        on = self.enabled(policy, "dra-kubelet-plugin")
        for name in names:
            if self._cache is not None:
                if "DeviceClass" not in self._cache.served:
                    return
                existing = self._cache.get("DeviceClass", name)
            else:
                try:
                    existing = self.api.get("DeviceClass", name)
                except ApiFailure as e:
                    if e.status == 404:  # resource.k8s.io not served
                        return
                    raise
            mine = existing is not None and (existing["metadata"].get("annotations") or {}).get(
                COMPONENT_ANNOTATION) == "dra-kubelet-plugin"
            if on and existing is None:
                dc = o.deviceclass(name, driver=driver)
                dc["metadata"]["annotations"] = {COMPONENT_ANNOTATION: "dra-kubelet-plugin"}
                try:
                    self.api.seed(dc)
                except ApiFailure as e:
                    if e.status != 409:  # raced with another step
                        raise
            elif not on and mine:
                self.api.delete("DeviceClass", name)

    def _pod_name(self, comp: str, node: str, base: str, snap: _Snapshot | None = None) -> str:
        return f"{self._ds_name(comp, node, base, snap)}-{node}"

    def _ds_name(self, comp: str, node: str | None, base: str, snap: _Snapshot | None = None) -> str:
        """The component's DaemonSet; the driver's depends on the node's pool (v0.3.0: one per os/kernel)."""
        node_obj = self._node(node, snap) if comp == "driver" and node else None
        return self.release.daemonset_name(comp, base, node=node_obj)

    def _node(self, name: str, snap: _Snapshot | None) -> dict | None:
        if snap is not None and name in snap.nodes_by_name:
            return snap.nodes_by_name[name]
        return self._cache.get("Node", name) if self._cache is not None else self.api.get("Node", name)

    def _policy_components(self, policy: dict) -> list[str]:
        """The components the policy enables that the operator runs as policy DaemonSets (the driver is the
        RBLNDriver's), in the order the real v0.3.0 lists them in status.components."""
        order = ("vfio-manager", "npu-feature-discovery", "metrics-exporter", self.release.daemon, "device-plugin",
                 "sandbox-device-plugin", "dra-kubelet-plugin", "container-toolkit", "operator-validator")
        return [c for c in order if self.enabled(policy, c)]

    def _sync_policy_status(self, policy: dict, snap: _Snapshot) -> None:
        """Write status as the real v0.3.0 does: a status.components[] entry per policy DaemonSet whose
        DaemonSetReady condition follows it (ready: desired > 0, all Ready, none unavailable) while the entry's
        `state`, the top-level `state` and the Ready condition say ready regardless."""
        old = policy.get("status") or {}
        before = {c.get("name"): c for c in old.get("components") or []}
        entries = []
        base = self._base(policy)
        for comp in self._policy_components(policy):
            name = self.release.daemonset_name(comp, base)
            ds = snap.daemonsets.get(name) or {}
            st = ds.get("status") or {}
            desired, ready = int(st.get("desiredNumberScheduled") or 0), int(st.get("numberReady") or 0)
            unavailable = int(st.get("numberUnavailable") or 0)
            ok = desired > 0 and ready == desired and unavailable == 0
            ref = f"{self.namespace}/{name}"
            cond = {"type": "DaemonSetReady", "status": "True" if ok else "False",
                    "reason": "DaemonSetAllPodsReady" if ok else "DaemonSetAllPodsNotReady",
                    "message": f"All pods in DaemonSet {ref} are running" if ok else
                    f"DaemonSet {ref} is progressing: {ready} of {desired} pods are Ready ({unavailable} unavailable)",
                    "observedGeneration": int((ds.get("metadata") or {}).get("generation") or 1)}
            prev = next(iter((before.get(name) or {}).get("condition") or []), {})
            same = {k: prev.get(k) for k in cond} == cond
            cond["lastTransitionTime"] = prev.get("lastTransitionTime") if same else o.now_ts()
            entries.append({"name": name, "namespace": self.namespace, "state": "ready", "condition": [cond]})
        n = len(entries)
        conditions = [{"type": "ComponentsReady", "status": "True", "reason": "AllComponentsReady",
                       "message": "All managed components are Ready"},
                      {"type": "Ready", "status": "True", "reason": "AllComponentsReady",
                       "message": f"All components are Ready ({n}/{n})"}]
        prev_conds = {c.get("type"): c for c in old.get("conditions") or []}
        for c in conditions:
            p = prev_conds.get(c["type"]) or {}
            c["lastTransitionTime"] = p.get("lastTransitionTime") or o.now_ts()
        status = {**old, "state": "ready", "conditions": conditions, "components": entries}
        if status != old:  # the whole status, as the operator's status update writes it
            self.api.mutate("RBLNClusterPolicy", policy["metadata"]["name"], None,
                            lambda q: q.update(status=status), sub="status")

    def _component(self, pod: dict, snap: _Snapshot) -> str | None:
        ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("kind") == "DaemonSet"), None)
        if ref is None:
            return None
        ds = snap.daemonsets.get(ref["name"])
        comp = ((ds or {}).get("metadata", {}).get("annotations") or {}).get(COMPONENT_ANNOTATION)
        return comp if comp in ALL_COMPONENTS else None

    @staticmethod
    def _hardware(node: dict) -> tuple[str, int]:
        md = node["metadata"]
        labels, ann = md.get("labels") or {}, md.get("annotations") or {}
        product = ann.get(o.NPU_PRODUCT_ANNOTATION) or labels.get(o.NPU_PRODUCT_LABEL) or "RBLN-CA22"
        count = ann.get(o.NPU_COUNT_ANNOTATION) or labels.get(o.NPU_COUNT_LABEL) or "1"
        return product, int(count)

    @staticmethod
    def _is_ready(p: dict) -> bool:
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (p.get("status") or {}).get("conditions") or [])

    def _ensure_daemonset(self, comp: str, base: str, snap: _Snapshot, node: str | None = None) -> dict:
        node_obj = snap.nodes_by_name.get(node) if comp == "driver" and node else None
        ds_name = self.release.daemonset_name(comp, base, node=node_obj)
        ds = snap.daemonsets.get(ds_name)
        if ds is None:
            labels = self.release.pod_labels(comp, base, node=node_obj)
            want = o.daemonset(self.namespace, ds_name, labels=labels,
                               node_selector=self.release.node_selector(comp, node_obj), desired=0, ready=0)
            inits = self.release.init_containers(comp)
            if inits:
                want["spec"]["template"]["spec"]["initContainers"] = [
                    {"name": n, "image": f"docker.io/rebellions/rbln-{comp}:latest"} for n in inits]
            want["metadata"].setdefault("annotations", {})[COMPONENT_ANNOTATION] = comp
            # a container name is a DNS label: rbln-driver-ubuntu22.04 is not (a real server refuses it)
            want["spec"]["template"]["spec"]["containers"][0]["name"] = comp
            try:
                want.pop("status")  # the DaemonSet controller's count comes with its pods (_sync_daemonsets)
                ds = self.api.create(want)
            except ApiFailure as e:
                if e.status != 409:  # raced with another step
                    raise
                ds = self.api.get("DaemonSet", ds_name, self.namespace)
                if ds is None:
                    raise _Retry() from e
            snap.daemonsets[ds_name] = ds
        return ds

    def _create_component_pod(self, comp: str, node: str, base: str, snap: _Snapshot) -> None:
        ds = self._ensure_daemonset(comp, base, snap, node)
        pod_name = self._pod_name(comp, node, base, snap)
        delay = 0.0 if (node, comp) in self._released else self.component_delays.get(comp, self.ready_delay_s)
        stuck = comp == "sandbox-device-plugin" and self.release.sandbox_waits_for_driver and \
            not self._driver_marker(node, base, snap)
        ready_now = delay <= 0 and not stuck
        template = ds["spec"]["template"]
        p = o.pod(self.namespace, pod_name, node=node, labels=dict(template["metadata"]["labels"]),
                  ready=ready_now, image=f"docker.io/rebellions/rbln-{comp}:latest",
                  node_selector=dict(template["spec"].get("nodeSelector") or {}), annotations={EXTERNAL: "true"})
        p["metadata"]["ownerReferences"] = [o.owner_ref("DaemonSet", ds["metadata"]["name"], self.namespace,
                                                        uid=ds["metadata"].get("uid"))]
        if template["spec"].get("initContainers"):
            p["spec"]["initContainers"] = [dict(c) for c in template["spec"]["initContainers"]]
        if stuck:  # v0.3.0: `driver-ready` waits for a file only the driver pod writes; none runs here
            o.set_pod_initializing(p, ("driver-ready", "vfio-bind-checker"), running="driver-ready")
        try:
            snap.pods[pod_name] = self._create_pod(p)
        except ApiFailure as e:
            if e.status == 409:  # raced with another step
                return
            raise
        if stuck:
            self.stuck_in_init.add(pod_name)
        elif ready_now:
            self._kick()
        else:
            self._later(delay, self._become_ready, pod_name)

    def _create_pod(self, pod: dict) -> dict:
        """Create the pod (a server starts it Pending), then report the status it carries as its kubelet would
        (pods/status, from the created resourceVersion; read again if someone wrote meanwhile)."""
        status = pod.pop("status")
        created = self.api.create(pod)
        try:
            return self.api.update({**created, "status": status}, sub="status")
        except ApiFailure as e:
            if e.status != 409:
                raise
        md = created["metadata"]
        return self.api.mutate("Pod", md["name"], md["namespace"], lambda q: q.update(status=status),
                               sub="status") or created

    def _driver_marker(self, node: str, base: str, snap: _Snapshot) -> bool:
        """/run/rbln/validations/.driver-ctr-ready exists on `node`: a driver pod runs there, Ready (its startup
        probe wrote the file) and not terminating (its preStop removes it)."""
        p = snap.pods.get(self._pod_name("driver", node, base, snap))
        return p is not None and self._is_ready(p) and not p["metadata"].get("deletionTimestamp")

    def make_ready(self, node: str, component: str) -> None:
        """The component's pod on `node` becomes Ready now, or as soon as it is created, whatever its delay: a test
        decides when (pair it with a long ``component_delays`` entry)."""
        with self._cond:
            self._released.add((node, component))
        pod = self._pod_name(component, node, self._base(self.policy()))
        if self.api.get("Pod", pod, self.namespace) is not None:
            self._become_ready(pod)
        self._kick()

    def roll(self, node: str, component: str) -> None:
        """Delete the component's pod on `node` (the DaemonSet then recreates it): a rollout."""
        policy = self.policy()
        self._delete_pod(self._pod_name(component, node, self._base(policy)))
        self._kick()

    def _later(self, delay: float, fn: Any, *args: Any) -> None:
        def run() -> None:
            try:
                if not self._stopped.is_set():
                    fn(*args)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(repr(exc))
            finally:
                with self._cond:
                    self._timers.discard(timer)
                    self._cond.notify_all()

        timer = threading.Timer(delay, run)
        timer.daemon = True
        with self._cond:
            self._timers.add(timer)
        timer.start()

    def _become_ready(self, pod_name: str) -> None:
        def edit(q: dict) -> None:
            if not q["metadata"].get("deletionTimestamp"):
                o.set_pod_ready(q, True)

        self.api.mutate("Pod", pod_name, self.namespace, edit, sub="status")
        if self.auto:
            self._kick()  # one reconcile for every pod that became Ready meanwhile
        else:
            self._step_quietly()

    def _publish(self, node_name: str, comp: str, policy: dict, snap: _Snapshot) -> None:
        """The device plugin of the node's current mode registered: advertise its resource."""
        node = snap.nodes_by_name.get(node_name)
        if node is None:
            return
        mode = self.converged_modes.get(node_name)
        product, count = self._hardware(node)
        if comp == "device-plugin" and mode == o.MODE_CONTAINER:
            key = self.release.container_resource(policy, product)
        elif comp == "sandbox-device-plugin" and mode == o.MODE_VM:
            key = self.release.vm_resource(policy, product)
        else:
            return
        if key is None:
            return  # a product its resourceList does not cover is never advertised
        st = node.get("status") or {}
        if all((st.get(f) or {}).get(key) == str(count) for f in ("capacity", "allocatable")):
            return
        snap.nodes_by_name[node_name] = self.api.patch(
            "Node", node_name, {"status": {f: {key: str(count)} for f in ("capacity", "allocatable")}}, sub="status")

    def _sync_slices(self, node: str, mode: str | None, policy: dict, count: int, wanted: set[str],
                     snap: _Snapshot) -> None:
        """A Ready dra-kubelet-plugin publishes the node's devices in the mode's form; otherwise no slice."""
        if snap.slices is None:
            return  # resource.k8s.io is not served
        name = f"{node}-{DRA_DRIVER}"
        existing = snap.slices.get(name)
        pod = snap.pods.get(self._pod_name("dra-kubelet-plugin", node, self._base(policy), snap))
        serving = ("dra-kubelet-plugin" in wanted and pod is not None and self._is_ready(pod)
                   and not pod["metadata"].get("deletionTimestamp"))
        if not serving:
            if existing is not None:
                self.api.delete("ResourceSlice", name)
                snap.slices.pop(name, None)
            return
        product, _ = self._hardware(snap.nodes_by_name.get(node) or {"metadata": {}})
        dev_id = DEVICE_IDS.get(product, ("1220",))[0]
        if mode == o.MODE_VM:
            devices = [{"name": f"vfio-0000-3b-{i:02x}-0", "attributes": {
                "type": {"string": "vfio"}, "resource.kubernetes.io/pciBusID": {"string": f"0000:3b:{i:02x}.0"},
                "iommuGroup": {"int": 40 + i}, "pciDeviceID": {"string": dev_id}, "productName": {"string": product}}}
                for i in range(count)]
        else:
            devices = [{"name": f"rbln{i}", "attributes": {
                "type": {"string": "npu"}, "productName": {"string": product}, "pciDeviceID": {"string": dev_id}}}
                for i in range(count)]
        if existing is None:
            try:
                snap.slices[name] = self.api.seed(o.resource_slice(node, driver=DRA_DRIVER, devices=devices,
                                                                   name=name))[0]
            except ApiFailure as e:
                if e.status != 409:
                    raise
        elif existing["spec"]["devices"] != devices:
            existing = copy.deepcopy(existing)
            existing["spec"]["devices"] = devices
            snap.slices[name] = self.api.update(existing)

    def _sync_daemonsets(self, snap: _Snapshot) -> None:
        """Each DaemonSet's status from its pods as this step leaves them (the snapshot follows its own writes)."""
        pods = list(snap.pods.values())
        for ds in list(snap.daemonsets.values()):
            comp = ((ds["metadata"].get("annotations")) or {}).get(COMPONENT_ANNOTATION)
            if comp not in ALL_COMPONENTS:
                continue
            mine = [p for p in pods if self._owner_name(p) == ds["metadata"]["name"]
                    and not p["metadata"].get("deletionTimestamp")]
            ready = sum(1 for p in mine if self._is_ready(p))
            want = o.daemonset_status(len(mine), ready, ds["metadata"].get("generation", 1))
            if _nonzero(ds.get("status")) != _nonzero(want):  # a real server omits most zero counts
                ds = copy.deepcopy(ds)
                ds["status"] = want
                snap.daemonsets[ds["metadata"]["name"]] = self.api.update(ds, sub="status")

    @staticmethod
    def _owner_name(pod: dict) -> str | None:
        ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("kind") == "DaemonSet"), None)
        return ref["name"] if ref else None


def _nonzero(d: dict | None) -> dict:
    return {k: v for k, v in (d or {}).items() if v}


def stack_v030(apiserver: Any, nodes: tuple[str, ...] = ("npu-node-1", "npu-node-2")) -> SimulatedOperator:
    """The workplace stack's world (../shared/stack) on the fake: the chart v0.3.0 policy with the vfio-manager, the
    sandbox plugin and the device plugin on, KubeVirt v1.9.0 with HostDevices, and `nodes` as RBLN-CA12 NPU nodes in
    container mode (covered by v0.3.0's sandbox resourceList); the simulated operator v0.3.0 started and idle. A node
    switched to vm-passthrough there keeps its sandbox plugin in `Init:0/2` (driver-ready) for good, as the real one
    does. Stop the operator returned when done."""
    from tests.fakes.releases import V0_3_0

    policy = V0_3_0.policy(vfio_manager=True, sandbox=True, device_plugin=True)
    apiserver.add(policy, o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"),
                  *(o.npu_node(n, product="RBLN-CA12", release=V0_3_0, policy=policy) for n in nodes))
    op = SimulatedOperator(apiserver, release=V0_3_0, ready_delay_s=0.05).start()
    assert op.wait_idle()
    return op
