"""Watcher: one collection listed, then watched, on any API server, calling back for every change.

What an informer does, reduced to what the simulations need (tests/cluster/kubelet.py, the simulated operator and
host kubelet on a real server): a paged LIST (each item an ``ADDED``), then a watch from the list's
resourceVersion, resumed from the last resourceVersion seen when the server ends the stream, listed again on
410 Gone (or an ERROR event). ``on_event(type, obj)`` runs on the watcher's thread; what it raises lands in
``errors``. ``stop()`` ends a stream blocked in a read at once (urllib3's ``shutdown()``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import urllib3

from tests.cluster.client import Api, ApiFailure


class Watcher:
    def __init__(self, api: Api, kind: str, on_event: Callable[[str, dict], None], *, namespace: str | None = None,
                 labels: str | None = None, fields: str | None = None, errors: list[str] | None = None,
                 name: str = "watcher", stream_timeout_s: int = 30) -> None:
        self.api = api
        self.kind = kind
        self.on_event = on_event
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.errors = errors if errors is not None else []
        self.name = name
        self.stream_timeout_s = stream_timeout_s
        #: time.monotonic() of the last event handed to on_event (0: none yet)
        self.last_event_at = 0.0
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._resp: Any = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 15.0) -> "Watcher":
        """Start, and return once the first list has been handed to on_event."""
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()
        if not self._synced.wait(timeout_s):
            raise RuntimeError(f"{self.name}: could not list {self.kind}: {self.errors}")
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # noqa: BLE001 - already closed
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _opened(self, resp: Any) -> None:
        with self._lock:
            self._resp = resp
        if self._stop.is_set():
            resp.shutdown()

    def _emit(self, etype: str, obj: dict) -> None:
        self.last_event_at = time.monotonic()
        try:
            self.on_event(etype, obj)
        except Exception as e:  # noqa: BLE001 - a simulation's bug must reach the test
            self.errors.append(f"{self.name}: {type(e).__name__}: {e}")

    def _list(self) -> str:
        path = self.api.kinds[self.kind].path(namespace=self.namespace)
        token = None
        while True:
            page = self.api.request("GET", path, query={"labelSelector": self.labels, "fieldSelector": self.fields,
                                                        "limit": 500, "continue": token})
            for obj in self.api.typed(self.kind, page.get("items") or []):
                self._emit("ADDED", obj)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return page["metadata"]["resourceVersion"]

    def _loop(self) -> None:
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                    self._synced.set()
                for ev in self.api.watch(self.kind, self.namespace, resource_version=rv, labels=self.labels,
                                         fields=self.fields, timeout_s=self.stream_timeout_s, bookmarks=True,
                                         on_open=self._opened):
                    if self._stop.is_set():
                        return
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        rv = None  # 410 Gone in the stream: list again
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._emit(ev["type"], obj)
            except ApiFailure as e:
                if e.status == 410:
                    rv = None
                    continue
                self.errors.append(f"{self.name}: {e}")
                self._stop.wait(0.2)
            except Exception as e:  # noqa: BLE001 - a broken stream: resume from rv
                if self._stop.is_set():
                    return
                if not isinstance(e, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)):
                    self.errors.append(f"{self.name}: {type(e).__name__}: {e}")
                self._stop.wait(0.1)
            finally:
                with self._lock:
                    self._resp = None
