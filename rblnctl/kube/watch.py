"""Watches: a collection's changes as they happen, resumed, relisted and polled as client-go's reflector does.

Waits (pods leaving a node, the operator converging, a VM stopping or Ready, `status --watch`) are driven
by these: a list, then one stream per collection, so a wait costs a few requests whatever the number of
objects. A wait until something holds is watch_until(): the one such loop of the library.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import urllib3

from rblnctl.clock import Clock, Stop, next_item
from rblnctl.errors import (
    ClusterError,
    ClusterUnreachable,
    Forbidden,
    MalformedReply,
    NotFound,
    RblnError,
)
from rblnctl.kube.client import Kube, log, log_request
from rblnctl.kube.replies import _one_line, _root_cause, _status_error, is_transient
from rblnctl.kube.resources import Resource


# Watches (watch): each request asks the server to stream for at most WATCH_STREAM_S (client-go
# asks for 5 to 10 minutes) and the client gives it WATCH_READ_GRACE_S more before it calls the stream
# dead; a broken stream is reopened after WATCH_RETRY_START_S, doubling up to WATCH_RETRY_CAP_S; where
# watching is not allowed, the collection is listed every WATCH_POLL_S instead.
WATCH_STREAM_S = 300
WATCH_READ_GRACE_S = 30.0
WATCH_RETRY_START_S = 0.2
WATCH_RETRY_CAP_S = 5.0
WATCH_POLL_S = 1.0
WATCH_JOIN_S = 0.5  # how long leaving watch_many waits for its threads to end (daemons: never longer)
SYNC = "SYNC"  # a WatchEvent carrying every object of the collection (after a list)
S = TypeVar("S")  # what a wait makes of the collections it watches (watch_until)


@dataclass(frozen=True, kw_only=True)
class Change:
    """One difference between two looks at the cluster, a line of `node list`, `status` and `vm list --watch`:
    `subject` (`node/n1`) and what changed (`mode`), from `old` to `new` (empty for a subject that appeared or went:
    `what` is then `added` or `removed`). Below node/ and vm/, which both report their changes as these."""

    subject: str
    what: str
    old: str = ""
    new: str = ""


@dataclass(frozen=True)
class WatchEvent:
    """One change to a watched collection: ADDED, MODIFIED or DELETED `object`, or SYNC with every `objects`.

    A SYNC comes first (the initial list), after a relist (the server forgot the resourceVersion the
    watch would resume from: 410 Gone) and, where watching is not allowed, once per poll: the
    consumer replaces what it holds with `objects`. `source` is the index of the WatchSpec it came
    from (watch_many). `resource_version`: the collection's version once the event is applied (a SYNC's
    is its list's), where a later watch() of the same collection resumes (its `resource_version`).
    """

    type: str
    object: dict | None = None
    objects: tuple[dict, ...] = ()
    source: int = 0
    resource_version: str = ""


@dataclass(frozen=True)
class WatchSpec:
    """One collection to watch (watch_many); `missing_ok`: a collection the server does not serve is empty;
    `resource_version`: where to resume (watch(): no list first)."""

    res: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    missing_ok: bool = False
    resource_version: str | None = None


def object_key(obj: dict) -> tuple[str, str]:
    """(namespace, name) of an object ("" for a cluster-scoped one)."""
    md = obj.get("metadata") or {}
    return str(md.get("namespace") or ""), str(md.get("name") or "")


class Mirror:
    """The objects of a watched collection, kept current by applying its WatchEvents."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.synced = False  # a SYNC has been applied: the mirror holds the whole collection

    def apply(self, ev: WatchEvent) -> None:
        """Apply one event (SYNC replaces everything)."""
        if ev.type == SYNC:
            self.objects = {object_key(o): o for o in ev.objects}
            self.synced = True
        elif ev.type == "DELETED" and ev.object is not None:
            self.objects.pop(object_key(ev.object), None)
        elif ev.type in ("ADDED", "MODIFIED") and ev.object is not None:
            self.objects[object_key(ev.object)] = ev.object

    def items(self) -> list[dict]:
        """The objects, sorted by namespace and name."""
        return [self.objects[k] for k in sorted(self.objects)]


def watch(
    kube: Kube,
    res: Resource,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    resource_version: str | None = None,
    timeout_s: float | None = None,
    clock: Clock | None = None,
    stop: Stop | None = None,
    poll_s: float = WATCH_POLL_S,
    on_retry: Callable[[RblnError], None] | None = None,
    missing_ok: bool = False,
) -> Iterator[WatchEvent]:
    """Yield a collection's changes as they happen, until `timeout_s` has passed or `stop` is set.

    Without `resource_version` it lists first and yields that as a SYNC, then watches from the
    list's resourceVersion (client-go's reflector: k8s.io/client-go/tools/cache/reflector.go
    ListAndWatch). When the server ends a stream (its request timeout, a restart) the watch is
    reopened from the last resourceVersion seen, BOOKMARK events included (they only move that
    version on and are not yielded). When the server no longer has that version (410 Gone /
    Expired, "too old resource version"), it relists and yields a SYNC. Where watching is
    forbidden (403) or not supported (405), it lists every `poll_s` instead, one SYNC each: one
    request per round, whatever the collection holds. Transient failures (a dropped
    connection, 429, 5xx) are reported to `on_retry` and tried again with backoff until the
    deadline; other errors are raised. `clock` (default the client's) times the deadline.
    `missing_ok`: a collection the server does not serve (404) is one empty SYNC, then nothing.
    """
    clock = clock or kube.clock
    deadline = None if timeout_s is None else clock.monotonic() + timeout_s
    path = res.path(namespace=namespace)
    selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}
    polling = False
    failures = 0

    rv = resource_version

    def left() -> float | None:
        return None if deadline is None else deadline - clock.monotonic()

    def stopped() -> bool:
        return stop is not None and stop.is_set()

    def relist() -> WatchEvent:
        items, version = kube.list_with_version(res, namespace=namespace, label_selector=label_selector,
                                                field_selector=field_selector)
        nonlocal rv
        rv = version
        return WatchEvent(SYNC, objects=tuple(items), resource_version=version or "")

    def backoff(err: RblnError) -> bool:
        """Report a transient failure and wait before the next try; False when the wait should end."""
        nonlocal failures
        failures += 1
        remaining = left()
        if remaining is not None and remaining <= 0:
            return False
        if on_retry is not None:
            on_retry(err)
        pause = min(WATCH_RETRY_CAP_S, WATCH_RETRY_START_S * 2 ** (failures - 1))
        return not clock.sleep(pause if remaining is None else min(pause, remaining), stop)

    listed = rv is not None  # polling lists again each round
    while not stopped():
        if not listed or polling:
            if listed:  # polling: wait a round first
                remaining = left()
                if remaining is not None and remaining <= 0:
                    return
                if clock.sleep(poll_s if remaining is None else min(poll_s, remaining), stop):
                    return
            try:
                sync = relist()
            except NotFound:
                if not missing_ok:
                    raise
                yield WatchEvent(SYNC)
                return
            except (ClusterError, ClusterUnreachable) as e:
                if not is_transient(e) or not backoff(e):
                    raise
                continue
            listed = True
            failures = 0
            yield sync
            continue
        remaining = left()
        if remaining is not None and remaining <= 0:
            return
        try:
            resp = open_stream(kube, path, {**selectors, "resourceVersion": rv}, remaining)
        except Forbidden as e:
            log.debug("cannot watch %s (%s): listing it every %gs instead", path, e, poll_s)
            polling = True
            continue
        except (ClusterError, ClusterUnreachable) as e:
            if e.status == 405:  # watch is not served for this resource
                log.debug("%s cannot be watched: listing it every %gs instead", path, poll_s)
                polling = True
                continue
            if e.status == 410:  # the resourceVersion is gone: start again from a fresh list
                listed = False
                continue
            if stopped():
                return
            if not is_transient(e) or not backoff(e):
                raise
            continue
        expired = False
        clean = False
        events = 0
        opened = time.monotonic()
        unregister = stop.on_set(lambda: _shutdown(resp)) if stop is not None else (lambda: None)
        try:
            for ev in _stream_events(resp, path):
                etype, obj = ev.get("type"), ev.get("object")
                if not isinstance(obj, dict):
                    raise MalformedReply(f"a watch event of GET {path} has no object: {_one_line(ev)[:80]}")
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        expired = True
                        break
                    raise _status_error("GET", path, int(obj.get("code") or 500), obj, kube.server)
                version = (obj.get("metadata") or {}).get("resourceVersion")
                rv = str(version) if version else rv
                if etype == "BOOKMARK":
                    continue
                if etype not in ("ADDED", "MODIFIED", "DELETED"):
                    raise MalformedReply(f"a watch event of GET {path} has an unknown type {etype!r}")
                failures = 0
                events += 1
                yield WatchEvent(str(etype), object=obj, resource_version=rv or "")
            else:
                clean = True
        except (urllib3.exceptions.HTTPError, OSError) as e:
            if stopped():
                return
            err = ClusterUnreachable(f"the watch of {path} on the API server at {kube.server} broke: "
                                     f"{_root_cause(e)}")
            if not backoff(err):
                return
        finally:
            unregister()
            if clean:
                resp.release_conn()
            else:
                resp.close()
        if expired:
            log.debug("the watch of %s expired at resourceVersion %s: listing again", path, rv)
            listed = False
        elif clean and not events and time.monotonic() - opened < 1 and not stopped():
            # A stream the server (or a proxy) ends at once would otherwise be reopened in a tight loop.
            if not backoff(ClusterUnreachable(f"the API server at {kube.server} ended the watch of {path} "
                                              "at once")):
                return


def open_stream(kube: Kube, path: str, query: dict[str, Any], remaining: float | None) -> Any:
    """Open one watch stream (urllib3 response, body unread); a non-200 answer is its typed error."""
    stream_s = WATCH_STREAM_S if remaining is None else max(1, min(WATCH_STREAM_S, math.ceil(remaining)))
    query = {**query, "watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": stream_s}
    url, headers, plugin_errors, resource_path = kube._prepare("GET", path, query, None, None)
    started = time.monotonic()
    resp, _ = kube._send("GET", path, url, headers, None, (kube.request_timeout_s, stream_s + WATCH_READ_GRACE_S),
                         stream=True)
    log_request("GET", url, resp, started, streaming=True)
    if resp.status != 200:
        data = resp.read()
        resp.release_conn()
        raise kube._reply_error("GET", path, resp, data, plugin_errors)
    return resp


def watch_many(kube: Kube, specs: Sequence[WatchSpec], *, timeout_s: float | None = None, clock: Clock | None = None,
               stop: Stop | None = None, poll_s: float = WATCH_POLL_S,
               on_retry: Callable[[RblnError], None] | None = None) -> Iterator[WatchEvent]:
    """Watch several collections at once (one stream each, read on its own thread); yield every event as it
    comes, its `source` the index of its spec. Ends when every watch has; the first error is raised. `on_retry`
    hears each transient failure on the caller's thread, in its place among the events (as one watch() would).

    Leaving the loop early, however it is left (an error, Ctrl-C or a signal at any moment, the opening of
    the streams included), stops every watch: the stop is set in a `finally` that covers the start of every
    thread. The threads are daemons and are waited for only WATCH_JOIN_S: one still inside a request (a LIST,
    or a stream the server has not answered yet) ends on its own when that returns, and never holds the
    process (a ThreadPoolExecutor's workers are joined at interpreter exit: a stream the server was slow to
    open kept an interrupted rblnctl alive until its read timeout, issue 28).

    A single collection is read on a thread too: the caller's thread (the main thread, where Ctrl-C is run) waits
    only on the queue of events, in slices (rblnctl.clock.next_item), never in a stream's read, where a signal that
    lands just before the read waits for the next event or the read timeout (minutes) to be run."""
    # (index, an event; a transient failure for on_retry, heard on this thread in its place among the events; None:
    # that watch is over)
    events: queue.Queue[tuple[int, WatchEvent | RblnError | None]] = queue.Queue()
    failures: list[BaseException | None] = [None] * len(specs)
    threads: list[threading.Thread] = []
    with (stop.linked() if stop is not None else _own_stop()) as mine:

        def pump(i: int, sp: WatchSpec) -> None:
            retry = None if on_retry is None else lambda err: events.put((i, err))
            try:
                for ev in watch(kube, sp.res, namespace=sp.namespace, label_selector=sp.label_selector,
                                     field_selector=sp.field_selector, resource_version=sp.resource_version,
                                     timeout_s=timeout_s, clock=clock, stop=mine, poll_s=poll_s, on_retry=retry,
                                     missing_ok=sp.missing_ok):
                    events.put((i, replace(ev, source=i)))
            except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
                failures[i] = e
            finally:
                events.put((i, None))  # this watch is over (failures[i] holds the error, if any)

        try:
            for i, sp in enumerate(specs):
                threads.append(threading.Thread(target=pump, args=(i, sp), name=f"rblnctl-watch-{i}", daemon=True))
                threads[-1].start()
            running = len(specs)
            while running:
                i, ev = next_item(events)  # never a wait without a timeout: Ctrl-C is run at once
                if ev is None:
                    running -= 1
                    failure = failures[i]
                    if failure is not None:
                        raise failure  # what ended that watch
                    continue
                if isinstance(ev, RblnError):
                    if on_retry is not None:
                        on_retry(ev)
                    continue
                yield ev
        finally:
            mine.set()  # wakes every stream still open, and ends every watch before its next request
            deadline = time.monotonic() + WATCH_JOIN_S
            for t in threads:
                if t.is_alive():  # one whose start was interrupted never ran
                    t.join(max(0.0, deadline - time.monotonic()))


@contextmanager
def _own_stop() -> Iterator[Stop]:
    yield Stop()


def _shutdown(resp: Any) -> None:
    """Wake a thread blocked reading `resp` (a watch asked to stop)."""
    try:
        resp.shutdown()
    except (ValueError, RuntimeError, OSError):  # already released or closed: nobody is reading it
        pass


def _stream_events(resp: Any, path: str) -> Iterator[dict]:
    """The JSON events of a watch stream, one per line, as they arrive."""
    buffer = b""
    for chunk in resp.stream(65536, decode_content=True):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as e:
                text = _one_line(line[:80].decode("utf-8", "replace"))
                raise MalformedReply(f"GET {path} streamed invalid JSON ({text})") from e
            if not isinstance(event, dict):
                raise MalformedReply(f"GET {path} streamed {type(event).__name__}, not a watch event")
            yield event
    if buffer.strip():
        raise MalformedReply(f"GET {path} ended in the middle of a watch event")


@dataclass(frozen=True)
class Watched(Generic[S]):
    """How watch_until() ended: `state` is the last one looked at (None: the collections were never all read),
    `done` whether `done(state)` held, `stopped` whether the stop ended it; neither: the deadline passed."""

    state: S | None
    done: bool
    stopped: bool = False


def watch_until(kube: Kube, specs: Sequence[WatchSpec], look: Callable[[Sequence[Mirror]], S],
                done: Callable[[S], bool], *, deadline: float, clock: Clock | None = None, stop: Stop | None = None,
                on_change: Callable[[S], None] | None = None, on_retry: Callable[[RblnError], None] | None = None,
                poll_s: float = WATCH_POLL_S) -> Watched[S]:
    """The one wait of the library: watch `specs` (watch_many) until `done` holds of what they show, the
    `deadline` (seconds on `clock`'s monotonic time, default the client's) passes, or `stop` is set.

    Every event is applied to its collection's Mirror; once every collection has been read (its first
    SYNC), `look(mirrors)` turns them into a state (it may raise: a deleted object, a change that makes the
    wait pointless) and `on_change(state)` hears each state unlike the one before (progress), then
    `done(state)` decides. Transient failures of the watches go to `on_retry` and are tried again until the
    deadline (watch()); the state after one is heard again, changed or not. Never polls: a LIST per round
    happens only where watching is refused (403/405).
    """
    clock = clock or kube.clock
    mirrors = [Mirror() for _ in specs]
    last: S | None = None
    seen = False

    def retrying(err: RblnError) -> None:
        nonlocal seen
        seen = False  # the retry was shown: the state after it is shown again, changed or not
        if on_retry is not None:
            on_retry(err)

    remaining = deadline - clock.monotonic()
    if remaining > 0 and not (stop is not None and stop.is_set()):
        for ev in watch_many(kube, specs, timeout_s=remaining, clock=clock, stop=stop, poll_s=poll_s,
                             on_retry=retrying):
            mirrors[ev.source].apply(ev)
            if not all(m.synced for m in mirrors):
                continue
            state = look(mirrors)
            if not seen or state != last:
                seen, last = True, state
                if on_change is not None:
                    on_change(state)
            if done(state):
                return Watched(state, True)
    return Watched(last, False, stopped=stop is not None and stop.is_set())
