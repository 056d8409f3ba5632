"""The object store: objects by resource, resourceVersions, the change history, and deletion.

Every change goes through ``commit``, which gives the object the next resourceVersion, appends an
``Event`` to the history (what watches replay) and hands it to the commit listeners (open watches)
while the lock is held. ``notify`` then runs, outside the lock, the ``on_change`` callbacks and
the internal reactions (kubelet, KubeVirt simulation) on the thread that made the change.

Deletion follows the API: finalizers hold an object with a ``deletionTimestamp``; a pod on a node
is deleted gracefully (its deletionTimestamp set, removed after ``deletion_delay_s``, or with ``inf``
when a kubelet confirms with ``gracePeriodSeconds: 0`` as on a real server) unless it is finished,
unscheduled or deleted with ``gracePeriodSeconds: 0``.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from tests.fakes.apiserver.config import DELETION_DELAY_ANNOTATION, Settings
from tests.fakes.apiserver.errors import GroupResource, conflict
from tests.fakes.apiserver.meta import Key, now, sort_key, spec_part, ts, without_rv
from tests.fakes.apiserver.resources import Resource, ResourceTable

HISTORY_LIMIT = 5000
CRD_ID = "customresourcedefinitions.apiextensions.k8s.io"


@dataclass
class Event:
    """One committed change, as watches replay it. ``old`` is the object before a MODIFIED/DELETED."""

    rv: int
    res_id: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict
    old: dict | None


class Store:
    """Objects, resourceVersions and history. Methods ending in ``_locked`` expect the lock held;
    the others take it. Methods that commit return their events; the caller passes them to
    ``notify`` after releasing the lock."""

    def __init__(self, table: ResourceTable, lock: threading.RLock, settings: Settings, errors: list[str]):
        self.lock = lock
        self.table = table
        self.settings = settings
        self.errors = errors
        self.rv = 1000
        self.history: list[Event] = []
        self.pruned_rv = 0  # history up to and including this resourceVersion is gone
        self.change_callbacks: list[Callable[[str, dict], None]] = []
        self.reactions: list[Callable[[Event], None]] = []
        self.commit_listeners: list[Callable[[Event], None]] = []
        self.stopping = threading.Event()
        self._objects: dict[str, dict[Key, dict]] = {}
        self._timers: set[threading.Timer] = set()
        self._due: dict[threading.Timer, float] = {}  # when each scheduled callback runs (time.monotonic())
        self._running = 0  # scheduled callbacks running now

    # ---- reads ------------------------------------------------------------------------------------

    def bucket(self, res: Resource) -> dict[Key, dict]:
        return self._objects.setdefault(res.id, {})

    @staticmethod
    def key(res: Resource, namespace: str | None, name: str) -> Key:
        if not res.namespaced:
            return ("", name)
        return (namespace if namespace is not None else "default", name)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        with self.lock:
            res = self.table.resolve(kind)
            obj = self.bucket(res).get(self.key(res, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: str, namespace: str | None = None, api_version: str | None = None) -> list[dict]:
        with self.lock:
            res = self.table.resolve(kind, api_version)
            items = [o for (ns, _), o in self.bucket(res).items() if namespace is None or ns == namespace]
            return copy.deepcopy(sorted(items, key=sort_key))

    # ---- the test's direct writes ------------------------------------------------------------------

    def add(self, *objs: dict) -> None:
        events: list[Event] = []
        with self.lock:
            for obj in objs:
                res = self.table.resolve(obj.get("kind", ""), obj.get("apiVersion"))
                obj = copy.deepcopy(obj)
                obj.setdefault("apiVersion", res.api_version)
                obj.setdefault("kind", res.kind)
                md = obj.setdefault("metadata", {})
                if not md.get("name"):
                    raise ValueError(f"{res.kind} without metadata.name")
                if res.namespaced:
                    md.setdefault("namespace", "default")
                else:
                    md.pop("namespace", None)
                key = (md.get("namespace", ""), md["name"])
                if key in self.bucket(res):
                    raise ValueError(f"{res.kind} {key} already exists")
                if res.namespaced:
                    events += self.ensure_namespace_locked(md["namespace"])
                md.setdefault("uid", str(uuid.uuid4()))
                md.setdefault("creationTimestamp", ts())
                md.setdefault("generation", 1)
                md.pop("resourceVersion", None)
                events.append(self.commit_locked(res, "ADDED", obj, None))
        self.notify(events)

    def update(self, obj: dict) -> dict:
        with self.lock:
            out, events = self._update_locked(obj)
        self.notify(events)
        return out

    def mutate(self, kind: str, name: str, namespace: str | None, fn: Callable[[dict], dict | None]) -> dict:
        with self.lock:
            res = self.table.resolve(kind)
            cur = self.bucket(res).get(self.key(res, namespace, name))
            if cur is None:
                raise KeyError(f"{res.kind} {namespace}/{name} not found")
            cur = copy.deepcopy(cur)
            result = fn(cur)
            use = result if isinstance(result, dict) and "metadata" in result else cur
            out, events = self._update_locked(use)
        self.notify(events)
        return out

    def _update_locked(self, obj: dict) -> tuple[dict, list[Event]]:
        res = self.table.resolve(obj.get("kind", ""), obj.get("apiVersion"))
        md = obj.get("metadata") or {}
        key = self.key(res, md.get("namespace"), md.get("name", ""))
        old = self.bucket(res).get(key)
        if old is None:
            raise KeyError(f"{res.kind} {key} not found")
        new = copy.deepcopy(obj)
        new.setdefault("apiVersion", res.api_version)
        new.setdefault("kind", res.kind)
        nmd = new.setdefault("metadata", {})
        for k in ("uid", "creationTimestamp", "generation"):
            if k not in nmd and k in old["metadata"]:
                nmd[k] = old["metadata"][k]
        if res.namespaced:
            nmd["namespace"] = key[0]
        events = self.store_update_locked(res, key, copy.deepcopy(old), new)
        stored = self.bucket(res).get(key)
        return copy.deepcopy(stored if stored is not None else events[-1].obj), events

    def delete_now(self, kind: str, name: str, namespace: str | None = None) -> None:
        with self.lock:
            res = self.table.resolve(kind)
            key = self.key(res, namespace, name)
            if key not in self.bucket(res):
                raise KeyError(f"{res.kind} {key} not found")
            events = self.remove_locked(res, key)
        self.notify(events)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        with self.lock:
            res = self.table.resolve(kind)
            key = self.key(res, namespace, name)
            if key not in self.bucket(res):
                return None
            out, events = self.delete_locked(res, key, {}, dry_run=False)
        self.notify(events)
        return out

    def compact(self, rv: int | None = None) -> None:
        """Forget the history up to ``rv`` (default: all of it), as etcd compaction does."""
        with self.lock:
            upto = self.rv if rv is None else rv
            self.history = [ev for ev in self.history if ev.rv > upto]
            self.pruned_rv = max(self.pruned_rv, upto)

    # ---- commit and notify -------------------------------------------------------------------------

    def commit_locked(self, res: Resource, etype: str, obj: dict, old: dict | None) -> Event:
        """Store (or remove, for DELETED) ``obj`` with a new resourceVersion."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if etype == "DELETED":
            self.bucket(res).pop(key, None)
        else:
            self.bucket(res)[key] = obj
        if res.id == CRD_ID and etype != "DELETED":
            self.table.serve_crd(obj)
        ev = Event(self.rv, res.id, etype, copy.deepcopy(obj), copy.deepcopy(old) if old is not None else None)
        self.history.append(ev)
        if len(self.history) > HISTORY_LIMIT:
            drop = len(self.history) - HISTORY_LIMIT
            self.pruned_rv = self.history[drop - 1].rv
            del self.history[:drop]
        for listener in self.commit_listeners:
            listener(ev)
        return ev

    def notify(self, events: list[Event]) -> None:
        """Run the on_change callbacks, then the internal reactions, for each event. No lock held."""
        if not events:
            return
        with self.lock:
            callbacks = list(self.change_callbacks)
            reactions = list(self.reactions)
        for ev in events:
            for cb in callbacks:
                try:
                    cb(ev.type, copy.deepcopy(ev.obj))
                except Exception as exc:  # noqa: BLE001 - recorded for the test to see
                    self.errors.append(f"on_change callback {cb!r} raised {exc!r}")
            for react in reactions:
                try:
                    react(ev)
                except Exception as exc:  # noqa: BLE001
                    self.errors.append(f"reaction {react!r} raised {exc!r}")

    def ensure_namespace_locked(self, ns: str) -> list[Event]:
        if not self.settings.auto_namespaces or not ns:
            return []
        res = self.table.get("namespaces")
        if res is None or ("", ns) in self.bucket(res):
            return []
        obj = {"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": ns, "uid": str(uuid.uuid4()), "creationTimestamp": ts(),
                            "labels": {"kubernetes.io/metadata.name": ns}},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        return [self.commit_locked(res, "ADDED", obj, None)]

    def namespace_missing_locked(self, ns: str | None) -> bool:
        """True when namespaces are not created on demand and ``ns`` does not exist."""
        res = self.table.get("namespaces")
        return bool(ns) and not self.settings.auto_namespaces and res is not None and ("", ns) not in self.bucket(res)

    def store_update_locked(self, res: Resource, key: Key, old: dict, new: dict) -> list[Event]:
        """Commit ``new`` over ``old`` unless nothing changed. Handles generation and finalizers."""
        nmd = new["metadata"]
        if spec_part(new) != spec_part(old):
            nmd["generation"] = int(old["metadata"].get("generation", 1)) + 1
        elif "generation" in old["metadata"]:
            nmd["generation"] = old["metadata"]["generation"]
        if without_rv(new) == without_rv(old):
            new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
            self.bucket(res)[key] = new
            return []
        events = [self.commit_locked(res, "MODIFIED", new, old)]
        if nmd.get("deletionTimestamp") and not nmd.get("finalizers") and not self._graceful_pending(res, new):
            events += self.remove_locked(res, key)
        return events

    @staticmethod
    def _graceful_pending(res: Resource, obj: dict) -> bool:
        return res.id == "pods" and obj["metadata"].get("deletionGracePeriodSeconds", 0) > 0

    def remove_locked(self, res: Resource, key: Key) -> list[Event]:
        """Remove at once; a namespace takes its contents with it (no namespace termination)."""
        obj = self.bucket(res).get(key)
        if obj is None:
            return []
        events = [self.commit_locked(res, "DELETED", copy.deepcopy(obj), obj)]
        if res.id == "namespaces":
            for other in self.table.all():
                if other.namespaced:
                    for k in [k for k in self.bucket(other) if k[0] == key[1]]:
                        events += self.remove_locked(other, k)
        return events

    # ---- deletion ----------------------------------------------------------------------------------

    def _pod_delay(self, pod: dict) -> float:
        ann = (pod["metadata"].get("annotations") or {}).get(DELETION_DELAY_ANNOTATION)
        if ann is not None:
            try:
                return float(ann)
            except ValueError:
                pass
        return float(self.settings.deletion_delay_s)

    def delete_locked(self, res: Resource, key: Key, options: dict, dry_run: bool) -> tuple[dict, list[Event]]:
        """The DELETE semantics (preconditions, finalizers, graceful pods). Returns (body, events)."""
        obj = self.bucket(res)[key]
        pre = options.get("preconditions") or {}
        md = obj["metadata"]
        # rest.BeforeDelete (k8s.io/apiserver/pkg/registry/rest/delete.go) checks these before storage
        # does, and names the object by its Kind: 'Operation cannot be fulfilled on Pod "p": ...'.
        by_kind = GroupResource(res.group, res.kind)
        if pre.get("uid") and pre["uid"] != md.get("uid"):
            raise conflict(by_kind, key[1], f'the UID in the precondition ({pre["uid"]}) does not match the UID in '
                           f'record ({md.get("uid")}). The object might have been deleted and then recreated')
        if pre.get("resourceVersion") and pre["resourceVersion"] != md.get("resourceVersion"):
            raise conflict(by_kind, key[1], f'the ResourceVersion in the precondition ({pre["resourceVersion"]}) '
                           f'does not match the ResourceVersion in record ({md.get("resourceVersion")}). The object '
                           "might have been modified")
        grace = options.get("gracePeriodSeconds")
        graceful = False
        delay = 0.0
        if res.id == "pods":
            delay = self._pod_delay(obj)
            phase = (obj.get("status") or {}).get("phase")
            graceful = (delay > 0 and grace != 0 and bool((obj.get("spec") or {}).get("nodeName"))
                        and phase not in ("Succeeded", "Failed"))
        if md.get("deletionTimestamp"):
            if res.id == "pods" and grace == 0 and not md.get("finalizers"):
                return copy.deepcopy(obj), ([] if dry_run else self.remove_locked(res, key))
            return copy.deepcopy(obj), []
        if graceful or md.get("finalizers"):
            new = copy.deepcopy(obj)
            if graceful:
                if grace is None:
                    grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                grace = max(int(grace), 1)
                new["metadata"]["deletionTimestamp"] = ts(now() + timedelta(seconds=grace))
                new["metadata"]["deletionGracePeriodSeconds"] = grace
            else:
                new["metadata"]["deletionTimestamp"] = ts()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
            if dry_run:
                return new, []
            events = [self.commit_locked(res, "MODIFIED", new, obj)]
            if graceful and delay != float("inf"):  # inf: a kubelet confirms (DELETE gracePeriodSeconds 0)
                self.schedule(delay, self._finish_graceful, res.id, key, new["metadata"].get("uid"))
            return copy.deepcopy(new), events
        if dry_run:
            return copy.deepcopy(obj), []
        events = self.remove_locked(res, key)
        return copy.deepcopy(events[0].obj), events

    def schedule(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` after ``delay`` seconds on a timer thread, unless the server stops first."""
        def run() -> None:
            with self.lock:
                self._timers.discard(timer)
                self._due.pop(timer, None)
                self._running += 1
            try:
                if not self.stopping.is_set():
                    fn(*args)
            finally:
                with self.lock:
                    self._running -= 1

        timer = threading.Timer(delay, run)
        timer.daemon = True
        with self.lock:
            self._timers.add(timer)
            self._due[timer] = time.monotonic() + delay
        timer.start()

    def wait_scheduled(self, horizon_s: float, timeout_s: float) -> bool:
        """Wait until no scheduled callback runs and none is due within ``horizon_s`` (what a simulated controller
        does next, 50 ms after its last write, has then happened): a test that judges the state waits for exactly
        that instead of sleeping a fixed time. False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                now = time.monotonic()
                busy = self._running or any(due <= now + horizon_s for due in self._due.values())
            if not busy:
                return True
            if now >= deadline:
                return False
            time.sleep(0.005)

    def cancel_timers(self) -> None:
        with self.lock:
            timers = list(self._timers)
            self._timers.clear()
            self._due.clear()
        for t in timers:
            t.cancel()

    def _finish_graceful(self, res_id: str, key: Key, uid: str | None) -> None:
        with self.lock:
            res = self.table.get(res_id)
            if res is None:
                return
            obj = self.bucket(res).get(key)
            if obj is None or obj["metadata"].get("uid") != uid or not obj["metadata"].get("deletionTimestamp"):
                return
            if obj["metadata"].get("finalizers"):
                new = copy.deepcopy(obj)
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                events = [self.commit_locked(res, "MODIFIED", new, obj)]
            else:
                events = self.remove_locked(res, key)
        self.notify(events)
