"""The request log and the change callbacks."""

from __future__ import annotations

import time

from tests.fakes import objects as o


def test_request_log_records_method_path_query_type_body_status(apiserver, core):
    apiserver.add(o.node("n1"))
    apiserver.clear_requests()
    core.list_node(label_selector="a=b", limit=10)
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    listed, patched = apiserver.requests
    assert (listed.method, listed.path, listed.query) == ("GET", "/api/v1/nodes",
                                                          {"labelSelector": ["a=b"], "limit": ["10"]})
    assert listed.body is None and listed.status == 200 and not listed.is_write
    assert (patched.method, patched.path, patched.status) == ("PATCH", "/api/v1/nodes/n1", 200)
    assert patched.content_type == "application/strategic-merge-patch+json"
    assert patched.body == {"metadata": {"labels": {"a": "b"}}}
    assert apiserver.writes() == [patched]


def test_on_change_sees_api_and_direct_changes(apiserver, core):
    seen = []
    apiserver.on_change(lambda ev, obj: seen.append((ev, obj["kind"], obj["metadata"]["name"])))
    apiserver.add(o.node("n1"))
    core.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})
    apiserver.delete_now("Node", "n1")
    assert seen == [("ADDED", "Node", "n1"), ("MODIFIED", "Node", "n1"), ("DELETED", "Node", "n1")]
    assert apiserver.errors == []


def test_requests_matching_counts_by_method_and_path_regex_with_arrival_times(apiserver, core):
    apiserver.add(o.node("n1"), o.node("n2"))
    before = time.monotonic()
    core.list_node()
    core.read_node("n1")
    core.read_node("n2")
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    after = time.monotonic()
    assert [r.path for r in apiserver.requests_matching(path=r"^/api/v1/nodes/n\d$")] == [
        "/api/v1/nodes/n1", "/api/v1/nodes/n2", "/api/v1/nodes/n1"]
    assert [r.path for r in apiserver.requests_matching("get", r"/nodes/")] == ["/api/v1/nodes/n1", "/api/v1/nodes/n2"]
    assert [r.method for r in apiserver.requests_matching(method="PATCH")] == ["PATCH"]
    assert len(apiserver.requests_matching()) == 4 and apiserver.requests_matching(path="pods") == []
    stamps = [r.at for r in apiserver.requests]
    assert before <= stamps[0] and stamps == sorted(stamps) and stamps[-1] <= after
