"""Watch streams: replay from a resourceVersion, initial events, 410 Expired, selectors, the end of a
stream (timeout, close_watches) and BOOKMARK events, and a client resuming after the end."""

from __future__ import annotations

import http.client
import json
import threading
import time

from kubernetes import watch

from tests.fakes import objects as o


def test_watch_streams_events_from_a_resource_version(apiserver, core):
    apiserver.add(o.node("n1", labels={"role": "npu"}), o.node("n2"))
    listed = core.list_node()
    got = []

    def consume():
        w = watch.Watch()
        for ev in w.stream(core.list_node, label_selector="role=npu",
                           resource_version=listed.metadata.resource_version, timeout_seconds=2):
            got.append((ev["type"], ev["object"].metadata.name))
            if len(got) == 2:
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    # No wait for the watch to be open: whether it starts before or after these changes, it must send
    # both (live, or replayed from the listed resourceVersion).
    apiserver.mutate("Node", "n2", fn=lambda n: n["metadata"]["labels"].update(role="npu"))
    apiserver.delete_now("Node", "n1")
    t.join(5)
    assert not t.is_alive() and got == [("ADDED", "n2"), ("DELETED", "n1")]


def test_watch_without_resource_version_starts_with_current_objects(apiserver):
    apiserver.add(o.node("n1"))
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    conn.request("GET", "/api/v1/nodes?watch=1&timeoutSeconds=1")
    resp = conn.getresponse()
    lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    conn.close()
    assert resp.status == 200 and [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "n1")]
    assert lines[0]["object"]["kind"] == "Node"


def _watch_lines(apiserver, query):
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    conn.request("GET", "/api/v1/nodes?watch=true&" + query)
    resp = conn.getresponse()
    events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    conn.close()
    return resp.status, events


def test_watch_from_a_pruned_resource_version_gets_410_expired(apiserver):
    apiserver.add(o.node("n1"))
    apiserver.compact(5000)  # as if the history before 5000 had been compacted
    status, events = _watch_lines(apiserver, "resourceVersion=1001")
    assert status == 200 and len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"


def test_watch_reports_an_object_leaving_the_selector_as_deleted(apiserver):
    apiserver.add(o.node("n1", labels={"a": "1"}))
    rv = apiserver.get("Node", "n1")["metadata"]["resourceVersion"]
    # Changed before the watch opens (no timer racing its 1 s timeout): the event is replayed from `rv`.
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update(a="2"))
    status, events = _watch_lines(apiserver, f"labelSelector=a%3D1&timeoutSeconds=1&resourceVersion={rv}")
    assert status == 200
    assert [(e["type"], e["object"]["metadata"]["labels"]["a"]) for e in events] == [("DELETED", "2")]


def _wait_for(predicate, what):
    deadline = time.monotonic() + 5  # a bound for a slow machine, not the expected time
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_close_watches_ends_open_streams_cleanly(apiserver):
    apiserver.add(o.node("n1"))
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    conn.request("GET", "/api/v1/nodes?watch=true")
    resp = conn.getresponse()
    _wait_for(lambda: apiserver.open_watches == 1, "the watch to open")
    assert apiserver.close_watches() == 1
    events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]  # the terminating chunk came
    conn.close()
    assert [e["type"] for e in events] == ["ADDED"] and apiserver.open_watches == 0


def test_bookmarks_carry_the_resource_version_and_close_the_stream(apiserver):
    apiserver.bookmark_interval_s = 0.2
    apiserver.add(o.node("n1"))
    status, events = _watch_lines(apiserver, "allowWatchBookmarks=true&timeoutSeconds=1")
    assert status == 200 and events[0]["type"] == "ADDED"
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 2 and events[-1]["type"] == "BOOKMARK"  # periodic, and one before the end
    assert events[-1]["object"] == {"kind": "Node", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": apiserver.get("Node", "n1")["metadata"][
                                        "resourceVersion"]}}
    _, plain = _watch_lines(apiserver, "timeoutSeconds=0.3")
    assert "BOOKMARK" not in {e["type"] for e in plain}  # only for watches that ask


def test_a_bookmark_comes_after_the_events_it_covers(apiserver):
    apiserver.add(o.node("n1"))
    rv = apiserver.get("Node", "n1")["metadata"]["resourceVersion"]
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"].setdefault("labels", {}).update(a="1"))
    apiserver.add(o.namespace("other"))  # moves the resourceVersion on without a node event
    status, events = _watch_lines(apiserver, f"allowWatchBookmarks=true&timeoutSeconds=0.5&resourceVersion={rv}")
    assert [e["type"] for e in events] == ["MODIFIED", "BOOKMARK"]
    assert int(events[1]["object"]["metadata"]["resourceVersion"]) > int(events[0]["object"]["metadata"][
        "resourceVersion"])


def test_the_client_resumes_after_a_close_from_the_last_bookmark(apiserver, core):
    apiserver.bookmark_interval_s = 3600.0  # only the bookmark sent on close
    apiserver.add(o.node("n1"))
    listed = core.list_node().metadata.resource_version
    got, w = [], watch.Watch()

    def consume():  # no timeout_seconds: Watch.stream reconnects whenever the server ends the stream
        for ev in w.stream(core.list_node, resource_version=listed, allow_watch_bookmarks=True):
            got.append((ev["type"], (ev["raw_object"].get("metadata", {}).get("labels") or {}).get("x")))
            if len([g for g in got if g[0] == "MODIFIED"]) == 2:
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    _wait_for(lambda: apiserver.open_watches == 1, "the watch to open")
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update(x="1"))
    _wait_for(lambda: got, "the first event")
    apiserver.add(o.namespace("elsewhere"))
    closed_at = apiserver.get("Namespace", "elsewhere")["metadata"]["resourceVersion"]  # the latest change
    assert apiserver.close_watches() == 1
    _wait_for(lambda: len(apiserver.requests_matching("GET", "^/api/v1/nodes$")) == 3, "the client to watch again")
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update(x="2"))
    t.join(5)
    assert not t.is_alive()
    assert got == [("MODIFIED", "1"), ("BOOKMARK", None), ("MODIFIED", "2")]  # nothing lost, nothing twice
    rewatch = apiserver.requests_matching("GET", "^/api/v1/nodes$")[-1]
    assert rewatch.query["resourceVersion"] == [closed_at] and rewatch.query["watch"] == ["true"]


def test_a_client_that_goes_away_ends_its_stream(apiserver):
    apiserver.add(o.node("n1"))
    conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
    conn.request("GET", "/api/v1/nodes?watch=true")
    resp = conn.getresponse()
    _wait_for(lambda: apiserver.open_watches == 1, "the watch to open")
    resp.close()
    conn.close()  # nothing more will be sent on it: the server notices without an event to write
    _wait_for(lambda: apiserver.open_watches == 0, "the stream to end")
