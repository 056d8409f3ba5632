"""SimKubelet: the kubelet of kubelet-less test nodes, acting only through the API server's REST interface.

A real kube-apiserver without kubelets keeps every pod Pending (status is written by the kubelet through
``pods/status``) and every deleted or evicted pod Terminating (graceful deletion ends when the kubelet
confirms with a DELETE ``gracePeriodSeconds: 0``). SimKubelet plays that part for the nodes it is given, on
any backend (the fake or a real server), from a watch of pods:

* a pod bound to one of its nodes is reported Running and Ready (containerStatuses running, the kubelet's
  conditions), after ``ready_delay_s``; annotations steer one pod: ``HOLD`` keeps it Pending (no container
  started, as a pod waiting for an image), ``NOT_READY`` reports it Running but not Ready, ``EXTERNAL`` leaves
  its status to another simulation (the simulated operator's component pods), ``HOLD_DELETION`` keeps it
  Terminating once deleted, until the annotation is removed;
* a pod of its nodes with a ``deletionTimestamp`` is deleted for good (``gracePeriodSeconds: 0``, guarded
  by the pod's uid) after ``deletion_delay_s``, as the kubelet does once the containers stopped;
* with ``heartbeat_s`` > 0 each node's Ready condition gets a fresh ``lastHeartbeatTime`` that often.

``wait_idle()`` returns once everything seen so far has been acted on. Errors land in ``errors``.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterable
from typing import Any

from tests.cluster.client import Api, ApiFailure
from tests.cluster.watcher import Watcher

HOLD = "kubelet.test.rblnctl.io/hold"  # "true": the pod stays Pending
NOT_READY = "kubelet.test.rblnctl.io/not-ready"  # "true": Running, never Ready
# "true": a deleted pod stays Terminating (its containers never stop) until the annotation goes
HOLD_DELETION = "kubelet.test.rblnctl.io/hold-deletion"
# "true": another simulation reports the pod's status (the simulated operator its component pods); the kubelet
# only confirms its graceful deletion.
EXTERNAL = "kubelet.test.rblnctl.io/external"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def running_status(pod: dict, *, ready: bool = True) -> dict:
    """The status a kubelet reports for a pod whose containers all started (Ready when `ready`)."""
    now = _now()
    flag = "True" if ready else "False"
    containers = (pod.get("spec") or {}).get("containers") or []
    return {
        "phase": "Running", "hostIP": "127.0.0.1", "podIP": "10.244.0.10", "startTime": now,
        "podIPs": [{"ip": "10.244.0.10"}], "qosClass": (pod.get("status") or {}).get("qosClass") or "BestEffort",
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": flag, "lastTransitionTime": now},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        ],
        "containerStatuses": [
            {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": ready, "started": True,
             "restartCount": 0, "containerID": f"containerd://{i:064d}", "state": {"running": {"startedAt": now}}}
            for i, c in enumerate(containers)],
    }


class SimKubelet:
    def __init__(self, api: Api, nodes: Iterable[str] = (), *, ready_delay_s: float = 0.0,
                 deletion_delay_s: float = 0.0, heartbeat_s: float = 0.0) -> None:
        self.api = api
        self.nodes: set[str] = set(nodes)
        self.ready_delay_s = ready_delay_s
        self.deletion_delay_s = deletion_delay_s
        self.heartbeat_s = heartbeat_s
        self.errors: list[str] = []
        self.acted = 0
        self._stop = threading.Event()
        self._lock = threading.Condition()
        self._pending: set[tuple[str, str]] = set()  # (ns, name) scheduled to act on
        self._threads: list[threading.Thread] = []
        self._watcher: Watcher | None = None

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "SimKubelet":
        self._watcher = Watcher(self.api, "Pod", self._on_event, errors=self.errors, name="sim-kubelet").start()
        if self.heartbeat_s > 0:
            self._threads.append(threading.Thread(target=self._heartbeats, name="sim-kubelet-hb", daemon=True))
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.stop()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> "SimKubelet":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_node(self, name: str) -> None:
        self.nodes.add(name)
        for pod in self.api.list("Pod", fields=f"spec.nodeName={name}"):
            self._consider(pod)

    def wait_idle(self, timeout_s: float = 15.0) -> bool:
        """Wait until every pod of its nodes is acted on. The watch may not have delivered the last pods created
        yet (a pod seeded just before may still be on its way), so the kubelet first catches up with a LIST, as a
        kubelet relists; acting twice is harmless (each action re-reads the pod)."""
        deadline = time.monotonic() + timeout_s
        for pod in self.api.list("Pod"):
            self._consider(pod)
        with self._lock:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.05))
        return True

    # ---- the watch -------------------------------------------------------------------------------

    def _on_event(self, etype: str, pod: dict) -> None:
        if etype != "DELETED":
            self._consider(pod)

    def _consider(self, pod: dict) -> None:
        md, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if spec.get("nodeName") not in self.nodes:
            return
        key = (md.get("namespace", ""), md.get("name", ""))
        ann = md.get("annotations") or {}
        status = pod.get("status") or {}
        if md.get("deletionTimestamp"):
            if ann.get(HOLD_DELETION) != "true":
                self._later(self.deletion_delay_s, key, self._finish_deletion, md.get("uid"))
        elif status.get("phase") in (None, "", "Pending") and ann.get(HOLD) != "true" and \
                ann.get(EXTERNAL) != "true":
            self._later(self.ready_delay_s, key, self._run, ann.get(NOT_READY) != "true")

    def _later(self, delay: float, key: tuple[str, str], fn: Any, *args: Any) -> None:
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)

        def go() -> None:
            try:
                if delay:
                    time.sleep(delay)
                if not self._stop.is_set():
                    fn(key, *args)
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"{key}: {type(e).__name__}: {e}")
            finally:
                with self._lock:
                    self._pending.discard(key)
                    self._lock.notify_all()

        if delay:
            threading.Thread(target=go, daemon=True).start()
        else:
            go()

    def _run(self, key: tuple[str, str], ready: bool) -> None:
        ns, name = key

        def edit(p: dict) -> None:
            if p["metadata"].get("deletionTimestamp") or (p.get("status") or {}).get("phase") not in (None, "",
                                                                                                    "Pending"):
                return
            p["status"] = running_status(p, ready=ready)

        self.api.mutate("Pod", name, ns, edit, sub="status")
        self.acted += 1

    def _finish_deletion(self, key: tuple[str, str], uid: str | None) -> None:
        ns, name = key
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid} if uid else None}
        try:
            self.api.request("DELETE", self.api.kinds["Pod"].path(name, ns), body)
        except ApiFailure as e:
            if e.status not in (404, 409):  # gone already, or a new pod of the same name
                raise
        self.acted += 1

    def _heartbeats(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            for node in list(self.nodes):
                try:
                    def beat(n: dict) -> None:
                        for c in (n.get("status") or {}).get("conditions") or []:
                            if c.get("type") == "Ready":
                                c["lastHeartbeatTime"] = _now()
                    self.api.mutate("Node", node, None, beat, sub="status")
                except Exception as e:  # noqa: BLE001
                    self.errors.append(f"heartbeat {node}: {e}")
