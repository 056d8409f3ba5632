"""HostKubelet: the kubelet of rblnctl's host pods, running each pod's rblnctl command for real, over HTTP.

A pod carrying rblnctl's host-pod label (rebellions.ai/rblnctl.host-pod) on node N "runs": its
container args (`preflight --local --root /host -o json`, `vfio status -o json --root /host`) are
given to the real CLI, in-process, with `/host` replaced by N's simulated host tree (built with
tests/fakes/sysfs.py, one tree per node or shared), and what it printed (stdout, then stderr, as a
container log interleaves both) becomes the pod's log, the tree's path written as `/host` as the pod
would print it; it ends Succeeded (exit 0) or Failed with the exit code. Nodes can instead be told
to fail the way real ones do:

* ``unschedulable[node] = message``: the scheduler's verdict (PodScheduled False/Unschedulable and
  a FailedScheduling Warning Event from default-scheduler);
* ``image_pull[node] = reason``: the container waits with ErrImagePull / ImagePullBackOff;
* ``rejected[node] = (reason, message)``: the kubelet's admission refuses the pod (phase Failed, no
  container ran, as for OutOfcpu);
* ``hang``: the pod runs and never ends.

It acts as a kubelet does, only through the API server's REST interface (tests/cluster/client.Api), so it runs
against the project's fake and a real kube-apiserver alike: each pod's status through ``pods/status`` (a pod is
created Pending whatever it carries), the FailedScheduling Event by ``POST events``, a deleted pod's graceful
deletion confirmed (``DELETE`` with ``gracePeriodSeconds: 0``). Its log is served as a kubelet serves it: an HTTPS
endpoint (tests/cluster/kubelet_endpoint.py) that each node running a host pod is pointed at (its status' address
and kubelet port), which the API server asks on ``GET pods/NAME/log``; the fake does so as kube-apiserver does for a
node with a loopback address.

What makes it act: on the fake (a FakeApiServer or a FakeBackend) the server's synchronous ``kubelet`` hook, so a
pod has run before the reply to its create; on a real server a watch of the host pods. With
``finish_after_s=s`` a pod runs (Running) for ``s`` seconds after the kubelet took it, then ends: pods overlap in
time, so a concurrency limit can be observed. That time is the kubelet's own, not the client's: on the fake a write
the server schedules (``FakeApiServer.schedule``, which ``wait_scheduled`` waits for), on a real server a timer. It
does not depend on how, or how often, the client looks (a list, a watch) nor on the client's Clock (a FakeClock
never makes it pass). Such pods run on a timer thread, one at a time (the CLI runs in-process, its output captured
through the process' sys.stdout): a test whose own thread runs the CLI meanwhile (CliRunner) must not use it. Every
pod that ever existed at once is tracked (``max_alive``, ``alive``). Errors land in ``errors`` (a test asserts it
is empty).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from rblnctl import constants as C
from tests.cluster.backend import harness_client
from tests.cluster.client import ApiFailure
from tests.cluster.kubelet_endpoint import KubeletEndpoint
from tests.fakes.apiserver.meta import micro_ts
from tests.fakes.apiserver.pods import kubelet_status

_CLI = threading.Lock()  # one in-process CLI at a time: CliRunner swaps the process' sys.stdout and sys.stderr


class HostKubelet:
    def __init__(self, cluster: Any, hosts: dict[str, Path] | None = None, *, default: Path | None = None,
                 finish_after_s: float = 0.0) -> None:
        """``cluster``: a FakeApiServer, a Backend or a harness Api (tests/cluster/backend.harness_client)."""
        self.api, self.fake = harness_client(cluster)
        if finish_after_s < 0:
            raise ValueError(f"finish_after_s must not be negative, not {finish_after_s}")
        self.hosts = dict(hosts or {})
        self.default = default
        self.finish_after_s = finish_after_s
        self.unschedulable: dict[str, str] = {}
        self.image_pull: dict[str, str] = {}
        self.rejected: dict[str, tuple[str, str]] = {}
        self.hang: set[str] = set()
        self.runs: list[tuple[str, list[str]]] = []  # (node, argv as run) per pod that ran
        self.errors: list[str] = []
        self.alive: set[str] = set()
        self.max_alive = 0
        self.created: list[str] = []
        self.endpoint = KubeletEndpoint()
        self._registered: set[str] = set()
        self._started: set[str] = set()  # uids of the pods it has acted on
        self._timers: set[threading.Timer] = set()  # on a real server: the pods still to finish (finish_after_s)
        self._lock = threading.RLock()
        self._unsubscribe: list[Any] = []
        self._watcher: Any = None

    def start(self) -> HostKubelet:
        self.endpoint.start()
        if self.fake is not None:
            self.fake.kubelet = self._on_pod
            self._unsubscribe = [self.fake.on_change(self._on_change)]
        else:
            from tests.cluster.watcher import Watcher

            self._watcher = Watcher(self.api, "Pod", self._on_change, labels=C.HOST_POD_LABEL, errors=self.errors,
                                    name="host-kubelet").start()
        return self

    def stop(self) -> None:
        if self.fake is not None and self.fake.kubelet == self._on_pod:
            self.fake.kubelet = None
        for u in self._unsubscribe:
            u()
        if self._watcher is not None:
            self._watcher.stop()
        with self._lock:
            timers, self._timers = list(self._timers), set()
        for t in timers:
            t.cancel()
        self.endpoint.stop()

    # ---- the pod timeline -----------------------------------------------------------------------

    def _on_change(self, event: str, obj: dict) -> None:
        if obj.get("kind") != "Pod" or C.HOST_POD_LABEL not in (obj["metadata"].get("labels") or {}):
            return
        md = obj["metadata"]
        name = md["name"]
        with self._lock:
            if event == "ADDED":
                self.alive.add(name)
                self.created.append(name)
                self.max_alive = max(self.max_alive, len(self.alive))
            elif event == "DELETED":
                self.alive.discard(name)
                self.endpoint.forget(md.get("namespace", ""), name)
        if event != "DELETED" and md.get("deletionTimestamp") and (obj.get("spec") or {}).get("nodeName"):
            self._confirm_deletion(obj)
        elif self.fake is None and event in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName"):
            self._on_pod(obj)  # on the fake its kubelet hook does this, before the create's reply

    def _confirm_deletion(self, pod: dict) -> None:
        """The containers stopped: the kubelet ends the graceful deletion."""
        md = pod["metadata"]
        try:
            self.api.request("DELETE", self.api.kinds["Pod"].path(md["name"], md["namespace"]),
                             {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                              "preconditions": {"uid": md.get("uid")}})
        except ApiFailure as e:
            if e.status not in (404, 409):
                self.errors.append(f"confirming the deletion of {md['name']}: {e}")

    # ---- the kubelet ----------------------------------------------------------------------------

    def _on_pod(self, pod: dict) -> None:
        md = pod["metadata"]
        if C.HOST_POD_LABEL not in (md.get("labels") or {}) or md.get("deletionTimestamp"):
            return
        with self._lock:
            if md.get("uid") in self._started:
                return
            self._started.add(md.get("uid"))
        try:
            self._start(pod)
        except Exception as e:  # noqa: BLE001 - a fake's bug must reach the test, not the HTTP client
            self.errors.append(f"{type(e).__name__}: {e}")

    def _register(self, node: str) -> None:
        with self._lock:
            if node in self._registered:
                return
            self._registered.add(node)
        self.endpoint.register(self.api, node)

    def _report(self, pod: dict, phase: str, **kw: Any) -> None:
        """Write the status a kubelet reports for `phase` (pods/status)."""
        md = pod["metadata"]
        self.api.mutate("Pod", md["name"], md["namespace"],
                        lambda p: p.update(status=kubelet_status(p, phase, kw.get("exit_code"), kw.get("reason"),
                                                                 kw.get("message"))), sub="status")

    def _start(self, pod: dict) -> None:
        md, node = pod["metadata"], pod["spec"]["nodeName"]
        ns, name = md["namespace"], md["name"]
        self._register(node)
        if node in self.unschedulable:
            self._unschedulable(pod, self.unschedulable[node])
        elif node in self.image_pull:
            reason = self.image_pull[node]
            self.endpoint.set_waiting(ns, name, pod["spec"]["containers"][0]["name"], reason)
            self._report(pod, "Pending", reason=reason)
        elif node in self.rejected:
            reason, message = self.rejected[node]
            self.api.mutate("Pod", name, ns, lambda p: p.update(status={
                "phase": "Failed", "reason": reason, "message": message}), sub="status")
        elif node in self.hang or self.finish_after_s:
            self.endpoint.set_log(ns, name, "")
            self._report(pod, "Running")
            if node not in self.hang:
                self._later(self.finish_after_s, self._finish, pod)
        else:
            self._run(pod)

    def _unschedulable(self, pod: dict, message: str) -> None:
        """The scheduler's verdict, as it writes it: the PodScheduled condition and a FailedScheduling Event."""
        md = pod["metadata"]

        def edit(p: dict) -> None:
            st = p.setdefault("status", {})
            st["phase"] = "Pending"
            st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"] + [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                 "lastProbeTime": None, "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]

        stored = self.api.mutate("Pod", md["name"], md["namespace"], edit, sub="status") or pod
        self.api.create({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{md['name']}.{time.time_ns():x}", "namespace": md["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": md["name"], "namespace": md["namespace"],
                               "uid": stored["metadata"].get("uid"),
                               "resourceVersion": stored["metadata"].get("resourceVersion")},
            "reason": "FailedScheduling", "message": message, "type": "Warning", "action": "Scheduling",
            "source": {}, "reportingComponent": "default-scheduler", "reportingInstance": "default-scheduler-sim",
            "eventTime": micro_ts(), "firstTimestamp": None, "lastTimestamp": None})

    def _later(self, delay: float, fn: Any, *args: Any) -> None:
        """``fn(*args)`` after ``delay`` seconds: a write the fake schedules (wait_scheduled sees it), or a timer."""
        if self.fake is not None:
            self.fake.schedule(delay, fn, *args)
            return
        timer = threading.Timer(delay, lambda: (self._timers.discard(timer), fn(*args)))
        timer.daemon = True
        with self._lock:
            self._timers.add(timer)
        timer.start()

    def _finish(self, pod: dict) -> None:
        """A pod's time is up: it runs its command and ends, unless it was deleted meanwhile (its uid, not its name)."""
        md = pod["metadata"]
        try:
            now = self.api.get("Pod", md["name"], md["namespace"])
            if now is not None and now["metadata"].get("uid") == md.get("uid") \
                    and not now["metadata"].get("deletionTimestamp"):
                self._run(pod)
        except Exception as e:  # noqa: BLE001 - a fake's bug must reach the test, not a timer thread
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
        with _CLI:
            result = CliRunner().invoke(app, argv)
        # In the pod the tree is at /host: whatever the command printed of its root reads so there too.
        self.endpoint.set_log(md["namespace"], md["name"],
                              (result.stdout + result.stderr).replace(str(root), C.HOST_POD_ROOT))
        code = result.exit_code
        self._report(pod, "Succeeded" if code == 0 else "Failed", exit_code=code)
