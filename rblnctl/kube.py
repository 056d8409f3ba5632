"""Kubernetes access shared by every cluster command: connect, raw JSON requests, typed errors, paging.

rblnctl talks to the API server over urllib3 (rblnctl.kubeconfig loads credentials as kubectl does
and builds the transport) and reads and writes plain JSON dicts instead of generated models: one
code path for built-in and custom resources, explicit patch content types (kubernetes-client/python
#2119 sends JSON-patch lists to CustomObjectsApi as merge patches), and no model (de)serialisation
cost on large lists. The kubernetes package is imported only for credential plugins and in-cluster
configuration; `--help`, `vfio` and `preflight --local` do not even import this module.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import re
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import urllib3

from rblnctl import __version__
from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock, Stop
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
    RblnError,
    WriteTimeout,
)
from rblnctl.kubeconfig import (
    Endpoint,
    Transport,
    apply_flags,
    choose_context,
    client_errors,
    endpoint_from_kubeconfig,
    has_contexts,
    in_cluster_endpoint,
    read_kubeconfig,
    resolve_kubeconfig,
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
SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
USER_AGENT = f"rblnctl/{__version__}"
# Reads are retried when the server is briefly unable to answer, as client-go does (429 with
# Retry-After, 5xx, a dropped connection): at most READ_RETRIES more tries, waiting the server's
# Retry-After or 0.5 s, 1 s, 2 s, never more than MAX_RETRY_WAIT_S. A timeout is never retried
# (that would double --request-timeout) and a write is never re-sent (see OutcomeUnknown).
READ_RETRIES = 3
RETRY_BASE_S = 0.5
MAX_RETRY_WAIT_S = 10.0
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# Watches (Kube.watch): each request asks the server to stream for at most WATCH_STREAM_S (client-go
# asks for 5 to 10 minutes) and the client gives it WATCH_READ_GRACE_S more before it calls the stream
# dead; a broken stream is reopened after WATCH_RETRY_START_S, doubling up to WATCH_RETRY_CAP_S; where
# watching is not allowed, the collection is listed every WATCH_POLL_S instead.
WATCH_STREAM_S = 300
WATCH_READ_GRACE_S = 30.0
WATCH_RETRY_START_S = 0.2
WATCH_RETRY_CAP_S = 5.0
WATCH_POLL_S = 1.0
SYNC = "SYNC"  # a WatchEvent carrying every object of the collection (after a list)
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


@dataclass(frozen=True)
class WatchEvent:
    """One change to a watched collection: ADDED, MODIFIED or DELETED `object`, or SYNC with every `objects`.

    A SYNC comes first (the initial list), after a relist (the server forgot the resourceVersion the
    watch would resume from: 410 Gone) and, where watching is not allowed, once per poll: the
    consumer replaces what it holds with `objects`. `source` is the index of the WatchSpec it came
    from (Kube.watch_many).
    """

    type: str
    object: dict | None = None
    objects: tuple[dict, ...] = ()
    source: int = 0


@dataclass(frozen=True)
class WatchSpec:
    """One collection to watch (Kube.watch_many); `missing_ok`: a collection the server does not serve is empty."""

    res: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    missing_ok: bool = False


def object_key(obj: dict) -> tuple[str, str]:
    """(namespace, name) of an object ("" for a cluster-scoped one)."""
    md = obj.get("metadata") or {}
    return str(md.get("namespace") or ""), str(md.get("name") or "")


class Mirror:
    """The objects of a watched collection, kept current by applying its WatchEvents."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.synced = False  # a SYNC has been applied: the mirror holds the whole collection

    def apply(self, ev: WatchEvent) -> None:
        """Apply one event (SYNC replaces everything)."""
        if ev.type == SYNC:
            self.objects = {object_key(o): o for o in ev.objects}
            self.synced = True
        elif ev.type == "DELETED" and ev.object is not None:
            self.objects.pop(object_key(ev.object), None)
        elif ev.type in ("ADDED", "MODIFIED") and ev.object is not None:
            self.objects[object_key(ev.object)] = ev.object

    def items(self) -> list[dict]:
        """The objects, sorted by namespace and name."""
        return [self.objects[k] for k in sorted(self.objects)]


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

    transport: Transport  # the connection pool and the credentials (rblnctl.kubeconfig)
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
        url, headers, plugin_errors, resource_path = self._prepare(method, path, query, body, content_type)
        if text:  # errors come back as JSON Status objects either way; a text body (a pod log) is text/plain
            headers["Accept"] = f"text/plain, {JSON}"
        if wire_log.isEnabledFor(logging.DEBUG) and body is not None:
            wire_log.debug("request body: %s", _loggable(body))
        started = time.monotonic()
        resp, data = self._send(method, path, url, headers, body, self.request_timeout_s)
        request_log.debug("%s %s -> %s (%.0f ms)", method, resource_path, resp.status,
                          (time.monotonic() - started) * 1e3)
        if wire_log.isEnabledFor(logging.DEBUG):
            wire_log.debug("response body: %s", _loggable(data))
        ctype = str(resp.headers.get("Content-Type") or "") if getattr(resp, "headers", None) is not None else ""
        if 200 <= resp.status < 300:
            if text:
                return (data or b"").decode("utf-8", "replace")
            return _decode_ok(data, ctype, method, path, self.server)
        raise self._reply_error(method, path, resp, data, plugin_errors)

    def _prepare(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
                 content_type: str | None) -> tuple[str, Any, list[str], str]:
        """The URL and headers (auth, impersonation) of a request; the credential plugin's errors, if it ran."""
        query_items = [(k, v) for k, v in (query or {}).items() if v is not None and v != ""]
        headers = urllib3.HTTPHeaderDict({"Accept": JSON, "User-Agent": USER_AGENT})
        if body is not None:
            headers["Content-Type"] = content_type or JSON
        resource_path = path + ("?" + urlencode(query_items) if query_items else "")
        # The header may come from an exec credential plugin, run again when its token expired.
        with client_errors() as plugin_errors:
            authorization = self.transport.authorization()
        if authorization:
            headers["Authorization"] = authorization
        if self.impersonate_user or self.impersonate_groups:
            headers = _impersonation(headers, self.impersonate_user, self.impersonate_groups)
        return self.transport.host + resource_path, headers, plugin_errors, resource_path

    def _send(self, method: str, path: str, url: str, headers: Any, body: Any, timeout: Any, *,
              stream: bool = False) -> tuple[Any, bytes | None]:
        """Send one request; (response, body), or with `stream` (response, None) and the body left unread.

        `timeout` is seconds for the whole request (None: no limit) or (connect, read) seconds. Every
        transport failure becomes a typed error here: timeouts, refused and dropped connections, TLS
        failures, and for a write that reached the server OutcomeUnknown.
        """
        self.request_count += 1
        where = f"the API server at {self.server}" + (f" (through proxy {self.proxy})" if self.proxy else "")
        write = method not in ("GET", "HEAD")
        data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        limit = urllib3.Timeout(connect=timeout[0], read=timeout[1]) if isinstance(timeout, tuple) else \
            urllib3.Timeout(total=timeout)
        try:
            resp = self.transport.request(method, url, headers=headers, body=data, timeout=limit)
            if stream:
                return resp, None
            content = resp.read()
            resp.release_conn()
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
        return resp, content

    def _reply_error(self, method: str, path: str, resp: Any, data: bytes | None,
                     plugin_errors: list[str]) -> ClusterError | NotFound:
        """The typed error of a non-2xx reply (the credential plugin's words on a 401, Retry-After kept)."""
        decoded = _decode(data)
        err = _status_error(method, path, resp.status, decoded, self.server)
        if resp.status == 401 and plugin_errors:
            err = AuthError(f"{err} (credential plugin: {_one_line('; '.join(plugin_errors))})",
                            status=401, reason="Unauthorized")
        retry_after = _retry_after(resp, decoded)
        if retry_after is not None:
            err.retry_after_s = retry_after  # type: ignore[attr-defined]
        return err

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


    # -- watches ----------------------------------------------------------------------------------

    def list_with_version(self, res: Resource, *, namespace: str | None = None, label_selector: str | None = None,
                          field_selector: str | None = None) -> tuple[list[dict], str]:
        """Every object of a collection (paged) and the resourceVersion a watch resumes from."""
        items: list[dict] = []
        version = ""
        token: str | None = None
        path = res.path(namespace=namespace)
        while True:
            page = self.request("GET", path, query={"labelSelector": label_selector, "fieldSelector": field_selector,
                                                    "limit": DEFAULT_PAGE_SIZE, "continue": token})
            if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
                raise MalformedReply(f"GET {path} did not return a list (got {type(page).__name__})")
            items += [_object(item, f"an item of GET {path}") for item in page.get("items") or []]
            meta = page.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")  # the first page's: the list's snapshot
            token = meta.get("continue")
            if not token:
                return items, version

    def watch(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_s: float | None = None,
        clock: Clock | None = None,
        stop: Stop | None = None,
        poll_s: float = WATCH_POLL_S,
        on_retry: Callable[[RblnError], None] | None = None,
        missing_ok: bool = False,
    ) -> Iterator[WatchEvent]:
        """Yield a collection's changes as they happen, until `timeout_s` has passed or `stop` is set.

        Without `resource_version` it lists first and yields that as a SYNC, then watches from the
        list's resourceVersion (client-go's reflector: k8s.io/client-go/tools/cache/reflector.go
        ListAndWatch). When the server ends a stream (its request timeout, a restart) the watch is
        reopened from the last resourceVersion seen, BOOKMARK events included (they only move that
        version on and are not yielded). When the server no longer has that version (410 Gone /
        Expired, "too old resource version"), it relists and yields a SYNC. Where watching is
        forbidden (403) or not supported (405), it lists every `poll_s` instead, one SYNC each: one
        request per round, whatever the collection holds. Transient failures (a dropped
        connection, 429, 5xx) are reported to `on_retry` and tried again with backoff until the
        deadline; other errors are raised. `clock` (default the client's) times the deadline.
        `missing_ok`: a collection the server does not serve (404) is one empty SYNC, then nothing.
        """
        clock = clock or self.clock
        deadline = None if timeout_s is None else clock.monotonic() + timeout_s
        path = res.path(namespace=namespace)
        selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}
        polling = False
        failures = 0

        def left() -> float | None:
            return None if deadline is None else deadline - clock.monotonic()

        def stopped() -> bool:
            return stop is not None and stop.is_set()

        def relist() -> WatchEvent:
            items, version = self.list_with_version(res, namespace=namespace, label_selector=label_selector,
                                                    field_selector=field_selector)
            nonlocal rv
            rv = version
            return WatchEvent(SYNC, objects=tuple(items))

        def backoff(err: RblnError) -> bool:
            """Report a transient failure and wait before the next try; False when the wait should end."""
            nonlocal failures
            failures += 1
            remaining = left()
            if remaining is not None and remaining <= 0:
                return False
            if on_retry is not None:
                on_retry(err)
            pause = min(WATCH_RETRY_CAP_S, WATCH_RETRY_START_S * 2 ** (failures - 1))
            return not clock.sleep(pause if remaining is None else min(pause, remaining), stop)

        rv = resource_version
        listed = rv is not None  # polling lists again each round
        while not stopped():
            if not listed or polling:
                if listed:  # polling: wait a round first
                    remaining = left()
                    if remaining is not None and remaining <= 0:
                        return
                    if clock.sleep(poll_s if remaining is None else min(poll_s, remaining), stop):
                        return
                try:
                    sync = relist()
                except NotFound:
                    if not missing_ok:
                        raise
                    yield WatchEvent(SYNC)
                    return
                except (ClusterError, ClusterUnreachable) as e:
                    if not is_transient(e) or not backoff(e):
                        raise
                    continue
                listed = True
                failures = 0
                yield sync
                continue
            remaining = left()
            if remaining is not None and remaining <= 0:
                return
            try:
                resp = self._open_watch(path, {**selectors, "resourceVersion": rv}, remaining)
            except Forbidden as e:
                log.debug("cannot watch %s (%s): listing it every %gs instead", path, e, poll_s)
                polling = True
                continue
            except (ClusterError, ClusterUnreachable) as e:
                if e.status == 405:  # watch is not served for this resource
                    log.debug("%s cannot be watched: listing it every %gs instead", path, poll_s)
                    polling = True
                    continue
                if e.status == 410:  # the resourceVersion is gone: start again from a fresh list
                    listed = False
                    continue
                if stopped():
                    return
                if not is_transient(e) or not backoff(e):
                    raise
                continue
            expired = False
            clean = False
            events = 0
            opened = time.monotonic()
            unregister = stop.on_set(lambda: _shutdown(resp)) if stop is not None else (lambda: None)
            try:
                for ev in _stream_events(resp, path):
                    etype, obj = ev.get("type"), ev.get("object")
                    if not isinstance(obj, dict):
                        raise MalformedReply(f"a watch event of GET {path} has no object: {_one_line(ev)[:80]}")
                    if etype == "ERROR":
                        if obj.get("code") == 410:
                            expired = True
                            break
                        raise _status_error("GET", path, int(obj.get("code") or 500), obj, self.server)
                    version = (obj.get("metadata") or {}).get("resourceVersion")
                    rv = str(version) if version else rv
                    if etype == "BOOKMARK":
                        continue
                    if etype not in ("ADDED", "MODIFIED", "DELETED"):
                        raise MalformedReply(f"a watch event of GET {path} has an unknown type {etype!r}")
                    failures = 0
                    events += 1
                    yield WatchEvent(str(etype), object=obj)
                else:
                    clean = True
            except (urllib3.exceptions.HTTPError, OSError) as e:
                if stopped():
                    return
                err = ClusterUnreachable(f"the watch of {path} on the API server at {self.server} broke: "
                                         f"{_root_cause(e)}")
                if not backoff(err):
                    return
            finally:
                unregister()
                if clean:
                    resp.release_conn()
                else:
                    resp.close()
            if expired:
                log.debug("the watch of %s expired at resourceVersion %s: listing again", path, rv)
                listed = False
            elif clean and not events and time.monotonic() - opened < 1 and not stopped():
                # A stream the server (or a proxy) ends at once would otherwise be reopened in a tight loop.
                if not backoff(ClusterUnreachable(f"the API server at {self.server} ended the watch of {path} "
                                                  "at once")):
                    return

    def _open_watch(self, path: str, query: dict[str, Any], remaining: float | None) -> Any:
        """Open one watch stream (urllib3 response, body unread); a non-200 answer is its typed error."""
        stream_s = WATCH_STREAM_S if remaining is None else max(1, min(WATCH_STREAM_S, math.ceil(remaining)))
        query = {**query, "watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": stream_s}
        url, headers, plugin_errors, resource_path = self._prepare("GET", path, query, None, None)
        started = time.monotonic()
        resp, _ = self._send("GET", path, url, headers, None, (self.request_timeout_s, stream_s + WATCH_READ_GRACE_S),
                             stream=True)
        request_log.debug("GET %s -> %s (%.0f ms, streaming)", resource_path, resp.status,
                          (time.monotonic() - started) * 1e3)
        if resp.status != 200:
            data = resp.read()
            resp.release_conn()
            raise self._reply_error("GET", path, resp, data, plugin_errors)
        return resp

    def watch_many(self, specs: Sequence[WatchSpec], *, timeout_s: float | None = None, clock: Clock | None = None,
                   stop: Stop | None = None, poll_s: float = WATCH_POLL_S,
                   on_retry: Callable[[RblnError], None] | None = None) -> Iterator[WatchEvent]:
        """Watch several collections at once (one stream each, read on its own thread); yield every event as it
        comes, its `source` the index of its spec. Ends when every watch has; the first error is raised.
        Leaving the loop early closes every stream."""
        if len(specs) == 1:
            sp = specs[0]
            yield from self.watch(sp.res, namespace=sp.namespace, label_selector=sp.label_selector,
                                  field_selector=sp.field_selector, timeout_s=timeout_s, clock=clock, stop=stop,
                                  poll_s=poll_s, on_retry=on_retry, missing_ok=sp.missing_ok)
            return
        events: queue.Queue[tuple[int, WatchEvent | None]] = queue.Queue()
        with (stop.linked() if stop is not None else _own_stop()) as mine:

            def pump(i: int, sp: WatchSpec) -> None:
                try:
                    for ev in self.watch(sp.res, namespace=sp.namespace, label_selector=sp.label_selector,
                                         field_selector=sp.field_selector, timeout_s=timeout_s, clock=clock,
                                         stop=mine, poll_s=poll_s, on_retry=on_retry, missing_ok=sp.missing_ok):
                        events.put((i, replace(ev, source=i)))
                finally:
                    events.put((i, None))  # this watch is over (its future holds the error, if any)

            pool = ThreadPoolExecutor(max_workers=len(specs), thread_name_prefix="rblnctl-watch")
            futures = [pool.submit(pump, i, sp) for i, sp in enumerate(specs)]
            try:
                running = len(specs)
                while running:
                    i, ev = events.get()
                    if ev is None:
                        running -= 1
                        futures[i].result()  # raises what ended that watch
                        continue
                    yield ev
            finally:
                mine.set()  # wakes every stream still open
                pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def _own_stop() -> Iterator[Stop]:
    yield Stop()


def _shutdown(resp: Any) -> None:
    """Wake a thread blocked reading `resp` (a watch asked to stop)."""
    try:
        resp.shutdown()
    except (ValueError, RuntimeError, OSError):  # already released or closed: nobody is reading it
        pass


def _stream_events(resp: Any, path: str) -> Iterator[dict]:
    """The JSON events of a watch stream, one per line, as they arrive."""
    buffer = b""
    for chunk in resp.stream(65536, decode_content=True):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as e:
                text = _one_line(line[:80].decode("utf-8", "replace"))
                raise MalformedReply(f"GET {path} streamed invalid JSON ({text})") from e
            if not isinstance(event, dict):
                raise MalformedReply(f"GET {path} streamed {type(event).__name__}, not a watch event")
            yield event
    if buffer.strip():
        raise MalformedReply(f"GET {path} ended in the middle of a watch event")


def connect(opts: KubeOptions) -> Kube:
    """Build a Kube from kubeconfig, context or in-cluster service account, then kubectl's connection flags.

    Raises ConfigError when no configuration fits, AuthError when a credential plugin fails. Only
    credential plugins and in-cluster configuration import the kubernetes package (rblnctl.kubeconfig).
    """
    context = None
    source = _kubeconfig_source(opts)
    if source is not None:
        kc = read_kubeconfig(source)
        context = choose_context(kc, opts.context)
        endpoint = endpoint_from_kubeconfig(kc, context, cluster=opts.cluster, user=opts.user)
        if opts.context is None:
            context = None  # the current context: messages say so
    elif not opts.server:
        if not os.environ.get("KUBERNETES_SERVICE_HOST") or not SA_TOKEN.exists():
            raise ConfigError(
                "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, or run in a pod"
            )
        endpoint = in_cluster_endpoint()
    else:
        endpoint = Endpoint()
    apply_flags(endpoint, server=opts.server, token=opts.token, certificate_authority=opts.certificate_authority,
                insecure_skip_tls_verify=opts.insecure_skip_tls_verify)
    if not endpoint.server or endpoint.server.rstrip("/") in ("http:", "https:"):
        where = f"context {context}" if context else "the current context"
        raise ConfigError(f"kubeconfig {opts.kubeconfig or resolve_kubeconfig(None)}: the cluster of {where} has no "
                          "server URL")
    return Kube(transport=Transport(endpoint), server=endpoint.server, context=context,
                request_timeout_s=opts.request_timeout_s, proxy=endpoint.proxy,
                impersonate_user=opts.impersonate_user, impersonate_groups=tuple(opts.impersonate_groups))


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
    return source if source is not None and has_contexts(source) else None


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
