"""Cluster credentials as kubectl loads them, and the HTTP transport every request goes through.

A kubeconfig (--kubeconfig, else the merged $KUBECONFIG files, else ~/.kube/config) is read with
kubectl's rules (kubernetes/client-go tools/clientcmd/loader.go, Load: across several files the
first to set a named cluster, user or context, or the current-context, wins; relative paths are
relative to the file that holds them) and turned into an Endpoint: the server URL, the TLS material,
a proxy, the credentials. Static credentials (a token or token file, a client certificate, a user
name and password) need nothing more, so cluster commands do not import the kubernetes package,
whose import alone costs about 0.2 s (benchmarks/node_list.py). Credential plugins (`exec`, the
legacy `auth-provider`) and the in-cluster service account go through the kubernetes package's own
loader, imported only then: it runs the plugins and refreshes what they return.
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml

from rblnctl.errors import AuthError, ConfigError, one_line
from rblnctl.kube.proxies import PYSOCKS_HINT, Proxy, proxy_for

log = logging.getLogger(__name__)

DEFAULT_KUBECONFIG = Path("~/.kube/config")
# Connections kept open per host: evictions in flight, watches and a pool of nodes share one client.
CONNECTION_POOL_SIZE = 64
TOKEN_FILE_REREAD_S = 60.0  # a token file is read again after this long (client-go's CachedFileTokenSource)
_SECTIONS = ("clusters", "contexts", "users")


@dataclass
class Endpoint:
    """Where the API server is and how to talk to it; filled from a kubeconfig, then kubectl's flags."""

    server: str = ""
    verify: bool = True
    ca_file: str | None = None
    ca_data: str | None = None  # PEM text
    cert_file: str | None = None
    key_file: str | None = None
    tls_server_name: str | None = None
    proxy: str | None = None
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = None
    # The Authorization header from a credential plugin (the kubernetes package's loader runs and refreshes it).
    authorization: Callable[[], str | None] | None = None


class Transport:
    """One urllib3 pool to the server and the Authorization header; safe to share between threads."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.host = endpoint.server.rstrip("/")
        # The proxy every request goes through (rblnctl.kube.proxies: the kubeconfig's proxy-url, else the
        # environment's HTTPS_PROXY/HTTP_PROXY/NO_PROXY); None: direct.
        self.proxy = proxy_for(self.host, endpoint.proxy)
        self.pool = _pool(endpoint, self.proxy)
        self._token_file: tuple[float, str] | None = None

    def authorization(self) -> str | None:
        """The Authorization header value (None: anonymous); may run a credential plugin."""
        ep = self.endpoint
        if ep.authorization is not None:
            value = ep.authorization()
            if value:
                return value
        if ep.token:
            return f"Bearer {ep.token}"
        if ep.token_file:
            now = time.monotonic()
            if self._token_file is None or now - self._token_file[0] > TOKEN_FILE_REREAD_S:
                try:
                    self._token_file = (now, Path(ep.token_file).read_text().strip())
                except OSError as e:
                    raise ConfigError(f"cannot read the token file {ep.token_file}: {e.strerror or e}") from e
            return f"Bearer {self._token_file[1]}"
        if ep.username is not None:
            pair = f"{ep.username}:{ep.password or ''}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        return None

    def peer_certificate(self, timeout_s: float) -> bytes | None:
        """The certificate the server presents (DER), read over a connection made only for that: to the same address
        through the same proxy, verification off, no client certificate, no HTTP request (rblnctl.kube.tls: the
        error path of a refused certificate). None when it cannot be read."""
        if not self.host.startswith("https"):
            return None
        plain = Endpoint(server=self.host, verify=False, tls_server_name=self.endpoint.tls_server_name)
        manager = _pool(plain, self.proxy)
        conn = None
        try:
            pool = manager.connection_from_url(self.host)
            conn = pool._new_conn()  # urllib3's own steps of a fresh connection (HTTPSConnectionPool.urlopen)
            conn.timeout = timeout_s
            if getattr(pool, "proxy", None) is not None and self.proxy is not None and self.proxy.scheme != "socks5":
                pool._prepare_proxy(conn)  # the CONNECT tunnel, then TLS
            else:
                conn.connect()
            der = conn.sock.getpeercert(binary_form=True) if conn.sock is not None else None
            return der or None
        except (OSError, urllib3.exceptions.HTTPError) as e:
            log.debug("cannot read the server's certificate: %s", e)
            return None
        finally:
            if conn is not None:
                conn.close()
            manager.clear()

    def request(self, method: str, url: str, *, headers: Any, body: bytes | None, timeout: Any) -> Any:
        """Send one request; the urllib3 response, its body unread. No retries, no redirects: the caller decides."""
        return self.pool.request(method, url, body=body, headers=headers, timeout=timeout, retries=False,
                                 redirect=False, preload_content=False)


def _pool(ep: Endpoint, proxy: Proxy | None) -> Any:
    kw: dict[str, Any] = {"maxsize": CONNECTION_POOL_SIZE, "block": False}
    if ep.server.startswith("https"):
        kw["cert_reqs"] = "CERT_REQUIRED" if ep.verify else "CERT_NONE"
        if not ep.verify:
            kw["assert_hostname"] = False
        elif ep.ca_file:
            kw["ca_certs"] = ep.ca_file
        elif ep.ca_data:
            kw["ca_cert_data"] = ep.ca_data
        if ep.cert_file:
            kw["cert_file"] = ep.cert_file
            kw["key_file"] = ep.key_file
        if ep.tls_server_name:
            kw["server_hostname"] = ep.tls_server_name
    if proxy is not None:
        # urllib3 is given the proxy's URL without its credentials, so no error it raises can show them; they go
        # as headers (http, https) or as the SOCKS5 user/password.
        if proxy.scheme == "socks5":
            return _socks_pool(proxy, kw)
        auth = proxy.basic_auth()
        return urllib3.ProxyManager(proxy.display, proxy_headers={"Proxy-Authorization": auth} if auth else None,
                                    **kw)
    return urllib3.PoolManager(**kw)


def _socks_pool(proxy: Proxy, kw: dict[str, Any]) -> Any:
    """A SOCKS5 pool. `socks5h`: the proxy resolves the server's name, as Go's SOCKS5 dialer sends it
    (golang/net internal/socks/client.go connect: AddrTypeFQDN for a host that is not an IP)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # urllib3 warns before it raises ImportError: one line is enough
            from urllib3.contrib.socks import SOCKSProxyManager
    except ImportError:
        raise ConfigError(f"{proxy.source} is a socks5 proxy ({proxy.display}), which needs PySocks: "
                          f"{PYSOCKS_HINT}") from None
    url = "socks5h" + proxy.display[len("socks5"):]
    return SOCKSProxyManager(url, username=proxy.username, password=proxy.password, **kw)


# -- finding and reading kubeconfigs -------------------------------------------------------------------


def resolve_kubeconfig(explicit: str | None) -> str | None:
    """Return the kubeconfig path(s) kubectl would use: flag, $KUBECONFIG, ~/.kube/config; None for in-cluster."""
    if explicit:
        if not Path(explicit).expanduser().is_file():
            raise ConfigError(f"kubeconfig {explicit} does not exist")
        return str(Path(explicit).expanduser())
    env = os.environ.get("KUBECONFIG")
    if env:
        paths = [p for p in env.split(os.pathsep) if p]
        existing = [p for p in paths if Path(p).expanduser().is_file()]
        if not existing:
            raise ConfigError(f"KUBECONFIG names no existing file: {env}")
        return os.pathsep.join(existing)
    default = DEFAULT_KUBECONFIG.expanduser()
    return str(default) if default.is_file() else None


@dataclass
class Kubeconfig:
    """The merged kubeconfig: named entries (first wins), each with the directory of the file it came from."""

    source: str
    clusters: dict[str, tuple[dict, Path]]
    users: dict[str, tuple[dict, Path]]
    contexts: dict[str, tuple[dict, Path]]
    current_context: str | None


def read_kubeconfig(source: str) -> Kubeconfig:
    """Read and merge the file(s) of `source` (os.pathsep-separated); ConfigError naming what is wrong."""
    merged: dict[str, dict[str, tuple[dict, Path]]] = {s: {} for s in _SECTIONS}
    current: str | None = None
    for name in source.split(os.pathsep):
        path = Path(name).expanduser()
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            raise ConfigError(f"invalid kubeconfig {source}: not valid YAML{where}") from e
        except (OSError, ValueError) as e:
            raise ConfigError(f"invalid kubeconfig {source}: {_one_line(e)}") from e
        if raw is None:
            continue  # an empty file sets nothing (kubectl reads it as an empty config)
        if not isinstance(raw, dict):
            raise ConfigError(f"invalid kubeconfig {source}: not a kubeconfig (expected a mapping with contexts)")
        for section in _SECTIONS:
            entries = raw.get(section) or []
            if not isinstance(entries, list):
                raise ConfigError(f"invalid kubeconfig {source}: {section} is not a list")
            field = section[:-1]  # cluster, context, user
            for entry in entries:
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    raise ConfigError(f"invalid kubeconfig {source}: an entry of {section} has no name")
                body = entry.get(field) or {}
                if not isinstance(body, dict):
                    raise ConfigError(f"invalid kubeconfig {source}: {field} {entry['name']!r} is not a mapping")
                merged[section].setdefault(entry["name"], (body, path.parent))
        if not current and raw.get("current-context"):
            current = str(raw["current-context"])
    return Kubeconfig(source=source, clusters=merged["clusters"], users=merged["users"],
                      contexts=merged["contexts"], current_context=current)


def has_contexts(source: str) -> bool:
    """Whether any of the files defines a context (an unreadable one counts: loading it says what is wrong)."""
    for path in source.split(os.pathsep):
        try:
            raw = yaml.safe_load(Path(path).expanduser().read_text())
        except (OSError, yaml.YAMLError):
            return True
        if isinstance(raw, dict) and raw.get("contexts"):
            return True
    return False


def choose_context(kc: Kubeconfig, context: str | None) -> str:
    """The context to use: `context` (checked), else the current-context; ConfigError when neither works."""
    if not kc.contexts:
        raise ConfigError(f"invalid kubeconfig {kc.source}: it defines no contexts")
    if context is not None:
        if context not in kc.contexts:
            known = ", ".join(kc.contexts) or "none"
            raise ConfigError(f'context "{context}" not found in kubeconfig {kc.source} (contexts: {known})')
        return context
    if not kc.current_context:
        raise ConfigError(f"kubeconfig {kc.source} has no current-context; pass --context")
    if kc.current_context not in kc.contexts:
        raise ConfigError(f"invalid kubeconfig {kc.source}: current-context {kc.current_context!r} is not defined")
    return kc.current_context


def context_namespace(kc: Kubeconfig, context: str) -> str | None:
    """The namespace `context` names (None: it names none, so kubectl uses `default`).

    kubectl's order is --namespace, then the context's namespace, then `default`
    (kubernetes/client-go tools/clientcmd/client_config.go, DirectClientConfig.Namespace).
    """
    body, _ = kc.contexts[context]
    value = body.get("namespace")
    return str(value).strip() or None if value else None


def _named(kc: Kubeconfig, section: str, name: str, *, flag: bool) -> tuple[dict, Path]:
    entry = getattr(kc, section).get(name)
    if entry is None:
        kind = section[:-1]
        if flag:
            raise ConfigError(f"kubeconfig {kc.source} has no {kind} named {name!r} (--{kind})")
        raise ConfigError(f"invalid kubeconfig {kc.source}: {kind} {name!r} is not defined")
    return entry


# -- kubeconfig -> endpoint ---------------------------------------------------------------------------


def endpoint_from_kubeconfig(kc: Kubeconfig, context: str, *, cluster: str | None = None,
                             user: str | None = None) -> Endpoint:
    """The endpoint of `context` (its cluster and user, or the ones --cluster / --user name instead).

    A user with a credential plugin is loaded by the kubernetes package (see the module docstring).
    """
    ctx, _ = kc.contexts[context]
    cluster_body, cluster_dir = _named(kc, "clusters", cluster or str(ctx.get("cluster") or ""), flag=bool(cluster))
    user_name = user or ctx.get("user")
    user_body, user_dir = _named(kc, "users", str(user_name), flag=bool(user)) if user_name else ({}, Path("."))
    if user_body.get("exec") or user_body.get("auth-provider"):
        return _client_endpoint(kc.source, context, cluster=cluster, user=user)
    ep = Endpoint(server=str(cluster_body.get("server") or "").rstrip("/"),
                  verify=not _true(cluster_body.get("insecure-skip-tls-verify")),
                  tls_server_name=cluster_body.get("tls-server-name") or None,
                  proxy=cluster_body.get("proxy-url") or None)
    ep.ca_file = _path(cluster_body.get("certificate-authority"), cluster_dir)
    if not ep.ca_file and cluster_body.get("certificate-authority-data"):
        ep.ca_data = _decoded(kc.source, "certificate-authority-data", cluster_body["certificate-authority-data"])
    ep.cert_file = _path(user_body.get("client-certificate"), user_dir) or _data_file(
        kc.source, "client-certificate-data", user_body.get("client-certificate-data"))
    ep.key_file = _path(user_body.get("client-key"), user_dir) or _data_file(
        kc.source, "client-key-data", user_body.get("client-key-data"))
    if bool(ep.cert_file) != bool(ep.key_file):
        raise ConfigError(f"invalid kubeconfig {kc.source}: user {user_name!r} has a client certificate without its "
                          "key, or a key without its certificate")
    ep.token = user_body.get("token") or None
    ep.token_file = None if ep.token else _path(user_body.get("tokenFile"), user_dir)
    if user_body.get("username") is not None:
        ep.username, ep.password = str(user_body["username"]), str(user_body.get("password") or "")
    return ep


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _path(value: Any, base: Path) -> str | None:
    """A file the kubeconfig names, relative to the kubeconfig's own directory (as kubectl resolves it)."""
    if not value:
        return None
    p = Path(str(value)).expanduser()
    return str(p if p.is_absolute() else base / p)


def _decoded(source: str, key: str, value: Any) -> str:
    try:
        return base64.b64decode(str(value), validate=False).decode()
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"invalid kubeconfig {source}: {key} is not base64-encoded PEM") from e


def _data_file(source: str, key: str, value: Any) -> str | None:
    """Inline certificate or key data, written to a private temporary file (TLS libraries read files)."""
    if not value:
        return None
    try:
        data = base64.b64decode(str(value), validate=False)
    except ValueError as e:
        raise ConfigError(f"invalid kubeconfig {source}: {key} is not base64-encoded") from e
    fd, name = tempfile.mkstemp(prefix="rblnctl-", suffix=".pem")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    atexit.register(_unlink, name)
    return name


def _unlink(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def apply_flags(ep: Endpoint, *, server: str | None, token: str | None, certificate_authority: str | None,
                insecure_skip_tls_verify: bool) -> None:
    """kubectl's connection flags over whatever the kubeconfig said."""
    if server:
        ep.server = server.rstrip("/")
    if token:
        ep.token, ep.token_file, ep.username, ep.password, ep.authorization = token, None, None, None, None
    if certificate_authority:
        ca = Path(certificate_authority).expanduser()
        if not ca.is_file():
            raise ConfigError(f"--certificate-authority {certificate_authority}: no such file")
        ep.ca_file, ep.ca_data = str(ca), None
    if insecure_skip_tls_verify:
        if certificate_authority:
            raise ConfigError("--insecure-skip-tls-verify and --certificate-authority cannot be combined "
                              "(as in kubectl): pick one")
        ep.verify, ep.ca_file, ep.ca_data = False, None, None


# -- credential plugins and in-cluster: the kubernetes package's loader -----------------------------------


def _client_endpoint(source: str, context: str, *, cluster: str | None, user: str | None) -> Endpoint:
    """Load `context` with the kubernetes package (credential plugins): it runs and refreshes them."""
    from kubernetes import client as k8s
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

    cfg = k8s.Configuration()
    try:
        with client_errors() as plugin_errors:
            merged = KubeConfigMerger(source).config
            loader = KubeConfigLoader(config_dict=merged, active_context=context)
            # --cluster and --user swap one half of the context, as kubectl's overrides do. The loader
            # keeps the context's halves in these two attributes (kubernetes 37, config/kube_config.py
            # set_active_context); pinned with the client's major version in pyproject.toml.
            if cluster:
                loader._cluster = _merged_entry(merged, "clusters", cluster)["cluster"]
            if user:
                loader._user = _merged_entry(merged, "users", user)["user"]
            loader.load_and_set(cfg)
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"invalid kubeconfig {source}: {_one_line(e)}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid kubeconfig {source}: not valid YAML") from e
    if plugin_errors and not cfg.api_key and not cfg.cert_file:
        # kubernetes logs a failed exec plugin and goes on without credentials; kubectl stops.
        raise AuthError(
            f"cannot get credentials for context {context} from {source}: {_one_line('; '.join(plugin_errors))}",
            reason="Unauthorized",
        )
    return endpoint_from_client(cfg)


def _merged_entry(merged: Any, section: str, name: str) -> Any:
    for entry in merged.safe_get(section) or []:
        if entry.safe_get("name") == name:
            return entry
    raise KeyError(name)  # read_kubeconfig() has already refused a name that is not there


def in_cluster_endpoint() -> Endpoint:
    """The pod's service account (the kubernetes package's loader re-reads its rotating token)."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    cfg = k8s.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=cfg)
    except ConfigException as e:
        raise ConfigError(f"in-cluster configuration is unusable: {e}") from e
    return endpoint_from_client(cfg)


def endpoint_from_client(cfg: Any) -> Endpoint:
    """An Endpoint from a kubernetes.client.Configuration that the kubernetes package's loader filled."""
    return Endpoint(server=str(cfg.host or "").rstrip("/"), verify=bool(cfg.verify_ssl), ca_file=cfg.ssl_ca_cert,
                    cert_file=cfg.cert_file, key_file=cfg.key_file, tls_server_name=cfg.tls_server_name,
                    proxy=cfg.proxy or None, username=cfg.username or None, password=cfg.password or None,
                    authorization=lambda: cfg.get_api_key_with_prefix("BearerToken", alias="authorization"))


@contextmanager
def client_errors() -> Iterator[list[str]]:
    """Collect what the kubernetes package logs with logging.error() (a failed exec credential plugin).

    It logs on the root logger, which with no handler would print the record on stderr. A filter on
    the root logger (not a handler: nothing is attached for the rest of the process) takes those
    records out and puts their messages into rblnctl's one-line errors; other records pass untouched.
    """
    messages: list[str] = []

    def _collect(record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and "kubernetes" in record.pathname:
            messages.append(record.getMessage())
            log.debug("kubernetes client: %s", record.getMessage())
            return False
        return True

    root = logging.getLogger()
    root.addFilter(_collect)
    try:
        yield messages
    finally:
        root.removeFilter(_collect)


def _one_line(e: object) -> str:
    return one_line(e)[:300]
