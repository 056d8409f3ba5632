"""ReplicaSetSim: the ReplicaSet controller and the scheduler of one ReplicaSet, reduced to what a drain needs.

A real cluster replaces a pod the moment it is evicted: the ReplicaSet controller counts the pods that are not
terminating and creates the missing ones, the scheduler binds them to a schedulable node, its kubelet starts them.
Without that a PodDisruptionBudget over a ReplicaSet never frees again once a pod went. This keeps ``spec.replicas``
non-terminating pods of the ReplicaSet, each new one created bound to ``node`` (spec.nodeName: no scheduler runs)
and owned by the ReplicaSet (its real uid), from a watch of the ReplicaSet's pods; a SimKubelet on ``node`` then
reports it Running and Ready. ``created`` lists the replacements it made, in order.
"""

from __future__ import annotations

import copy
import itertools
import threading

from tests.cluster.client import Api, ApiFailure
from tests.cluster.watcher import Watcher
from tests.fakes import objects as o


class ReplicaSetSim:
    def __init__(self, api: Api, namespace: str, name: str, *, node: str, template: dict) -> None:
        """``template``: a pod (tests/fakes/objects.pod) whose spec and labels the replacements copy."""
        self.api = api
        self.namespace = namespace
        self.name = name
        self.node = node
        self.template = template
        self.created: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._pods: dict[str, dict] = {}
        self._seq = itertools.count()
        self._watcher: Watcher | None = None
        self._synced = False  # the first list is in: each event may now be acted on

    def start(self) -> "ReplicaSetSim":
        rs = self.api.get("ReplicaSet", self.name, self.namespace)
        if rs is None:
            raise LookupError(f"ReplicaSet {self.namespace}/{self.name} does not exist")
        self._rs = rs
        sel = ",".join(f"{k}={v}" for k, v in rs["spec"]["selector"]["matchLabels"].items())
        self._watcher = Watcher(self.api, "Pod", self._on_event, namespace=self.namespace, labels=sel,
                                errors=self.errors, name=f"replicaset-{self.name}").start()
        self._synced = True
        self._reconcile()
        return self

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    def _on_event(self, etype: str, pod: dict) -> None:
        with self._lock:
            if etype == "DELETED":
                self._pods.pop(pod["metadata"]["name"], None)
            else:
                self._pods[pod["metadata"]["name"]] = pod
        if self._synced:
            self._reconcile()

    def _reconcile(self) -> None:
        with self._lock:
            active = [p for p in self._pods.values() if not p["metadata"].get("deletionTimestamp")
                      and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
            missing = int(self._rs["spec"].get("replicas", 1)) - len(active)
            names = [f"{self.name}-r{next(self._seq)}" for _ in range(max(0, missing))]
            for n in names:  # counted at once: the next event must not create them again
                self._pods[n] = {"metadata": {"name": n}, "status": {"phase": "Pending"}}
        for n in names:
            pod = copy.deepcopy(self.template)
            pod["metadata"] = {"name": n, "namespace": self.namespace,
                               "labels": dict(self.template["metadata"].get("labels") or {}),
                               "ownerReferences": [o.owner_ref("ReplicaSet", self.name, self.namespace,
                                                               uid=self._rs["metadata"]["uid"])]}
            pod["spec"]["nodeName"] = self.node
            pod.pop("status", None)
            try:
                self.api.create(pod)
                self.created.append(n)
            except ApiFailure as e:
                self.errors.append(f"create {n}: {e}")
