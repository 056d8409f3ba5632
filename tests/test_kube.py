"""The Kubernetes access layer against the loopback API server: paging, typed errors, kubeconfig resolution."""

from __future__ import annotations

import socket

import pytest

from rblnctl.errors import (
    ClusterError,
    ClusterTimeout,
    ClusterUnreachable,
    ConfigError,
    Conflict,
    Forbidden,
    NotFound,
)
from rblnctl.kube import KUBEVIRTS, NODES, PODS, KubeOptions, connect, describe_request
from tests.fakes import objects as o


@pytest.fixture
def kube(apiserver, kubeconfig):
    return connect(KubeOptions(kubeconfig=str(kubeconfig), request_timeout_s=2))


def test_connects_through_kubeconfig_and_reads_version(kube, apiserver):
    assert kube.server.rstrip("/") == apiserver.url
    assert kube.server_version()["gitVersion"].startswith("v1.")


def test_list_follows_continue_tokens(kube, apiserver):
    apiserver.add(*(o.node(f"n{i}") for i in range(5)))
    apiserver.clear_requests()
    names = [n["metadata"]["name"] for n in kube.iter_list(NODES, page_size=2)]
    assert names == [f"n{i}" for i in range(5)]
    lists = [r for r in apiserver.requests if r.path == "/api/v1/nodes"]
    assert len(lists) == 3
    assert lists[0].query["limit"] == ["2"] and "continue" not in lists[0].query
    assert all("continue" in r.query for r in lists[1:])


def test_label_and_field_selectors_reach_the_server(kube, apiserver):
    apiserver.add(o.node("a", labels={"x": "1"}), o.node("b", labels={"x": "2"}))
    apiserver.add(o.pod("default", "p1", node="a"), o.pod("default", "p2", node="b"))
    assert [n["metadata"]["name"] for n in kube.list(NODES, label_selector="x in (2,3)")] == ["b"]
    assert [p["metadata"]["name"] for p in kube.list(PODS, field_selector="spec.nodeName=a")] == ["p1"]


def test_not_found_carries_the_server_message(kube):
    with pytest.raises(NotFound, match='nodes "ghost" not found'):
        kube.get(NODES, "ghost")
    assert kube.get_optional(NODES, "ghost") is None


def test_forbidden_names_verb_resource_and_namespace(kube, apiserver):
    apiserver.forbid("list", "kubevirts", namespace="kubevirt")
    with pytest.raises(Forbidden) as err:
        kube.list(KUBEVIRTS, namespace="kubevirt")
    msg = str(err.value)
    assert "list" in msg and "kubevirts.kubevirt.io" in msg and 'namespace "kubevirt"' in msg
    assert "\n" not in msg


def test_forbidden_at_cluster_scope(kube, apiserver):
    apiserver.forbid("patch", "nodes")
    apiserver.add(o.node("n1"))
    with pytest.raises(Forbidden, match="patch on nodes at cluster scope"):
        kube.patch(NODES, "n1", {"spec": {"unschedulable": True}}, patch_type="strategic")


def test_conflict_on_stale_resource_version(kube, apiserver):
    apiserver.add(o.node("n1"))
    node = kube.get(NODES, "n1")
    kube.patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}}, patch_type="merge")
    with pytest.raises(Conflict, match="modified"):
        kube.request("PUT", NODES.path("n1"), body=node)


def test_server_error_is_a_cluster_error_with_status(kube, apiserver):
    apiserver.inject_fault(path=r"^/api/v1/nodes$", status=500, message="etcd is sad")
    with pytest.raises(ClusterError) as err:
        kube.list(NODES)
    assert err.value.status == 500 and "etcd is sad" in str(err.value)


def test_dropped_connection_is_unreachable(kube, apiserver):
    apiserver.inject_fault(path=r"^/api/v1/nodes$", drop=True, times=5)
    with pytest.raises(ClusterUnreachable, match=apiserver.url):
        kube.list(NODES)


def test_slow_server_times_out(apiserver, kubeconfig):
    kube = connect(KubeOptions(kubeconfig=str(kubeconfig), request_timeout_s=0.3))
    apiserver.inject_fault(path=r"^/api/v1/nodes$", status=None, delay_s=2, times=3)
    with pytest.raises(ClusterTimeout, match="did not answer"):
        kube.list(NODES)


def test_nothing_listening_is_unreachable_with_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kube = connect(KubeOptions(server=f"http://127.0.0.1:{port}", request_timeout_s=2))
    with pytest.raises(ClusterUnreachable, match=f"127.0.0.1:{port}.*connection refused"):
        kube.server_version()


def test_patch_sends_the_declared_content_type(kube, apiserver):
    apiserver.add(o.node("n1"))
    apiserver.clear_requests()
    kube.patch(NODES, "n1", [{"op": "add", "path": "/metadata/labels/z", "value": "1"}], patch_type="json")
    kube.patch(NODES, "n1", {"metadata": {"labels": {"y": "1"}}}, patch_type="merge", dry_run=True)
    w = apiserver.writes()
    assert [r.content_type.split(";")[0] for r in w] == ["application/json-patch+json", "application/merge-patch+json"]
    assert w[1].query.get("dryRun") == ["All"]
    assert apiserver.get("Node", "n1")["metadata"]["labels"].get("y") is None


# -- kubeconfig resolution ------------------------------------------------------------------


def test_unknown_context_lists_the_known_ones(kubeconfig):
    with pytest.raises(ConfigError, match=r'context "prod" not found .*contexts: fake'):
        connect(KubeOptions(kubeconfig=str(kubeconfig), context="prod"))


def test_missing_kubeconfig_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        connect(KubeOptions(kubeconfig=str(tmp_path / "nope")))


def test_corrupt_kubeconfig(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nclusters: [\n")
    with pytest.raises(ConfigError, match="invalid kubeconfig"):
        connect(KubeOptions(kubeconfig=str(bad)))


def test_kubeconfig_env_with_no_existing_file(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "a") + ":" + str(tmp_path / "b"))
    with pytest.raises(ConfigError, match="KUBECONFIG names no existing file"):
        connect(KubeOptions())


def test_kubeconfig_env_is_used(monkeypatch, kubeconfig, apiserver):
    monkeypatch.setenv("KUBECONFIG", f"/nonexistent:{kubeconfig}")
    assert connect(KubeOptions()).server.rstrip("/") == apiserver.url


def test_no_kubeconfig_and_not_in_a_pod(monkeypatch):
    monkeypatch.delenv("KUBECONFIG")
    with pytest.raises(ConfigError, match="no kubeconfig found"):
        connect(KubeOptions())


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/api/v1/nodes", ("list", "nodes", None)),
        ("GET", "/api/v1/nodes/n1", ("get", "nodes", None)),
        ("PATCH", "/api/v1/nodes/n1", ("patch", "nodes", None)),
        ("POST", "/api/v1/namespaces/ns/pods/p/eviction", ("create", "pods/eviction", "ns")),
        ("GET", "/apis/kubevirt.io/v1/namespaces/kv/kubevirts", ("list", "kubevirts.kubevirt.io", "kv")),
        ("PATCH", "/apis/kubevirt.io/v1/namespaces/kv/kubevirts/x", ("patch", "kubevirts.kubevirt.io", "kv")),
        ("GET", "/apis/apps/v1/daemonsets?limit=5", ("list", "daemonsets.apps", None)),
        ("DELETE", "/api/v1/namespaces/ns", ("delete", "namespaces", None)),
    ],
)
def test_describe_request(method, path, expected):
    assert describe_request(method, path) == expected


def test_file_that_is_yaml_but_not_a_kubeconfig(tmp_path):
    bad = tmp_path / "hostname"
    bad.write_text("worker-1\n")
    with pytest.raises(ConfigError, match="not a kubeconfig"):
        connect(KubeOptions(kubeconfig=str(bad)))
