"""Which proxy a request to the API server goes through, as kubectl (client-go) decides it, and how it is named.

The rule, in client-go's order:

1. The kubeconfig cluster's `proxy-url` (http, https or socks5), for every request to that cluster, loopback
   included: client-go installs it as the transport's Proxy function in place of the environment's
   (kubernetes/kubernetes staging/src/k8s.io/client-go/transport/cache.go: `proxy := http.ProxyFromEnvironment;
   if config.Proxy != nil { proxy = config.Proxy }`; clientcmd sets it from proxy-url with http.ProxyURL, which
   has no exceptions). NO_PROXY does not apply to it: apimachinery's CIDR wrapper only wraps the default
   (staging/src/k8s.io/apimachinery/pkg/util/net/http.go SetOldTransportDefaults, `isDefault(t.Proxy)`).
2. Otherwise the environment, as Go's net/http ProxyFromEnvironment reads it (golang/net http/httpproxy/proxy.go,
   FromEnvironment and proxyForURL): HTTPS_PROXY (then https_proxy) for an https server, HTTP_PROXY (then
   http_proxy) for an http one, unless NO_PROXY (then no_proxy) excludes the server's host; a value without a
   scheme is `http://` + value. NO_PROXY entries, comma-separated, case-insensitive: `*` (nothing is proxied),
   an IP (optionally `:port`), a CIDR, a domain name (optionally `:port`) that matches itself and its
   subdomains, `.domain` or `*.domain` that match subdomains only. `localhost` and loopback addresses are
   never proxied (proxy.go useProxy). HTTP_PROXY is refused under CGI (REQUEST_METHOD set), as Go does.

A proxy's credentials (user:password in its URL) are sent, never shown: as Proxy-Authorization Basic to an
http(s) proxy (Go's transport sends the proxy URL's userinfo the same way), as the SOCKS5 user/password to a
socks5 one. Every message names a proxy by `display` (scheme://host:port), which is what kubectl names too.
"""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from rblnctl.errors import ConfigError

# The ports Go assumes for a URL without one (golang/net http/httpproxy/proxy.go portMap).
DEFAULT_PORTS = {"http": 80, "https": 443, "socks5": 1080}
PROXY_SCHEMES = ("http", "https", "socks5")  # what client-go accepts in a kubeconfig's proxy-url
PYSOCKS_HINT = "pip install pysocks"


@dataclass(frozen=True)
class Proxy:
    """One forward proxy: where it is, which setting named it, and its credentials (never shown)."""

    scheme: str  # http, https or socks5
    host: str
    port: int
    source: str  # what named it: "the kubeconfig's proxy-url", "HTTPS_PROXY", ...
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def display(self) -> str:
        """scheme://host:port: how every message names the proxy (never its credentials)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def has_credentials(self) -> bool:
        return self.username is not None

    def basic_auth(self) -> str | None:
        """The Proxy-Authorization header value for an http(s) proxy with credentials (None without)."""
        if self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def __str__(self) -> str:
        return self.display


def parse_proxy(value: str, source: str, *, from_env: bool = False) -> Proxy:
    """A proxy URL as client-go reads it; ConfigError naming `source` (never the value: it may hold a password).

    From the environment a value without a scheme is `http://` + value (httpproxy parseProxy).
    """
    text = value.strip()
    if from_env and "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise ConfigError(f"{source}: invalid proxy URL (expected http://HOST:PORT, https://... or "
                          "socks5://...)") from None
    scheme = parts.scheme.lower()
    if scheme not in PROXY_SCHEMES:
        raise ConfigError(f"{source}: unsupported proxy scheme {scheme!r}: must be http, https or socks5 "
                          "(as in kubectl)")
    if not parts.hostname:
        raise ConfigError(f"{source}: the proxy URL names no host")
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return Proxy(scheme=scheme, host=parts.hostname, port=port or DEFAULT_PORTS[scheme], source=source,
                 username=username, password=password)


def proxy_for(server: str, proxy_url: str | None, environ: Mapping[str, str] | None = None) -> Proxy | None:
    """The proxy a request to `server` goes through: the kubeconfig's `proxy_url` when set, else the environment's
    (see the module docstring); None for a direct connection."""
    if proxy_url:
        return parse_proxy(proxy_url, "the kubeconfig's proxy-url")
    env = os.environ if environ is None else environ
    parts = urlsplit(server)
    scheme = parts.scheme.lower()
    if scheme == "https":
        name, value = _first(env, "HTTPS_PROXY", "https_proxy")
    elif scheme == "http":
        name, value = _first(env, "HTTP_PROXY", "http_proxy")
        if value and env.get("REQUEST_METHOD"):
            # Go refuses the request (golang/net http/httpproxy/proxy.go proxyForURL): a CGI client could set it.
            raise ConfigError(f"refusing to use {name} in a CGI environment (REQUEST_METHOD is set), as Go does")
    else:
        return None
    if not value:
        return None
    _, no_proxy = _first(env, "NO_PROXY", "no_proxy")
    host = parts.hostname or ""
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        return None
    if not use_proxy(host, port, no_proxy):
        return None
    return parse_proxy(value, name, from_env=True)


def use_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Whether a request to host:port goes through the environment's proxy under `no_proxy` (Go's useProxy)."""
    host = _ascii(host.strip().lower().strip("[]"))
    if not host or host == "localhost":
        return False
    ip = _ip(host)
    if ip is not None and _loopback(ip):
        return False
    for entry in no_proxy.split(","):
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return False
        if "/" in entry:  # IPv4/CIDR, IPv6/CIDR
            try:
                net = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                continue  # Go ignores what it cannot parse
            if ip is not None and ip.version == net.version and ip in net:
                return False
            continue
        rule_host, rule_port = _split_host_port(entry)
        if not rule_host:
            continue
        if rule_port and rule_port != str(port):
            continue
        rule_ip = _ip(rule_host)
        if rule_ip is not None:
            if ip is not None and ip == rule_ip:
                return False
            continue
        if ip is not None:
            continue  # a domain rule never matches an IP address
        if rule_host.startswith("*."):
            rule_host = rule_host[1:]
        rule_host = _ascii(rule_host)
        exact = not rule_host.startswith(".")
        suffix = rule_host if not exact else "." + rule_host
        if host.endswith(suffix) or (exact and host == rule_host):
            return False
    return True


def _first(env: Mapping[str, str], *names: str) -> tuple[str, str]:
    """The first of `names` set to a non-empty value, and that value (Go's getEnvAny)."""
    for name in names:
        value = env.get(name, "")
        if value:
            return name, value
    return names[0], ""


def _split_host_port(entry: str) -> tuple[str, str]:
    """`host`, `host:port`, `[v6]:port` or a bare IPv6 address -> (host, port or "")."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, port
    return entry, ""


def _ascii(name: str) -> str:
    """A host name in ASCII (punycode labels), as Go's idnaASCII compares them; unchanged when it cannot be."""
    if name.isascii():
        return name
    try:
        return ".".join(label.encode("idna").decode() if label else "" for label in name.split("."))
    except UnicodeError:
        return name


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _loopback(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Go's net.IP.IsLoopback: 127.0.0.0/8, ::1, and 127.x written as an IPv4-mapped IPv6 address."""
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)
