"""rblnctl.kube.watch and watch_many against the fake API server: list then watch, resuming after the server
ends a stream, relisting on 410, bookmarks, falling back to LISTs where watching is refused, stopping."""

from __future__ import annotations

import threading
import time

import pytest

from rblnctl.clock import Stop
from rblnctl.errors import ClusterError
from rblnctl.kube import NODES, PODS, SYNC, Mirror, WatchSpec, watch, watch_many
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from tests.helpers import blocked_in, ctrl_c_pending_when



def _wait_for(predicate, what):
    deadline = time.monotonic() + 5  # a bound for a slow machine, not the expected time
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _names(ev):
    return [x["metadata"]["name"] for x in ev.objects] if ev.type == SYNC else ev.object["metadata"]["name"]


class Consumer:
    """Iterate a watch on a thread, recording (type, names) until `until(events)` holds or it ends."""

    def __init__(self, iterator, until=lambda got: False):
        self.got: list[tuple[str, object]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(iterator, until), daemon=True)
        self.thread.start()

    def _run(self, iterator, until):
        try:
            for ev in iterator:
                self.got.append((ev.type, _names(ev)))
                if until(self.got):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e

    def join(self):
        self.thread.join(5)
        assert not self.thread.is_alive(), "the watch did not end"
        if self.error is not None:
            raise self.error
        return self.got


def _watches(apiserver):
    return [r for r in apiserver.requests_matching("GET", "^/api/v1/nodes$") if "watch" in r.query]


def _lists(apiserver):
    return [r for r in apiserver.requests_matching("GET", "^/api/v1/nodes$") if "watch" not in r.query]


def test_a_watch_lists_first_then_streams_the_changes(apiserver, kube):
    apiserver.add(o.node("n1"), o.node("n2"))
    c = Consumer(watch(kube, NODES, timeout_s=10), until=lambda got: len(got) == 4)
    _wait_for(lambda: apiserver.open_watches == 1, "the watch to open")
    apiserver.add(o.node("n3"))
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"].setdefault("labels", {}).update(a="1"))
    apiserver.delete_now("Node", "n2")
    assert c.join() == [(SYNC, ["n1", "n2"]), ("ADDED", "n3"), ("MODIFIED", "n1"), ("DELETED", "n2")]
    listed, watched = _lists(apiserver), _watches(apiserver)
    assert len(listed) == 1 and len(watched) == 1
    # The watch starts where the list ended (nothing between the two is lost) and asks for bookmarks.
    assert watched[0].query["resourceVersion"] == ["1002"] and watched[0].query["allowWatchBookmarks"] == ["true"]


def test_a_watch_resumes_where_it_was_when_the_server_ends_the_stream(apiserver, kube):
    apiserver.add(o.node("n1"))
    c = Consumer(watch(kube, NODES, timeout_s=10), until=lambda got: len(got) == 3)
    _wait_for(lambda: apiserver.open_watches == 1, "the watch to open")
    apiserver.add(o.node("n2"))
    _wait_for(lambda: len(c.got) == 2, "the first event")
    seen = apiserver.get("Node", "n2")["metadata"]["resourceVersion"]
    assert apiserver.close_watches() == 1  # what a real server does when its watch timeout passes
    _wait_for(lambda: len(_watches(apiserver)) == 2, "the watch to be opened again")
    apiserver.add(o.node("n3"))
    assert c.join() == [(SYNC, ["n1"]), ("ADDED", "n2"), ("ADDED", "n3")]  # nothing lost, nothing twice
    watched = _watches(apiserver)
    assert len(_lists(apiserver)) == 1 and len(watched) == 2
    assert watched[1].query["resourceVersion"] == [seen]  # resumed, not relisted


def test_a_watch_resumes_from_the_last_bookmark(apiserver, kube):
    apiserver.add(o.node("n1"))
    c = Consumer(watch(kube, NODES, timeout_s=10), until=lambda got: len(got) == 2)
    _wait_for(lambda: apiserver.open_watches == 1, "the watch to open")
    apiserver.add(o.namespace("elsewhere"))  # moves the resourceVersion on without a node event
    latest = apiserver.get("Namespace", "elsewhere")["metadata"]["resourceVersion"]
    apiserver.close_watches()  # the stream's last event is a BOOKMARK at `latest`
    _wait_for(lambda: len(_watches(apiserver)) == 2, "the watch to be opened again")
    apiserver.add(o.node("n2"))
    assert c.join() == [(SYNC, ["n1"]), ("ADDED", "n2")]  # bookmarks are not yielded
    assert _watches(apiserver)[1].query["resourceVersion"] == [latest]


def test_a_watch_that_expired_lists_again(apiserver, kube):
    """410 Gone: the server no longer has the version to resume from; the mirror is rebuilt from a fresh list."""
    apiserver.add(o.node("n1"))

    def expire(req):
        if "watch" in req.query and len(_watches(apiserver)) == 2:  # the resume, before it is served
            apiserver.add(o.node("n3"))
            apiserver.delete_now("Node", "n1")
            apiserver.compact()

    c = Consumer(watch(kube, NODES, timeout_s=10), until=lambda got: len(got) == 3)
    _wait_for(lambda: apiserver.open_watches == 1, "the watch to open")
    apiserver.add(o.node("n2"))
    _wait_for(lambda: len(c.got) == 2, "the first event")
    apiserver.on_request(expire)
    apiserver.close_watches()
    assert c.join() == [(SYNC, ["n1"]), ("ADDED", "n2"), (SYNC, ["n2", "n3"])]
    mirror = Mirror()
    for ev in [*watch(kube, NODES, timeout_s=0)]:
        mirror.apply(ev)
    assert [n["metadata"]["name"] for n in mirror.items()] == ["n2", "n3"]
    assert len(_lists(apiserver)) == 3  # the first list, the relist after the 410, the last check


def test_a_refused_watch_falls_back_to_one_list_per_round(apiserver, kube):
    apiserver.add(o.node("n1"))
    apiserver.forbid("watch", "nodes")
    clock = FakeClock(start=0.0)
    added = []

    def grow(req):  # the cluster changes between two rounds
        if req.method == "GET" and len(_lists(apiserver)) == 3 and not added:
            added.append(1)
            apiserver.add(o.node("n2"))

    apiserver.on_request(grow)
    got = [(ev.type, _names(ev)) for ev in watch(kube, NODES, timeout_s=3, poll_s=1, clock=clock)]
    assert got == [(SYNC, ["n1"]), (SYNC, ["n1"]), (SYNC, ["n1", "n2"]), (SYNC, ["n1", "n2"])]
    assert clock.sleeps == [1, 1, 1] and len(_watches(apiserver)) == 1  # tried once, then only lists


def test_a_watch_the_server_does_not_serve_falls_back_to_lists(apiserver, kube):
    apiserver.add(o.node("n1"))
    apiserver.on_request(lambda req: apiserver.inject_fault(method="GET", status=405, reason="MethodNotAllowed")
                         if "watch" in req.query else None)
    got = [ev.type for ev in watch(kube, NODES, timeout_s=2, poll_s=1, clock=FakeClock(start=0.0))]
    assert got == [SYNC, SYNC, SYNC]


def test_a_failing_watch_is_retried_and_reported(apiserver, kube):
    apiserver.add(o.node("n1"))
    failures = []

    def fail_once(req):
        if "watch" in req.query and len(_watches(apiserver)) == 1:
            apiserver.inject_fault(method="GET", status=503, reason="ServiceUnavailable")

    apiserver.on_request(fail_once)
    c = Consumer(watch(kube, NODES, timeout_s=10, on_retry=failures.append), until=lambda got: len(got) == 2)
    _wait_for(lambda: apiserver.open_watches == 1, "the second watch to open")
    apiserver.add(o.node("n2"))
    assert c.join() == [(SYNC, ["n1"]), ("ADDED", "n2")]
    assert len(failures) == 1 and isinstance(failures[0], ClusterError) and failures[0].status == 503


def test_an_error_event_that_is_not_410_is_raised(apiserver, kube):
    apiserver.add(o.node("n1"))
    apiserver.on_request(lambda req: apiserver.inject_fault(
        method="GET", status=200, body='{"type":"ERROR","object":{"kind":"Status","code":500,"message":"boom"}}\n')
        if "watch" in req.query else None)
    with pytest.raises(ClusterError, match="boom"):
        list(watch(kube, NODES, timeout_s=5))


def test_stop_ends_a_watch_blocked_on_a_quiet_stream_at_once(apiserver, kube):
    apiserver.add(o.node("n1"))
    stop = Stop()
    c = Consumer(watch(kube, NODES, timeout_s=60, stop=stop))
    _wait_for(lambda: apiserver.open_watches == 1, "the watch to open")
    stop.set()  # from another thread, while the reader waits for the next event
    assert c.join() == [(SYNC, ["n1"])]
    _wait_for(lambda: apiserver.open_watches == 0, "the stream to close")


def test_the_deadline_ends_a_watch(apiserver, kube):
    apiserver.add(o.node("n1"))
    started = time.monotonic()
    assert [ev.type for ev in watch(kube, NODES, timeout_s=1)] == [SYNC]
    assert _watches(apiserver)[0].query["timeoutSeconds"] == ["1"]  # the server ends the stream at the deadline
    assert time.monotonic() - started < 5


def test_watch_many_tags_each_event_with_its_source(apiserver, kube):
    apiserver.add(o.node("n1"), o.pod("default", "p1", node="n1"))
    specs = [WatchSpec(NODES), WatchSpec(PODS, namespace="default", field_selector="spec.nodeName=n1")]
    seen: list[tuple[int, str, object]] = []
    for ev in watch_many(kube, specs, timeout_s=10):
        seen.append((ev.source, ev.type, _names(ev)))
        if len(seen) == 2:
            apiserver.add(o.pod("default", "p2", node="n1"), o.pod("default", "p3", node="n2"))
        if len(seen) == 3:
            break
    assert sorted(seen[:2]) == [(0, SYNC, ["n1"]), (1, SYNC, ["p1"])]
    assert seen[2] == (1, "ADDED", "p2")  # p3 is on another node: not in the selector
    _wait_for(lambda: apiserver.open_watches == 0, "leaving the loop to close every stream")


def test_watch_many_treats_a_missing_optional_collection_as_empty(apiserver, kube):
    apiserver.add(o.node("n1"))
    apiserver.remove_resource("resourceslices.resource.k8s.io")
    from rblnctl.kube import RESOURCE_SLICES

    specs = [WatchSpec(NODES), WatchSpec(RESOURCE_SLICES, missing_ok=True)]
    got = sorted((ev.source, ev.type, len(ev.objects)) for ev in watch_many(kube, specs, timeout_s=0))
    assert got == [(0, SYNC, 1), (1, SYNC, 0)]


def test_an_interrupt_while_watch_many_starts_its_watches_stops_the_ones_started(apiserver, kube, monkeypatch):
    """Issue 28 finding 6: the threads were started before the `try` whose `finally` stops the watches, so Ctrl-C
    while the second one started left the first watching until its timeout (and joined at exit: a hang)."""
    apiserver.add(o.node("n1"), o.pod("default", "p1", node="n1"))
    started: list[threading.Thread] = []
    real_start = threading.Thread.start

    def start(self):
        if self.name.startswith("rblnctl-watch") and started:
            raise KeyboardInterrupt  # Ctrl-C lands while the second watch's thread starts
        started.append(self)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    specs = [WatchSpec(NODES), WatchSpec(PODS, namespace="default")]
    with pytest.raises(KeyboardInterrupt):
        next(iter(watch_many(kube, specs, timeout_s=60)))
    monkeypatch.undo()
    assert started and started[0].daemon  # a thread left inside a request never holds the process at exit
    started[0].join(5)  # a bound for a slow machine: the stopped watch ends at once
    assert not started[0].is_alive(), "the watch started before the interrupt kept running"
    _wait_for(lambda: apiserver.open_watches == 0, "every stream to close")



def test_a_ctrl_c_that_lands_as_watch_many_starts_waiting_ends_it_at_once(apiserver, kube):
    """`node list -w` ignored one Ctrl-C in 15 under load: the signal landed after the interpreter last looked for
    one and before the main thread blocked in the queue of events, and a wait with no timeout is never woken by a
    handler already pending: the main thread slept on, on a quiet cluster for ever. watch_many waits in slices
    (rblnctl.clock.next_item), so the handler runs within one."""
    apiserver.add(o.node("n1"), o.pod("default", "p1", node="n1"))
    events = watch_many(kube, [WatchSpec(NODES), WatchSpec(PODS, namespace="default")], timeout_s=60)
    assert sorted(ev.type for ev in (next(events), next(events))) == [SYNC, SYNC]
    main = threading.current_thread()
    with ctrl_c_pending_when(lambda: apiserver.open_watches == 2 and blocked_in(main, "watch_many", "get")):
        with pytest.raises(KeyboardInterrupt):
            next(events)  # the cluster is quiet: nothing but the interrupt ends this wait
    _wait_for(lambda: apiserver.open_watches == 0, "the interrupt to close every stream")


def test_a_ctrl_c_that_lands_as_a_single_watch_waits_ends_it_at_once(apiserver, kube):
    """One collection too: its stream was read on the caller's thread, which a pending Ctrl-C did not wake before
    the next event or the stream's end (minutes); watch_many reads it on a thread."""
    apiserver.add(o.node("n1"))
    events = watch_many(kube, [WatchSpec(NODES)], timeout_s=60)
    assert next(events).type == SYNC
    main = threading.current_thread()
    with ctrl_c_pending_when(lambda: apiserver.open_watches == 1 and blocked_in(main, "watch_many")):
        with pytest.raises(KeyboardInterrupt):
            next(events)
    _wait_for(lambda: apiserver.open_watches == 0, "the interrupt to close the stream")


def test_watch_many_reports_a_retry_on_the_callers_thread_among_its_events(apiserver, kube):
    """A watch read on a thread called on_retry there: watch_until's "hear the state after a retry again" raced the
    events before it (the retry heard before the first state was: that state was then not heard again)."""
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(method="GET", path="/api/v1/nodes$", status=503, reason="ServiceUnavailable", watch=True)
    heard: list[tuple[str, threading.Thread]] = []

    def retrying(err):
        heard.append(("retry", threading.current_thread()))
        apiserver.add(o.node("n2"))  # an event after the retry ends the loop

    for ev in watch_many(kube, [WatchSpec(NODES)], timeout_s=30, on_retry=retrying):
        heard.append((ev.type, threading.current_thread()))
        if ev.type == "ADDED":
            break
    assert heard == [(SYNC, threading.current_thread()), ("retry", threading.current_thread()),
                     ("ADDED", threading.current_thread())]
