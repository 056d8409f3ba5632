"""rblnctl.node.history: a node's switches and drains, from rblnctl's Events and the node's progress record."""

from __future__ import annotations

import json

import pytest

from rblnctl import audit
from rblnctl.errors import NotFound
from rblnctl.node.history import read_history
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from rblnctl.constants import SET_MODE_ANNOTATION as ANN


def record(**kw):
    data = {"target": "vm-passthrough", "from": "container", "started": "2026-12-02T10:00:00Z",
            "cordoned_by_rblnctl": True, "step": "evict", **kw}
    return {ANN: json.dumps(data)}


def test_a_run_killed_after_its_start_is_in_progress_while_its_record_is_there(apiserver, kube):
    """kill -9 mid-switch: only the start Event exists; the record on the node says the switch is unfinished."""
    apiserver.add(o.npu_node("n1", annotations=record()))
    a = audit.Auditor(kube=kube, clock=FakeClock())
    a.run(audit.Regarding.node("n1"), "set-mode", from_="container", to="vm-passthrough",
          started="2026-12-02T10:00:00Z").start("switching node n1")
    a.run(audit.Regarding.node("n1"), "drain").start("draining node n1")  # an older run that never said more
    h = read_history(kube, "n1")
    results = {e.action: (e.result, e.source) for e in h.entries}
    assert results == {"set-mode": ("in-progress", "events"), "drain": ("unknown", "events")}
    assert h.record is not None and h.record.target == "vm-passthrough"


def test_the_record_alone_still_tells_who_when_from_and_to(apiserver, kube):
    """The Events expired (--event-ttl): the unfinished switch's record is what is left."""
    apiserver.add(o.npu_node("n1", annotations=record(by="alice@example.com")))
    (entry,) = read_history(kube, "n1").entries
    assert (entry.run, entry.user, entry.started, entry.from_mode, entry.to_mode, entry.result, entry.source) == (
        None, "alice@example.com", "2026-12-02T10:00:00Z", "container", "vm-passthrough", "in-progress", "record")
    assert entry.message == "unfinished: the record on the node says it reached step evict, cordoned by rblnctl"


def test_only_rblnctls_events_about_this_node_count(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.npu_node("n2"))
    a = audit.Auditor(kube=kube, clock=FakeClock())
    run = a.run(audit.Regarding.node("n2"), "drain")
    run.start("draining n2")
    run.finish(audit.DONE, "drained n2")
    apiserver.add({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"name": "n1.kubelet", "namespace": "default"},
                   "regarding": {"apiVersion": "v1", "kind": "Node", "name": "n1"}, "reason": "NodeReady",
                   "note": "Node n1 status is now: NodeReady", "type": "Normal", "reportingController": "kubelet",
                   "reportingInstance": "n1", "action": "NodeReady", "eventTime": "2026-12-02T10:00:00.000000Z"})
    assert read_history(kube, "n1").entries == []
    (listing,) = [r for r in apiserver.requests if r.method == "GET"
                  and r.path == "/apis/events.k8s.io/v1/namespaces/default/events"]
    assert listing.query["fieldSelector"] == ["regarding.kind=Node,regarding.name=n1,reportingController=rblnctl"]


def test_a_deleted_node_keeps_its_events_until_they_expire(apiserver, kube):
    apiserver.add(o.npu_node("gone"))
    a = audit.Auditor(kube=kube, clock=FakeClock())
    run = a.run(audit.Regarding.node("gone"), "set-mode", from_="vm-passthrough", to="container")
    run.start("switching")
    run.finish(audit.DONE, "switched")
    apiserver.delete("Node", "gone")
    h = read_history(kube, "gone")
    assert not h.node_exists and [e.result for e in h.entries] == ["done"]
    assert h.notes == ["node gone no longer exists; its Events remain until they expire"]
    with pytest.raises(NotFound, match='nodes "nosuch" not found'):
        read_history(kube, "nosuch")


def test_events_rbac_refuses_leave_the_record(apiserver, kube):
    apiserver.add(o.npu_node("n1", annotations=record()))
    apiserver.forbid("list", "events.events.k8s.io")
    h = read_history(kube, "n1")
    assert not h.events_read and [(e.source, e.result) for e in h.entries] == [("record", "in-progress")]
    assert h.notes[0].startswith("the Events could not be read (") and "only the node's record is shown" in h.notes[0]


def _foreign_event(name, data, *, event_time="2026-12-02T10:00:00.000000Z"):
    """An Event that claims to be rblnctl's (reportingController rblnctl) but was written by someone else."""
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"rebellions.ai/rblnctl.audit": json.dumps(data)}},
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": "n1"}, "reason": "ModeSwitchFailed",
            "note": "hand-made", "type": "Normal", "reportingController": "rblnctl", "reportingInstance": "x",
            "action": "SetMode", "eventTime": event_time}


def test_events_with_malformed_fields_never_crash_and_keep_the_documented_types(apiserver):
    """Someone else's Events with rblnctl's annotation: numbers, lists and objects where strings belong, an unknown
    result. Before: two runs of the unfinished switch, one `finished` a number, made `node history` exit 70
    (str > int), and the JSON carried a dict as user, a number as finished, a list as from, any text as result."""
    from jsonschema import Draft202012Validator

    from tests.cli.test_output_schema import schemas
    from tests.helpers import cli

    apiserver.add(o.npu_node("n1", annotations=record(started="2026-12-02T10:00:00Z")))
    base = {"action": "set-mode", "started": "2026-12-02T10:00:00Z", "to": "vm-passthrough", "result": "failed"}
    apiserver.add(_foreign_event("a", {**base, "run": "r1", "finished": 7, "user": {"x": 1}, "from": ["a"]}),
                  _foreign_event("b", {**base, "run": "r2", "finished": "2026-12-02T10:05:00Z"}),
                  _foreign_event("c", {"run": "r3", "action": "drain", "result": {"a": 1}, "started": 5}),
                  _foreign_event("d", {"run": ["x"], "action": "drain", "result": "done"}))
    r = cli("node", "history", "n1", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    Draft202012Validator(schemas()["NodeHistory"]).validate(doc)
    by_run = {i["run"]: i for i in doc["items"]}
    assert (by_run["r1"]["user"], by_run["r1"]["finished"], by_run["r1"]["from"]) == (None, None, None)
    assert by_run["r3"]["result"] == "unknown" and by_run["r3"]["started"] == "2026-12-02T10:00:00.000000Z"
    assert "['x']" not in by_run  # a run id that is not a string is no run
    assert cli("node", "history", "n1", "-o", "wide", server=apiserver.url).exit_code == 0
