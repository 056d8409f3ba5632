"""Kubernetes access shared by every cluster command: connect, raw JSON requests, typed errors, paging.

rblnctl talks to the API server through the kubernetes client's own configuration loading, auth
and urllib3 transport, but reads and writes plain JSON dicts instead of generated models: one code
path for built-in and custom resources, explicit patch content types (kubernetes-client/python#2119
sends JSON-patch lists to CustomObjectsApi as merge patches), and no model (de)serialisation cost on
large lists. Only cluster code paths import this module (the CLI imports it lazily), so `--help`,
`vfio` and `preflight --local` never load the kubernetes package.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
import yaml

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import (
    AuthError,
    ClusterError,
    ClusterTimeout,
    ClusterUnreachable,
    ConfigError,
    Conflict,
    Forbidden,
    InvalidInput,
    MalformedReply,
    NotAnApiServer,
    NotFound,
    OutcomeUnknown,
    WriteTimeout,
)

log = logging.getLogger(__name__)
request_log = logging.getLogger(__name__ + ".requests")  # -v=6: one line per request
wire_log = logging.getLogger(__name__ + ".bodies")  # -v=8: request and response bodies

JSON = "application/json"
PATCH_TYPES = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
DEFAULT_PAGE_SIZE = 500
DEFAULT_KUBECONFIG = Path("~/.kube/config")
SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
# Reads are retried when the server is briefly unable to answer, as client-go does (429 with
# Retry-After, 5xx, a dropped connection): at most READ_RETRIES more tries, waiting the server's
# Retry-After or 0.5 s, 1 s, 2 s, never more than MAX_RETRY_WAIT_S. A timeout is never retried
# (that would double --request-timeout) and a write is never re-sent (see OutcomeUnknown).
READ_RETRIES = 3
RETRY_BASE_S = 0.5
MAX_RETRY_WAIT_S = 10.0
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# RFC 1123 subdomain: what Kubernetes accepts as a node (and most objects') name
# (k8s.io/apimachinery pkg/util/validation IsDNS1123Subdomain).
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def validate_name(name: str, *, kind: str = "node") -> str:
    """Return `name` if Kubernetes would accept it as a `kind` name (RFC 1123 subdomain); else InvalidInput.

    Checked before any request: `./n1`, `x/../n1` or `n1?` would address an object over HTTP while
    matching nothing in field and label selectors.
    """
    if not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        raise InvalidInput(f"invalid {kind} name {name!r}: a {kind} name is lower-case letters, digits, '-' and '.', "
                           "starting and ending with a letter or digit (at most 253 characters)")
    return name


def is_transient(err: BaseException) -> bool:
    """A failure worth trying again later: throttled, a 5xx, or no answer (but never bad credentials)."""
    if isinstance(err, (AuthError, MalformedReply, NotAnApiServer)):
        return False
    if isinstance(err, ClusterUnreachable):
        return True
    return isinstance(err, ClusterError) and err.status in TRANSIENT_STATUSES


def _retryable(err: BaseException) -> bool:
    """What Kube.request() itself tries again: a throttled or 5xx answer, or a connection that broke mid-request.

    A refused connection, a TLS or DNS failure fail fast (the next try fails the same way), and a
    timeout is never retried (it would double --request-timeout); the long waits of set-mode retry
    those themselves (is_transient) within their own deadline.
    """
    if isinstance(err, ClusterTimeout):
        return False
    if isinstance(err, ClusterUnreachable):
        return bool(getattr(err, "dropped", False))
    return isinstance(err, ClusterError) and not isinstance(err, (AuthError, MalformedReply)) and \
        err.status in TRANSIENT_STATUSES


def outcome_unknown(err: BaseException) -> bool:
    """Whether a write that failed with `err` may still have been applied (lost reply, or a 504 gateway timeout)."""
    return isinstance(err, OutcomeUnknown) or (isinstance(err, ClusterError) and err.status == 504)


@dataclass(frozen=True)
class Resource:
    """The REST coordinates of one resource type."""

    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    def path(self, name: str | None = None, *, namespace: str | None = None, sub: str | None = None) -> str:
        """Return the URL path of the collection (no name) or of one object (and its subresource).

        Names are path segments: one that is empty, `.`/`..` or holds `/`, `?`, `#` or `%` is refused
        (InvalidInput) rather than allowed to address something else.
        """
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{_segment(namespace)}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{_segment(name)}"
            if sub:
                base += f"/{sub}"
        return base

    @property
    def qualified(self) -> str:
        """`plural.group` as the API server names it in messages (`nodes`, `kubevirts.kubevirt.io`)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _segment(name: str) -> str:
    if not name or name in (".", "..") or any(c in name for c in "/?#%") or name != name.strip():
        raise InvalidInput(f"invalid object name {name!r}")
    return quote(name, safe="")


NODES = Resource("", "v1", "nodes", False, "Node")
PODS = Resource("", "v1", "pods", True, "Pod")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
DAEMONSETS = Resource("apps", "v1", "daemonsets", True, "DaemonSet")
DEPLOYMENTS = Resource("apps", "v1", "deployments", True, "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", True, "ReplicaSet")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", True, "PodDisruptionBudget")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition")
KUBEVIRTS = Resource(C.KUBEVIRT_GROUP, C.KUBEVIRT_VERSION, C.KUBEVIRT_PLURAL, True, "KubeVirt")
VMS = Resource(C.KUBEVIRT_GROUP, C.KUBEVIRT_VERSION, C.VM_PLURAL, True, "VirtualMachine")
VMIS = Resource(C.KUBEVIRT_GROUP, C.KUBEVIRT_VERSION, C.VMI_PLURAL, True, "VirtualMachineInstance")
CLUSTER_POLICIES = Resource(
    C.CLUSTER_POLICY_GROUP, C.CLUSTER_POLICY_VERSION, C.CLUSTER_POLICY_PLURAL, False, "RBLNClusterPolicy"
)
NODE_FEATURES = Resource(C.NFD_GROUP, C.NFD_VERSION, C.NFD_NODEFEATURE_PLURAL, True, "NodeFeature")
DEVICE_CLASSES = Resource(C.DRA_GROUP, C.DRA_VERSION, "deviceclasses", False, "DeviceClass")
RESOURCE_SLICES = Resource(C.DRA_GROUP, C.DRA_VERSION, "resourceslices", False, "ResourceSlice")
RESOURCE_CLAIMS = Resource(C.DRA_GROUP, C.DRA_VERSION, "resourceclaims", True, "ResourceClaim")
RESOURCE_CLAIM_TEMPLATES = Resource(C.DRA_GROUP, C.DRA_VERSION, "resourceclaimtemplates", True,
                                    "ResourceClaimTemplate")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
SELF_SUBJECT_RULES_REVIEWS = Resource("authorization.k8s.io", "v1", "selfsubjectrulesreviews", False,
                                      "SelfSubjectRulesReview")
EVENTS = Resource("", "v1", "events", True, "Event")
# virt-api's start/stop/restart subresources of a VirtualMachine (PUT .../virtualmachines/NAME/{start,stop,restart}).
VM_SUBRESOURCES = Resource(C.KUBEVIRT_SUBRESOURCES_GROUP, C.KUBEVIRT_VERSION, C.VM_PLURAL, True, "VirtualMachine")


@dataclass(frozen=True, kw_only=True)
class KubeOptions:
    """How to reach the cluster; None means kubectl's default resolution."""

    kubeconfig: str | None = None  # else $KUBECONFIG, else ~/.kube/config, else in-cluster
    context: str | None = None  # else the kubeconfig's current-context
    # kubectl's connection flags, for break-glass use. `server` replaces the context's server URL (with
    # no usable kubeconfig it is a plain URL without credentials: tests, `kubectl proxy`).
    server: str | None = None
    cluster: str | None = None  # a kubeconfig cluster entry instead of the context's
    user: str | None = None  # a kubeconfig user entry instead of the context's
    token: str | None = None  # a bearer token instead of the user's credentials
    certificate_authority: str | None = None  # a CA bundle file for the server's certificate
    insecure_skip_tls_verify: bool = False
    impersonate_user: str | None = None  # --as
    impersonate_groups: tuple[str, ...] = ()  # --as-group (repeatable)
    request_timeout_s: float | None = 30.0  # None: wait as long as it takes (kubectl's --request-timeout=0)


@dataclass
class Kube:
    """One connection to one cluster; every request returns parsed JSON or raises a typed RblnError."""

    api_client: Any  # kubernetes.client.ApiClient
    server: str
    context: str | None = None
    request_timeout_s: float | None = 30.0  # None: wait as long as it takes (kubectl's --request-timeout=0)
    proxy: str | None = None  # the kubeconfig's proxy-url, named in "unreachable" messages
    impersonate_user: str | None = None  # sent as Impersonate-User (kubectl --as)
    impersonate_groups: tuple[str, ...] = ()  # one Impersonate-Group header each (kubectl --as-group)
    clock: Clock = SYSTEM_CLOCK  # waits between read retries
    read_retries: int = READ_RETRIES
    request_count: int = field(default=0, init=False)

    # -- core -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        text: bool = False,
    ) -> Any:
        """Send one request; return the decoded JSON body (None when empty), or with `text` the body as text.

        Raises NotFound (404), Conflict (409), AuthError (401), Forbidden (403), ClusterError
        (other non-2xx), MalformedReply (a 2xx that is not JSON), NotAnApiServer (an HTML page),
        ClusterUnreachable / ClusterTimeout when no answer comes back, and for a write whose reply
        was lost OutcomeUnknown (WriteTimeout after --request-timeout). Reads that fail
        transiently are tried again (READ_RETRIES); writes are sent exactly once.
        """
        retries = self.read_retries if method in ("GET", "HEAD") else 0
        attempt = 0
        while True:
            try:
                return self._request_once(method, path, query=query, body=body, content_type=content_type,
                                          text=text)
            except (ClusterError, ClusterUnreachable) as err:
                if attempt >= retries or not _retryable(err):
                    raise
                attempt += 1
                wait = min(MAX_RETRY_WAIT_S, getattr(err, "retry_after_s", None) or RETRY_BASE_S * 2 ** (attempt - 1))
                log.debug("%s %s failed (%s); try %d of %d in %.1fs", method, path, err, attempt + 1, retries + 1,
                          wait)
                self.clock.sleep(wait)

    def _request_once(self, method: str, path: str, *, query: dict[str, Any] | None, body: Any,
                      content_type: str | None, text: bool = False) -> Any:
        from kubernetes.client.exceptions import ApiException

        query_items = [(k, v) for k, v in (query or {}).items() if v is not None and v != ""]
        # Errors come back as JSON Status objects either way; a text body (a pod log) is text/plain.
        headers = {"Accept": f"text/plain, {JSON}" if text else JSON}
        if body is not None:
            headers["Content-Type"] = content_type or JSON
        resource_path = path + ("?" + urlencode(query_items) if query_items else "")
        # Building the auth header may run an exec credential plugin again (an expired token).
        with _client_errors() as plugin_errors:
            _, url, headers, _, _ = self.api_client.param_serialize(
                method=method, resource_path=resource_path, header_params=headers, auth_settings=["BearerToken"]
            )
        if self.impersonate_user or self.impersonate_groups:
            headers = _impersonation(headers, self.impersonate_user, self.impersonate_groups)
        if wire_log.isEnabledFor(logging.DEBUG) and body is not None:
            wire_log.debug("request body: %s", _loggable(body))
        started = time.monotonic()
        self.request_count += 1
        where = f"the API server at {self.server}" + (f" (through proxy {self.proxy})" if self.proxy else "")
        write = method not in ("GET", "HEAD")
        try:
            resp = self.api_client.rest_client.request(
                method,
                url,
                headers=headers,
                body=body,
                _request_timeout=self.request_timeout_s,
            )
            data = resp.read()
        except urllib3.exceptions.HTTPError as e:
            if _is_timeout(e):
                msg = f"{where} did not answer {method} {path} within {self.request_timeout_s or 0:g}s"
                raise (WriteTimeout(msg + "; it may have been applied") if write else ClusterTimeout(msg)) from e
            if write and _reached_server(e):
                raise OutcomeUnknown(f"the connection to {where} broke during {method} {path}: "
                                     f"{_root_cause(e)}; it may have been applied") from e
            unreachable = ClusterUnreachable(f"cannot reach {where}: {_root_cause(e)}")
            unreachable.dropped = _reached_server(e)  # type: ignore[attr-defined]
            raise unreachable from e
        except OSError as e:
            raise ClusterUnreachable(f"cannot reach {where}: {_root_cause(e)}") from e
        except ApiException as e:  # the client wraps TLS failures as status 0 ("SSLError\n<detail>")
            raise ClusterUnreachable(f"cannot reach {where}: {_root_cause(e, text=e.reason or '')}") from e
        request_log.debug("%s %s -> %s (%.0f ms)", method, resource_path, resp.status,
                          (time.monotonic() - started) * 1e3)
        if wire_log.isEnabledFor(logging.DEBUG):
            wire_log.debug("response body: %s", _loggable(data))
        ctype = str(resp.headers.get("Content-Type") or "") if getattr(resp, "headers", None) is not None else ""
        if 200 <= resp.status < 300:
            if text:
                return (data or b"").decode("utf-8", "replace")
            return _decode_ok(data, ctype, method, path, self.server)
        decoded = _decode(data)
        err = _status_error(method, path, resp.status, decoded, self.server)
        if resp.status == 401 and plugin_errors:
            err = AuthError(f"{err} (credential plugin: {_one_line('; '.join(plugin_errors))})",
                            status=401, reason="Unauthorized")
        retry_after = _retry_after(resp, decoded)
        if retry_after is not None:
            err.retry_after_s = retry_after  # type: ignore[attr-defined]
        raise err

    def get(self, res: Resource, name: str, *, namespace: str | None = None) -> dict:
        """GET one object (MalformedReply when the reply is not one)."""
        path = res.path(name, namespace=namespace)
        return _object(self.request("GET", path), f"GET {path}")

    def get_optional(self, res: Resource, name: str, *, namespace: str | None = None) -> dict | None:
        """GET one object; None when it does not exist."""
        try:
            return self.get(res, name, namespace=namespace)
        except NotFound:
            return None

    def iter_list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> Iterator[dict]:
        """Yield every object of a collection, following `continue` tokens page by page."""
        token: str | None = None
        while True:
            page = self.request(
                "GET",
                res.path(namespace=namespace),
                query={
                    "labelSelector": label_selector,
                    "fieldSelector": field_selector,
                    "limit": page_size,
                    "continue": token,
                },
            )
            if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
                raise MalformedReply(f"GET {res.path(namespace=namespace)} did not return a list "
                                     f"(got {type(page).__name__})")
            for item in page.get("items") or []:
                yield _object(item, f"an item of GET {res.path(namespace=namespace)}")
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def list(self, res: Resource, **kwargs: Any) -> list[dict]:
        """Return every object of a collection (paged under the hood)."""
        return list(self.iter_list(res, **kwargs))

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        *,
        patch_type: str,
        namespace: str | None = None,
        sub: str | None = None,
        dry_run: bool = False,
    ) -> dict:
        """PATCH one object; patch_type is `json`, `merge` or `strategic`; dry_run sends dryRun=All."""
        return self.request(
            "PATCH",
            res.path(name, namespace=namespace, sub=sub),
            query={"dryRun": "All" if dry_run else None},
            body=patch,
            content_type=PATCH_TYPES[patch_type],
        )

    def create(self, res: Resource, obj: dict, *, namespace: str | None = None, sub_of: str | None = None,
               sub: str | None = None, dry_run: bool = False) -> Any:
        """POST an object to a collection, or to a subresource (`sub_of` name + `sub`, e.g. eviction)."""
        path = res.path(sub_of, namespace=namespace, sub=sub) if sub_of else res.path(namespace=namespace)
        return self.request("POST", path, query={"dryRun": "All" if dry_run else None}, body=obj)

    def delete(self, res: Resource, name: str, *, namespace: str | None = None, body: dict | None = None,
               dry_run: bool = False) -> Any:
        """DELETE one object."""
        return self.request(
            "DELETE", res.path(name, namespace=namespace), query={"dryRun": "All" if dry_run else None}, body=body
        )

    def pod_log(self, name: str, *, namespace: str, container: str | None = None) -> str:
        """The log of a pod's container (`kubectl logs`), as text."""
        return self.request("GET", PODS.path(name, namespace=namespace, sub="log"), query={"container": container},
                            text=True)

    def server_version(self) -> dict:
        """Return the server's /version document."""
        doc = self.request("GET", "/version")
        if not isinstance(doc, dict):
            raise MalformedReply(f"GET /version did not return a version document (got {type(doc).__name__})")
        return doc


def connect(opts: KubeOptions) -> Kube:
    """Build a Kube from kubeconfig, context or in-cluster service account, then kubectl's connection flags.

    Raises ConfigError when no configuration fits, AuthError when a credential plugin fails.
    """
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    cfg = k8s.Configuration()
    context = None
    source = _kubeconfig_source(opts)
    if source is not None:
        context = _check_context(source, opts.context)
        _load_kubeconfig(cfg, source, context, opts)
    elif not opts.server:
        if not os.environ.get("KUBERNETES_SERVICE_HOST") or not SA_TOKEN.exists():
            raise ConfigError(
                "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, or run in a pod"
            )
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except ConfigException as e:
            raise ConfigError(f"in-cluster configuration is unusable: {e}") from e
    _apply_flags(cfg, opts)
    if not cfg.host or cfg.host.rstrip("/") in ("http:", "https:"):
        where = f"context {context}" if context else "the current context"
        raise ConfigError(f"kubeconfig {opts.kubeconfig or resolve_kubeconfig(None)}: the cluster of {where} has no "
                          "server URL")
    # No retries in urllib3: Kube.request() retries reads itself (429, 5xx, dropped connections) and
    # never retries a timeout (it would double --request-timeout) or a write (it could apply twice).
    cfg.retries = False
    api_client = k8s.ApiClient(cfg)
    return Kube(api_client=api_client, server=cfg.host, context=context, request_timeout_s=opts.request_timeout_s,
                proxy=cfg.proxy or None, impersonate_user=opts.impersonate_user,
                impersonate_groups=tuple(opts.impersonate_groups))


def _kubeconfig_source(opts: KubeOptions) -> str | None:
    """The kubeconfig to load; None for in-cluster, or for --server with no kubeconfig that names a context."""
    if not opts.server or opts.kubeconfig or opts.context or opts.user or opts.cluster:
        return resolve_kubeconfig(opts.kubeconfig)
    # --server alone: kubectl keeps the current context's credentials when there is one; no
    # kubeconfig, or one without contexts, leaves a plain URL.
    try:
        source = resolve_kubeconfig(None)
    except ConfigError:
        return None
    return source if source is not None and _has_contexts(source) else None


def _has_contexts(source: str) -> bool:
    for path in source.split(os.pathsep):
        try:
            raw = yaml.safe_load(Path(path).expanduser().read_text())
        except (OSError, yaml.YAMLError):
            return True  # let the strict load report what is wrong with it
        if isinstance(raw, dict) and raw.get("contexts"):
            return True
    return False


def _load_kubeconfig(cfg: Any, source: str, context: str | None, opts: KubeOptions) -> None:
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

    try:
        with _client_errors() as plugin_errors:
            merged = KubeConfigMerger(source).config
            loader = KubeConfigLoader(config_dict=merged, active_context=context)
            # --cluster and --user swap one half of the context, as kubectl's overrides do. The loader
            # keeps the context's halves in these two attributes (kubernetes 37, config/kube_config.py
            # set_active_context); pinned with the client's major version in pyproject.toml.
            if opts.cluster:
                loader._cluster = _named(merged, "clusters", opts.cluster, source)["cluster"]
            if opts.user:
                loader._user = _named(merged, "users", opts.user, source)["user"]
            loader.load_and_set(cfg)
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"invalid kubeconfig {source}: {_one_line(e)}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid kubeconfig {source}: not valid YAML") from e
    if plugin_errors and not cfg.api_key and not cfg.cert_file and not opts.token:
        # kubernetes logs a failed exec plugin and goes on without credentials; kubectl stops.
        which = f"context {context}" if context else "the current context"
        raise AuthError(
            f"cannot get credentials for {which} from {source}: {_one_line('; '.join(plugin_errors))}",
            reason="Unauthorized",
        )


def _named(merged: Any, section: str, name: str, source: str) -> Any:
    entries = merged.safe_get(section) if merged is not None else None
    for entry in entries or []:
        if entry.safe_get("name") == name:
            return entry
    kind = section.rstrip("s")
    raise ConfigError(f"kubeconfig {source} has no {kind} named {name!r} (--{kind})")


def _apply_flags(cfg: Any, opts: KubeOptions) -> None:
    """kubectl's connection flags over whatever the kubeconfig said."""
    if opts.server:
        cfg.host = opts.server.rstrip("/")
    if opts.token:
        cfg.api_key = {"authorization": f"Bearer {opts.token}"}
        cfg.api_key_prefix = {}
    if opts.certificate_authority:
        ca = Path(opts.certificate_authority).expanduser()
        if not ca.is_file():
            raise ConfigError(f"--certificate-authority {opts.certificate_authority}: no such file")
        cfg.ssl_ca_cert = str(ca)
    if opts.insecure_skip_tls_verify:
        if opts.certificate_authority:
            raise ConfigError("--insecure-skip-tls-verify and --certificate-authority cannot be combined "
                              "(as in kubectl): pick one")
        cfg.verify_ssl = False
        cfg.ssl_ca_cert = None


def _impersonation(headers: Any, user: str | None, groups: tuple[str, ...]) -> Any:
    """Impersonate-User and one Impersonate-Group header per group (the API server reads repeated headers)."""
    if groups and not user:
        raise ConfigError("--as-group needs --as (as in kubectl)")
    out = urllib3.HTTPHeaderDict(headers)
    out["Impersonate-User"] = user
    for g in groups:
        out.add("Impersonate-Group", g)
    return out


_SECRET_KEYS = re.compile(
    r'("(?:token|password|data|stringData|client-key-data|bearerToken)"\s*:\s*)'  # the key...
    r'("(?:[^"\\]|\\.)*"|\{[^}]*\})',  # ...and its string or flat object value
    re.IGNORECASE)
BODY_LOG_LIMIT = 10240  # bytes of a body shown at -v=8, as kubectl truncates


def _loggable(body: Any) -> str:
    """A request or response body for -v=8: one line, secrets masked, truncated."""
    if isinstance(body, (bytes, bytearray)):
        text = bytes(body[: BODY_LOG_LIMIT * 2]).decode("utf-8", "replace")
    elif isinstance(body, str):
        text = body
    else:
        text = json.dumps(body, separators=(",", ":"), default=str)
    text = _SECRET_KEYS.sub(lambda m: m.group(1) + '"<masked>"', text)
    if len(text) > BODY_LOG_LIMIT:
        text = text[:BODY_LOG_LIMIT] + f"... ({len(text) - BODY_LOG_LIMIT} more characters)"
    return " ".join(text.split())


@contextmanager
def _client_errors() -> Iterator[list[str]]:
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


def _check_context(source: str, context: str | None) -> str | None:
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigMerger

    try:
        # Read the merged file(s) ourselves: the client's list_kube_config_contexts() demands a
        # current-context even when --context names one, which kubectl does not.
        merged = KubeConfigMerger(source).config
        raw = merged.value if merged is not None else None
        if not isinstance(raw, dict):
            raise TypeError("not a mapping")
        contexts = raw.get("contexts") or []
        current = raw.get("current-context")
        if not isinstance(contexts, list):
            raise TypeError("contexts is not a list")
        # The merger keeps each list entry wrapped (ConfigNode, with the file it came from) as .value.
        contexts = [getattr(c, "value", c) for c in contexts]
    except ConfigException as e:
        raise ConfigError(f"invalid kubeconfig {source}: {_one_line(e)}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ConfigError(f"invalid kubeconfig {source}: not valid YAML{where}") from e
    except (TypeError, AttributeError, KeyError) as e:
        raise ConfigError(f"invalid kubeconfig {source}: not a kubeconfig (expected a mapping with contexts)") from e
    except (OSError, ValueError) as e:
        raise ConfigError(f"invalid kubeconfig {source}: {_one_line(e)}") from e
    names = [c.get("name") for c in contexts or [] if isinstance(c, dict)]
    if not names:
        raise ConfigError(f"invalid kubeconfig {source}: it defines no contexts")
    if context is not None:
        if context not in names:
            known = ", ".join(str(n) for n in names) or "none"
            raise ConfigError(f'context "{context}" not found in kubeconfig {source} (contexts: {known})')
        return context
    if not current:
        raise ConfigError(f"kubeconfig {source} has no current-context; pass --context")
    return None


# -- error translation ------------------------------------------------------------------------

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def describe_request(method: str, path: str) -> tuple[str, str, str | None]:
    """Return (verb, resource, namespace) as RBAC sees a request path."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return method.lower(), path, None
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    if group:
        resource = f"{resource}.{group}" if "/" not in resource else resource.replace("/", f".{group}/", 1)
    if method == "GET":
        verb = "get" if len(rest) >= 2 else "list"
    else:
        verb = _VERBS.get(method, method.lower())
    return verb, resource, namespace


def _status_error(method: str, path: str, status: int, body: Any, server: str) -> ClusterError | NotFound:
    message = ""
    reason = ""
    if isinstance(body, dict):
        message = str(body.get("message") or "")
        reason = str(body.get("reason") or "")
        # A failed JSON Patch comes back as 422 "the server rejected our request due to an error in
        # our request" with the real cause ("testing value /x failed: test failed") only in details.causes.
        details = body.get("details") if isinstance(body.get("details"), dict) else {}
        causes = [str(c["message"]) for c in details.get("causes") or [] if isinstance(c, dict) and c.get("message")]
        extra = [c for c in causes if c not in message]
        if extra:
            message = f"{message}: {'; '.join(extra)}" if message else "; ".join(extra)
    verb, resource, namespace = describe_request(method, path)
    where = f'in namespace "{namespace}"' if namespace else "at cluster scope"
    if status == 401:
        return AuthError(
            f"unauthorized: the API server at {server} rejected our credentials; refresh your kubeconfig login",
            status=status,
            reason=reason or "Unauthorized",
        )
    if status == 403:
        return Forbidden(
            f"forbidden: RBAC does not allow {verb} on {resource} {where}"
            + (f" ({_one_line(message)})" if message else ""),
            status=status,
            reason=reason or "Forbidden",
        )
    if status == 404:
        if not message or message == "the server could not find the requested resource":
            # The API itself is missing (a CRD not installed, a group version not served), not an object.
            return NotFound(f"the API server does not serve {resource} ({method} {path}): is its CRD installed?")
        return NotFound(message)
    if status == 409:
        return Conflict(message or f"conflict on {resource}", status=status, reason=reason or "Conflict")
    text = _one_line(message) or (body if isinstance(body, str) else "") or "no message"
    return ClusterError(f"{method} {path} failed: {status} {reason or ''} {text}".replace("  ", " "),
                        status=status, reason=reason)


def _object(value: Any, what: str) -> dict:
    """`value` if it is a Kubernetes object (a mapping with metadata.name); else MalformedReply naming `what`."""
    meta = value.get("metadata") if isinstance(value, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise MalformedReply(f"{what} did not return a Kubernetes object (got {type(value).__name__})")
    return value


def _decode_ok(data: bytes | None, ctype: str, method: str, path: str, server: str) -> Any:
    """Decode a 2xx body: JSON, or a clear error saying what came back instead."""
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        pass
    if "json" not in ctype.lower():
        raise NotAnApiServer(f"the server at {server} answered {method} {path} with {ctype or 'no content type'}, "
                             "not the Kubernetes API: is the kubeconfig's server URL right (or a proxy in between)?")
    raise MalformedReply(f"{method} {path} returned invalid JSON ({_one_line(data[:80].decode('utf-8', 'replace'))})")


def _retry_after(resp: Any, body: Any) -> float | None:
    """The seconds a 429/503 asks the client to wait (the Retry-After header, else details.retryAfterSeconds)."""
    headers = getattr(resp, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value is None and isinstance(body, dict):
        value = (body.get("details") or {}).get("retryAfterSeconds") if isinstance(body.get("details"), dict) \
            else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


def _reached_server(e: BaseException) -> bool:
    """Whether a failed request got as far as the server (a broken connection), not refused before sending."""
    refused = (urllib3.exceptions.NewConnectionError, urllib3.exceptions.NameResolutionError,
               urllib3.exceptions.SSLError, urllib3.exceptions.ProxyError)
    for err in (e, getattr(e, "reason", None)):
        if isinstance(err, refused):
            return False
    return True


def _decode(data: bytes | None) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")[:200]


def _is_timeout(e: BaseException) -> bool:
    """A read/connect timeout, possibly wrapped by urllib3's MaxRetryError."""
    # urllib3 2.x makes NewConnectionError (refused, DNS) a ConnectTimeoutError subclass: not a timeout.
    refused = urllib3.exceptions.NewConnectionError
    for err in (e, getattr(e, "reason", None)):
        if isinstance(err, urllib3.exceptions.TimeoutError) and not isinstance(err, refused):
            return True
    return False


def _root_cause(e: BaseException, *, text: str | None = None) -> str:
    seen = e
    while True:
        nxt = getattr(seen, "reason", None) or seen.__cause__ or seen.__context__
        if not isinstance(nxt, BaseException) or nxt is seen:
            break
        seen = nxt
    if text is None:
        text = str(seen)
    for hint in ("Connection refused", "Name or service not known", "No route to host", "timed out",
                 "Connection reset", "Remote end closed connection", "certificate verify failed"):
        if hint.lower() in text.lower() or hint.lower() in str(e).lower():
            return hint.lower()
    return _one_line(text) or type(seen).__name__


def _one_line(e: object) -> str:
    text = " ".join(str(e).split())
    return text[:300]
