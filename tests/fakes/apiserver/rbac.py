"""Authorization: who may do what, decided before routing as kube-apiserver does.

Each request is first described as the real server describes it (``RequestInfo``, after
k8s.io/apiserver/pkg/endpoints/request/requestinfo.go): a resource request (verb get, list,
watch, create, update, patch, delete, deletecollection; group, resource, subresource,
namespace, name) or a non-resource request (the lower-cased HTTP method and the path). Then:

* ``forbid(verb, resource, namespace)`` rules refuse matching resource requests (an explicit deny);
* under ``enforce_rbac(roles)`` a request must be allowed by a rule of one of the given Role or
  ClusterRole objects (a Role only in its namespace), matched as plugin/pkg/auth/authorizer/rbac
  does (apiGroups, resources incl. ``pods/eviction`` and ``*/status``, verbs, resourceNames,
  nonResourceURLs with a trailing ``*``). Like every authenticated user, the fake user also holds
  system:discovery, system:public-info-viewer and system:basic-user (discovery, ``/version``,
  ``/healthz``, SelfSubjectAccessReviews). There are no bindings: the user holds every role given.

A refusal is the 403 of responsewriters.Forbidden (k8s.io/apiserver/pkg/endpoints/handlers/
responsewriters/errors.go). ``POST selfsubjectaccessreviews`` answers the same question for
``kubectl auth can-i``.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from tests.fakes.apiserver.config import Settings
from tests.fakes.apiserver.errors import ApiError, GroupResource, details, group_resource, invalid
from tests.fakes.apiserver.meta import first, truthy
from tests.fakes.apiserver.resources import Resource

_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True)
class RequestInfo:
    is_resource: bool
    verb: str
    path: str = ""
    group: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def request_info(method: str, path: str, query: dict[str, list[str]]) -> RequestInfo:
    """The request as the authorizer sees it (only the path and query, not the resource table)."""
    parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
    non_resource = RequestInfo(False, method.lower(), path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    cur = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(cur) < 3:
            return non_resource
        group, cur = cur[0], cur[1:]
    cur = cur[1:]  # the version
    verb = _METHOD_VERBS.get(method, "")
    namespace = ""
    if cur[0] == "namespaces" and len(cur) > 1:
        namespace = cur[1]
        if len(cur) > 2 and cur[2] not in _NAMESPACE_SUBRESOURCES:
            cur = cur[2:]
    resource = cur[0]
    name = cur[1] if len(cur) > 1 else ""
    sub = cur[2] if len(cur) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if truthy(first(query, "watch")) else "list"
        for req in (first(query, "fieldSelector") or "").split(","):
            key, sep, value = req.partition("==") if "==" in req else req.partition("=")
            if sep and key.strip() == "metadata.name":
                name = value.strip()
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(True, verb, path, group, namespace, resource, sub, name)


def forbidden(user: str, info: RequestInfo) -> ApiError:
    """403 with the text of responsewriters.forbiddenMessage wrapped by errors.NewForbidden."""
    if not info.is_resource:
        return ApiError(403, "Forbidden", f'forbidden: User "{user}" cannot {info.verb} path "{info.path}"', {})
    resource = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
    scope = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    gr = GroupResource(info.group, info.resource)
    who = f'{group_resource(gr)} "{info.name}"' if info.name else group_resource(gr)
    return ApiError(403, "Forbidden", f'{who} is forbidden: User "{user}" cannot {info.verb} resource "{resource}" '
                    f'in API group "{info.group}" {scope}', details(gr, info.name or None))


@dataclass
class _Role:
    kind: str  # Role | ClusterRole
    name: str
    namespace: str | None
    rules: list[dict]
    subject: str = ""  # how the reason names the holder; "" for the fake user


_ALL_AUTHENTICATED = 'Group "system:authenticated"'
_IMPLICIT = (
    _Role("ClusterRole", "system:discovery", None, [{"verbs": ["get"], "nonResourceURLs": [
        "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version",
        "/version/"]}], _ALL_AUTHENTICATED),
    _Role("ClusterRole", "system:public-info-viewer", None, [{"verbs": ["get"], "nonResourceURLs": [
        "/healthz", "/livez", "/readyz", "/version", "/version/"]}], _ALL_AUTHENTICATED),
    _Role("ClusterRole", "system:basic-user", None, [
        {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
         "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
        {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]}],
        _ALL_AUTHENTICATED),
)


def _has(values: list[str] | None, wanted: str) -> bool:
    return any(v == "*" or v == wanted for v in values or [])


def _rule_allows(rule: dict, info: RequestInfo) -> bool:
    """rbac.RuleAllows (plugin/pkg/auth/authorizer/rbac/rbac.go)."""
    if not _has(rule.get("verbs"), info.verb):
        return False
    if not info.is_resource:
        return any(u == "*" or u == info.path or (u.endswith("*") and info.path.startswith(u.rstrip("*")))
                   for u in rule.get("nonResourceURLs") or [])
    if not _has(rule.get("apiGroups"), info.group):
        return False
    combined = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
    if not any(r in ("*", combined) or (info.subresource and r == f"*/{info.subresource}")
               for r in rule.get("resources") or []):
        return False
    names = rule.get("resourceNames") or []
    return not names or info.name in names


@dataclass(frozen=True)
class Decision:
    allowed: bool
    denied: bool = False
    reason: str = ""


class Authorizer:
    def __init__(self, lock: threading.RLock, settings: Settings):
        self._lock = lock
        self.settings = settings
        self._forbidden: list[tuple[str, str, str | None]] = []
        self._roles: list[_Role] | None = None  # None: every request is allowed

    def forbid(self, verb: str, resource: str, namespace: str | None = None) -> None:
        with self._lock:
            self._forbidden.append((verb, resource, namespace))

    def enforce(self, objects: list[dict]) -> None:
        roles = []
        for obj in objects:
            kind, md = obj.get("kind"), obj.get("metadata") or {}
            if kind not in ("Role", "ClusterRole") or not md.get("name"):
                raise ValueError(f"enforce_rbac takes named Role and ClusterRole objects, not {kind!r}")
            ns = (md.get("namespace") or "default") if kind == "Role" else None
            roles.append(_Role(kind, md["name"], ns, copy.deepcopy(obj.get("rules") or [])))
        with self._lock:
            self._roles = roles

    def allow_all(self) -> None:
        with self._lock:
            self._forbidden.clear()
            self._roles = None

    def decide(self, info: RequestInfo) -> Decision:
        with self._lock:
            forbidden_rules, roles = list(self._forbidden), self._roles
        if info.is_resource:
            sub = f"/{info.subresource}" if info.subresource else ""
            names = ("*", f"{info.resource}{sub}", f"{info.resource}.{info.group}{sub}" if info.group else "*")
            for verb, resource, ns in forbidden_rules:
                if verb in ("*", info.verb) and resource in names and (ns is None or ns == info.namespace):
                    return Decision(False, denied=True, reason="denied by the fake apiserver's forbid() rule")
        if roles is None:
            return Decision(True)
        user = f'User "{self.settings.user}"'
        for role in [r for r in roles if r.kind == "ClusterRole"] + list(_IMPLICIT):
            if any(_rule_allows(rule, info) for rule in role.rules):
                return Decision(True, reason=f'RBAC: allowed by ClusterRoleBinding "{role.name}" of ClusterRole '
                                             f'"{role.name}" to {role.subject or user}')
        for role in roles:
            if role.kind == "Role" and info.is_resource and info.namespace and role.namespace == info.namespace \
                    and any(_rule_allows(rule, info) for rule in role.rules):
                return Decision(True, reason=f'RBAC: allowed by RoleBinding "{role.name}/{role.namespace}" of Role '
                                             f'"{role.name}" to {user}')
        return Decision(False)

    def authorize(self, info: RequestInfo) -> None:
        """Raise the real 403 unless the request is allowed."""
        if not self.decide(info).allowed:
            raise forbidden(self.settings.user, info)

    def rules_review(self, res: Resource, body: Any) -> tuple[int, dict]:
        """``POST selfsubjectrulesreviews``: the rules the user holds in ``spec.namespace`` (the RBAC
        authorizer's RulesFor: every ClusterRole's rules, the namespace's Roles', the defaults), or a
        wildcard rule when RBAC is not enforced (what an admin sees)."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
        namespace = (body.get("spec") or {}).get("namespace") or ""
        with self._lock:
            roles = self._roles
        if roles is None:
            resource_rules = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
            non_resource = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
        else:
            held = [r for r in roles if r.kind == "ClusterRole" or r.namespace == namespace] + list(_IMPLICIT)
            rules = [rule for r in held for rule in r.rules]
            resource_rules = [{k: v for k, v in rule.items() if k != "nonResourceURLs"} for rule in rules
                              if rule.get("resources")]
            non_resource = [{"verbs": rule.get("verbs") or [], "nonResourceURLs": rule["nonResourceURLs"]}
                            for rule in rules if rule.get("nonResourceURLs")]
        out = copy.deepcopy(body)
        out.update({"kind": res.kind, "apiVersion": res.api_version, "metadata": out.get("metadata") or {},
                    "status": {"resourceRules": resource_rules, "nonResourceRules": non_resource,
                               "incomplete": False}})
        return 201, out

    def review(self, res: Resource, body: Any) -> tuple[int, dict]:
        """``POST selfsubjectaccessreviews``: the body back with ``status`` (allowed, denied, reason)."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
        spec = body.get("spec") or {}
        attrs, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if (attrs is None) == (non_resource is None):
            field_, why = (("spec.nonResourceAttributes", "cannot be specified in combination with resourceAttributes")
                           if attrs is not None else
                           ("spec.resourceAttributes", "exactly one of nonResourceAttributes or resourceAttributes "
                                                       "must be specified"))
            raise invalid(res, "", [("FieldValueInvalid", field_, f'Invalid value: "null": {why}')])
        if attrs is not None:
            info = RequestInfo(True, attrs.get("verb", ""), "", attrs.get("group", ""), attrs.get("namespace", ""),
                               attrs.get("resource", ""), attrs.get("subresource", ""), attrs.get("name", ""))
        else:
            info = RequestInfo(False, non_resource.get("verb", ""), non_resource.get("path", ""))
        decision = self.decide(info)
        status: dict[str, Any] = {"allowed": decision.allowed}
        if decision.denied:
            status["denied"] = True
        if decision.reason:
            status["reason"] = decision.reason
        out = copy.deepcopy(body)
        out.update({"kind": res.kind, "apiVersion": res.api_version, "metadata": out.get("metadata") or {},
                    "status": status})
        return 201, out
