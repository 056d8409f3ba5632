"""rblnctl.audit: the Events a run writes on the object it changes, who ran it, and that they never fail the run.

The fake validates events.k8s.io/v1 Events as kube-apiserver does (tests/fakes/apiserver/events.py); the real
server's verdict on the same Events is tests/envtest/test_audit_real.py.
"""

from __future__ import annotations

import json
import logging

import pytest

from rblnctl import audit
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from rblnctl.constants import AUDIT_ANNOTATION as ANNOTATION

EVENTS = "events.events.k8s.io"


def auditor(kube, **kw):
    return audit.Auditor(kube=kube, clock=FakeClock(), instance="rblnctl@test", **kw)


def events(apiserver):
    """rblnctl's Events, a run's start first (the FakeClock gives both one eventTime)."""
    return sorted(apiserver.list(EVENTS), key=lambda e: ("Started" not in e["reason"], e["eventTime"]))


def test_a_run_writes_a_start_and_an_end_event_on_its_object(apiserver, kube):
    apiserver.add(o.npu_node("n1"))
    uid = apiserver.get("Node", "n1")["metadata"]["uid"]
    run = auditor(kube).run(audit.Regarding.node("n1", uid), "set-mode", from_="container", to="vm-passthrough",
                            started="2026-12-02T11:59:00Z")
    assert run.start("switching node n1 from container to vm-passthrough")
    assert run.finish(audit.DONE, "switched node n1")
    assert not run.finish(audit.FAILED, "twice")  # one end per run
    start, end = events(apiserver)
    for ev in (start, end):
        assert ev["metadata"]["namespace"] == "default"  # a Node is cluster-scoped: kube-apiserver wants default
        assert ev["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": uid}
        assert (ev["reportingController"], ev["reportingInstance"], ev["action"]) == ("rblnctl", "rblnctl@test",
                                                                                     "SetMode")
        assert ev["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rblnctl"}
        assert ev["eventTime"].endswith("Z") and "." in ev["eventTime"]  # metav1.MicroTime
    assert (start["reason"], start["type"], end["reason"], end["type"]) == ("ModeSwitchStarted", "Normal",
                                                                            "ModeSwitched", "Normal")
    assert start["note"] == "switching node n1 from container to vm-passthrough (by fake-user)"
    details = [json.loads(e["metadata"]["annotations"][ANNOTATION]) for e in (start, end)]
    assert details[0] == {"run": run.run_id, "action": "set-mode", "user": "fake-user", "from": "container",
                          "to": "vm-passthrough", "result": "started", "started": "2026-12-02T11:59:00Z"}
    assert details[1] == {**details[0], "result": "done", "finished": "2026-12-02T12:00:00Z"}


@pytest.mark.parametrize(("result", "reason"), [(audit.FAILED, "DrainFailed"),
                                                (audit.INTERRUPTED, "DrainInterrupted")])
def test_a_failed_or_interrupted_run_ends_with_a_warning(apiserver, kube, result, reason):
    run = auditor(kube).run(audit.Regarding.node("n1"), "drain")
    run.finish(result, "drain of node n1 " + result)
    (ev,) = events(apiserver)
    assert (ev["reason"], ev["type"], ev["action"]) == (reason, "Warning", "Drain")
    assert "uid" not in ev["regarding"]


def test_the_policy_is_regarded_as_a_cluster_scoped_rblnclusterpolicy(apiserver, kube):
    auditor(kube).run(audit.Regarding.policy("rbln-cluster-policy", "u-1"), "set-method", from_="sandbox",
                      to="dra").start("switching")
    (ev,) = events(apiserver)
    assert ev["regarding"] == {"apiVersion": "rebellions.ai/v1beta1", "kind": "RBLNClusterPolicy",
                               "name": "rbln-cluster-policy", "uid": "u-1"}
    assert (ev["action"], ev["reason"]) == ("SetMethod", "MethodChangeStarted")


def test_who_is_asked_once_with_a_selfsubjectreview(apiserver, kube):
    a = auditor(kube)
    for node in ("n1", "n2", "n3"):
        run = a.run(audit.Regarding.node(node), "drain")
        run.start("draining")
        run.finish(audit.DONE, "drained")
    reviews = [r for r in apiserver.requests if r.path == "/apis/authentication.k8s.io/v1/selfsubjectreviews"]
    assert len(reviews) == 1 and reviews[0].method == "POST"
    assert {json.loads(e["metadata"]["annotations"][ANNOTATION])["user"] for e in events(apiserver)} == {"fake-user"}


def test_an_unknown_user_is_said_so(apiserver, kube):
    apiserver.forbid("create", "selfsubjectreviews.authentication.k8s.io")
    auditor(kube).run(audit.Regarding.node("n1"), "drain").start("draining node n1")
    (ev,) = events(apiserver)
    assert ev["note"] == "draining node n1 (by an unknown user)"
    assert json.loads(ev["metadata"]["annotations"][ANNOTATION])["user"] is None


def test_an_event_that_cannot_be_written_is_reported_and_never_raised(apiserver, kube, caplog):
    apiserver.forbid("create", "events.events.k8s.io")
    failed: list[str] = []
    run = auditor(kube).run(audit.Regarding.node("n1"), "set-mode", from_="container", to="vm-passthrough",
                            on_failed=failed.append)
    with caplog.at_level(logging.INFO, logger="rblnctl.audit"):
        assert run.start("switching") is False
        assert run.finish(audit.DONE, "switched") is False
    assert events(apiserver) == []
    assert [m.split(": forbidden")[0] for m in failed] == [
        "could not record Event ModeSwitchStarted (started) on Node n1",
        "could not record Event ModeSwitched (done) on Node n1"]
    assert all('cannot create resource "events" in API group "events.k8s.io"' in m for m in failed)
    assert [r.getMessage() for r in caplog.records] == failed  # and logged


def test_a_lost_reply_is_settled_by_reading_the_event_back(apiserver, kube):
    apiserver.inject_fault(method="POST", path="/events$", lose_reply=True)
    assert auditor(kube).run(audit.Regarding.node("n1"), "drain").start("draining")
    assert len(events(apiserver)) == 1  # not sent twice
    posts = [r for r in apiserver.requests if r.method == "POST" and r.path.endswith("/events")]
    gets = [r for r in apiserver.requests if r.method == "GET" and "/events/" in r.path]
    assert len(posts) == 1 and posts[0].reply_lost and len(gets) == 1


def test_two_events_of_one_object_in_one_clock_tick_get_two_names(apiserver, kube):
    a = auditor(kube)  # FakeClock: time stands still
    run = a.run(audit.Regarding.node("n1"), "drain")
    run.start("a")
    run.finish(audit.DONE, "b")
    assert len({e["metadata"]["name"] for e in events(apiserver)}) == 2


def test_the_note_and_the_names_fit_the_api_servers_limits(apiserver, kube):
    long_node = "n" * 253
    apiserver.add(o.npu_node(long_node))
    auditor(kube).run(audit.Regarding.node(long_node), "drain").start("é" * 2000)
    (ev,) = events(apiserver)
    assert len(ev["metadata"]["name"]) <= 253 and len(ev["note"].encode()) <= 1024


@pytest.mark.parametrize(("drop", "field"), [("reportingController", "reportingController"),
                                             ("reportingInstance", "reportingInstance"), ("action", "action"),
                                             ("reason", "reason"), ("eventTime", "eventTime")])
def test_the_fake_refuses_what_kube_apiserver_refuses(apiserver, kube, drop, field):
    """The fake's events.k8s.io validation bites, so an Event the fake takes means something (the real server's
    answer to the same bodies: tests/envtest/test_audit_real.py)."""
    from rblnctl.errors import ClusterError
    from rblnctl.kube import EVENTS_V1, writes

    a = auditor(kube)
    a.run(audit.Regarding.node("n1"), "drain").start("draining")
    (good,) = events(apiserver)
    body = {k: v for k, v in good.items() if k != drop}
    body["metadata"] = {"name": "n1.other", "namespace": "default"}
    with pytest.raises(ClusterError) as err:
        writes.send(kube, writes.create(EVENTS_V1, body, namespace="default"))
    assert err.value.status == 422 and f"{field}: Required value" in str(err.value)


def test_ctrl_c_is_interrupted_in_the_events_not_the_python_class():
    assert audit.one_line(KeyboardInterrupt()) == "interrupted"
    assert audit.one_line(RuntimeError()) == "RuntimeError" and audit.one_line(ValueError("a\n b")) == "a b"
