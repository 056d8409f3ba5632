"""Failures exactly as kube-apiserver serialises them: a ``Status`` body, carried by ``ApiError``.

The constructors mirror k8s.io/apimachinery/pkg/api/errors (NewNotFound, NewConflict,
NewInvalid...): same reason, same message text, same ``details``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    406: "NotAcceptable", 409: "Conflict", 410: "Expired", 413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
    503: "ServiceUnavailable", 504: "Timeout",
}


class GroupResourceLike(Protocol):
    @property
    def group(self) -> str: ...

    @property
    def plural(self) -> str: ...


class GroupResource(NamedTuple):
    """A schema.GroupResource for messages about things that are not in the resource table
    (``GroupResource("kubevirt.io", "virtualmachine")`` as virt-api names a VM)."""

    group: str
    plural: str


def status_body(code: int, reason: str | None, message: str, details: dict | None = None) -> dict:
    """A ``Status`` object exactly as kube-apiserver serialises a failure; ``reason`` "" leaves it out, as
    ``reason,omitempty`` does (an admission webhook's denial carries none)."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message}
    if reason != "":
        body["reason"] = reason if reason is not None else REASONS.get(code, "")
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


class ApiError(Exception):
    """Raised inside request handling; becomes a Status response."""

    def __init__(self, code: int, reason: str | None, message: str, details: dict | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.code = code
        self.body = status_body(code, reason, message, details)
        self.headers = headers or {}


def details(res: GroupResourceLike, name: str | None) -> dict:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if res.group:
        d["group"] = res.group
    d["kind"] = res.plural
    return d


def group_resource(res: GroupResourceLike) -> str:
    """``resource.group`` as Kubernetes messages print a GroupResource."""
    return f"{res.plural}.{res.group}" if res.group else res.plural


def not_found(res: GroupResourceLike, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{group_resource(res)} "{name}" not found', details(res, name))


def conflict(res: GroupResourceLike, name: str, why: str = "the object has been modified; please apply your "
             "changes to the latest version and try again") -> ApiError:
    """errors.NewConflict: ``Operation cannot be fulfilled on <gr> "<name>": <why>``."""
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {group_resource(res)} "{name}": {why}',
                    details(res, name))


def already_exists(res: GroupResourceLike, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{group_resource(res)} "{name}" already exists', details(res, name))


class KindLike(Protocol):
    @property
    def group(self) -> str: ...

    @property
    def kind(self) -> str: ...


def invalid(res: KindLike, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid as ``errors.NewInvalid`` builds it; causes are (reason, field, message)."""
    qkind = f"{res.kind}.{res.group}" if res.group else res.kind
    text = ", ".join(f"{f}: {m}" for _, f, m in causes)
    if len(causes) > 1:
        text = "[" + text + "]"
    d: dict[str, Any] = {"name": name}
    if res.group:
        d["group"] = res.group
    d["kind"] = res.kind
    d["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    return ApiError(422, "Invalid", f'{qkind} "{name}" is invalid: {text}', d)


def unknown_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def internal_error(message: str) -> ApiError:
    """errors.NewInternalError: ``Internal error occurred: <message>``."""
    return ApiError(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})


class PlainError(ApiError):
    """A failure written as plain text, not a Status: what a Go server outside kube-apiserver's own handlers answers
    (go-restful's ``WriteErrorString``, net/http's ``http.Error``: ``text/plain; charset=utf-8`` with
    ``X-Content-Type-Options: nosniff``), relayed as is by kube-apiserver's aggregation layer."""

    def __init__(self, code: int, text: str, headers: dict[str, str] | None = None):
        super().__init__(code, None, text, headers={"X-Content-Type-Options": "nosniff", **(headers or {})})
        self.body = text  # type: ignore[assignment]  # a str body is sent as text/plain
