"""HostKubelet: the fake API server's kubelet for rblnctl's host pods, running each pod's rblnctl command for real.

A pod carrying rblnctl's host-pod label (rebellions.ai/rblnctl.host-pod) on node N "runs": its
container args (`preflight --local --root /host -o json`, `vfio status -o json --root /host`) are
given to the real CLI, in-process, with `/host` replaced by N's simulated host tree (built with
tests/fakes/sysfs.py, one tree per node or shared), and what it printed (stdout, then stderr, as a
container log interleaves both) becomes the pod's log, the tree's path written as `/host` as the pod
would print it; it ends Succeeded (exit 0) or Failed with the exit code. Nodes can instead be told
to fail the way real ones do:

* ``unschedulable[node] = message``: the scheduler's verdict (PodScheduled False/Unschedulable and
  a FailedScheduling event, FakeApiServer.mark_unschedulable);
* ``image_pull[node] = reason``: the container waits with ErrImagePull / ImagePullBackOff;
* ``rejected[node] = (reason, message)``: the kubelet's admission refuses the pod (phase Failed, no
  container ran, as for OutOfcpu);
* ``hang``: the pod runs and never ends.

With ``finish_after_lists=k`` a pod runs (Running) until the k-th list of its run's pods after it
was created, then ends: pods overlap in time, so a concurrency limit can be observed. Every pod
that ever existed at once is tracked (``max_alive``, ``alive``), from the server's change events.
Errors inside the hook land in ``errors`` (a test asserts it is empty).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rblnctl import constants as C
from tests.fakes.apiserver import FakeApiServer, RecordedRequest


class HostKubelet:
    def __init__(self, server: FakeApiServer, hosts: dict[str, Path] | None = None, *, default: Path | None = None,
                 finish_after_lists: int = 0) -> None:
        self.server = server
        self.hosts = dict(hosts or {})
        self.default = default
        self.finish_after_lists = finish_after_lists
        self.unschedulable: dict[str, str] = {}
        self.image_pull: dict[str, str] = {}
        self.rejected: dict[str, tuple[str, str]] = {}
        self.hang: set[str] = set()
        self.runs: list[tuple[str, list[str]]] = []  # (node, argv as run) per pod that ran
        self.errors: list[str] = []
        self.alive: set[str] = set()
        self.max_alive = 0
        self.created: list[str] = []
        self._waiting: dict[str, tuple[dict, int]] = {}  # pod name -> (pod, lists seen)
        self._lock = threading.RLock()
        self._unsubscribe: list[Any] = []

    def start(self) -> HostKubelet:
        self.server.kubelet = self._on_pod
        self._unsubscribe = [self.server.on_change(self._on_change), self.server.on_request(self._on_request)]
        return self

    def stop(self) -> None:
        self.server.kubelet = None
        for u in self._unsubscribe:
            u()

    # ---- the pod timeline -----------------------------------------------------------------------

    def _on_change(self, event: str, obj: dict) -> None:
        if obj.get("kind") != "Pod" or C.HOST_POD_LABEL not in (obj["metadata"].get("labels") or {}):
            return
        name = obj["metadata"]["name"]
        with self._lock:
            if event == "ADDED":
                self.alive.add(name)
                self.created.append(name)
                self.max_alive = max(self.max_alive, len(self.alive))
            elif event == "DELETED":
                self.alive.discard(name)

    # ---- the kubelet ----------------------------------------------------------------------------

    def _on_pod(self, pod: dict) -> None:
        if C.HOST_POD_LABEL not in (pod["metadata"].get("labels") or {}):
            return
        try:
            self._start(pod)
        except Exception as e:  # noqa: BLE001 - a fake's bug must reach the test, not the HTTP client
            self.errors.append(f"{type(e).__name__}: {e}")

    def _start(self, pod: dict) -> None:
        md, node = pod["metadata"], pod["spec"]["nodeName"]
        ns, name = md["namespace"], md["name"]
        if node in self.unschedulable:
            self.server.mark_unschedulable(ns, name, self.unschedulable[node])
        elif node in self.image_pull:
            self.server.set_pod_phase(ns, name, "Pending", reason=self.image_pull[node])
        elif node in self.rejected:
            reason, message = self.rejected[node]
            self.server.mutate("Pod", name, ns, lambda p: p.update(status={
                "phase": "Failed", "reason": reason, "message": message}))
        elif node in self.hang or self.finish_after_lists:
            self.server.set_pod_phase(ns, name, "Running")
            if node not in self.hang:
                with self._lock:
                    self._waiting[name] = (pod, 0)
        else:
            self._run(pod)

    def _on_request(self, req: RecordedRequest) -> None:
        """Before a list of a run's pods is served: pods that waited enough lists end now."""
        selector = (req.query.get("labelSelector") or [""])[0]
        if req.method != "GET" or not req.path.endswith("/pods") or C.HOST_POD_RUN_LABEL not in selector:
            return
        due = []
        with self._lock:
            for name, (pod, seen) in list(self._waiting.items()):
                if seen + 1 >= self.finish_after_lists:
                    due.append(pod)
                    del self._waiting[name]
                else:
                    self._waiting[name] = (pod, seen + 1)
        for pod in due:
            try:
                if self.server.get("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"]) is not None:
                    self._run(pod)
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"{type(e).__name__}: {e}")

    def _run(self, pod: dict) -> None:
        from typer.testing import CliRunner

        from rblnctl.cli.app import app

        md, node = pod["metadata"], pod["spec"]["nodeName"]
        root = self.hosts.get(node, self.default)
        if root is None:
            raise KeyError(f"no simulated host for node {node}")
        [container] = pod["spec"]["containers"]
        argv = [str(root) if a == C.HOST_POD_ROOT else a for a in container.get("args") or []]
        with self._lock:
            self.runs.append((node, argv))
        result = CliRunner().invoke(app, argv)
        # In the pod the tree is at /host: whatever the command printed of its root reads so there too.
        log = (result.stdout + result.stderr).replace(str(root), C.HOST_POD_ROOT)
        self.server.set_pod_log(md["namespace"], md["name"], log)
        code = result.exit_code
        self.server.set_pod_phase(md["namespace"], md["name"], "Succeeded" if code == 0 else "Failed", exit_code=code)
