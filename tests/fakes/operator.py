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
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.releases import DEVICE_IDS, NEWER, POLICY_KEYS, Release

ALL_COMPONENTS = ("driver", "device-plugin", "dra-kubelet-plugin", "metrics-exporter", "rbln-daemon", "rbln-smd",
                  "npu-feature-discovery", "operator-validator", "container-toolkit", "vfio-manager",
                  "sandbox-device-plugin")
SKIP = "skip"
PAUSED = "paused-for-driver-upgrade"
DRA_DRIVER = "npu.rebellions.ai"


class SimulatedOperator:
    def __init__(self, server: FakeApiServer, *, namespace: str = "rbln-system", ready_delay_s: float = 0.0,
                 auto: bool = True, policy_name: str | None = None, release: Release = NEWER,
                 component_delays: dict[str, float] | None = None, kubelet_lag_steps: int = 0,
                 kubelet_period_s: float = 0.05):
        self.server = server
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

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> "SimulatedOperator":
        self.step()
        if self.auto:
            self._unsubscribe = self.server.on_change(self._on_change)
            self._worker = threading.Thread(target=self._run, name="simulated-operator", daemon=True)
            self._worker.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
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
        """Wait until no reconcile is queued or running and no readiness timer is pending."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._dirty or self._busy or self._timers:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    # ---- auto mode ----------------------------------------------------------------------------

    def _on_change(self, event: str, obj: dict) -> None:
        kind = obj.get("kind")
        relevant = kind in ("Node", "RBLNClusterPolicy") or (
            kind == "Pod" and event == "DELETED" and obj["metadata"].get("namespace") == self.namespace)
        if relevant and not self._stopped.is_set():
            self._kick()

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
            try:
                self.step()
            except Exception:  # noqa: BLE001 - recorded in .errors by step()
                pass
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    # ---- reconcile ----------------------------------------------------------------------------

    def policy(self) -> dict | None:
        try:
            policies = self.server.list("RBLNClusterPolicy")
        except KeyError:
            return None
        if self.policy_name:
            policies = [p for p in policies if p["metadata"]["name"] == self.policy_name]
        live = [p for p in policies if (p.get("status") or {}).get("state") != "ignored"] or policies
        live.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "~", p["metadata"]["name"]))
        return live[0] if live else None

    def step(self) -> None:
        """Converge every node once (synchronously)."""
        with self._step_lock:
            try:
                policy = self.policy()
                if policy is None:
                    return
                for node in self.server.list("Node"):
                    self._converge(node, policy)
                if self.release.measured:  # the real v0.3.0 creates every enabled component's DaemonSet up front
                    for comp in self._policy_components(policy):
                        self._ensure_daemonset(comp, self._base(policy))
                self._sync_daemonsets()
                if self.release.measured:
                    self._sync_policy_status(policy)
                self._sync_device_classes(policy)
            except Exception as exc:  # noqa: BLE001 - surfaced through .errors
                self.errors.append(repr(exc))
                raise

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

    def _converge(self, node: dict, policy: dict) -> None:
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
            self._pause(name, policy, new_labels)

        keep = self._advertised(mode, policy, product)
        keep |= self._lagging_kubelet(name, node, keep)

        def fix_resources(st: dict) -> None:
            for field in ("capacity", "allocatable"):
                res = st.setdefault(field, {})
                for k in list(res):
                    if k.startswith("rebellions.ai/") and k not in keep:
                        del res[k]

        status = copy.deepcopy(node.get("status") or {})
        fix_resources(status)
        if new_labels != labels or status != (node.get("status") or {}):
            def edit(n: dict) -> None:
                n["metadata"]["labels"] = dict(new_labels)
                fix_resources(n.setdefault("status", {}))

            self.server.mutate("Node", name, fn=edit)
        self.converged_modes[name] = mode if mode is not None else "absent"

        # Pods: delete the ones the node no longer selects, create the missing ones.
        wanted = {c for c in comps if self.enabled(policy, c) and new_labels.get(o.DEPLOY_LABEL_PREFIX + c) == "true"}
        for p in self.server.list("Pod", self.namespace):
            comp = self._component(p)
            if (p.get("spec") or {}).get("nodeName") != name or comp is None:
                continue
            if comp not in wanted and not p["metadata"].get("deletionTimestamp"):
                self.server.delete("Pod", p["metadata"]["name"], self.namespace)
        for comp in sorted(wanted):
            pod_name = self._pod_name(comp, name, base)
            existing = self.server.get("Pod", pod_name, self.namespace)
            if existing is not None:
                if self._is_ready(existing) and not existing["metadata"].get("deletionTimestamp"):
                    self._publish(name, comp, policy)
                continue  # running, or still terminating: created after its DELETED event
            self._create_component_pod(comp, name, base)
        self._sync_slices(name, mode, policy, count, wanted)

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

    def _pause(self, node: str, policy: dict, labels: dict[str, str]) -> None:
        """NEWER: the vfio-manager's driver manager holds the other vm labels while it is not Ready."""
        vfio = self.server.get("Pod", self._pod_name("vfio-manager", node, self._base(policy)), self.namespace)
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
            existing = self.server.get("DeviceClass", name)
            mine = existing is not None and (existing["metadata"].get("annotations") or {}).get(
                "fake.rblnctl.io/component") == "dra-kubelet-plugin"
            if on and existing is None:
                dc = o.deviceclass(name, driver=driver)
                dc["metadata"]["annotations"] = {"fake.rblnctl.io/component": "dra-kubelet-plugin"}
                try:
                    self.server.add(dc)
                except ValueError:
                    pass  # raced with another step
            elif not on and mine:
                self.server.delete("DeviceClass", name)

    def _pod_name(self, comp: str, node: str, base: str) -> str:
        return f"{self._ds_name(comp, node, base)}-{node}"

    def _ds_name(self, comp: str, node: str | None, base: str) -> str:
        """The component's DaemonSet; the driver's depends on the node's pool (v0.3.0: one per os/kernel)."""
        node_obj = self.server.get("Node", node) if comp == "driver" and node else None
        return self.release.daemonset_name(comp, base, node=node_obj)

    def _policy_components(self, policy: dict) -> list[str]:
        """The components the policy enables that the operator runs as policy DaemonSets (the driver is the
        RBLNDriver's), in the order the real v0.3.0 lists them in status.components."""
        order = ("vfio-manager", "npu-feature-discovery", "metrics-exporter", self.release.daemon, "device-plugin",
                 "sandbox-device-plugin", "dra-kubelet-plugin", "container-toolkit", "operator-validator")
        return [c for c in order if self.enabled(policy, c)]

    def _sync_policy_status(self, policy: dict) -> None:
        """Write status as the real v0.3.0 does: a status.components[] entry per policy DaemonSet whose
        DaemonSetReady condition follows it (ready: desired > 0, all Ready, none unavailable) while the entry's
        `state`, the top-level `state` and the Ready condition say ready regardless."""
        old = policy.get("status") or {}
        before = {c.get("name"): c for c in old.get("components") or []}
        entries = []
        base = self._base(policy)
        for comp in self._policy_components(policy):
            name = self.release.daemonset_name(comp, base)
            ds = self.server.get("DaemonSet", name, self.namespace) or {}
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
        if status != old:
            self.server.mutate("RBLNClusterPolicy", policy["metadata"]["name"], fn=lambda q: q.update(status=status))

    def _component(self, pod: dict) -> str | None:
        ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("kind") == "DaemonSet"), None)
        if ref is None:
            return None
        ds = self.server.get("DaemonSet", ref["name"], self.namespace)
        comp = ((ds or {}).get("metadata", {}).get("annotations") or {}).get("fake.rblnctl.io/component")
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

    def _ensure_daemonset(self, comp: str, base: str, node: str | None = None) -> dict:
        ds_name = self._ds_name(comp, node, base)
        ds = self.server.get("DaemonSet", ds_name, self.namespace)
        if ds is None:
            node_obj = self.server.get("Node", node) if comp == "driver" and node else None
            labels = self.release.pod_labels(comp, base, node=node_obj)
            ds = o.daemonset(self.namespace, ds_name, labels=labels,
                             node_selector=self.release.node_selector(comp, node_obj), desired=0, ready=0)
            inits = self.release.init_containers(comp)
            if inits:
                ds["spec"]["template"]["spec"]["initContainers"] = [
                    {"name": n, "image": f"docker.io/rebellions/rbln-{comp}:latest"} for n in inits]
            ds["metadata"].setdefault("annotations", {})["fake.rblnctl.io/component"] = comp
            try:
                self.server.add(ds)
            except ValueError:
                pass  # raced with another step
            ds = self.server.get("DaemonSet", ds_name, self.namespace) or ds
        return ds

    def _create_component_pod(self, comp: str, node: str, base: str) -> None:
        ds = self._ensure_daemonset(comp, base, node)
        pod_name = self._pod_name(comp, node, base)
        delay = self.component_delays.get(comp, self.ready_delay_s)
        stuck = comp == "sandbox-device-plugin" and self.release.sandbox_waits_for_driver and \
            not self._driver_marker(node, base)
        ready_now = delay <= 0 and not stuck
        template = ds["spec"]["template"]
        p = o.pod(self.namespace, pod_name, node=node, labels=dict(template["metadata"]["labels"]),
                  ready=ready_now, image=f"docker.io/rebellions/rbln-{comp}:latest",
                  node_selector=dict(template["spec"].get("nodeSelector") or {}))
        p["metadata"]["ownerReferences"] = [o.owner_ref("DaemonSet", ds["metadata"]["name"], self.namespace,
                                                        uid=ds["metadata"].get("uid"))]
        if template["spec"].get("initContainers"):
            p["spec"]["initContainers"] = [dict(c) for c in template["spec"]["initContainers"]]
        if stuck:  # v0.3.0: `driver-ready` waits for a file only the driver pod writes; none runs here
            o.set_pod_initializing(p, ("driver-ready", "vfio-bind-checker"), running="driver-ready")
        try:
            self.server.add(p)
        except ValueError:
            return
        if stuck:
            self.stuck_in_init.add(pod_name)
        elif ready_now:
            self._kick()
        else:
            self._later(delay, self._become_ready, pod_name)

    def _driver_marker(self, node: str, base: str) -> bool:
        """/run/rbln/validations/.driver-ctr-ready exists on `node`: a driver pod runs there, Ready (its startup
        probe wrote the file) and not terminating (its preStop removes it)."""
        p = self.server.get("Pod", self._pod_name("driver", node, base), self.namespace)
        return p is not None and self._is_ready(p) and not p["metadata"].get("deletionTimestamp")

    def roll(self, node: str, component: str) -> None:
        """Delete the component's pod on `node` (the DaemonSet then recreates it): a rollout."""
        policy = self.policy()
        name = self._pod_name(component, node, self._base(policy))
        self.server.delete("Pod", name, self.namespace)
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
        p = self.server.get("Pod", pod_name, self.namespace)
        if p is None or p["metadata"].get("deletionTimestamp"):
            return
        self.server.mutate("Pod", pod_name, self.namespace, fn=lambda q: o.set_pod_ready(q, True))
        self.step()

    def _publish(self, node_name: str, comp: str, policy: dict) -> None:
        """The device plugin of the node's current mode registered: advertise its resource."""
        node = self.server.get("Node", node_name)
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

        def edit(n: dict) -> None:
            for f in ("capacity", "allocatable"):
                n.setdefault("status", {}).setdefault(f, {})[key] = str(count)

        self.server.mutate("Node", node_name, fn=edit)

    def _sync_slices(self, node: str, mode: str | None, policy: dict, count: int, wanted: set[str]) -> None:
        """A Ready dra-kubelet-plugin publishes the node's devices in the mode's form; otherwise no slice."""
        name = f"{node}-{DRA_DRIVER}"
        existing = self.server.get("ResourceSlice", name)
        pod = self.server.get("Pod", self._pod_name("dra-kubelet-plugin", node, self._base(policy)), self.namespace)
        serving = ("dra-kubelet-plugin" in wanted and pod is not None and self._is_ready(pod)
                   and not pod["metadata"].get("deletionTimestamp"))
        if not serving:
            if existing is not None:
                self.server.delete("ResourceSlice", name)
            return
        product, _ = self._hardware(self.server.get("Node", node) or {"metadata": {}})
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
        want = o.resource_slice(node, driver=DRA_DRIVER, devices=devices, name=name)
        if existing is None:
            try:
                self.server.add(want)
            except ValueError:
                pass
        elif existing["spec"]["devices"] != devices:
            existing["spec"]["devices"] = devices
            self.server.update(existing)

    def _sync_daemonsets(self) -> None:
        pods = self.server.list("Pod", self.namespace)
        for ds in self.server.list("DaemonSet", self.namespace):
            comp = ((ds["metadata"].get("annotations")) or {}).get("fake.rblnctl.io/component")
            if comp not in ALL_COMPONENTS:
                continue
            mine = [p for p in pods if self._owner_name(p) == ds["metadata"]["name"]
                    and not p["metadata"].get("deletionTimestamp")]
            ready = sum(1 for p in mine if self._is_ready(p))
            want = o.daemonset_status(len(mine), ready, ds["metadata"].get("generation", 1))
            if ds.get("status") != want:
                ds["status"] = want
                self.server.update(ds)

    @staticmethod
    def _owner_name(pod: dict) -> str | None:
        ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("kind") == "DaemonSet"), None)
        return ref["name"] if ref else None
