"""Kubernetes access shared by every cluster command: connect, raw JSON requests, typed errors, paging.

rblnctl talks to the API server over urllib3 (rblnctl.kube.kubeconfig loads credentials as kubectl does
and builds the transport) and reads and writes plain JSON dicts instead of generated models: one
code path for built-in and custom resources, explicit patch content types (kubernetes-client/python
#2119 sends JSON-patch lists to CustomObjectsApi as merge patches), and no model (de)serialisation
cost on large lists. The kubernetes package is imported only for credential plugins and in-cluster
configuration; `--help`, `vfio` and `preflight --local` do not even import this module.
"""

from __future__ import annotations

import builtins
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple
from urllib.parse import urlencode, urlsplit

import urllib3

from rblnctl import __version__
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import (
    AuthError,
    ClusterError,
    ClusterTimeout,
    ClusterUnreachable,
    ConfigError,
    ContinueExpired,
    MalformedReply,
    NotFound,
    OutcomeUnknown,
    WriteTimeout,
)
from rblnctl.kube.kubeconfig import Transport, client_errors
from rblnctl.kube.parallel import start
from rblnctl.kube.proxies import Proxy
from rblnctl.kube.tls import decode, explain, verify_error
from rblnctl.kube.replies import (
    AggregatedApi,
    _decode,
    _decode_ok,
    _is_timeout,
    _object,
    _one_line,
    _reached_server,
    _retry_after,
    _retryable,
    _root_cause,
    _status_error,
    aggregated_api,
    aggregated_api_failed,
    api_not_served,
    mux_not_found,
    not_an_api_server,
    proxy_auth_failure,
    proxy_refused,
)
from rblnctl.kube.resources import API_SERVICES, PODS, Resource
from rblnctl.kube.warning_headers import ServerWarning, warnings_of

log = logging.getLogger("rblnctl.kube")
request_log = logging.getLogger("rblnctl.kube.requests")  # -v=6: one line per request
wire_log = logging.getLogger("rblnctl.kube.bodies")  # -v=8: request and response bodies

JSON = "application/json"
# The Accept header of every request, exactly as client-go sends it for a client whose content type is JSON
# (k8s.io/client-go rest/client.go GetClientContentConfig defaults ContentType to application/json, and
# rest/request.go setAcceptHeader sends `ContentType + ", */*"`; `kubectl get --raw` sends it too). The `*/*`
# matters: KubeVirt's virt-api routes for start/stop/restart declare no Produces (kubevirt/kubevirt@v1.9.0
# pkg/virt-api/api.go), and go-restful answers 406 Not Acceptable to an Accept that names none of a route's
# Produces and lacks */* (github.com/emicklei/go-restful/v3 route.go matchesAccept, jsr311.go detectRoute).
# kube-apiserver serves JSON for it; a pod log (text/plain) is served for it as well.
ACCEPT = f"{JSON}, */*"
PATCH_TYPES = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
DEFAULT_PAGE_SIZE = 500
# A display command's first page: "any data not older than resourceVersion 1", i.e. whatever the watch cache holds.
# kube-apiserver serves resourceVersionMatch=NotOlderThan from its watch cache, not etcd (kubernetes/kubernetes
# staging/src/k8s.io/apiserver/pkg/storage/cacher/delegator/interface.go: ShouldDelegateList answers false for
# it), and pages it by `limit`; the `continue` pages after it are served from the cache's snapshot of that first
# page. Measured on v1.36.2 with 20,000 pods, 40 pages of 500: apiserver_cache_list_total +40, 1.44 s and 39 MiB
# peak, against 1.9-2.6 s for the consistent paged read (from etcd) and 1.3-1.7 s but 194 MiB for
# `resourceVersion=0` (the cache, every item in one reply: it ignores `limit`).
# Servers before the cache's snapshots answer the same query from etcd, consistently: slower, never wrong.
FROM_CACHE = {"resourceVersion": "1", "resourceVersionMatch": "NotOlderThan"}
USER_AGENT = f"rblnctl/{__version__}"
# Reads are retried when the server is briefly unable to answer, as client-go does (429 with
# Retry-After, 5xx, a dropped connection): at most READ_RETRIES more tries, waiting the server's
# Retry-After or 0.5 s, 1 s, 2 s, never more than MAX_RETRY_WAIT_S. A timeout is never retried
# (that would double --request-timeout) and a write is never re-sent (see OutcomeUnknown).
READ_RETRIES = 3
RETRY_BASE_S = 0.5
MAX_RETRY_WAIT_S = 10.0


def log_request(method: str, url: str, resp: Any, started: float, *, streaming: bool = False) -> None:
    """-v=6: one line per request with the full URL, as kubectl's round_trippers log it
    (`GET https://host:6443/api/v1/nodes?limit=500 200 OK in 5 milliseconds`)."""
    if not request_log.isEnabledFor(logging.DEBUG):
        return
    reason = str(getattr(resp, "reason", "") or "")
    request_log.debug("%s %s %s%s in %.0f milliseconds%s", method, url, resp.status, f" {reason}" if reason else "",
                      (time.monotonic() - started) * 1e3, " (streaming)" if streaming else "")


@dataclass
class Kube:
    """One connection to one cluster; every request returns parsed JSON or raises a typed RblnError."""

    transport: Transport  # the connection pool and the credentials (rblnctl.kube.kubeconfig)
    server: str
    context: str | None = None
    # The namespace a namespaced command uses when -n is not given: the context's, as kubectl resolves it
    # (rblnctl.kube.connection.default_namespace).
    namespace: str = "default"
    request_timeout_s: float | None = 30.0  # None: wait as long as it takes (kubectl's --request-timeout=0)
    # When set (time.monotonic() seconds), every request gets at most what is left until then: a clean-up bounded as
    # a whole (rblnctl.vm.lifecycle.VmLifecycle.bounded), not request by request.
    deadline: float | None = None
    # The proxy the transport goes through (rblnctl.kube.proxies), named by scheme://host:port in messages.
    proxy: Proxy | None = None
    impersonate_user: str | None = None  # sent as Impersonate-User (kubectl --as)
    impersonate_groups: tuple[str, ...] = ()  # one Impersonate-Group header each (kubectl --as-group)
    clock: Clock = SYSTEM_CLOCK  # waits between read retries
    read_retries: int = READ_RETRIES
    # Every `Warning` header of every reply (admission webhooks, deprecated APIs), parsed: the front end's
    # handler (the CLI prints each text once on stderr, as kubectl). None: dropped. Called from any thread.
    on_warning: Callable[[ServerWarning], None] | None = None
    # Lists served from the apiserver's watch cache (FROM_CACHE: any data not older than the cache, paged) instead
    # of kubectl's consistent read. For display commands only (node list, status, vm
    # list, vm fit, preflight): the front end sets it; a command that decides a write on what it reads never does.
    list_from_cache: bool = False
    request_count: int = field(default=0, init=False)
    _count_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    # The groups GET /apis lists (None: not an APIGroupList, e.g. not an API server), read once, the first
    # time a reply needs it to tell "API group not installed" from "not an API server" (see _reply_error).
    _discovery: frozenset[str] | None = field(default=None, init=False, repr=False)
    _discovery_read: bool = field(default=False, init=False, repr=False)
    # The APIServices read on the error path (name -> AggregatedApi, None for a Local or missing one).
    _api_services: dict[str, AggregatedApi | None] = field(default_factory=dict, init=False, repr=False)

    # -- copies for reads and clean-ups that must not hold a command up ----------------------------

    def one_try(self, timeout_s: float) -> Kube:
        """The same connection, each request tried once and given at most `timeout_s` (reads that only inform: a
        manifest's warnings, an init container's last log line)."""
        return replace(self, read_retries=0, request_timeout_s=min(self.request_timeout_s or timeout_s, timeout_s))

    def bounded(self, seconds: float) -> Kube:
        """The same connection with one budget of `seconds` for every request from now on (a clean-up after an
        interrupt): each tried once and given what is left of it (`deadline`; an earlier deadline stays)."""
        end = time.monotonic() + seconds
        return replace(self.one_try(seconds), deadline=end if self.deadline is None else min(end, self.deadline))

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
        raw: bool = False,
    ) -> Any:
        """Send one request; return the decoded JSON body (None when empty), with `text` the body as text, with
        `raw` a 2xx body undecoded (RawBody: iter_list decodes its pages itself).

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
                                          text=text, raw=raw)
            except (ClusterError, ClusterUnreachable) as err:
                if attempt >= retries or not _retryable(err):
                    raise
                attempt += 1
                wait = min(MAX_RETRY_WAIT_S, getattr(err, "retry_after_s", None) or RETRY_BASE_S * 2 ** (attempt - 1))
                log.debug("%s %s failed (%s); try %d of %d in %.1fs", method, path, err, attempt + 1, retries + 1,
                          wait)
                self.clock.sleep(wait)

    def _request_once(self, method: str, path: str, *, query: dict[str, Any] | None, body: Any,
                      content_type: str | None, text: bool = False, raw: bool = False) -> Any:
        url, headers, plugin_errors, resource_path = self._prepare(method, path, query, body, content_type)
        if wire_log.isEnabledFor(logging.DEBUG) and body is not None:
            wire_log.debug("request body: %s", _loggable(body))
        started = time.monotonic()
        resp, data = self._send(method, path, url, headers, body, self._timeout_now())
        log_request(method, url, resp, started)
        if wire_log.isEnabledFor(logging.DEBUG):
            wire_log.debug("response body: %s", _loggable(data))
        ctype = str(resp.headers.get("Content-Type") or "") if getattr(resp, "headers", None) is not None else ""
        if 200 <= resp.status < 300:
            if text:
                return (data or b"").decode("utf-8", "replace")
            if raw:
                return RawBody(data or b"", ctype)
            return _decode_ok(data, ctype, method, path, self.server)
        raise self._reply_error(method, path, resp, data, plugin_errors)

    def _prepare(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
                 content_type: str | None) -> tuple[str, Any, list[str], str]:
        """The URL and headers (auth, impersonation) of a request; the credential plugin's errors, if it ran."""
        query_items = [(k, v) for k, v in (query or {}).items() if v is not None and v != ""]
        headers = urllib3.HTTPHeaderDict({"Accept": ACCEPT, "User-Agent": USER_AGENT})
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

    def _timeout_now(self) -> float | None:
        """This request's limit: request_timeout_s, or less when the deadline is nearer (never under 0.1 s, so a
        request past it still fails as a timeout, named as one)."""
        if self.deadline is None:
            return self.request_timeout_s
        left = max(0.1, self.deadline - time.monotonic())
        return left if self.request_timeout_s is None else min(self.request_timeout_s, left)

    def _send(self, method: str, path: str, url: str, headers: Any, body: Any, timeout: Any, *,
              stream: bool = False) -> tuple[Any, bytes | None]:
        """Send one request; (response, body), or with `stream` (response, None) and the body left unread.

        `timeout` is seconds for the whole request (None: no limit) or (connect, read) seconds. Every
        transport failure becomes a typed error here: timeouts, refused and dropped connections, TLS
        failures, and for a write that reached the server OutcomeUnknown.
        """
        with self._count_lock:  # reads run side by side (rblnctl.kube.parallel)
            self.request_count += 1
        where = f"the API server at {self.server}" + (f" (through proxy {self.proxy.display})" if self.proxy else "")
        write = method not in ("GET", "HEAD")
        data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        limit = urllib3.Timeout(connect=timeout[0], read=timeout[1]) if isinstance(timeout, tuple) else \
            urllib3.Timeout(total=timeout)
        try:
            resp = self.transport.request(method, url, headers=headers, body=data, timeout=limit)
            self._report_warnings(resp)
            if stream:
                return resp, None
            content = resp.read()
            resp.release_conn()
        except urllib3.exceptions.HTTPError as e:
            if self.proxy is not None and (refused := proxy_auth_failure(e)):
                raise proxy_refused(self.proxy, self.server, refused) from e
            if _is_timeout(e):
                limit_s = timeout[1] if isinstance(timeout, tuple) else timeout
                msg = f"{where} did not answer {method} {path} within {limit_s or 0:g}s"
                raise (WriteTimeout(msg + "; it may have been applied") if write else ClusterTimeout(msg)) from e
            if write and _reached_server(e):
                raise OutcomeUnknown(f"the connection to {where} broke during {method} {path}: "
                                     f"{_root_cause(e)}; it may have been applied") from e
            refused_cert = verify_error(e)
            if refused_cert is not None:
                raise ClusterUnreachable(f"cannot reach {where}: TLS: {self._certificate_refused(refused_cert)}") from e
            unreachable = ClusterUnreachable(f"cannot reach {where}: {_root_cause(e)}")
            unreachable.dropped = _reached_server(e)  # type: ignore[attr-defined]
            raise unreachable from e
        except OSError as e:
            raise ClusterUnreachable(f"cannot reach {where}: {_root_cause(e)}") from e
        return resp, content

    def _certificate_refused(self, err: Any) -> str:
        """Why the server's certificate was refused, with what it is valid for (rblnctl.kube.tls)."""
        der = self.transport.peer_certificate(min(5.0, self.request_timeout_s or 5.0))
        name = self.transport.endpoint.tls_server_name or urlsplit(self.server).hostname or self.server
        return explain(err, name, decode(der) if der else None)

    def _report_warnings(self, resp: Any) -> None:
        """Hand the reply's Warning headers to on_warning (client-go's handleWarnings, for every reply)."""
        if self.on_warning is not None:
            for warning in warnings_of(resp):
                self.on_warning(warning)

    def _reply_error(self, method: str, path: str, resp: Any, data: bytes | None,
                     plugin_errors: list[str]) -> ClusterError | NotFound:
        """The typed error of a non-2xx reply (the credential plugin's words on a 401, Retry-After kept)."""
        decoded = _decode(data)
        ctype = str((getattr(resp, "headers", None) or {}).get("Content-Type") or "")
        if resp.status == 407 and self.proxy is not None:  # an http:// server through the proxy: its answer
            return proxy_refused(self.proxy, self.server, "407 Proxy Authentication Required")
        if isinstance(decoded, str) and "json" not in ctype.lower() and resp.status not in (401, 403):
            # kube-apiserver answers every failure of its own with a JSON Status; a text reply under an API
            # group another server serves through the aggregation layer came from that server (virt-api's
            # go-restful 404/405/406), or from the aggregator failing to reach it (503 "service unavailable").
            api = self._aggregated_api(path, mux_404=mux_not_found(resp.status, ctype, decoded))
            if api is not None:
                return aggregated_api_failed(method, path, resp.status, str(getattr(resp, "reason", "") or ""),
                                             ctype, decoded, api)
        if isinstance(decoded, str) and mux_not_found(resp.status, ctype, decoded) and \
                _under_api_group(path) and self._serves_discovery():
            # kube-apiserver's mux: nothing is routed under this API group (its CRD is not installed).
            return api_not_served(method, path)
        if isinstance(decoded, str) and "json" not in ctype.lower() and resp.status not in (401, 403):
            # An HTML error page (a proxy's 502, a web server's 404): not the Kubernetes API answering.
            # Still retried like the status it carries (a load balancer's 502 is often momentary).
            return not_an_api_server(method, path, resp.status, ctype, decoded, self.server)
        err = _status_error(method, path, resp.status, decoded, self.server)
        if resp.status == 401 and plugin_errors:
            err = AuthError(f"{err} (credential plugin: {_one_line('; '.join(plugin_errors))})",
                            status=401, reason="Unauthorized")
        retry_after = _retry_after(resp, decoded)
        if retry_after is not None:
            err.retry_after_s = retry_after
        return err

    def _serves_discovery(self) -> bool:
        """Whether this server answers GET /apis with an APIGroupList, as every kube-apiserver does (read once)."""
        return self._api_groups() is not None

    def _api_groups(self) -> frozenset[str] | None:
        """The API groups GET /apis lists; None when it is no APIGroupList (read once)."""
        if not self._discovery_read:
            try:
                doc = self._request_once("GET", "/apis", query=None, body=None, content_type=None)
            except (ClusterError, ClusterUnreachable, NotFound):
                doc = None
            if isinstance(doc, dict) and doc.get("kind") == "APIGroupList" and isinstance(doc.get("groups"), list):
                self._discovery = frozenset(str(g.get("name")) for g in doc["groups"] if isinstance(g, dict))
            self._discovery_read = True
        return self._discovery

    def _aggregated_api(self, path: str, *, mux_404: bool) -> AggregatedApi | None:
        """The aggregated API `path` is under (its APIService, `VERSION.GROUP`, has a Service), else None.

        Asked only on the error path, at most one read per APIService: a plain-text 404 under a group /apis
        does not list is "not installed" without it. An APIService that cannot be read (RBAC) still counts as
        aggregated when /apis lists its group: kube-apiserver itself would have answered a JSON Status.
        """
        parts = [p for p in path.split("?")[0].split("/") if p]
        if parts[:1] != ["apis"] or len(parts) < 3 or parts[1] == API_SERVICES.group:
            return None
        group, version = parts[1], parts[2]
        groups = self._api_groups()
        if groups is None or (mux_404 and group not in groups):
            return None
        name = f"{version}.{group}"
        if name not in self._api_services:
            self._api_services[name] = None  # also what a failing read of it below leaves (no recursion)
            try:
                obj = self._request_once("GET", API_SERVICES.path(name), query=None, body=None, content_type=None)
                self._api_services[name] = aggregated_api(name, obj)
            except NotFound:
                pass
            except (ClusterError, ClusterUnreachable) as err:
                if group in groups:
                    self._api_services[name] = AggregatedApi(name, unread=_one_line(err)[:120])
        return self._api_services[name]

    def get(self, res: Resource, name: str, *, namespace: str | None = None) -> dict:
        """GET one object (MalformedReply when the reply is not one)."""
        path = res.path(name, namespace=namespace)
        return _object(self.request("GET", path), f"GET {path}")

    def get_optional(self, res: Resource, name: str, *, namespace: str | None = None) -> dict | None:
        """GET one object; None when it does not exist (404, the type's API not served included).

        A 403 and every other error raise: a caller that may survive a refused read uses
        rblnctl.kube.optional.optional() instead, which says what the refusal means (docs/architecture.md)."""
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
        page_size: int | None = None,
        projection: type | None = None,
    ) -> Iterator[dict]:
        """Yield every object of a collection, following `continue` tokens page by page (DEFAULT_PAGE_SIZE a page).

        `projection` (rblnctl.kube.projections: NODE, VM, VMI, POD): decode each page into only the fields it names
        (plain dicts, the other keys absent), for a caller that reads no other field.

        With `list_from_cache` the first request also sends FROM_CACHE (`resourceVersion=1&resourceVersionMatch=
        NotOlderThan`): kube-apiserver answers it from its watch cache, page by page, so a display command holds
        one page's bytes at a time at any fleet size. The later pages send only the token (the server refuses
        resourceVersionMatch beside `continue`), which names the first page's snapshot; when that snapshot is
        gone (410 Expired) the rest is read with the token the server offers instead, as it is now: each object
        once, the later pages newer than the first (a display, not a decision: never for a consistent list).
        """
        path = res.path(namespace=namespace)
        decode: Callable[[bytes], Any] | None = None
        if projection is not None:
            from rblnctl.kube.projections import list_decoder

            decode = list_decoder(projection)

        def fetch(token: str | None) -> Any:
            """One page's body, undecoded."""
            query = {"labelSelector": label_selector, "fieldSelector": field_selector,
                     "limit": page_size or DEFAULT_PAGE_SIZE,
                     **(FROM_CACHE if self.list_from_cache and not token else {}), "continue": token}
            return self.request("GET", path, query=query, raw=True)

        def settled(first: Callable[[], Any]) -> Any:
            """A page's body, reading on past an expired continue token where a display list may."""
            read = first
            while True:
                try:
                    return read()
                except ContinueExpired as e:
                    if not (self.list_from_cache and e.inconsistent_continue):
                        raise
                    # The cache's snapshot of the first page is gone (a collection nobody wrote since etcd's last
                    # compaction: measured on v1.36.2, 5,000 nodes idle for 30 minutes). A display command reads
                    # on with the token the server offers: the rest of the pages as they are now.
                    log.debug("GET %s: %s; reading the rest as it is now", path, e.server_message)
                    read = functools.partial(fetch, e.inconsistent_continue)

        body = settled(lambda: fetch(None))
        while True:
            # The next page is asked for before this one is decoded and handed out, so the server answers it
            # while rblnctl works (the token, found in the page's first or last bytes, is checked against the
            # decoded one; on a mismatch the guess is dropped).
            guess = _continue_token(body)
            ahead = start(functools.partial(fetch, guess)) if guess else None
            page = self._list_page(body, decode, path)
            for item in page.get("items") or []:
                yield _object(item, f"an item of GET {path}")
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            body = settled(ahead.result if ahead is not None and token == guess else functools.partial(fetch, token))

    def _list_page(self, body: RawBody, decode: Callable[[bytes], Any] | None, path: str) -> dict:
        """A LIST page's body decoded: into `decode`'s projection, or in full when there is none or the body does
        not fit it (ValueError: msgspec's DecodeError and ValidationError are ValueErrors)."""
        page = None
        if decode is not None and body.data:
            try:
                page = decode(body.data)
            except ValueError:
                log.debug("GET %s: the reply does not fit its projection; decoding it in full", path)
        if page is None:
            page = _decode_ok(body.data, body.content_type, "GET", path, self.server)
        if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
            raise MalformedReply(f"GET {path} did not return a list (got {type(page).__name__})")
        return page

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
        """DELETE one object (`body`: DeleteOptions); dry_run deletes nothing (dryRun=All)."""
        if body is not None and dry_run:
            # kube-apiserver reads a DELETE's options from its body when it has one and then ignores the query
            # (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/delete.go DeleteResource): a `?dryRun=All`
            # beside preconditions in the body deletes for real (measured on v1.36.2). Say it in the body too.
            body = {**body, "dryRun": ["All"]}
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


    # -- the list a watch starts from (rblnctl.kube.watch) ------------------------------------------

    def list_with_version(self, res: Resource, *, namespace: str | None = None, label_selector: str | None = None,
                          field_selector: str | None = None) -> tuple[builtins.list[dict], str]:
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


# the list's own metadata: an object holding no object (an item's metadata holds labels, annotations, owners)
_CONTINUE = re.compile(rb'"metadata":\{[^{}]*?"continue":"([^"]+)"')


class RawBody(NamedTuple):
    """A 2xx body as it came (Kube.request with `raw`) and its Content-Type."""

    data: bytes
    content_type: str


def _continue_token(body: RawBody) -> str | None:
    """A LIST page's `continue` token read off its bytes without decoding them: kube-apiserver writes the list's
    metadata before `items` for built-in kinds and after them for custom resources (their keys sorted). A guess:
    iter_list checks it against the decoded page."""
    data = body.data
    m = _CONTINUE.search(data, 0, 4096) or _CONTINUE.search(data, max(0, len(data) - 4096))
    return m.group(1).decode() if m else None


def _under_api_group(path: str) -> bool:
    """A path under /apis/GROUP/...: where kube-apiserver's mux answers a plain 404 for a group it does not serve."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    return parts[:1] == ["apis"] and len(parts) >= 2


def _impersonation(headers: Any, user: str | None, groups: tuple[str, ...]) -> Any:
    """Impersonate-User and one Impersonate-Group header per group (the API server reads repeated headers)."""
    if not user:  # groups alone (the caller asks only when one of them is set)
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
