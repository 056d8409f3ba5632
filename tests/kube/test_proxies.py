"""rblnctl.kube.proxies: which proxy a request goes through, as client-go decides it, and that its secret stays unsaid.

The NO_PROXY tables are Go's own (golang/net http/httpproxy/proxy_test.go: UseProxyTests with its `noProxy` list,
TestAllNoProxy, TestInvalidNoProxy, and proxyForURLTests), run against rblnctl's rule.
"""

from __future__ import annotations

import socket
import sys

import pytest

from rblnctl.errors import ClusterUnreachable, ConfigError, ProxyAuthError
from rblnctl.kube import KubeOptions, connect
from rblnctl.kube.proxies import parse_proxy, proxy_for, use_proxy
from tests.fakes.apiserver import FakeApiServer

SECRET = "s3cr3t-Pa55"  # the fixture password: it must never be shown

# golang/net http/httpproxy/proxy_test.go `noProxy` and UseProxyTests (host, whether it is proxied), port 80.
GO_NO_PROXY = ("foobar.com, .barbaz.net, *.wildcard.io, 192.168.1.1, 192.168.1.2:81, 192.168.1.3:80, 10.0.0.0/30, "
               "2001:db8::52:0:1, [2001:db8::52:0:2]:443, [2001:db8::52:0:3]:80, 2002:db8:a::45/64")
GO_USE_PROXY = [
    ("localhost", False), ("127.0.0.1", False), ("127.0.0.2", False), ("[::1]", False), ("[::2]", True),
    ("192.168.1.1", False), ("192.168.1.2", True), ("192.168.1.3", False), ("192.168.1.4", True),
    ("10.0.0.2", False), ("[2001:db8::52:0:1]", False), ("[2001:db8::52:0:2]", True),
    ("[2001:db8::52:0:3]", False), ("[2002:db8:a::123]", False), ("[fe80::424b:c8be:1643:a1b6]", True),
    ("barbaz.net", True), ("www.barbaz.net", False), ("foobar.com", False), ("www.foobar.com", False),
    ("foofoobar.com", True), ("baz.com", True), ("localhost.net", True), ("local.localhost", True),
    ("barbarbaz.net", True), ("wildcard.io", True), ("nested.wildcard.io", False), ("awildcard.io", True),
]


@pytest.mark.parametrize("host,proxied", GO_USE_PROXY)
def test_no_proxy_rules_are_gos(host, proxied):
    assert use_proxy(host, 80, GO_NO_PROXY) is proxied


@pytest.mark.parametrize("host", [h for h, _ in GO_USE_PROXY])
def test_a_star_proxies_nothing(host):
    assert use_proxy(host, 80, "*") is False


def test_a_malformed_entry_is_ignored():
    assert use_proxy("example.com", 80, ":1") is True


@pytest.mark.parametrize("no_proxy,url,proxied", [
    # golang/net http/httpproxy/proxy_test.go proxyForURLTests
    ("example.com", "http://example.com/", False),
    (".example.com", "http://example.com/", True),
    ("ample.com", "http://example.com/", True),
    ("example.com", "http://foo.example.com/", False),
    (".foo.com", "http://example.com/", True),
    (".示例.com", "http://www.示例.com", False),
    ("xn--fsq092h.com", "http://www.示例.com", False),
    ("示例.com", "http://www.xn--fsq092h.com", False),
    # a port in the rule, and the scheme's default port for a URL without one
    ("kube.example:6443", "http://kube.example:6443", False),
    ("kube.example:6443", "http://kube.example", True),
    ("kube.example:80", "http://kube.example", False),
    ("10.96.0.0/12", "http://10.96.0.1:6443", False),
    ("10.96.0.0/12", "http://10.112.0.1:6443", True),
])
def test_proxy_for_url_as_go(no_proxy, url, proxied):
    env = {"HTTP_PROXY": "proxy", "NO_PROXY": no_proxy}
    got = proxy_for(url, None, env)
    assert (got is not None) is proxied
    if got is not None:
        assert got.display == "http://proxy:80"  # no scheme: http:// (httpproxy parseProxy), Go's default port


def test_the_variable_follows_the_servers_scheme_and_upper_case_wins():
    env = {"HTTPS_PROXY": "http://upper:3128", "https_proxy": "http://lower:3128", "http_proxy": "http://plain:1"}
    assert proxy_for("https://kube.example:6443", None, env).display == "http://upper:3128"
    assert proxy_for("http://kube.example:6443", None, env).display == "http://plain:1"
    assert proxy_for("https://kube.example:6443", None, {"https_proxy": "lower:3128"}).source == "https_proxy"
    assert proxy_for("https://kube.example:6443", None, {"HTTP_PROXY": "http://only-http:1"}) is None
    assert proxy_for("https://kube.example", None, {"HTTPS_PROXY": "http://p:1", "no_proxy": ".example"}) is None


def test_http_proxy_is_refused_under_cgi_and_https_proxy_is_not():
    with pytest.raises(ConfigError, match="CGI"):
        proxy_for("http://kube.example", None, {"HTTP_PROXY": "p:1", "REQUEST_METHOD": "GET"})
    assert proxy_for("https://kube.example", None, {"HTTPS_PROXY": "p:1", "REQUEST_METHOD": "GET"}) is not None


def test_the_kubeconfig_proxy_wins_over_the_environment_and_no_proxy_and_loopback():
    env = {"HTTPS_PROXY": "http://env:1", "NO_PROXY": "*"}
    got = proxy_for("https://127.0.0.1:6443", "http://kc:3128", env)
    assert got is not None and got.display == "http://kc:3128" and got.source == "the kubeconfig's proxy-url"


def test_loopback_is_never_proxied_from_the_environment():
    env = {"HTTPS_PROXY": "http://env:1"}
    assert proxy_for("https://127.0.0.1:6443", None, env) is None
    assert proxy_for("https://localhost:6443", None, env) is None
    assert proxy_for("https://[::1]:6443", None, env) is None
    assert proxy_for("https://[::ffff:127.0.0.1]:6443", None, env) is None
    assert proxy_for("https://10.0.0.1:6443", None, env) is not None


def test_credentials_are_kept_but_never_shown():
    p = parse_proxy(f"http://ops:{SECRET.replace('5', '%35')}@proxy.corp:3128", "the kubeconfig's proxy-url")
    assert (p.username, p.password) == ("ops", SECRET)  # percent-decoded, as Go's url.UserPassword
    assert p.display == "http://proxy.corp:3128"
    for text in (str(p), repr(p), p.display, f"{p}"):
        assert SECRET not in text and "ops" not in text
    assert p.basic_auth() == "Basic " + __import__("base64").b64encode(f"ops:{SECRET}".encode()).decode()


@pytest.mark.parametrize("url,message", [
    (f"ftp://ops:{SECRET}@proxy:21", "unsupported proxy scheme 'ftp'"),
    (f"http://ops:{SECRET}@proxy:port", "invalid proxy URL"),
    (f"http://ops:{SECRET}@:3128", "names no host"),
])
def test_a_bad_proxy_url_is_a_config_error_without_the_password(url, message):
    with pytest.raises(ConfigError, match=message) as err:
        parse_proxy(url, "the kubeconfig's proxy-url")
    assert SECRET not in str(err.value) and "\n" not in str(err.value)


def _kubeconfig(tmp_path, server, proxy_url):
    kc = tmp_path / "kc"
    kc.write_text("apiVersion: v1\nkind: Config\n"
                  f"clusters:\n- name: c\n  cluster:\n    server: {server}\n    proxy-url: {proxy_url}\n"
                  "contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"
                  "users:\n- name: u\n  user:\n    token: fake-token\n")
    return kc


def _dead_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_proxy_is_named_without_its_password(tmp_path):
    # issue 38 finding 2: "cannot reach ... (through proxy http://ops:PASSWORD@...)"
    port = _dead_port()
    kc = _kubeconfig(tmp_path, "https://kube.invalid:6443", f"http://ops:{SECRET}@127.0.0.1:{port}")
    with pytest.raises(ClusterUnreachable) as err:
        connect(KubeOptions(kubeconfig=str(kc), request_timeout_s=2)).server_version()
    assert f"(through proxy http://127.0.0.1:{port})" in str(err.value)
    assert SECRET not in str(err.value) and "ops" not in str(err.value)


def test_the_proxy_credentials_are_sent_as_basic_auth(tmp_path):
    # issue 38 finding 3. The fake API server takes absolute-form requests (an http:// server through an http
    # proxy); the CONNECT tunnel of an https:// server is tested against a real proxy (tests/envtest).
    with FakeApiServer() as fake:
        kc = _kubeconfig(tmp_path, "http://kube-api.invalid:6443", f"http://ops:{SECRET}@127.0.0.1:{fake.port}")
        assert connect(KubeOptions(kubeconfig=str(kc))).server_version()["gitVersion"]
        sent = fake.requests[-1].headers
        assert sent.get("proxy-authorization") == parse_proxy(
            f"http://ops:{SECRET}@x", "x").basic_auth()


def test_a_407_from_an_http_proxy_is_an_auth_error_naming_the_proxy(tmp_path):
    with FakeApiServer() as fake:
        fake.inject_fault(method="GET", path="^/version", status=407, reason="Proxy Authentication Required",
                          body="", content_type="text/plain", times=10)
        kc = _kubeconfig(tmp_path, "http://kube-api.invalid:6443", f"http://ops:{SECRET}@127.0.0.1:{fake.port}")
        with pytest.raises(ProxyAuthError) as err:
            connect(KubeOptions(kubeconfig=str(kc))).server_version()
    msg = str(err.value)
    assert f"the proxy http://127.0.0.1:{fake.port} (the kubeconfig's proxy-url) refused our credentials" in msg
    assert SECRET not in msg and "ops:" not in msg


def test_socks5_without_pysocks_is_one_config_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "socks", None)  # PySocks not installed: `import socks` raises ImportError
    monkeypatch.delitem(sys.modules, "urllib3.contrib.socks", raising=False)
    kc = _kubeconfig(tmp_path, "https://kube.example:6443", f"socks5://ops:{SECRET}@127.0.0.1:1080")
    with pytest.raises(ConfigError) as err:
        connect(KubeOptions(kubeconfig=str(kc)))
    assert "pip install pysocks" in str(err.value) and "socks5://127.0.0.1:1080" in str(err.value)
    assert SECRET not in str(err.value)


def test_socks5_carries_the_user_and_password_and_lets_the_proxy_resolve(tmp_path):
    pytest.importorskip("socks")
    kc = _kubeconfig(tmp_path, "https://kube.example:6443", f"socks5://ops:{SECRET}@127.0.0.1:1080")
    pool = connect(KubeOptions(kubeconfig=str(kc))).transport.pool
    opts = pool.connection_pool_kw["_socks_options"]
    assert (opts["username"], opts["password"], opts["rdns"]) == ("ops", SECRET, True)


def test_a_407_from_an_environment_proxy_asks_for_its_credentials(monkeypatch):
    with FakeApiServer() as fake:
        fake.inject_fault(method="GET", path="^/version", status=407, reason="Proxy Authentication Required",
                          body="", content_type="text/plain", times=10)
        monkeypatch.setenv("HTTP_PROXY", f"127.0.0.1:{fake.port}")
        with pytest.raises(ProxyAuthError) as err:
            connect(KubeOptions(server="http://kube-api.invalid:6443")).server_version()
    assert str(err.value) == (
        f"the proxy http://127.0.0.1:{fake.port} (HTTP_PROXY) asks for credentials (407 Proxy Authentication "
        "Required) on the way to the API server at http://kube-api.invalid:6443: put them in HTTP_PROXY "
        f"(http://USER:PASSWORD@127.0.0.1:{fake.port})")
