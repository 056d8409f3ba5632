"""rblnctl.kube.watch_until, the one wait of the library, against the fake API server: the judge sees every change,
the deadline and the stop end it, transient failures are reported and the state after one is heard again."""

from __future__ import annotations

import threading
import time

from rblnctl.clock import Stop
from rblnctl.errors import ClusterError
from rblnctl.kube import NODES, PODS, KubeOptions, WatchSpec, connect, watch_until
from tests.fakes import objects as o

SPECS = [WatchSpec(NODES), WatchSpec(PODS, namespace="default")]


def kube_of(apiserver):
    return connect(KubeOptions(server=apiserver.url))


def names(mirrors):
    """The state: the names of the nodes, and of the pods."""
    return tuple(tuple(x["metadata"]["name"] for x in m.items()) for m in mirrors)


def _wait_for(predicate, what):
    deadline = time.monotonic() + 5  # a bound for a slow machine, not the expected time
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_the_judge_sees_each_change_of_every_collection_until_it_holds(apiserver):
    apiserver.add(o.node("n1"))
    kube = kube_of(apiserver)
    heard = []
    nxt = iter([lambda: apiserver.add(o.node("n2")), lambda: apiserver.add(o.pod("default", "p1", node="n2")),
                lambda: None])

    def progress(state):  # each change makes the next one: none can be missed
        heard.append(state)
        next(nxt)()

    seen = watch_until(kube, SPECS, names, lambda s: s[1] == ("p1",), deadline=kube.clock.monotonic() + 30,
                       on_change=progress)
    assert seen.done and not seen.stopped and seen.state == (("n1", "n2"), ("p1",))
    assert heard == [(("n1",), ()), (("n1", "n2"), ()), (("n1", "n2"), ("p1",))]


def test_a_change_that_changes_nothing_the_judge_sees_is_not_heard_again(apiserver):
    apiserver.add(o.node("n1"))
    kube = kube_of(apiserver)
    heard, looks = [], []

    def look(mirrors):
        looks.append(1)
        if len(looks) == 1:  # a label on n1: a MODIFIED event, the same names
            apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"].setdefault("labels", {}).update({"a": "b"}))
        elif len(looks) == 2:
            apiserver.add(o.node("n2"))
        return names(mirrors)

    seen = watch_until(kube, [WatchSpec(NODES)], look, lambda s: len(s[0]) == 2,
                       deadline=kube.clock.monotonic() + 30, on_change=heard.append)
    assert seen.done and len(looks) == 3 and heard == [(("n1",),), (("n1", "n2"),)]


def test_the_deadline_ends_the_wait_with_the_last_state(apiserver):
    apiserver.add(o.node("n1"))
    kube = kube_of(apiserver)
    seen = watch_until(kube, SPECS, names, lambda s: False, deadline=kube.clock.monotonic() + 0.5)
    assert not seen.done and not seen.stopped and seen.state == (("n1",), ())


def test_a_deadline_already_passed_asks_nothing(apiserver):
    kube = kube_of(apiserver)
    apiserver.clear_requests()
    seen = watch_until(kube, SPECS, names, lambda s: True, deadline=kube.clock.monotonic())
    assert not seen.done and seen.state is None and list(apiserver.requests) == []


def test_the_stop_ends_the_wait_at_once_and_says_so(apiserver):
    apiserver.add(o.node("n1"))
    kube = kube_of(apiserver)
    stop = Stop()
    out = []
    t = threading.Thread(target=lambda: out.append(watch_until(
        kube, SPECS, names, lambda s: False, deadline=kube.clock.monotonic() + 60, stop=stop)), daemon=True)
    t.start()
    _wait_for(lambda: apiserver.open_watches == 2, "both watches to open")
    stop.set()  # Ctrl-C: set from another thread while the streams are quiet
    t.join(5)
    assert not t.is_alive() and out[0].stopped and not out[0].done and out[0].state == (("n1",), ())


def test_a_transient_failure_is_reported_and_the_state_after_it_heard_again(apiserver):
    apiserver.add(o.node("n1"))
    kube = kube_of(apiserver)
    failures, heard = [], []
    apiserver.inject_fault(method="GET", path="/api/v1/nodes$", status=503, reason="ServiceUnavailable", watch=True)

    def retrying(err):  # meanwhile n1 gets a label: a change the names do not show
        failures.append(err)
        apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"].setdefault("labels", {}).update({"a": "b"}))

    def progress(state):
        heard.append(state)
        if failures and len(heard) == 2:
            apiserver.add(o.node("n2"))

    seen = watch_until(kube, [WatchSpec(NODES)], names, lambda s: len(s[0]) == 2,
                       deadline=kube.clock.monotonic() + 30, on_change=progress, on_retry=retrying)
    assert seen.done
    assert len(failures) == 1 and isinstance(failures[0], ClusterError) and failures[0].status == 503
    # heard after the list, heard again after the retry (the progress line said "trying again"), then the change
    assert heard[0] == heard[1] == (("n1",),) and heard[-1] == (("n1", "n2"),)
