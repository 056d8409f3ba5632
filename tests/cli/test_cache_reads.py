"""Display commands list from the apiserver's watch cache, page by page (`resourceVersion=1&resourceVersionMatch=
NotOlderThan` on a first page, the `continue` token alone on the next); commands that write read consistently.

The fake refuses resourceVersionMatch without resourceVersion or beside `continue` as kube-apiserver v1.36.2 does
(422, ListOptions invalid), so a continue page that kept the first page's query would fail here as it fails there.
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


def _from_cache(q) -> bool:
    """A first page asked of the watch cache: any data not older than resourceVersion 1."""
    return q.query.get("resourceVersion") == ["1"] and q.query.get("resourceVersionMatch") == ["NotOlderThan"]


def _cache_pages(lists: list) -> bool:
    """Every list is a first page from the watch cache, or a continue page carrying only its token."""
    return all(_from_cache(q) if "continue" not in q.query
               else not {"resourceVersion", "resourceVersionMatch"} & set(q.query) for q in lists)


def test_node_list_reads_every_node_from_the_watch_cache_page_by_page(apiserver):
    # 501 NPU nodes: two pages of 500 for each NFD label rblnctl selects on, the first asked of the watch cache,
    # the second by its token alone
    apiserver.add(o.cluster_policy(), *(o.npu_node(f"n{i:03d}") for i in range(501)))
    apiserver.clear_requests()
    r = cli("node", "list", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["items"]) == 501
    nodes = _lists(apiserver)
    assert any("continue" in q.query for q in nodes) and _cache_pages(nodes), [q.query for q in nodes]
    assert _cache_pages(_rblnctl_lists(apiserver))


@pytest.mark.parametrize("args", [("status",), ("vm", "list", "-A"), ("vm", "fit", "--npus", "1"),
                                  ("preflight", "-o", "json")])
def test_display_commands_list_from_the_watch_cache(apiserver, args):
    apiserver.add(o.cluster_policy(), o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"),
                  o.npu_node("n1", mode="container"), o.npu_node("n2", mode="vm-passthrough"))
    apiserver.clear_requests()
    r = cli(*args, server=apiserver.url)
    assert r.exit_code in (0, 1), r.stderr  # preflight and fit may find FAILs: still a full read
    lists = _rblnctl_lists(apiserver)
    assert lists and _cache_pages(lists), [(q.path, q.query) for q in lists]


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
    assert len(cached) == 3 and _from_cache(cached[0]) and _cache_pages(cached), [r.query for r in cached]


def test_the_fake_refuses_resource_version_match_as_the_real_server(apiserver, kubeconfig):
    """kube-apiserver v1.36.2 refuses resourceVersionMatch without resourceVersion and beside `continue` (422):
    a client that sent the first page's query again with its token would fail on a real cluster."""
    from rblnctl.errors import ClusterError
    from rblnctl.kube import NODES, KubeOptions, connect

    apiserver.add(*(o.node(f"n{i}") for i in range(3)))
    kube = connect(KubeOptions(kubeconfig=str(kubeconfig), request_timeout_s=2))
    for query, why in [({"resourceVersionMatch": "NotOlderThan"}, "unless resourceVersion is provided"),
                       ({"resourceVersion": "1", "resourceVersionMatch": "NotOlderThan", "continue": "x"},
                        "when continue is provided")]:
        with pytest.raises(ClusterError, match=f"resourceVersionMatch is forbidden {why}"):
            kube.request("GET", NODES.path(), query=query)


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


def test_a_display_list_reads_on_when_its_continue_token_expires(apiserver, kubeconfig):
    """A continue token older than etcd's compaction is 410 Expired (on v1.36.2 after 30 quiet minutes: the watch
    cache no longer holds the first page's snapshot); the server offers a token that reads the rest as it is now.
    A display list takes it: every object once. A consistent list (a command that writes) raises."""
    from rblnctl.errors import ContinueExpired
    from rblnctl.kube import NODES, KubeOptions, connect

    apiserver.add(*(o.node(f"n{i}") for i in range(5)))
    kube = connect(KubeOptions(kubeconfig=str(kubeconfig), request_timeout_s=2))
    kube.list_from_cache = True
    pages = kube.iter_list(NODES, page_size=2)
    first = [next(pages)["metadata"]["name"] for _ in range(2)]
    apiserver.add(o.namespace("later"))  # a write, then etcd compacts past the first page's revision
    apiserver.compact()
    assert first + [n["metadata"]["name"] for n in pages] == [f"n{i}" for i in range(5)]
    expired = [r for r in apiserver.requests if r.path == "/api/v1/nodes" and r.status == 410]
    assert len(expired) == 1

    kube.list_from_cache = False
    pages = kube.iter_list(NODES, page_size=2)
    next(pages)
    apiserver.add(o.namespace("later-still"))
    apiserver.compact()
    with pytest.raises(ContinueExpired, match="410 Expired The provided continue parameter is too old"):
        list(pages)
