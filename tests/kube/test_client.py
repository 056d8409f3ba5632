"""The Kubernetes access layer against the loopback API server: paging, typed errors, kubeconfig resolution."""

from __future__ import annotations

import logging
import socket
import sys
import time

import pytest

from rblnctl.errors import (
    AuthError,
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
from tests.fakes.apiserver import FakeApiServer


pytestmark = pytest.mark.kube_on_fake_clock  # `kube` (tests/conftest.py): through a kubeconfig, retries on a FakeClock


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
    apiserver.inject_fault(path=r"^/api/v1/nodes$", status=500, message="etcd is sad", times=4)
    with pytest.raises(ClusterError) as err:
        kube.list(NODES)
    assert err.value.status == 500 and "etcd is sad" in str(err.value)
    assert kube.clock.sleeps == [0.5, 1.0, 2.0]  # three more tries, backing off


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_a_transient_read_failure_is_tried_again(kube, apiserver, status):
    """client-go retries reads the server could not answer just now; one blip must not abort a long wait."""
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(path=r"^/api/v1/nodes/n1$", status=status, times=2)
    assert kube.get(NODES, "n1")["metadata"]["name"] == "n1"
    assert [r.status for r in apiserver.requests if r.path == "/api/v1/nodes/n1"] == [status, status, 200]


def test_retry_after_is_honoured_and_capped(kube, apiserver):
    apiserver.inject_fault(path=r"^/api/v1/nodes$", status=429, retry_after_s=3, times=1)
    apiserver.inject_fault(path=r"^/api/v1/nodes$", status=429, retry_after_s=120, times=1)
    assert kube.list(NODES) == []
    assert kube.clock.sleeps == [3.0, 10.0]


def test_a_transient_failure_of_a_write_is_not_retried(kube, apiserver):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(method="PATCH", status=503, times=1)
    with pytest.raises(ClusterError) as err:
        kube.patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}}, patch_type="merge")
    assert err.value.status == 503 and len(apiserver.writes()) == 1


def test_dropped_connection_is_unreachable(kube, apiserver):
    apiserver.inject_fault(path=r"^/api/v1/nodes$", drop=True, times=5)
    with pytest.raises(ClusterUnreachable, match=apiserver.url):
        kube.list(NODES)


def test_slow_server_times_out(apiserver, kubeconfig):
    kube = connect(KubeOptions(kubeconfig=str(kubeconfig), request_timeout_s=0.3))
    apiserver.inject_fault(path=r"^/api/v1/nodes$", status=None, delay_s=2, times=3)
    with pytest.raises(ClusterTimeout, match="did not answer"):
        kube.list(NODES)


def test_the_next_page_is_asked_for_before_this_one_is_handed_out(kube, apiserver):
    """iter_list reads the continue token off a page's bytes and asks for the next page at once, so the server
    answers it while the caller works on this one (issue 31)."""
    apiserver.add(*(o.node(f"n{i}") for i in range(5)))
    apiserver.clear_requests()
    pages = kube.iter_list(NODES, page_size=2)
    assert next(pages)["metadata"]["name"] == "n0"  # the first item of the first page, nothing more consumed
    deadline = time.monotonic() + 5
    while not any("continue" in r.query for r in apiserver.requests) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert any("continue" in r.query for r in apiserver.requests)
    assert ["n0", *(n["metadata"]["name"] for n in pages)] == [f"n{i}" for i in range(5)]
    assert len([r for r in apiserver.requests if r.path == "/api/v1/nodes"]) == 3


def test_an_objects_continue_text_is_no_token(kube, apiserver):
    """The guess is read from the list's own metadata only (an object holding no object): an annotation or label
    named `continue` on an item is never taken for a token, on the last page or any other."""
    apiserver.add(*(o.node(f"n{i}", annotations={"continue": "not-a-token"}, labels={"continue": "no"})
                    for i in range(3)))
    apiserver.clear_requests()
    names = [n["metadata"]["name"] for n in kube.iter_list(NODES, page_size=2)]
    assert names == ["n0", "n1", "n2"]
    time.sleep(0.2)  # a stray guess would be on its way by now
    assert [r.query.get("continue") for r in apiserver.requests if r.path == "/api/v1/nodes"][2:] == []
    assert not any(r.query.get("continue") in (["not-a-token"], ["no"]) for r in apiserver.requests)


def test_a_continue_token_guessed_wrong_is_dropped(kube, apiserver, monkeypatch):
    """Should a guess still be wrong, the decoded token decides: the guess's page is never handed out."""
    from rblnctl.kube import client

    apiserver.add(*(o.node(f"n{i}") for i in range(5)))
    monkeypatch.setattr(client, "_continue_token", lambda body: "not-a-token")
    assert [n["metadata"]["name"] for n in kube.iter_list(NODES, page_size=2)] == [f"n{i}" for i in range(5)]


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


def test_kubeconfig_without_current_context_is_a_config_error_naming_it(apiserver, tmp_path):
    kc = tmp_path / "kc"
    kc.write_text(_kubeconfig_text(apiserver.url).replace("current-context: c\n", ""))
    with pytest.raises(ConfigError, match="has no current-context; pass --context"):
        connect(KubeOptions(kubeconfig=str(kc)))
    assert apiserver.requests == []


def test_kubeconfig_without_current_context_works_with_context(apiserver, tmp_path):
    kc = tmp_path / "kc"
    kc.write_text(_kubeconfig_text(apiserver.url).replace("current-context: c\n", ""))
    kube = connect(KubeOptions(kubeconfig=str(kc), context="c"))  # kubectl accepts this; so do we
    assert kube.context == "c" and kube.server_version()["gitVersion"]


def test_kubeconfig_without_contexts_is_invalid(tmp_path):
    kc = tmp_path / "kc"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(ConfigError, match="invalid kubeconfig"):
        connect(KubeOptions(kubeconfig=str(kc)))


def test_context_naming_a_missing_cluster_is_invalid(tmp_path):
    kc = tmp_path / "kc"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters: []\n"
                  "contexts:\n- name: c\n  context: {cluster: gone, user: u}\ncurrent-context: c\n"
                  "users:\n- name: u\n  user: {token: t}\n")
    with pytest.raises(ConfigError, match=r"invalid kubeconfig .*gone"):
        connect(KubeOptions(kubeconfig=str(kc)))


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


# -- transport: timeouts, retries, TLS, proxies, credentials ---------------------------------


def test_request_timeout_is_not_doubled_by_a_retry(apiserver, kubeconfig):
    kube = connect(KubeOptions(kubeconfig=str(kubeconfig), request_timeout_s=0.4))
    apiserver.inject_fault(path=r"^/api/v1/nodes$", status=None, delay_s=1.5, times=3)
    with pytest.raises(ClusterTimeout):
        kube.list(NODES)
    # One try, not urllib3 retrying it: a retry would reach the server (logged on arrival) 0.4 s later,
    # while the 1.5 s delay still holds the first request.
    assert len([r for r in apiserver.requests if r.path == "/api/v1/nodes"]) == 1


@pytest.mark.parametrize("method", ["DELETE", "PUT", "PATCH", "POST"])
def test_a_write_that_timed_out_is_not_sent_again(apiserver, kubeconfig, method):
    kube = connect(KubeOptions(kubeconfig=str(kubeconfig), request_timeout_s=0.3))
    apiserver.add(o.node("n1"))
    apiserver.clear_requests()
    apiserver.inject_fault(method=method, status=None, delay_s=1, times=3)
    with pytest.raises(ClusterTimeout):
        path = NODES.path() if method == "POST" else NODES.path("n1")
        kube.request(method, path, body=[] if method == "PATCH" else {}, content_type=None)
    assert len([r for r in apiserver.requests if r.method == method]) == 1


def test_a_dropped_get_is_retried(kube, apiserver):
    apiserver.inject_fault(path=r"^/api/v1/nodes$", drop=True, times=1)
    assert kube.list(NODES) == []
    assert [r.status for r in apiserver.requests if r.path == "/api/v1/nodes"] == [0, 200]  # dropped, then answered


def test_dropped_gets_are_retried_a_bounded_number_of_times(kube, apiserver):
    apiserver.inject_fault(path=r"^/api/v1/nodes$", drop=True, times=5)
    with pytest.raises(ClusterUnreachable):
        kube.list(NODES)
    assert len([r for r in apiserver.requests if r.path == "/api/v1/nodes"]) == 4


@pytest.mark.parametrize("method", ["PATCH", "POST", "DELETE"])
def test_a_dropped_write_is_not_sent_again(kube, apiserver, method):
    apiserver.add(o.node("n1"))
    apiserver.clear_requests()
    apiserver.inject_fault(method=method, drop=True, times=1)  # a second try would go through
    with pytest.raises(ClusterUnreachable, match=apiserver.url):
        if method == "PATCH":
            kube.patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}}, patch_type="merge")
        elif method == "POST":
            kube.create(NODES, o.node("n2"))
        else:
            kube.delete(NODES, "n1")
    assert len([r for r in apiserver.requests if r.method == method]) == 1
    assert "a" not in (apiserver.get("Node", "n1")["metadata"].get("labels") or {})
    assert apiserver.get("Node", "n2") is None


def test_untrusted_tls_certificate_is_unreachable_naming_the_server(tls_apiserver, tmp_path):
    kc = tls_apiserver.write_kubeconfig(tmp_path / "kc")  # no CA: the self-signed cert is untrusted
    kube = connect(KubeOptions(kubeconfig=str(kc), request_timeout_s=5))
    with pytest.raises(ClusterUnreachable) as err:
        kube.server_version()
    msg = str(err.value)
    assert tls_apiserver.url in msg and "signed by an unknown authority" in msg and "\n" not in msg
    assert len([r for r in tls_apiserver.requests]) == 0


def test_tls_with_the_kubeconfig_ca(tls_apiserver, tls_files, tmp_path):
    kc = tls_apiserver.write_kubeconfig(tmp_path / "kc", ca=tls_files.cert)
    assert connect(KubeOptions(kubeconfig=str(kc))).server_version()["gitVersion"] == "v1.34.1"


@pytest.mark.filterwarnings("ignore:Unverified HTTPS request")
def test_insecure_skip_tls_verify(tls_apiserver, tmp_path):
    kc = tls_apiserver.write_kubeconfig(tmp_path / "kc", insecure=True)
    assert connect(KubeOptions(kubeconfig=str(kc))).server_version()["gitVersion"] == "v1.34.1"


def test_client_certificate_auth(tls_files, tmp_path):
    with FakeApiServer(tls_cert=tls_files.cert, tls_key=tls_files.key, client_ca=tls_files.client_cert) as fake:
        kc = fake.write_kubeconfig(tmp_path / "kc", ca=tls_files.cert, client_cert=tls_files.client_cert,
                                   client_key=tls_files.client_key)
        assert connect(KubeOptions(kubeconfig=str(kc))).server_version()["gitVersion"] == "v1.34.1"
        no_cert = fake.write_kubeconfig(tmp_path / "kc2", ca=tls_files.cert)
        with pytest.raises(ClusterUnreachable, match=fake.url):
            connect(KubeOptions(kubeconfig=str(no_cert), request_timeout_s=5)).server_version()


def _kubeconfig_text(server: str, *, cluster_extra: str = "", user: str = "    token: fake-token\n") -> str:
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {server}\n{cluster_extra}"
        "contexts:\n- name: c\n  context: {cluster: c, user: u}\n"
        "current-context: c\n"
        f"users:\n- name: u\n  user:\n{user}"
    )


def test_proxy_url_is_used(apiserver, tmp_path):
    # The server name does not resolve: only a request sent through the proxy (the fake, which
    # accepts absolute-form request targets) can succeed.
    kc = tmp_path / "kc"
    kc.write_text(_kubeconfig_text("http://kube-api.invalid:6443", cluster_extra=f"    proxy-url: {apiserver.url}\n"))
    assert connect(KubeOptions(kubeconfig=str(kc))).server_version()["gitVersion"] == "v1.34.1"


def test_dead_proxy_is_named_in_the_unreachable_message(apiserver, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = tmp_path / "kc"
    kc.write_text(_kubeconfig_text(apiserver.url, cluster_extra=f"    proxy-url: http://127.0.0.1:{port}\n"))
    with pytest.raises(ClusterUnreachable, match=rf"{apiserver.url} \(through proxy http://127.0.0.1:{port}\)"):
        connect(KubeOptions(kubeconfig=str(kc), request_timeout_s=2)).server_version()


PLUGIN = """
import datetime, json, os, sys
count = os.path.join(os.path.dirname(os.path.abspath(__file__)), "count")
n = int(open(count).read()) + 1 if os.path.exists(count) else 1
open(count, "w").write(str(n))
if os.environ.get("PLUGIN_FAIL"):
    print("login required: run `sso login`", file=sys.stderr)
    sys.exit(1)
# Valid for 5 min + 1 s: the client refreshes 5 minutes early, so it is stale after a second.
exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5, seconds=1)
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": f"tok{n}", "expirationTimestamp": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
"""


@pytest.fixture
def exec_kubeconfig(apiserver, tmp_path):
    plugin = tmp_path / "plugin" / "cred.py"
    plugin.parent.mkdir()
    plugin.write_text(PLUGIN)
    kc = tmp_path / "kc"
    kc.write_text(_kubeconfig_text(apiserver.url, user=(
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
        f"      command: {sys.executable}\n      args: [{plugin}]\n      interactiveMode: Never\n")))
    apiserver.require_token = True
    apiserver.token = "tok1"
    return kc


def test_exec_plugin_token_is_sent_and_refreshed(apiserver, exec_kubeconfig):
    kube = connect(KubeOptions(kubeconfig=str(exec_kubeconfig)))
    kube.server_version()
    apiserver.token = "tok2"
    time.sleep(1.5)
    kube.server_version()
    assert [r.headers.get("authorization") for r in apiserver.requests] == ["Bearer tok1", "Bearer tok2"]


def test_failing_exec_plugin_is_one_auth_error(apiserver, exec_kubeconfig, monkeypatch, capsys):
    monkeypatch.setenv("PLUGIN_FAIL", "1")
    root_handlers = list(logging.getLogger().handlers)
    with pytest.raises(AuthError, match=r"exec: process returned 1\. login required: run `sso login`"):
        connect(KubeOptions(kubeconfig=str(exec_kubeconfig)))
    assert capsys.readouterr().err == ""  # the kubernetes package's logging.error() does not leak
    assert logging.getLogger().handlers == root_handlers  # nor does it basicConfig() the root logger


def test_kubeconfig_env_merges_several_files(monkeypatch, apiserver, tmp_path):
    clusters = tmp_path / "clusters"
    clusters.write_text("apiVersion: v1\nkind: Config\n"
                        f"clusters:\n- name: c\n  cluster: {{server: '{apiserver.url}'}}\n")
    users = tmp_path / "users"
    users.write_text(
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {token: fake-token}\n"
        "contexts:\n- name: other\n  context: {cluster: c, user: u}\n- name: mine\n  context: {cluster: c, user: u}\n"
        "current-context: other\n"
    )
    monkeypatch.setenv("KUBECONFIG", f"{clusters}:{users}")
    apiserver.require_token = True
    kube = connect(KubeOptions(context="mine"))
    assert kube.context == "mine" and kube.server_version()["major"] == "1"


def test_in_cluster_service_account(monkeypatch, tls_apiserver, tls_files, tmp_path):
    import kubernetes.config.incluster_config as incluster

    from rblnctl.kube import connection as kube_mod  # connect() reads SA_TOKEN there

    token = tmp_path / "token"
    token.write_text("fake-token")
    monkeypatch.delenv("KUBECONFIG")  # and HOME has no ~/.kube/config: in-cluster is the last resort
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(tls_apiserver.port))
    monkeypatch.setattr(kube_mod, "SA_TOKEN", token)
    monkeypatch.setattr(incluster, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster, "SERVICE_CERT_FILENAME", str(tls_files.cert))
    tls_apiserver.require_token = True
    kube = connect(KubeOptions())
    assert kube.server == tls_apiserver.url
    assert kube.server_version()["major"] == "1"


def test_in_cluster_without_service_port_is_a_config_error(monkeypatch, tmp_path):
    from rblnctl.kube import connection as kube_mod  # connect() reads SA_TOKEN there

    token = tmp_path / "token"
    token.write_text("fake-token")
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.setattr(kube_mod, "SA_TOKEN", token)
    with pytest.raises(ConfigError, match="in-cluster configuration is unusable"):
        connect(KubeOptions())


def test_missing_api_says_which_and_suggests_the_crd(apiserver):
    from rblnctl.errors import ApiNotServed

    kube = connect(KubeOptions(server=apiserver.url))
    apiserver.remove_resource("kubevirts")
    with pytest.raises(ApiNotServed, match=r"does not serve kubevirts\.kubevirt\.io .*CRD installed") as err:
        kube.list(KUBEVIRTS)  # the group still serves virtualmachines: a JSON Status 404
    assert (err.value.resource, err.value.group) == ("kubevirts.kubevirt.io", "kubevirt.io")


def test_an_unserved_api_group_is_not_installed_not_a_broken_server(apiserver):
    """kube-apiserver's mux answers a plain-text 404 under a group nothing serves: one /apis read tells
    "not installed" (ApiNotServed, a NotFound every "is it installed?" caller handles) from a web server."""
    from rblnctl.errors import ApiNotServed, NotAnApiServer

    kube = connect(KubeOptions(server=apiserver.url))
    apiserver.remove_group("kubevirt.io")
    for _ in range(2):
        with pytest.raises(ApiNotServed, match=r"does not serve kubevirts\.kubevirt\.io"):
            kube.list(KUBEVIRTS)
    assert len(apiserver.requests_matching("GET", "^/apis$")) == 1  # asked once, then remembered
    # Something that is no API server (its /apis is no APIGroupList) answering the same plain 404.
    other = connect(KubeOptions(server=apiserver.url))
    apiserver.inject_fault(path="^/apis$", status=404, body="404 page not found\n",
                           content_type="text/plain; charset=utf-8", times=1)
    apiserver.inject_fault(path="^/apis/kubevirt.io/v1/kubevirts$", status=404, body="404 page not found\n",
                           content_type="text/plain; charset=utf-8", times=1)
    with pytest.raises(NotAnApiServer, match="not the Kubernetes API"):
        other.list(KUBEVIRTS)


@pytest.mark.parametrize(("body", "content_type", "error", "text"), [
    ("<html>proxy login</html>", "text/html", "NotAnApiServer", "not the Kubernetes API"),
    (b"\xff\xfe garbage", "application/json", "MalformedReply", "invalid JSON"),
    ([1, 2, 3], "application/json", "MalformedReply", "did not return a Kubernetes object"),
    ({"kind": "Node"}, "application/json", "MalformedReply", "did not return a Kubernetes object"),
])
def test_malformed_replies_are_one_line_typed_errors(kube, apiserver, body, content_type, error, text):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(path="^/api/v1/nodes/n1$", body=body, content_type=content_type, times=1)
    with pytest.raises(ClusterError if error == "MalformedReply" else ClusterUnreachable) as err:
        kube.get(NODES, "n1")
    assert type(err.value).__name__ == error and text in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("projection", [None, "NODE"])
@pytest.mark.parametrize(("body", "content_type", "error", "text"), [
    ("<html>proxy login</html>", "text/html", "NotAnApiServer", "not the Kubernetes API"),
    (b"\xff\xfe garbage", "application/json", "MalformedReply", "invalid JSON"),
])
def test_a_list_page_that_is_not_json_is_the_same_typed_error(kube, apiserver, body, content_type, error, text,
                                                              projection):
    """A list's pages are decoded by iter_list itself (pipelined, into a projection): a 200 that is no JSON is
    still told by its Content-Type, as a GET's."""
    from rblnctl.kube import projections

    apiserver.inject_fault(path="^/api/v1/nodes$", body=body, content_type=content_type, times=1)
    with pytest.raises(ClusterError if error == "MalformedReply" else ClusterUnreachable) as err:
        kube.list(NODES, projection=getattr(projections, projection) if projection else None)
    assert type(err.value).__name__ == error and text in str(err.value) and "\n" not in str(err.value)


def test_an_html_error_page_is_not_the_api_server_and_a_proxys_502_is_retried_once(kube, apiserver):
    """A proxy's 502 page (or a web server's 404) is no Kubernetes Status: exit 3, the page in one line."""
    from rblnctl.errors import NotAnApiServer

    apiserver.add(o.node("n1"))
    page = "<html><body>\n<h1>502 Bad Gateway</h1>\n</body></html>"
    apiserver.inject_fault(path="^/api/v1/nodes/n1$", status=502, body=page, content_type="text/html", times=1)
    assert kube.get(NODES, "n1")["metadata"]["name"] == "n1"  # a read: tried again, like any 502
    apiserver.inject_fault(path="^/api/v1/nodes/n1$", status=502, body=page, content_type="text/html", times=10)
    with pytest.raises(NotAnApiServer) as err:
        kube.get(NODES, "n1")
    text = str(err.value)
    assert "answered GET /api/v1/nodes/n1 with 502 and text/html (502 Bad Gateway)" in text and "\n" not in text
    apiserver.inject_fault(path="^/api/v1/nodes/n2$", status=404, body="<html>Not Found</html>",
                           content_type="text/html", times=1)
    with pytest.raises(NotAnApiServer, match="with 404 and text/html"):
        kube.get(NODES, "n2")


def test_a_list_that_is_not_a_list_is_malformed(kube, apiserver):
    apiserver.inject_fault(path="^/api/v1/nodes$", body={"items": {"a": 1}}, times=1)
    with pytest.raises(ClusterError, match="did not return a list"):
        kube.list(NODES)


def test_kubeconfig_cluster_without_server_is_a_config_error(tmp_path):
    kc = tmp_path / "kc"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {}\ncontexts:\n- name: x\n"
                  "  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {token: t}\n")
    with pytest.raises(ConfigError, match="has no server URL"):
        connect(KubeOptions(kubeconfig=str(kc)))


def test_a_lost_write_reply_is_outcome_unknown_and_never_resent(kube, apiserver):
    from rblnctl.errors import OutcomeUnknown

    apiserver.add(o.node("n1"))
    apiserver.inject_fault(method="PATCH", lose_reply=True, times=1)
    with pytest.raises(OutcomeUnknown, match="may have been applied"):
        kube.patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}}, patch_type="merge")
    assert apiserver.get("Node", "n1")["metadata"]["labels"]["a"] == "b"  # it did land
    assert len(apiserver.writes()) == 1


def test_pod_log_is_text_even_when_it_looks_like_json(kube, apiserver):
    apiserver.add(o.pod("ns", "p", node="n1"))
    apiserver.set_pod_phase("ns", "p", "Succeeded")
    apiserver.set_pod_log("ns", "p", '{"target": "host"}\nerror: preflight: 1 check(s) failed\n')
    assert kube.pod_log("p", namespace="ns") == '{"target": "host"}\nerror: preflight: 1 check(s) failed\n'
    [req] = apiserver.requests_matching("GET", r"/pods/p/log$")
    assert req.headers["accept"] == "application/json, */*"  # client-go's; kube-apiserver serves text/plain for */*


def test_pod_log_of_a_waiting_container_is_a_cluster_error(kube, apiserver):
    apiserver.add(o.pod("ns", "p", node="n1"))
    apiserver.set_pod_phase("ns", "p", "Pending", reason="ErrImagePull")
    with pytest.raises(ClusterError, match="image can't be pulled"):
        kube.pod_log("p", namespace="ns")


@pytest.mark.parametrize("server", ["not a url", "ftp://x", "https://", "https://h:abc"])
def test_a_malformed_server_url_is_bad_input_not_an_unreachable_cluster(server):
    with pytest.raises(ConfigError, match="--server: invalid API server URL"):
        connect(KubeOptions(server=server))


def test_a_server_without_a_scheme_is_https_as_in_client_go(apiserver):
    assert connect(KubeOptions(server="localhost:1")).server == "https://localhost:1"


def test_a_dry_run_delete_with_options_says_dry_run_in_the_body(kube, apiserver):
    """The server reads a DELETE's options from the body when there is one, ignoring ?dryRun=All."""
    from rblnctl.kube import LEASES

    apiserver.add(o.lease("default", "l1"))
    kube.delete(LEASES, "l1", namespace="default", body={"kind": "DeleteOptions", "apiVersion": "v1",
                                                         "preconditions": {"resourceVersion": None}}, dry_run=True)
    assert apiserver.get("Lease", "l1", "default") is not None
    [req] = apiserver.writes()
    assert req.body["dryRun"] == ["All"] and req.query["dryRun"] == ["All"]


# -- the Accept header; aggregated APIs; Warning headers (issue 27) ------------------------------


def test_every_request_accepts_json_and_anything_as_client_go_does(kube, apiserver):
    """client-go's Accept for a JSON client (rest/request.go setAcceptHeader: `application/json, */*`): virt-api's
    start/stop/restart routes serve nothing else (406 to `application/json` alone, measured on KubeVirt v1.9.0)."""
    from rblnctl.clock import Clock
    from rblnctl.kube import VM_SUBRESOURCES, VMS, watch

    apiserver.add(o.node("n1"), o.vm("default", "vm1", running=False), o.pod("ns", "p", node="n1"))
    apiserver.set_pod_log("ns", "p", "hello\n")
    apiserver.clear_requests()
    kube.get(NODES, "n1")
    kube.list(NODES)
    kube.patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}}, patch_type="merge")
    kube.create(PODS, o.pod("ns", "q"), namespace="ns")
    kube.delete(PODS, "q", namespace="ns")
    kube.pod_log("p", namespace="ns")
    kube.request("PUT", VM_SUBRESOURCES.path("vm1", namespace="default", sub="start"), body={})
    # The fixture's FakeClock never advances on its own: this watch's deadline needs time that passes.
    for _ in watch(kube, VMS, namespace="default", timeout_s=0.2, clock=Clock()):
        pass
    accepts = {(r.method, r.headers.get("accept")) for r in apiserver.requests}
    assert {a for _, a in accepts} == {"application/json, */*"}, accepts
    assert {m for m, _ in accepts} == {"GET", "PATCH", "POST", "DELETE", "PUT"}
    assert apiserver.get("VirtualMachine", "vm1", "default")["spec"]["runStrategy"] == "Always"  # not 406


def test_a_406_from_virt_api_names_the_aggregated_api_not_a_wrong_server_url(kube, apiserver):
    """Before issue 27 this said "not the Kubernetes API: is the kubeconfig's server URL right?" (exit 3): the
    answer came from virt-api through the aggregation layer, and the error now says so (exit 1)."""
    from rblnctl.errors import AggregatedApiError, NotAnApiServer
    from rblnctl.kube import VM_SUBRESOURCES

    apiserver.add(o.vm("default", "vm1", running=False))
    path = VM_SUBRESOURCES.path("vm1", namespace="default", sub="start")
    apiserver.inject_fault(path=path + "$", status=406, body="406: Not Acceptable\n\nAvailable representations: ",
                           content_type="text/plain; charset=utf-8", times=1)
    with pytest.raises(AggregatedApiError) as err:
        kube.request("PUT", path, body={})
    text = str(err.value)
    assert not isinstance(err.value, NotAnApiServer) and "server URL" not in text and "\n" not in text
    assert text == (
        "the aggregated API subresources.kubevirt.io/v1 (APIService v1.subresources.kubevirt.io, Service "
        f"kubevirt/virt-api) answered PUT {path} with 406 Not Acceptable and text/plain; charset=utf-8 "
        "(406: Not Acceptable Available representations:), not a Kubernetes Status: check "
        "`kubectl get apiservice v1.subresources.kubevirt.io` and the pods behind Service kubevirt/virt-api "
        "(`kubectl -n kubevirt get endpointslices -l kubernetes.io/service-name=virt-api`)")
    assert (err.value.status, err.value.api_service, err.value.service) == (
        406, "v1.subresources.kubevirt.io", "kubevirt/virt-api")
    assert [r.path for r in apiserver.requests_matching("GET")] == [
        "/apis", "/apis/apiregistration.k8s.io/v1/apiservices/v1.subresources.kubevirt.io"]


def test_an_unreachable_virt_api_is_the_aggregators_503_naming_why_its_apiservice_is_unavailable(kube, apiserver):
    from rblnctl.errors import AggregatedApiError
    from rblnctl.kube import VM_SUBRESOURCES, is_transient

    apiserver.add(o.vm("default", "vm1", running=False))
    apiserver.virt_api_available = False
    with pytest.raises(AggregatedApiError) as err:
        kube.request("PUT", VM_SUBRESOURCES.path("vm1", namespace="default", sub="start"), body={})
    text = str(err.value)
    assert "answered PUT" in text and "with 503 Service Unavailable and text/plain; charset=utf-8 " \
        "(service unavailable)" in text
    assert 'the APIService is not Available: service/virt-api in "kubevirt" is not present' in text
    assert is_transient(err.value)  # a 503: worth trying again later, as any
    assert apiserver.get("VirtualMachine", "vm1", "default")["spec"]["runStrategy"] == "Halted"


def test_an_apiservice_rbac_hides_is_still_named_from_discovery(kube, apiserver):
    from rblnctl.errors import AggregatedApiError
    from rblnctl.kube import VM_SUBRESOURCES

    apiserver.add(o.vm("default", "vm1", running=False))
    apiserver.forbid("get", "apiservices.apiregistration.k8s.io")
    apiserver.virt_api_available = False
    with pytest.raises(AggregatedApiError) as err:
        kube.request("PUT", VM_SUBRESOURCES.path("vm1", namespace="default", sub="start"), body={})
    assert "(APIService v1.subresources.kubevirt.io, which could not be read: forbidden: RBAC does not allow get " \
        "on apiservices.apiregistration.k8s.io at cluster scope" in str(err.value)
    assert "`kubectl get apiservice v1.subresources.kubevirt.io`" in str(err.value)


def test_a_text_reply_under_a_local_group_or_a_core_path_is_still_not_an_api_server(kube, apiserver):
    """kube-apiserver serves kubevirt.io itself (CRDs: a Local APIService): an HTML page there came from
    something in between, as on a core path."""
    from rblnctl.errors import NotAnApiServer

    apiserver.add(o.kubevirt())
    page = "<html><body><h1>403 Forbidden</h1>corporate proxy</body></html>"
    for path in ("^/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts$", "^/api/v1/nodes$"):
        apiserver.inject_fault(path=path, status=404, body=page, content_type="text/html", times=1)
    with pytest.raises(NotAnApiServer, match="not the Kubernetes API"):
        kube.list(KUBEVIRTS, namespace="kubevirt")
    with pytest.raises(NotAnApiServer, match="not the Kubernetes API"):
        kube.list(NODES)
    assert len(apiserver.requests_matching("GET", "/apiservices/v1.kubevirt.io$")) == 1


def test_a_group_not_installed_costs_no_apiservice_read(apiserver):
    from rblnctl.errors import ApiNotServed

    kube = connect(KubeOptions(server=apiserver.url))
    apiserver.remove_group("kubevirt.io")
    with pytest.raises(ApiNotServed):
        kube.list(KUBEVIRTS)
    assert apiserver.requests_matching("GET", "apiservices") == []


def test_the_continue_guess_reads_both_shapes_kube_apiserver_writes():
    """Measured on v1.36.2: a built-in kind's LIST writes its metadata first (resourceVersion, continue,
    remainingItemCount), a custom resource's last (keys sorted); an item's metadata is never taken."""
    from rblnctl.kube.client import RawBody, _continue_token

    item = b'{"metadata":{"annotations":{"continue":"x"},"name":"a"},"spec":{}}'
    builtin = (b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"75391","continue":"eyJ2Ijo",'
               b'"remainingItemCount":19500},"items":[' + item + b']}')
    custom = (b'{"apiVersion":"kubevirt.io/v1","items":[' + b",".join([item] * 100) +
              b'],"kind":"VirtualMachineList","metadata":{"continue":"eyJydiI6","resourceVersion":"9"}}')
    last = b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[' + item + b']}'
    assert _continue_token(RawBody(builtin, "application/json")) == "eyJ2Ijo"
    assert _continue_token(RawBody(custom, "application/json")) == "eyJydiI6"
    assert _continue_token(RawBody(last, "application/json")) is None
