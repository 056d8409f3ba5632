"""rblnctl through a real forward proxy (proxy.py: tests/envtest/forward_proxy.py) to the real apiserver (issue 38).

The kubeconfig's server is `https://kubernetes.default.svc:PORT`: a name in the apiserver's certificate that this
machine cannot resolve and that only the proxy's resolver maps to the apiserver. A command that succeeds with it
went through the proxy, every request of it: pipelined list pages and watches included (a direct attempt fails
on the name). Two proxies: `open` (no credentials) and `guarded` (`--basic-auth ops:PASSWORD`, 407 without them).

Every output of every run here (stdout and stderr, -o json, -v=8) is searched for the proxy's password and the
apiserver token: neither may appear (`run`).
"""

from __future__ import annotations

import json
import os
import socket

import pytest

from rblnctl.constants import WORKLOAD_LABEL
from rblnctl.kube import client as kube_client
from tests.envtest.forward_proxy import ForwardProxy, ProxyUnavailable, SocksProxy
from tests.envtest.test_node_scenarios import npu_cluster  # noqa: F401  (the fixture, on this module's backend)
from tests.fakes.releases import NEWER

pytestmark = pytest.mark.envtest

NAME = "kubernetes.default.svc"  # in the envtest serving certificate's SANs (tests/envtest/controlplane.py _pki)
# Names and an IP the certificate does not hold, mapped to the apiserver by the proxy's resolver (TLS refusals).
NOT_IN_CERT = {"wrong.example": "127.0.0.1", "192.0.2.77": "127.0.0.1"}
USER = "ops"
PASSWORD = "pr0xy-" + os.urandom(6).hex()  # the fixture secret: never printed
READS = [
    ("node", "list"), ("node", "list", "-o", "json"), ("node", "list", "-o", "wide"), ("node", "history", "n1"),
    ("status",), ("status", "-o", "json"), ("vm", "list", "-A"), ("vm", "list", "-A", "-o", "json"),
    ("vm", "fit", "1"), ("preflight",), ("preflight", "-o", "json"), ("policy", "show"), ("kubevirt", "status"),
    ("version",), ("node", "list", "-v=8"), ("status", "-o", "json", "-v=8"),
]


@pytest.fixture(scope="module")
def proxies(tmp_path_factory):
    started = {}
    try:
        for kind, auth in (("open", None), ("guarded", f"{USER}:{PASSWORD}")):
            started[kind] = ForwardProxy(tmp_path_factory.mktemp(f"proxy-{kind}"), {NAME: "127.0.0.1", **NOT_IN_CERT},
                                         basic_auth=auth).start()
    except ProxyUnavailable as e:
        pytest.skip(str(e))
    yield started
    for p in started.values():
        p.stop()


@pytest.fixture
def backend(real):
    """npu_cluster's backend: the real apiserver only (its operator and kubelet simulations talk to it directly)."""
    return real


def _name_does_not_resolve_here():
    try:
        socket.getaddrinfo(NAME, 443)
    except socket.gaierror:
        return
    pytest.skip(f"{NAME} resolves on this machine: a request could reach the apiserver around the proxy")


def kubeconfig(real, path, *, proxy_url=None, host=NAME, ca=True):
    """The admin's kubeconfig with the server named `host` (kubernetes.default.svc) and the given proxy-url."""
    doc = json.loads(real.control_plane.kubeconfig.read_text())
    port = real.control_plane.url.rsplit(":", 1)[1]
    cluster = doc["clusters"][0]["cluster"]
    cluster["server"] = f"https://{host}:{port}"
    if not ca:
        del cluster["certificate-authority"]
    if proxy_url:
        cluster["proxy-url"] = proxy_url
    path.write_text(json.dumps(doc))
    return path


def run(real, kc, *args):
    """rblnctl with `kc`; its stdout and stderr never hold the proxy password or the apiserver token."""
    r = real.rblnctl(*args, kubeconfig=kc)
    out = r.stdout + r.stderr
    if not any(a.startswith("-v") for a in args):  # -v adds the traceback (docs/exit-codes.md)
        assert "Traceback" not in out, out
    assert PASSWORD not in out, f"{args}: the proxy password was printed"
    assert real.control_plane.admin_token not in out, f"{args}: the token was printed"
    return r


def _with_credentials(p: ForwardProxy) -> str:
    return p.url.replace("http://", f"http://{USER}:{PASSWORD}@")


@pytest.mark.parametrize("kind", ["guarded", "open"])
def test_every_read_command_through_the_proxy(real, proxies, npu_cluster, tmp_path, monkeypatch, kind):  # noqa: F811
    """Each read command answers through the proxy as it does directly: same exit code; list pages pipelined one
    node a page (the next page asked for while this one is decoded) go through the proxy too."""
    _name_does_not_resolve_here()
    npu_cluster(NEWER, nodes=("n1", "n2"))
    proxy = proxies[kind]
    kc = kubeconfig(real, tmp_path / "kc", proxy_url=_with_credentials(proxy) if kind == "guarded" else proxy.url)
    direct = real.kubeconfig
    monkeypatch.setattr(kube_client, "DEFAULT_PAGE_SIZE", 1)  # every list is paged, each page a request
    mark = real.audit.mark()
    for args in READS:
        via, straight = run(real, kc, *args), run(real, direct, *args)
        assert via.exit_code == straight.exit_code, (args, via.stdout, via.stderr)
        assert via.exit_code not in (3, 4), (args, via.stderr)
        if "json" in args:
            assert json.loads(via.stdout).keys() == json.loads(straight.stdout).keys()
    node_list = run(real, kc, "node", "list", "-o", "json")
    assert sorted(i["name"] for i in json.loads(node_list.stdout)["items"]) == ["n1", "n2"]
    pages = [e.uri for e in real.audit.events(mark, user_agent="rblnctl/") if e.uri.startswith("/api/v1/nodes?")
             and "continue=" in e.uri]
    assert pages, "no second page of a node list was asked for"


def test_set_mode_through_the_proxy_watches_included(real, proxies, npu_cluster, tmp_path):  # noqa: F811
    _name_does_not_resolve_here()
    npu_cluster(NEWER)
    kc = kubeconfig(real, tmp_path / "kc", proxy_url=_with_credentials(proxies["guarded"]))
    mark = real.audit.mark()
    r = run(real, kc, "node", "set-mode", "vm", "n1", "--yes", "--timeout", "60s", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["result"]["changed"]
    assert real.api.get("Node", "n1")["metadata"]["labels"][WORKLOAD_LABEL] == "vm-passthrough"
    verbs = {e.verb for e in real.audit.events(mark, user_agent="rblnctl/")}
    assert {"watch", "patch", "create"} <= verbs, verbs  # create: the eviction; watch: the waits


def test_a_407_names_the_proxy_without_its_password(real, proxies, tmp_path):
    guarded = proxies["guarded"]
    where = f"the proxy {guarded.url} (the kubeconfig's proxy-url)"
    no_creds = kubeconfig(real, tmp_path / "none", proxy_url=guarded.url)
    for args in (("node", "list"), ("status", "-o", "json"), ("vm", "list", "-A")):
        r = run(real, no_creds, *args)
        assert r.exit_code == 4, (args, r.stderr)
        assert f"{where} asks for credentials (407 Proxy Authentication Required)" in r.stderr
        assert f"http://USER:PASSWORD@127.0.0.1:{guarded.port}" in r.stderr and r.stdout == ""
    wrong = kubeconfig(real, tmp_path / "wrong", proxy_url=guarded.url.replace("http://", f"http://{USER}:x{PASSWORD}@"))
    r = run(real, wrong, "node", "list", "-v=8")
    assert r.exit_code == 4 and f"{where} refused our credentials" in r.stderr, r.stderr
    assert f"x{PASSWORD}" not in r.stderr


def test_an_unreachable_server_through_the_proxy_names_it_without_its_password(real, proxies, tmp_path):
    """issue 38 finding 2, with the real proxy: it cannot reach what it was asked for (nothing listens there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    doc = kubeconfig(real, tmp_path / "kc", proxy_url=_with_credentials(proxies["guarded"]))
    text = doc.read_text().replace(f"{NAME}:{real.control_plane.url.rsplit(':', 1)[1]}", f"127.0.0.1:{dead}")
    doc.write_text(text)
    for args in (("node", "list"), ("status", "-o", "json"), ("vm", "list", "-A"), ("node", "list", "-v=8")):
        r = run(real, doc, *args, "--request-timeout", "5s")
        assert r.exit_code == 3, (args, r.stderr)
        assert f"(through proxy {proxies['guarded'].url})" in r.stderr, r.stderr


def test_environment_proxies_as_client_go(real, proxies, tmp_path, monkeypatch):
    """HTTPS_PROXY (and https_proxy) with credentials; NO_PROXY sends the request direct (where the name does not
    resolve: unreachable, and no proxy named); the kubeconfig's proxy-url wins over a dead HTTPS_PROXY."""
    _name_does_not_resolve_here()
    guarded = proxies["guarded"]
    kc = kubeconfig(real, tmp_path / "kc")
    for var in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(var, _with_credentials(guarded).removeprefix("http://"))  # no scheme: http://
        r = run(real, kc, "node", "list", "-o", "json", "-v=8")
        assert r.exit_code == 0, (var, r.stderr)
        monkeypatch.delenv(var)
    monkeypatch.setenv("HTTPS_PROXY", _with_credentials(guarded))
    for no_proxy in (".svc", "kubernetes.default.svc", "*", "default.svc"):
        monkeypatch.setenv("NO_PROXY", no_proxy)
        r = run(real, kc, "node", "list", "--request-timeout", "5s")
        assert r.exit_code == 3 and "through proxy" not in r.stderr, (no_proxy, r.stderr)
    monkeypatch.setenv("NO_PROXY", "other.svc,10.0.0.0/8")
    assert run(real, kc, "node", "list").exit_code == 0
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv("HTTPS_PROXY", f"http://{USER}:{PASSWORD}@127.0.0.1:9")  # nothing listens on port 9
    r = run(real, kc, "status", "-o", "json", "--request-timeout", "5s")
    assert r.exit_code == 3 and "(through proxy http://127.0.0.1:9)" in r.stderr, r.stderr
    wins = kubeconfig(real, tmp_path / "wins", proxy_url=_with_credentials(guarded))
    direct = run(real, real.kubeconfig, "status", "-o", "json")
    assert run(real, wins, "status", "-o", "json").exit_code == direct.exit_code


def test_tls_refusals_through_the_proxy_say_why(real, proxies, tmp_path):
    """The certificate that was refused is read through the same proxy, and named as Go's x509 names it."""
    proxy_url = _with_credentials(proxies["guarded"])
    port = real.control_plane.url.rsplit(":", 1)[1]
    cases = [
        ("wrong.example", True, "the server's certificate is valid for localhost, kubernetes.default.svc, not "
                                "wrong.example (its IP SANs: 127.0.0.1, 10.0.0.1)"),
        ("192.0.2.77", True, "the server's certificate is valid for 127.0.0.1, 10.0.0.1, not 192.0.2.77 (its DNS "
                             "names: localhost, kubernetes.default.svc)"),
        (NAME, False, "the server's certificate is signed by an unknown authority (issued by CN=envtest-ca)"),
    ]
    for host, ca, why in cases:
        kc = kubeconfig(real, tmp_path / f"kc-{host}", proxy_url=proxy_url, host=host, ca=ca)
        r = run(real, kc, "node", "list")
        assert r.exit_code == 3, r.stderr
        assert r.stderr.startswith(f"error: cannot reach the API server at https://{host}:{port} (through proxy "
                                   f"{proxies['guarded'].url}): TLS: {why}"), r.stderr


def test_socks5_with_a_user_and_password(real, tmp_path):
    """A real SOCKS5 proxy (pproxy) with a login: every read of `node list` and `status` goes through it (the
    kubeconfig's proxy-url applies to a loopback server too, as in client-go); a wrong password fails naming the
    proxy, never the password. pproxy closes the connection on a bad login (no SOCKS5 auth reply): unreachable."""
    try:
        socks = SocksProxy(tmp_path / "socks", USER, PASSWORD).start()
    except ProxyUnavailable as e:
        pytest.skip(str(e))
    try:
        target = real.control_plane.url.removeprefix("https://")
        kc = kubeconfig(real, tmp_path / "kc", proxy_url=f"socks5://{USER}:{PASSWORD}@127.0.0.1:{socks.port}",
                        host="127.0.0.1")
        for args in (("node", "list", "-o", "json"), ("status", "-o", "json", "-v=8")):
            r = run(real, kc, *args)
            assert r.exit_code == run(real, real.kubeconfig, *args).exit_code, r.stderr
        assert socks.tunnels(target) >= 1
        wrong = kubeconfig(real, tmp_path / "wrong", proxy_url=f"socks5://{USER}:x{PASSWORD}@127.0.0.1:{socks.port}",
                           host="127.0.0.1")
        r = run(real, wrong, "node", "list", "--request-timeout", "5s")
        assert r.exit_code == 3, r.stderr
        assert r.stderr.startswith(f"error: cannot reach the API server at {real.control_plane.url} (through proxy "
                                   f"socks5://127.0.0.1:{socks.port}): "), r.stderr
        assert f"x{PASSWORD}" not in r.stderr
    finally:
        socks.stop()
