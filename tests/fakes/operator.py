"""A simulated RBLN NPU operator running against a FakeApiServer's state.

It does what the real operator and the DaemonSet controller together do when a node's
``rebellions.ai/npu.workload.config`` label changes (see ../shared/reference/rbln-operator.md):

* for every node with an NFD Rebellions label it sets ``rebellions.ai/npu.present=true`` and the
  ``rebellions.ai/npu.deploy.<component>=true`` labels of the node's mode, removing the other
  mode's; ``rebellions.ai/npu.deploy.skip=true`` removes every deploy label; a node whose NFD
  label went away gets ``npu.present=false`` and loses its deploy labels;
* it deletes (gracefully, with the server's deletion rules) the component pods on that node that
  the node's labels no longer select, and creates the missing ones: ``rbln-<component>-<node>``
  in the operator namespace, labelled ``app.kubernetes.io/component=<component>``, owned by the
  DaemonSet ``rbln-<component>``, Running, Ready after ``ready_delay_s``;
* when the device plugin pod of the mode is Ready it publishes the extended resource in the
  node's capacity/allocatable (``rebellions.ai/npu`` for container,
  ``rebellions.ai/RBLN-<product>_PF`` for vm-passthrough), and removes the other mode's resource
  as soon as the mode changes;
* it keeps ``rbln-<component>`` DaemonSets (nodeSelector on the deploy label) with status counts
  that match the pods.

The mode comes from the node label, falling back to the RBLNClusterPolicy ``spec.workloadType``
(``container`` without a policy); unknown label values fall back to that default. Components
disabled in the policy get deploy labels but no pods. With ``dra`` enabled in the policy,
vm-passthrough nodes run ``dra-kubelet-plugin`` instead of ``sandbox-device-plugin`` and no
extended resource is published (DRA devices are ResourceSlices, not simulated here).
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer

_POLICY_FLAG = {  # component -> policy spec key whose .enabled gates it
    "device-plugin": "devicePlugin", "sandbox-device-plugin": "sandboxDevicePlugin",
    "vfio-manager": "vfioManager", "dra-kubelet-plugin": "draKubeletPlugin",
    "metrics-exporter": "metricsExporter", "npu-feature-discovery": "npuFeatureDiscovery",
    "container-toolkit": "containerToolkit", "driver": "driver",
}
ALL_COMPONENTS = tuple(dict.fromkeys(o.CONTAINER_COMPONENTS + o.VM_COMPONENTS + o.VM_DRA_COMPONENTS))
SKIP = "skip"


class SimulatedOperator:
    def __init__(self, server: FakeApiServer, *, namespace: str = "rbln-system", ready_delay_s: float = 0.0,
                 auto: bool = True, policy_name: str | None = None):
        self.server = server
        self.namespace = namespace
        self.ready_delay_s = ready_delay_s
        self.auto = auto
        self.policy_name = policy_name
        #: node name -> "container" | "vm-passthrough" | "skip" | "absent" (NFD label gone)
        self.converged_modes: dict[str, str] = {}
        self.errors: list[str] = []
        self._step_lock = threading.Lock()
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
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    # ---- reconcile ----------------------------------------------------------------------------

    def _policy(self) -> dict | None:
        try:
            policies = self.server.list("RBLNClusterPolicy")
        except KeyError:
            return None
        if self.policy_name:
            policies = [p for p in policies if p["metadata"]["name"] == self.policy_name]
        return policies[0] if policies else None

    def step(self) -> None:
        """Converge every node once (synchronously)."""
        with self._step_lock:
            try:
                policy = self._policy()
                for node in self.server.list("Node"):
                    self._converge(node, policy)
                self._sync_daemonsets()
            except Exception as exc:  # noqa: BLE001 - surfaced through .errors
                self.errors.append(repr(exc))
                raise

    def desired_mode(self, node: dict, policy: dict | None) -> str | None:
        labels = node["metadata"].get("labels") or {}
        if not any(labels.get(k) == "true" for k in o.NFD_NPU_LABELS):
            return None
        if labels.get(o.DEPLOY_SKIP_LABEL) == "true":
            return SKIP
        default = ((policy or {}).get("spec") or {}).get("workloadType") or o.MODE_CONTAINER
        if default not in (o.MODE_CONTAINER, o.MODE_VM):
            default = o.MODE_CONTAINER
        value = labels.get(o.WORKLOAD_LABEL)
        return value if value in (o.MODE_CONTAINER, o.MODE_VM) else default

    @staticmethod
    def _enabled(policy: dict | None, component: str) -> bool:
        if policy is None:
            return component != "dra-kubelet-plugin"
        key = _POLICY_FLAG.get(component)
        if key is None:
            return True
        spec = (policy.get("spec") or {}).get(key) or {}
        return bool(spec.get("enabled", component != "dra-kubelet-plugin"))

    def _components(self, mode: str | None, policy: dict | None) -> tuple[str, ...]:
        if mode == o.MODE_CONTAINER:
            return o.CONTAINER_COMPONENTS
        if mode == o.MODE_VM:
            return o.VM_DRA_COMPONENTS if self._enabled(policy, "dra-kubelet-plugin") and policy else o.VM_COMPONENTS
        return ()

    def _converge(self, node: dict, policy: dict | None) -> None:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        mode = self.desired_mode(node, policy)
        if mode is None and labels.get(o.NPU_PRESENT_LABEL) != "true" and name not in self.converged_modes:
            return  # never an NPU node
        comps = self._components(mode, policy)
        want = {o.DEPLOY_LABEL_PREFIX + c: "true" for c in comps}
        new_labels = {k: v for k, v in labels.items() if not k.startswith(o.DEPLOY_LABEL_PREFIX)
                      or k == o.DEPLOY_SKIP_LABEL}
        new_labels.update(want)
        new_labels[o.NPU_PRESENT_LABEL] = "false" if mode is None else "true"
        product, _ = self._hardware(node)
        vm_res = o.vm_resource_name(product)

        def fix_resources(st: dict) -> None:
            for field in ("capacity", "allocatable"):
                res = st.setdefault(field, {})
                for k in list(res):
                    keep = ((mode == o.MODE_CONTAINER and k == o.CONTAINER_RESOURCE)
                            or (mode == o.MODE_VM and k == vm_res))
                    if k.startswith("rebellions.ai/") and not keep:
                        del res[k]

        status = copy.deepcopy(node.get("status") or {})
        fix_resources(status)
        if new_labels != labels or status != (node.get("status") or {}):
            def edit(n: dict) -> None:
                n["metadata"]["labels"] = {k: v for k, v in (n["metadata"].get("labels") or {}).items()
                                           if not k.startswith(o.DEPLOY_LABEL_PREFIX) or k == o.DEPLOY_SKIP_LABEL}
                n["metadata"]["labels"].update(want)
                n["metadata"]["labels"][o.NPU_PRESENT_LABEL] = new_labels[o.NPU_PRESENT_LABEL]
                fix_resources(n.setdefault("status", {}))

            self.server.mutate("Node", name, fn=edit)
        self.converged_modes[name] = mode if mode is not None else "absent"

        # Pods: delete the ones the node no longer selects, create the missing ones.
        wanted = {c for c in comps if self._enabled(policy, c)}
        for p in self.server.list("Pod", self.namespace):
            comp = (p["metadata"].get("labels") or {}).get(o.COMPONENT_LABEL)
            if (p.get("spec") or {}).get("nodeName") != name or comp not in ALL_COMPONENTS:
                continue
            if comp not in wanted and not p["metadata"].get("deletionTimestamp"):
                self.server.delete("Pod", p["metadata"]["name"], self.namespace)
        for comp in sorted(wanted):
            pod_name = f"rbln-{comp}-{name}"
            existing = self.server.get("Pod", pod_name, self.namespace)
            if existing is not None:
                if self._is_ready(existing) and not existing["metadata"].get("deletionTimestamp"):
                    self._publish(name, comp)
                continue  # running, or still terminating: created after its DELETED event
            self._create_component_pod(comp, name)

    @staticmethod
    def _hardware(node: dict) -> tuple[str, int]:
        md = node["metadata"]
        labels, ann = md.get("labels") or {}, md.get("annotations") or {}
        product = labels.get(o.NPU_PRODUCT_LABEL) or ann.get(o.NPU_PRODUCT_ANNOTATION) or "RBLN-CA22"
        count = labels.get(o.NPU_COUNT_LABEL) or ann.get(o.NPU_COUNT_ANNOTATION) or "1"
        return product, int(count)

    @staticmethod
    def _is_ready(p: dict) -> bool:
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (p.get("status") or {}).get("conditions") or [])

    def _ensure_daemonset(self, comp: str) -> dict:
        ds_name = f"rbln-{comp}"
        ds = self.server.get("DaemonSet", ds_name, self.namespace)
        if ds is None:
            ds = o.daemonset(self.namespace, ds_name, labels={o.COMPONENT_LABEL: comp, "app": ds_name},
                             node_selector={o.DEPLOY_LABEL_PREFIX + comp: "true"}, desired=0, ready=0)
            try:
                self.server.add(ds)
            except ValueError:
                pass  # raced with another step
            ds = self.server.get("DaemonSet", ds_name, self.namespace) or ds
        return ds

    def _create_component_pod(self, comp: str, node: str) -> None:
        ds = self._ensure_daemonset(comp)
        pod_name = f"rbln-{comp}-{node}"
        ready_now = self.ready_delay_s <= 0
        p = o.pod(self.namespace, pod_name, node=node, labels={o.COMPONENT_LABEL: comp, "app": f"rbln-{comp}"},
                  ready=ready_now, image=f"docker.io/rebellions/rbln-{comp}:latest",
                  node_selector={o.DEPLOY_LABEL_PREFIX + comp: "true"})
        p["metadata"]["ownerReferences"] = [o.owner_ref("DaemonSet", ds["metadata"]["name"], self.namespace,
                                                        uid=ds["metadata"].get("uid"))]
        try:
            self.server.add(p)
        except ValueError:
            return
        if ready_now:
            self._publish(node, comp)
        else:
            self._later(self.ready_delay_s, self._become_ready, pod_name, node, comp)

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

    def _become_ready(self, pod_name: str, node: str, comp: str) -> None:
        p = self.server.get("Pod", pod_name, self.namespace)
        if p is None or p["metadata"].get("deletionTimestamp"):
            return
        self.server.mutate("Pod", pod_name, self.namespace, fn=lambda q: o.set_pod_ready(q, True))
        self._publish(node, comp)
        with self._step_lock:
            self._sync_daemonsets()

    def _publish(self, node_name: str, comp: str) -> None:
        """The device plugin of the node's current mode registered: advertise its resource."""
        node = self.server.get("Node", node_name)
        if node is None:
            return
        mode = self.converged_modes.get(node_name)
        product, count = self._hardware(node)
        if comp == "device-plugin" and mode == o.MODE_CONTAINER:
            key = o.CONTAINER_RESOURCE
        elif comp == "sandbox-device-plugin" and mode == o.MODE_VM:
            key = o.vm_resource_name(product)
        else:
            return
        st = node.get("status") or {}
        if all((st.get(f) or {}).get(key) == str(count) for f in ("capacity", "allocatable")):
            return

        def edit(n: dict) -> None:
            for f in ("capacity", "allocatable"):
                n.setdefault("status", {}).setdefault(f, {})[key] = str(count)

        self.server.mutate("Node", node_name, fn=edit)

    def _sync_daemonsets(self) -> None:
        pods = self.server.list("Pod", self.namespace)
        for ds in self.server.list("DaemonSet", self.namespace):
            comp = (ds["metadata"].get("labels") or {}).get(o.COMPONENT_LABEL)
            if comp not in ALL_COMPONENTS:
                continue
            mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(o.COMPONENT_LABEL) == comp
                    and not p["metadata"].get("deletionTimestamp")]
            ready = sum(1 for p in mine if self._is_ready(p))
            want = o.daemonset_status(len(mine), ready, ds["metadata"].get("generation", 1))
            if ds.get("status") != want:
                ds["status"] = want
                self.server.update(ds)
