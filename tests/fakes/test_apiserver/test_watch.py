"""Watch streams: replay from a resourceVersion, initial events, 410 Expired, selectors."""

from __future__ import annotations

import http.client
import json
import threading

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
