"""A small REST client for the tests' own side of a cluster: seeding objects, playing kubelet and operator.

It speaks to any API server, the fake (plain HTTP) or a real kube-apiserver (TLS, bearer token), with the
same calls, so a scenario can run on either. It is not rblnctl's client on purpose: the code under test must
not be the tool that prepares and checks its own world. Objects are plain dicts; kinds map to REST paths
through ``KINDS`` (the fake's resource table plus the RBAC and core kinds a real server needs), and a test
registers others with ``Api.register``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3

from tests.fakes.apiserver.config import HARNESS_USER_AGENT
from tests.fakes.apiserver.resources import RESOURCES

# What the fake keeps apart from the clients under test (tests/fakes/apiserver/config.py), and what a real
# server's audit log names the harness by.
USER_AGENT = HARNESS_USER_AGENT


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status: bool = True  # has a status subresource

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, name: str | None = None, namespace: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else "/api/v1"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


KINDS: dict[str, Kind] = {}
for _r in RESOURCES:  # the first of a kind wins: "Event" is core v1's (events.k8s.io serves the same objects)
    KINDS.setdefault(_r.kind, Kind(_r.group, _r.version, _r.plural, _r.kind, _r.namespaced, _r.has_status))
for _k in (Kind("", "v1", "serviceaccounts", "ServiceAccount", True, False),
           Kind("", "v1", "services", "Service", True),
           Kind("", "v1", "secrets", "Secret", True, False),
           Kind("", "v1", "resourcequotas", "ResourceQuota", True),
           Kind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, False),
           Kind("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, False),
           Kind("rbac.authorization.k8s.io", "v1", "roles", "Role", True, False),
           Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, False),
           Kind("rebellions.ai", "v1alpha1", "rblndrivers", "RBLNDriver", False),
           Kind("kubevirt.io", "v1", "virtualmachineinstancemigrations", "VirtualMachineInstanceMigration", True)):
    KINDS.setdefault(_k.kind, _k)


_NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _taint_keys(node: dict) -> set[str]:
    return {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}


class ApiFailure(Exception):
    """A non-2xx answer: ``status`` and the decoded ``body`` (a Status dict, or text)."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        msg = body.get("message") if isinstance(body, dict) else str(body)[:200]
        super().__init__(f"{method} {path}: {status} {msg}")
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        return str(self.body.get("reason") or "") if isinstance(self.body, dict) else ""


class Api:
    """Requests to one API server as one user; every method returns decoded JSON or raises ApiFailure."""

    def __init__(self, url: str, *, token: str | None = None, ca: str | None = None, user_agent: str = USER_AGENT,
                 timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.user_agent = user_agent
        self.timeout_s = timeout_s
        kw: dict[str, Any] = {"maxsize": 8, "retries": False}
        if url.startswith("https"):
            kw.update(cert_reqs="CERT_REQUIRED", ca_certs=str(ca)) if ca else kw.update(cert_reqs="CERT_NONE")
        self._pool = urllib3.PoolManager(**kw)
        self.kinds = dict(KINDS)

    def register(self, kind: Kind) -> None:
        self.kinds[kind.kind] = kind

    def kind(self, obj_or_kind: dict | str) -> Kind:
        name = obj_or_kind if isinstance(obj_or_kind, str) else obj_or_kind["kind"]
        return self.kinds[name]

    # ---- raw ---------------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None,
                content_type: str = "application/json", timeout_s: float | None = None) -> Any:
        # client-go's Accept (rest/request.go setAcceptHeader): virt-api's subresources 406 `application/json` alone
        headers = {"User-Agent": self.user_agent, "Accept": "application/json, */*"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        q = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.url + path + (f"?{urlencode(q)}" if q else "")
        resp = self._pool.request(method, url, body=data, headers=headers,
                                  timeout=urllib3.Timeout(total=timeout_s or self.timeout_s))
        text = resp.data
        try:
            decoded = json.loads(text) if text else None
        except ValueError:
            decoded = text.decode("utf-8", "replace")
        if not 200 <= resp.status < 300:
            raise ApiFailure(method, path, resp.status, decoded)
        return decoded

    # ---- objects -----------------------------------------------------------------------------------

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.request("GET", self.kinds[kind].path(name, namespace))
        except ApiFailure as e:
            if e.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None, *, labels: str | None = None,
             fields: str | None = None) -> list[dict]:
        out: list[dict] = []
        token = None
        while True:
            page = self.request("GET", self.kinds[kind].path(namespace=namespace),
                                query={"labelSelector": labels, "fieldSelector": fields, "limit": 500,
                                       "continue": token})
            out += self.typed(kind, page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return out

    def typed(self, kind: str, items: list[dict]) -> list[dict]:
        """A list's items with their ``kind`` and ``apiVersion`` (a server leaves them out of each item)."""
        k = self.kinds[kind]
        for item in items:
            item.setdefault("kind", k.kind)
            item.setdefault("apiVersion", k.api_version)
        return items

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        k = self.kind(obj)
        obj = {"apiVersion": k.api_version, **obj}
        return self.request("POST", k.path(namespace=obj["metadata"].get("namespace")), obj,
                            query={"dryRun": "All" if dry_run else None})

    def update(self, obj: dict, *, sub: str | None = None) -> dict:
        k = self.kind(obj)
        md = obj["metadata"]
        return self.request("PUT", k.path(md["name"], md.get("namespace"), sub), obj)

    def patch(self, kind: str, name: str, patch: Any, namespace: str | None = None, *, type_: str = "merge",
              sub: str | None = None) -> dict:
        ctype = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
                 "strategic": "application/strategic-merge-patch+json"}[type_]
        return self.request("PATCH", self.kinds[kind].path(name, namespace, sub), patch, content_type=ctype)

    def delete(self, kind: str, name: str, namespace: str | None = None, *, grace_s: int | None = None,
               missing_ok: bool = True) -> Any:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_s} \
            if grace_s is not None else None
        try:
            return self.request("DELETE", self.kinds[kind].path(name, namespace), body)
        except ApiFailure as e:
            if e.status == 404 and missing_ok:
                return None
            raise

    def mutate(self, kind: str, name: str, namespace: str | None, fn: Callable[[dict], None], *,
               sub: str | None = None, attempts: int = 10) -> dict | None:
        """GET, apply `fn` in place, PUT (to `sub`, e.g. ``status``); retried on 409. None when it is gone."""
        for _ in range(attempts):
            obj = self.get(kind, name, namespace)
            if obj is None:
                return None
            fn(obj)
            try:
                return self.update(obj, sub=sub)
            except ApiFailure as e:
                if e.status == 404:
                    return None
                if e.status != 409:
                    raise
        raise RuntimeError(f"{kind} {namespace}/{name}: still conflicting after {attempts} tries")

    def seed(self, *objs: dict) -> list[dict]:
        """Create each object as a client would, then give it the status it carries (``PUT .../status``): a real
        server drops status on create (a pod starts Pending) and keeps it only through the subresource. An
        ownerReference naming an object that exists gets that object's uid (a real server gives every object its
        own; the disruption controller, for one, finds a pod's controller by name and uid)."""
        out = []
        for obj in objs:
            status = obj.get("status")
            body = {k: v for k, v in obj.items() if k != "status"}
            body["metadata"] = {k: v for k, v in obj["metadata"].items()
                                if k not in ("resourceVersion", "uid", "creationTimestamp", "generation")}
            if body["metadata"].get("ownerReferences"):
                body["metadata"]["ownerReferences"] = [self._owned_by(r, body["metadata"].get("namespace"))
                                                       for r in body["metadata"]["ownerReferences"]]
            created = self.create(body)
            k = self.kind(obj)
            if status and k.status:  # a merge patch: no resourceVersion to race a controller writing status
                created = self.patch(k.kind, created["metadata"]["name"], {"status": status},
                                     created["metadata"].get("namespace"), sub="status")
            if k.kind == "Node" and _NOT_READY_TAINT not in _taint_keys(obj) and \
                    _NOT_READY_TAINT in _taint_keys(created):
                # kube-apiserver's TaintNodesByCondition admission taints every new Node not-ready until a
                # node-lifecycle controller sees it Ready; the node as written had no such taint.
                created = self.patch("Node", created["metadata"]["name"],
                                     {"spec": {"taints": (obj.get("spec") or {}).get("taints")}})
            out.append(created)
        return out

    def _owned_by(self, ref: dict, namespace: str | None) -> dict:
        k = self.kinds.get(ref.get("kind", ""))
        if k is None:
            return ref
        try:
            owner = self.get(k.kind, ref["name"], namespace if k.namespaced else None)
        except ApiFailure:
            return ref
        return {**ref, "uid": owner["metadata"]["uid"]} if owner else ref

    # ---- watch -------------------------------------------------------------------------------------

    def watch(self, kind: str, namespace: str | None = None, *, resource_version: str | None = None,
              labels: str | None = None, fields: str | None = None, timeout_s: int = 60,
              bookmarks: bool = False, on_open: Callable[[Any], None] | None = None) -> Iterator[dict]:
        """Yield watch events (dicts with type and object) until the server ends the stream. ``on_open`` gets the
        open response: another thread ends a stream blocked in a read with its ``shutdown()``."""
        q = {"watch": "true", "resourceVersion": resource_version, "labelSelector": labels, "fieldSelector": fields,
             "timeoutSeconds": timeout_s, "allowWatchBookmarks": "true" if bookmarks else None}
        q = {k: v for k, v in q.items() if v is not None}
        headers = {"User-Agent": self.user_agent}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        resp = self._pool.request("GET", f"{self.url}{self.kinds[kind].path(namespace=namespace)}?{urlencode(q)}",
                                  headers=headers, preload_content=False,
                                  timeout=urllib3.Timeout(connect=5, read=timeout_s + 10))
        if on_open is not None:
            on_open(resp)
        try:
            if resp.status != 200:
                raise ApiFailure("WATCH", kind, resp.status, resp.read().decode("utf-8", "replace"))
            buf = b""
            for chunk in resp.stream(4096, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()

    def wait_for(self, what: Callable[[], Any], *, timeout_s: float = 30.0, interval_s: float = 0.05,
                 message: str = "condition") -> Any:
        """Poll `what` until it returns something truthy; AssertionError naming `message` on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = what()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:g}s waiting for {message}")
            time.sleep(interval_s)
