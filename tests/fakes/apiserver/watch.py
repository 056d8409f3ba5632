"""``?watch=true``: a chunked stream of JSON events, as the watch cache serves it.

A watch from ``resourceVersion`` replays the history after it (``ERROR`` 410 Expired when that is
older than the kept history, see ``Store.compact``); without one it starts with synthetic ADDED
events for the current objects. Label and field selectors apply; an object that stops matching
arrives as DELETED, one that starts matching as ADDED.

A stream ends cleanly (the terminating chunk) after ``timeoutSeconds``, on ``close_all()`` (what a
real server does when its own timeout passes), or when the server stops. A client that closes its
connection ends the stream at once (the real server notices through the request's context), not
only at the next event it would have been sent. With
``allowWatchBookmarks=true`` it sends BOOKMARK events (an object with only kind, apiVersion and
``metadata.resourceVersion``) every ``bookmark_interval_s`` and once just before it ends; the real
server sends its last one two seconds before the timeout (cacher.go ``nextBookmarkTime``).
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from typing import Any, Callable, Protocol

from tests.fakes.apiserver.config import Settings
from tests.fakes.apiserver.errors import bad_request, status_body
from tests.fakes.apiserver.meta import first, truthy
from tests.fakes.apiserver.resources import Resource
from tests.fakes.apiserver.selectors import parse_field_selector, parse_label_selector
from tests.fakes.apiserver.store import Event, Store


class ChunkedWriter(Protocol):
    def start_chunked(self, code: int) -> None: ...

    def write_chunk(self, obj: Any) -> None: ...

    def end_chunked(self) -> None: ...

    def abort(self) -> None: ...

    def client_gone(self) -> bool: ...


class Watcher:
    def __init__(self, res_id: str, namespace: str | None):
        self.res_id = res_id
        self.namespace = namespace
        self.queue: queue.Queue[Event] = queue.Queue()
        self.closed = threading.Event()


class WatchHub:
    """The open watches. Every commit is queued (under the store lock) for the watchers of its resource."""

    def __init__(self, store: Store, settings: Settings):
        self.store = store
        self.settings = settings
        self._watchers: list[Watcher] = []
        store.commit_listeners.append(self._publish_locked)

    def _publish_locked(self, ev: Event) -> None:
        ns = ev.obj["metadata"].get("namespace", "")
        for w in self._watchers:
            if w.res_id == ev.res_id and (w.namespace is None or w.namespace == ns):
                w.queue.put(ev)

    def open_count(self) -> int:
        with self.store.lock:
            return len(self._watchers)

    def close_all(self) -> int:
        """End every open stream cleanly; returns how many there were."""
        with self.store.lock:
            watchers = list(self._watchers)
        for w in watchers:
            w.closed.set()
        return len(watchers)

    def serve(self, out: ChunkedWriter, res: Resource, ns: str | None, q: dict[str, list[str]]) -> None:
        lmatch = parse_label_selector(first(q, "labelSelector") or "")
        fmatch = parse_field_selector(first(q, "fieldSelector") or "", res)
        timeout = first(q, "timeoutSeconds")
        deadline = time.monotonic() + float(timeout) if timeout else None
        bookmarks = truthy(first(q, "allowWatchBookmarks"))

        def matches(o: dict | None) -> bool:
            return o is not None and lmatch(o["metadata"].get("labels") or {}) and fmatch(o)

        watcher = Watcher(res.id, ns)
        initial = self._register(watcher, res, ns, first(q, "resourceVersion"), matches)
        out.start_chunked(200)
        try:
            for etype, obj in initial:
                out.write_chunk({"type": etype, "object": obj})
            if initial and initial[0][0] == "ERROR":
                out.end_chunked()
                return

            def deliver(ev: Event) -> None:
                etype = _event_type(ev, matches)
                if etype is not None:
                    out.write_chunk({"type": etype, "object": ev.obj})

            def bookmark() -> None:
                while True:  # first send what is queued: a bookmark promises everything before it was sent
                    with self.store.lock:
                        if watcher.queue.empty():
                            rv = self.store.rv
                            break
                    deliver(watcher.queue.get_nowait())
                out.write_chunk({"type": "BOOKMARK", "object": {
                    "kind": res.kind, "apiVersion": res.api_version, "metadata": {"resourceVersion": str(rv)}}})

            next_bookmark = time.monotonic() + self.settings.bookmark_interval_s
            while not self.store.stopping.is_set():
                if out.client_gone():
                    out.abort()
                    return
                now = time.monotonic()
                if watcher.closed.is_set() or (deadline is not None and now >= deadline):
                    if bookmarks:
                        bookmark()
                    break
                if bookmarks and now >= next_bookmark:
                    bookmark()
                    next_bookmark = now + self.settings.bookmark_interval_s
                wakeups = [t for t in (deadline, next_bookmark if bookmarks else None) if t is not None]
                wait = min([0.05] + [t - now for t in wakeups])
                try:
                    deliver(watcher.queue.get(timeout=max(wait, 0.001)))
                except queue.Empty:
                    continue
        except OSError:  # the client went away
            out.abort()
            return
        finally:
            with self.store.lock:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)
        out.end_chunked()

    def _register(self, watcher: Watcher, res: Resource, ns: str | None, rv_param: str | None,
                  matches: Callable[[dict | None], bool]) -> list[tuple[str, dict]]:
        """Queue the replayed history (or return the synthetic ADDED events) and open the watcher."""
        initial: list[tuple[str, dict]] = []
        store = self.store
        with store.lock:
            if rv_param not in (None, "", "0"):
                try:
                    since = int(rv_param or "")
                except ValueError:
                    raise bad_request(f"invalid resource version: {rv_param}")
                if since < store.pruned_rv:
                    gone = status_body(410, "Expired", f"too old resource version: {since} ({store.pruned_rv + 1})")
                    return [("ERROR", gone)]
                for ev in store.history:
                    if ev.rv > since and ev.res_id == res.id and (
                            ns is None or ev.obj["metadata"].get("namespace", "") == ns):
                        watcher.queue.put(ev)
            else:
                for (ons, _), o in sorted(store.bucket(res).items()):
                    if (ns is None or ons == ns) and matches(o):
                        initial.append(("ADDED", copy.deepcopy(o)))
            self._watchers.append(watcher)
        return initial


def _event_type(ev: Event, matches: Callable[[dict | None], bool]) -> str | None:
    """The event as this watch's selectors see it, or None when it does not concern the watch."""
    now_m, old_m = matches(ev.obj), matches(ev.old)
    if ev.type == "MODIFIED":
        if now_m and not old_m:
            return "ADDED"
        if old_m and not now_m:
            return "DELETED"
        return "MODIFIED" if now_m else None
    return ev.type if now_m else None
