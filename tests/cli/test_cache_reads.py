"""Display commands list from the apiserver's watch cache (`resourceVersion=0`); commands that write read consistently.

The fake answers `resourceVersion=0` as kube-apiserver v1.36.2 does (measured: every item in one reply, `limit`
ignored, no `continue`), so a list that used to take several pages still returns every item.
"""

from __future__ import annotations

import json

import pytest

from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.helpers import cli

NPU = {"rebellions.ai/ATOM": "1"}


def _lists(apiserver, prefix: str = "/api/v1/nodes") -> list:
    """The list requests rblnctl sent to collections under `prefix` (no name after the collection)."""
    return [r for r in apiserver.requests if r.method == "GET" and r.path == prefix
            and "rblnctl" in (r.headers.get("User-Agent") or r.headers.get("user-agent") or "")]


def _rblnctl_lists(apiserver) -> list:
    return [r for r in apiserver.requests if r.method == "GET" and "limit" in r.query
            and "rblnctl" in (r.headers.get("User-Agent") or r.headers.get("user-agent") or "")]


def test_node_list_reads_every_node_from_the_watch_cache_in_one_reply(apiserver):
    # 501 NPU nodes: two pages of 500 for a consistent list, one reply from the watch cache
    apiserver.add(o.cluster_policy(), *(o.npu_node(f"n{i:03d}") for i in range(501)))
    apiserver.clear_requests()
    r = cli("node", "list", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["items"]) == 501
    lists = _rblnctl_lists(apiserver)
    assert lists and all(q.query.get("resourceVersion") == ["0"] for q in lists)
    assert not any("continue" in q.query for q in lists)


@pytest.mark.parametrize("args", [("status",), ("vm", "list", "-A"), ("vm", "fit", "--npus", "1"),
                                  ("preflight", "-o", "json")])
def test_display_commands_list_from_the_watch_cache(apiserver, args):
    apiserver.add(o.cluster_policy(), o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"),
                  o.npu_node("n1", mode="container"), o.npu_node("n2", mode="vm-passthrough"))
    apiserver.clear_requests()
    r = cli(*args, server=apiserver.url)
    assert r.exit_code in (0, 1), r.stderr  # preflight and fit may find FAILs: still a full read
    lists = _rblnctl_lists(apiserver)
    assert lists and all(q.query.get("resourceVersion") == ["0"] for q in lists), \
        [(q.path, q.query) for q in lists if q.query.get("resourceVersion") != ["0"]]


def test_set_mode_reads_consistently(apiserver):
    """A write decides on what it reads: no list of set-mode goes to the watch cache."""
    apiserver.add(o.cluster_policy(), o.npu_node("n1"), o.replicaset("default", "web"),
                  o.pod("default", "npu-app", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU))
    op = SimulatedOperator(apiserver).start()
    try:
        assert op.wait_idle()
        apiserver.clear_requests()
        r = cli("node", "set-mode", "n1", "vm", "--yes", server=apiserver.url)
        assert r.exit_code == 0, r.stderr
    finally:
        op.stop()
    lists = _rblnctl_lists(apiserver)
    assert lists and not any("resourceVersion" in q.query for q in lists)


def test_client_lists_from_the_cache_only_when_asked(apiserver, kubeconfig):
    from rblnctl.kube import NODES, KubeOptions, connect

    apiserver.add(*(o.node(f"n{i}") for i in range(5)))
    kube = connect(KubeOptions(kubeconfig=str(kubeconfig), request_timeout_s=2))
    apiserver.clear_requests()
    assert len(kube.list(NODES, page_size=2)) == 5
    consistent = [r for r in apiserver.requests if r.path == "/api/v1/nodes"]
    assert len(consistent) == 3 and not any("resourceVersion" in r.query for r in consistent)
    kube.list_from_cache = True
    apiserver.clear_requests()
    assert [n["metadata"]["name"] for n in kube.list(NODES, page_size=2)] == [f"n{i}" for i in range(5)]
    cached = [r for r in apiserver.requests if r.path == "/api/v1/nodes"]
    assert len(cached) == 1 and cached[0].query["resourceVersion"] == ["0"]


@pytest.mark.parametrize("args", [("vm", "attach", "vm1", "--npus", "1", "--dry-run"),
                                  ("policy", "set-method", "dra", "--dry-run")])
def test_commands_that_write_read_consistently(apiserver, args):
    """vm attach and policy set-method decide writes on what they read: none of their lists goes to the watch
    cache, dry run or not (issue 31)."""
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True), o.kubevirt(feature_gates=["HostDevices"],
                                                                                 version="v1.9.0"),
                  o.npu_node("n1", mode="container"), o.npu_node("n2", mode="vm-passthrough"), o.vm("default", "vm1"))
    apiserver.clear_requests()
    r = cli(*args, server=apiserver.url)
    assert r.exit_code in (0, 1), r.stderr  # a refusal still read what it decided on
    lists = _rblnctl_lists(apiserver)
    assert lists and not any("resourceVersion" in q.query for q in lists), \
        [(q.path, q.query) for q in lists if "resourceVersion" in q.query]
