"""What an answer (or its absence) means: typed errors from Kubernetes Status replies, and which failures are transient.

Every non-2xx reply becomes one RblnError with one line (the verb, resource and namespace RBAC saw
for a 403); a reply that is not JSON is MalformedReply, an HTML page NotAnApiServer, a non-Status answer
from an aggregated API (an APIService with a Service, such as KubeVirt's virt-api) AggregatedApiError;
no reply at all is ClusterUnreachable, or OutcomeUnknown for a write that may have been applied.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any

import urllib3

from rblnctl.errors import (
    AdmissionDenied,
    AggregatedApiError,
    ApiNotServed,
    AuthError,
    ClusterError,
    ClusterTimeout,
    ClusterUnreachable,
    Conflict,
    ContinueExpired,
    Forbidden,
    MalformedReply,
    NotAnApiServer,
    NotFound,
    OutcomeUnknown,
    ProxyAuthError,
    one_line,
)
from rblnctl.kube.proxies import Proxy

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# How kube-apiserver words an authorization denial (k8s.io/apiserver pkg/endpoints/handlers/responsewriters
# Forbidden: `... is forbidden: User "u" cannot VERB resource ...` / `forbidden: User "u" cannot VERB path ...`);
# a 403 worded otherwise comes from admission (ResourceQuota, PodSecurity, webhooks).
_RBAC_DENIAL = re.compile(r'\bcannot \S+ (resource|path)\b|User "[^"]*" cannot ')


def is_transient(err: BaseException) -> bool:
    """A failure worth trying again later: throttled, a 5xx, or no answer (but never bad credentials)."""
    if isinstance(err, NotAnApiServer):
        return err.status in TRANSIENT_STATUSES  # a proxy's 502 page, not a wrong URL
    if isinstance(err, (AuthError, MalformedReply)):
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
    if isinstance(err, NotAnApiServer):
        return err.status in TRANSIENT_STATUSES
    if isinstance(err, ClusterUnreachable):
        return bool(getattr(err, "dropped", False))
    return isinstance(err, ClusterError) and not isinstance(err, (AuthError, MalformedReply)) and \
        err.status in TRANSIENT_STATUSES


def outcome_unknown(err: BaseException) -> bool:
    """Whether a write that failed with `err` may still have been applied (lost reply, or a 504 gateway timeout)."""
    return isinstance(err, OutcomeUnknown) or (isinstance(err, ClusterError) and err.status == 504)


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
        details = d if isinstance(d := body.get("details"), dict) else {}
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
    if status == 403 and message and not _RBAC_DENIAL.search(message):
        # Admission refused it, not RBAC: a ResourceQuota ("exceeded quota"), Pod Security ("violates
        # PodSecurity"), a webhook. Saying RBAC here would send the user to the wrong fix.
        return AdmissionDenied(f"the API server's admission refused {verb} on {resource} {where}: {_one_line(message)}",
                               status=status, reason=reason or "Forbidden", server_message=_one_line(message))
    if status == 403:
        return Forbidden(
            f"forbidden: RBAC does not allow {verb} on {resource} {where}"
            + (f" ({_one_line(message)})" if message else ""),
            status=status,
            reason=reason or "Forbidden",
        )
    if status == 404:
        if not message or message == "the server could not find the requested resource":
            # The API itself is missing (a group version or resource not served), not an object.
            return api_not_served(method, path)
        return NotFound(message)
    if status == 409:
        return Conflict(message or f"conflict on {resource}", status=status, reason=reason or "Conflict")
    text = _one_line(message) or (body if isinstance(body, str) else "") or "no message"
    meta = body.get("metadata") if isinstance(body, dict) else None
    token = meta.get("continue") if isinstance(meta, dict) else None
    if status == 410 and reason == "Expired" and token:  # a continue page whose snapshot is gone
        return ContinueExpired(f"{method} {path} failed: {status} {reason} {text}", status=status, reason=reason,
                               server_message=_one_line(message), inconsistent_continue=str(token or ""))
    return ClusterError(f"{method} {path} failed: {status} {reason or ''} {text}".replace("  ", " "),
                        status=status, reason=reason, server_message=_one_line(message))


def api_not_served(method: str, path: str) -> ApiNotServed:
    """The resource of `path` is not served: its CRD or API group is not installed (or not established yet)."""
    _, resource, _ = describe_request(method, path)
    parts = [p for p in path.split("?")[0].split("/") if p]
    group = parts[1] if parts[:1] == ["apis"] and len(parts) > 1 else ""
    return ApiNotServed(f"the API server does not serve {resource} ({method} {path}): is its CRD installed?",
                        resource=resource, group=group)


def mux_not_found(status: int, ctype: str, text: str) -> bool:
    """Whether a reply is kube-apiserver's HTTP mux saying a path is not routed: Go's http.NotFound, a plain-text
    `404 page not found`. The apiserver answers so for every path under an API group it does not serve
    (`GET /apis/kubevirt.io/v1/kubevirts` without KubeVirt); under a served group it answers a JSON Status."""
    return status == 404 and ctype.lower().startswith("text/plain") and text.strip() == "404 page not found"


def not_an_api_server(method: str, path: str, status: int, ctype: str, text: str, server: str) -> NotAnApiServer:
    """A non-2xx reply whose body is not a Kubernetes Status: an HTML page from a proxy or a web server."""
    page = _one_line(re.sub(r"<[^>]+>", " ", text))[:80] or "an empty page"
    return NotAnApiServer(f"the server at {server} answered {method} {path} with {status} and "
                          f"{ctype or 'no content type'} ({page}), not the Kubernetes API: is the kubeconfig's "
                          "server URL right, or is a proxy in between failing?", status=status)


@dataclass(frozen=True)
class AggregatedApi:
    """An APIService that kube-apiserver proxies to a Service (`spec.service` set: not Local).

    `service` is `namespace/name` ("" when the APIService could not be read and discovery alone said the group
    is served), `unavailable` the message of its Available condition when that is not True, `unread` why the
    APIService could not be read ("" when it was).
    """

    name: str
    service: str = ""
    unavailable: str = ""
    unread: str = ""


def aggregated_api(name: str, obj: Any) -> AggregatedApi | None:
    """The AggregatedApi an APIService object describes; None for a Local one (served by kube-apiserver itself:
    the automanaged APIServices of built-in groups and CRDs have no `spec.service`)."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    service = spec.get("service") if isinstance(spec, dict) else None
    if not isinstance(service, dict) or not service.get("name"):
        return None
    status = s if isinstance(s := obj.get("status"), dict) else {}
    conditions = c if isinstance(c := status.get("conditions"), list) else []
    available = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Available"), None)
    unavailable = ""
    if available is not None and available.get("status") != "True":
        unavailable = _one_line(available.get("message") or available.get("reason") or "not Available")
    return AggregatedApi(name, f"{service.get('namespace') or 'default'}/{service['name']}", unavailable)


def aggregated_api_failed(method: str, path: str, status: int, reason: str, ctype: str, text: str,
                          api: AggregatedApi) -> AggregatedApiError:
    """A non-Status reply that came from an aggregated API server, not from kube-apiserver: name the APIService
    and its Service, what came back, and what to look at (never "is the kubeconfig's server URL right?")."""
    group_version = "/".join(reversed(api.name.split(".", 1)))
    where = f"APIService {api.name}"
    if api.service:
        where += f", Service {api.service}"
    elif api.unread:
        where += f", which could not be read: {api.unread}"
    answer = " ".join(p for p in (str(status), reason) if p)
    body = _one_line(re.sub(r"<[^>]+>", " ", text))[:120] or "an empty body"
    check = f"check `kubectl get apiservice {api.name}`"
    if api.service:
        ns, _, svc = api.service.partition("/")
        check += (f" and the pods behind Service {api.service} "
                  f"(`kubectl -n {ns} get endpointslices -l kubernetes.io/service-name={svc}`)")
    state = f"; the APIService is not Available: {api.unavailable}" if api.unavailable else ""
    return AggregatedApiError(
        f"the aggregated API {group_version} ({where}) answered {method} {path} with {answer} and "
        f"{ctype or 'no content type'} ({body}), not a Kubernetes Status{state}: {check}",
        status=status, reason=reason, api_service=api.name, service=api.service)


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


def proxy_refused(proxy: Proxy, server: str, answer: str) -> ProxyAuthError:
    """The proxy asked for credentials (407) or refused the ones sent: name it by scheme://host:port only, and
    the setting that holds (or should hold) its user and password (never their values)."""
    via = f"the proxy {proxy.display} ({proxy.source})"
    if proxy.has_credentials:
        return ProxyAuthError(f"{via} refused our credentials ({answer}) on the way to the API server at {server}: "
                              f"check the user and password in {proxy.source}", status=407,
                              reason="ProxyAuthenticationRequired")
    example = f"{proxy.scheme}://USER:PASSWORD@{proxy.display.split('://', 1)[1]}"
    return ProxyAuthError(f"{via} asks for credentials ({answer}) on the way to the API server at {server}: "
                          f"put them in {proxy.source} ({example})", status=407, reason="ProxyAuthenticationRequired")


_PROXY_AUTH_FAILURES = ("407 proxy authentication required", "socks5 authentication failed",
                        "all offered authentication methods were rejected")


def proxy_auth_failure(e: BaseException) -> str | None:
    """What a proxy said when it refused a tunnel for want of credentials (urllib3's ProxyError around
    `Tunnel connection failed: 407 ...`, PySocks' SOCKS5AuthError), else None."""
    for err in causes(e):
        text = str(err).lower()
        for failure in _PROXY_AUTH_FAILURES:
            if failure in text:
                return "407 Proxy Authentication Required" if failure.startswith("407") else failure
    return None


def causes(e: BaseException) -> Iterator[BaseException]:
    """`e` and what caused it, outermost first: urllib3's `reason` (MaxRetryError, ProxyError), then Python's
    `__cause__` / `__context__`."""
    seen: set[int] = set()
    err: BaseException | None = e
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        nxt = getattr(err, "reason", None) or err.__cause__ or err.__context__
        err = nxt if isinstance(nxt, BaseException) else None


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
    *_, seen = causes(e)
    if text is None:
        text = str(seen)
    for hint in ("Connection refused", "Name or service not known", "No route to host", "timed out",
                 "Connection reset", "Remote end closed connection", "certificate verify failed"):
        if hint.lower() in text.lower() or hint.lower() in str(e).lower():
            return hint.lower()
    return _one_line(text) or type(seen).__name__


def _one_line(e: object) -> str:
    text = one_line(e)
    return text[:300]
