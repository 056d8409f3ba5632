"""A loopback fake Kubernetes API server: a stateful object store speaking the real REST protocol.

Tests run the real ``kubernetes`` client (and real ``kubectl``) against it and then assert on the
server state (``get``/``list``) and on the recorded requests (``requests``/``writes()``). It is
standard library only: ``http.server.ThreadingHTTPServer`` on 127.0.0.1, port 0.

    fake = FakeApiServer(version="v1.34.1", deletion_delay_s=0.0).start()   # or `with FakeApiServer() as fake:`
    fake.add(objects.node("n1"), objects.pod("default", "p", node="n1"))
    api = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=fake.url))
    ...
    assert fake.get("Node", "n1")["spec"]["unschedulable"] is True
    assert [r.content_type for r in fake.writes()] == ["application/strategic-merge-patch+json"]

What it models (kube-apiserver behaviour, simplified where noted):

* Discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/{g}``, ``/apis/{g}/{v}`` in the
  legacy (non-aggregated) form; clients asking for aggregated discovery fall back to it, as they
  do against any server that answers plain ``application/json``. ``/openapi/*`` answers 404
  (so ``kubectl apply`` needs ``--validate=false``).
* CRUD on the resources of ``RESOURCES`` (one line each; a created CRD is served too),
  cluster-wide and namespaced paths, ``status`` subresources (main-resource writes keep the
  stored status; status writes change only status; creating a pod resets its status to Pending,
  creating a custom resource drops its status), label selectors (=, ==, !=, in, notin, exists,
  !exists), field selectors limited to the fields the real registry supports (400 otherwise),
  ``limit``/``continue`` paging (``remainingItemCount`` only when no selector was given, as a real
  server), optimistic concurrency on ``metadata.resourceVersion`` for PUT and patches,
  ``generateName``, ``dryRun=All`` on every write, finalizers, no-op writes that keep the
  resourceVersion, ``generation`` bumped on spec changes.
* Patches: JSON patch (RFC 6902; a failed ``test`` or a missing path is 422 Invalid with the
  real generic message and the json-patch error in ``details.causes``), merge patch (RFC 7386),
  strategic merge patch with the merge keys of ``SMP_MERGE_KEYS`` (lists not listed there are
  atomic, e.g. node taints and pod tolerations, as in the real API) and the ``$patch``,
  ``$retainKeys``, ``$deleteFromPrimitiveList`` and ``$setElementOrder`` directives; strategic
  merge on a custom resource and unknown patch types are 415.
* Deletion: pods on a node are deleted gracefully when ``deletion_delay_s`` (or the pod
  annotation ``fake.rblnctl.io/deletion-delay-s``) is > 0: ``deletionTimestamp`` and
  ``deletionGracePeriodSeconds`` are set and the pod goes after the delay; unscheduled and
  finished pods, and ``gracePeriodSeconds: 0``, delete at once. Pods and custom resources answer
  with the object, other kinds with a Success Status.
* ``pods/eviction``: ``eviction_hook``, then PodDisruptionBudgets (minAvailable/maxUnavailable,
  int or percent; expected count from the owning controller's ``spec.replicas``), 429 with the
  real message and ``DisruptionBudget`` cause, else 201 and a (graceful) delete.
* Watch (``?watch=true``): a chunked stream of JSON events, replaying from ``resourceVersion``
  (410 Expired when older than the kept history) or starting with synthetic ADDED events;
  selectors apply, an object that stops matching arrives as DELETED. Enough for ``kubectl wait``
  and ``kubernetes.watch.Watch``.
* Every error is a ``Status`` object with the reason and message text a real server uses;
  ``forbid()`` gives real-style 403s, ``require_token`` real 401s, ``inject_fault()`` 5xx,
  delays and dropped connections.
* ``on_change`` callbacks run after each committed change, outside the lock, on the thread that
  made it; for an HTTP write that is before the response is sent, so a test can wait for a
  reaction (e.g. ``SimulatedOperator.wait_idle``) right after a client call without races.

Not modelled: admission webhooks and schema validation (bodies are stored as sent), RBAC beyond
``forbid()``, garbage collection of dependents, namespace termination (deleting a namespace
deletes its contents at once), Table output for ``kubectl get`` (kubectl falls back to NAME/AGE
columns), server-side apply field ownership (``application/apply-patch+yaml`` must be JSON; it
creates a missing object, else applies like a strategic merge / merge patch), and continue
tokens do not pin a snapshot (paging continues after the last name at current state).
"""

from __future__ import annotations

import base64
import copy
import json
import math
import queue
import random
import re
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, unquote, urlsplit

FAKE_USER = "fake-user"
FAKE_TOKEN = "fake-token"
#: Per-pod graceful deletion delay (seconds, as a string) overriding the server-wide one.
DELETION_DELAY_ANNOTATION = "fake.rblnctl.io/deletion-delay-s"

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_HISTORY_LIMIT = 5000

# --------------------------------------------------------------------------------------------
# Resource table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """One served resource. ``custom`` marks CustomResourceDefinition-backed resources."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ("status",)
    custom: bool = False
    # Extra fieldSelector fields beyond metadata.name / metadata.namespace (as the real registry).
    field_selectors: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    singular: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def id(self) -> str:
        """``plural`` for the core group, ``plural.group`` otherwise (as kubectl spells it)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def returns_deleted_object(self) -> bool:
        # Real registries: pods and custom resources return the object, most others a Status.
        return self.custom or self.id == "pods"


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_R = Resource
RESOURCES: tuple[Resource, ...] = (
    _R("", "v1", "nodes", "Node", False, ("no",), ("status", "proxy"), field_selectors=("spec.unschedulable",)),
    _R("", "v1", "pods", "Pod", True, ("po",), ("status", "eviction", "log", "binding"),
       field_selectors=_POD_FIELDS, categories=("all",)),
    _R("", "v1", "namespaces", "Namespace", False, ("ns",), ("status", "finalize"), field_selectors=("status.phase",)),
    _R("", "v1", "events", "Event", True, ("ev",), (),
       field_selectors=("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                        "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                        "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")),
    _R("", "v1", "configmaps", "ConfigMap", True, ("cm",), ()),
    _R("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("status",), categories=("all",)),
    _R("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), ("status", "scale"), categories=("all",)),
    _R("apps", "v1", "deployments", "Deployment", True, ("deploy",), ("status", "scale"), categories=("all",)),
    _R("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",), ("status", "scale"), categories=("all",)),
    _R("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",), ("status",)),
    _R("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
       ("crd", "crds"), ("status",)),
    _R("kubevirt.io", "v1", "kubevirts", "KubeVirt", True, ("kv", "kvs"), ("status",), custom=True),
    _R("kubevirt.io", "v1", "virtualmachines", "VirtualMachine", True, ("vm", "vms"), ("status",), custom=True),
    _R("kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance", True, ("vmi", "vmis"),
       ("status",), custom=True),
    _R("rebellions.ai", "v1beta1", "rblnclusterpolicies", "RBLNClusterPolicy", False, ("rcp", "rblncp"),
       ("status",), custom=True),
    _R("nfd.k8s-sigs.io", "v1alpha1", "nodefeatures", "NodeFeature", True, (), (), custom=True),
    _R("nfd.k8s-sigs.io", "v1alpha1", "nodefeaturerules", "NodeFeatureRule", False, ("nfr",), (), custom=True),
    _R("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False, (), ()),
    _R("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, (), (),
       field_selectors=("spec.nodeName", "spec.driver")),
    _R("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, (), ("status",)),
    _R("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True, (), ()),
    _R("coordination.k8s.io", "v1", "leases", "Lease", True, (), ()),
)
del _R

# Discovery entries for subresources whose kind differs from the parent resource.
_SUBRESOURCE_KIND = {"eviction": ("policy", "v1", "Eviction"), "scale": ("autoscaling", "v1", "Scale"),
                     "binding": ("", "", "Binding"), "log": ("", "", "Pod"), "proxy": ("", "", "NodeProxyOptions")}
_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "eviction": ["create"], "scale": ["get", "patch", "update"],
                      "binding": ["create"], "log": ["get"], "proxy": ["create", "delete", "get", "patch", "update"],
                      "finalize": ["update"]}

_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    406: "NotAcceptable", 409: "Conflict", 410: "Expired", 413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
    503: "ServiceUnavailable", 504: "Timeout",
}

# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _ts(dt: datetime | None = None) -> str:
    return (dt or _now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str | None, message: str, details: dict | None = None) -> dict:
    """A ``Status`` object exactly as kube-apiserver serialises a failure."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason if reason is not None else _REASONS.get(code, "")}
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


def _details(res: Resource, name: str | None) -> dict:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if res.group:
        d["group"] = res.group
    d["kind"] = res.plural
    return d


def _gr(res: Resource) -> str:
    """``resource.group`` as Kubernetes messages print a GroupResource."""
    return f"{res.plural}.{res.group}" if res.group else res.plural


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_gr(res)} "{name}" not found', _details(res, name))


def conflict(res: Resource, name: str) -> ApiError:
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {_gr(res)} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again", _details(res, name))


def invalid(res: Resource, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid as ``errors.NewInvalid`` builds it; causes are (reason, field, message)."""
    qkind = f"{res.kind}.{res.group}" if res.group else res.kind
    text = ", ".join(f"{f}: {m}" for _, f, m in causes)
    if len(causes) > 1:
        text = "[" + text + "]"
    details: dict[str, Any] = {"name": name}
    if res.group:
        details["group"] = res.group
    details["kind"] = res.kind
    details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    return ApiError(422, "Invalid", f'{qkind} "{name}" is invalid: {text}', details)


def _unknown_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def _method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _lookup_path(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _field_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _spec_part(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _without_rv(obj: dict) -> dict:
    o = copy.deepcopy(obj)
    o.get("metadata", {}).pop("resourceVersion", None)
    o.get("metadata", {}).pop("managedFields", None)
    return o


# --------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"


def _split_top(expr: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(expr: str) -> Callable[[dict], bool]:
    """Parse a labelSelector string (=, ==, !=, in, notin, exists, !exists, gt, lt)."""
    reqs: list[Callable[[dict], bool]] = []
    for part in _split_top(expr or ""):
        m = re.fullmatch(rf"!\s*({_KEY})", part)
        if m:
            k = m.group(1)
            reqs.append(lambda lb, k=k: k not in lb)
            continue
        m = re.fullmatch(rf"({_KEY})\s+(in|notin)\s*\(([^)]*)\)", part)
        if m:
            k, op = m.group(1), m.group(2)
            vals = {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                reqs.append(lambda lb, k=k, vals=vals: k in lb and lb[k] in vals)
            else:
                reqs.append(lambda lb, k=k, vals=vals: k not in lb or lb[k] not in vals)
            continue
        m = re.fullmatch(rf"({_KEY})\s*(==|=|!=|>|<)\s*({_VALUE})", part)
        if m:
            k, op, v = m.group(1), m.group(2), m.group(3)
            if op in ("=", "=="):
                reqs.append(lambda lb, k=k, v=v: lb.get(k) == v)
            elif op == "!=":
                reqs.append(lambda lb, k=k, v=v: lb.get(k) != v)
            else:
                try:
                    num = int(v)
                except ValueError:
                    raise _bad_request("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer")
                if op == ">":
                    reqs.append(lambda lb, k=k, n=num: k in lb and lb[k].lstrip("-").isdigit() and int(lb[k]) > n)
                else:
                    reqs.append(lambda lb, k=k, n=num: k in lb and lb[k].lstrip("-").isdigit() and int(lb[k]) < n)
            continue
        m = re.fullmatch(rf"({_KEY})", part)
        if m:
            k = m.group(1)
            reqs.append(lambda lb, k=k: k in lb)
            continue
        raise _bad_request(f"unable to parse requirement: found '{part}', expected: in, notin, =, ==, !=, gt, lt")
    return lambda labels: all(r(labels or {}) for r in reqs)


def _split_fields(expr: str) -> list[str]:
    parts, cur, esc = [], [], False
    for ch in expr:
        if esc:
            cur.append(ch)
            esc = False
        elif ch == "\\":
            esc = True
        elif ch == ",":
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_field_selector(expr: str, res: Resource) -> Callable[[dict], bool]:
    allowed = {"metadata.name", "metadata.namespace", *res.field_selectors}
    reqs: list[Callable[[dict], bool]] = []
    for part in _split_fields(expr or ""):
        m = re.fullmatch(r"([^=!]+?)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise _bad_request(f"invalid selector: '{expr}'; can't understand '{part}'")
        key, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if key not in allowed:
            raise _bad_request(f'field label not supported: {key}')
        if op == "!=":
            reqs.append(lambda o, k=key, v=value: _field_string(_lookup_path(o, k)) != v)
        else:
            reqs.append(lambda o, k=key, v=value: _field_string(_lookup_path(o, k)) == v)
    return lambda obj: all(r(obj) for r in reqs)


def label_selector_matches(selector: dict | None, labels: dict | None) -> bool:
    """A metav1.LabelSelector (matchLabels/matchExpressions) against labels. Empty selects all."""
    labels = labels or {}
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        k, op, vals = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and (k not in labels or labels[k] not in vals):
            return False
        if op == "NotIn" and k in labels and labels[k] in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------


class PatchError(Exception):
    pass


def _ptr(path: str) -> list[str]:
    if path == "":
        return []
    if not isinstance(path, str) or not path.startswith("/"):
        raise PatchError(f'JSON pointer must start with "/": "{path}"')
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(token: str, length: int, allow_end: bool, op: str, path: str) -> int:
    if token == "-" and allow_end:
        return length
    if not re.fullmatch(r"0|[1-9][0-9]*", token):
        raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    i = int(token)
    if i > length or (i == length and not allow_end):
        raise PatchError(f"Unable to access invalid index: {i}: invalid index referenced")
    return i


def _container(doc: Any, tokens: list[str], op: str, path: str) -> Any:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(t, len(cur), False, op, path)]
        else:
            raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    if not isinstance(cur, (dict, list)):
        raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return cur


def _get(doc: Any, path: str, op: str) -> Any:
    cur = doc
    for t in _ptr(path):
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(t, len(cur), False, op, path)]
        else:
            if op == "test":
                raise PatchError(f"testing value {path} failed: test failed")
            raise PatchError(f'{op} operation does not apply: doc is missing from path: "{path}": missing value')
    return cur


def apply_json_patch(doc: Any, ops: list) -> Any:
    """RFC 6902. Raises PatchError with evanphx/json-patch style messages."""
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError("invalid operation")
        kind, path = op["op"], op.get("path")
        if path is None:
            raise PatchError(f"{kind} operation missing path")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"missing value for {kind} operation")
        tokens = _ptr(path)
        if kind == "test":
            if _get(doc, path, "test") != op["value"]:
                raise PatchError(f"testing value {path} failed: test failed")
            continue
        if kind in ("move", "copy"):
            src = op.get("from")
            if src is None:
                raise PatchError(f"{kind} operation missing from")
            value = copy.deepcopy(_get(doc, src, kind))
            if kind == "move":
                doc = _remove(doc, src, "move")
            doc = _add(doc, tokens, value, path)
            continue
        if kind == "add":
            doc = _add(doc, tokens, copy.deepcopy(op["value"]), path)
        elif kind == "remove":
            doc = _remove(doc, path, "remove")
        elif kind == "replace":
            if not tokens:
                doc = copy.deepcopy(op["value"])
                continue
            parent = _container(doc, tokens, "replace", path)
            key = tokens[-1]
            if isinstance(parent, dict):
                if key not in parent:
                    raise PatchError(f"replace operation does not apply: doc is missing key: {path}: missing value")
                parent[key] = copy.deepcopy(op["value"])
            else:
                parent[_index(key, len(parent), False, "replace", path)] = copy.deepcopy(op["value"])
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


def _add(doc: Any, tokens: list[str], value: Any, path: str) -> Any:
    if not tokens:
        return value
    parent = _container(doc, tokens, "add", path)
    key = tokens[-1]
    if isinstance(parent, dict):
        parent[key] = value
    else:
        parent.insert(_index(key, len(parent), True, "add", path), value)
    return doc


def _remove(doc: Any, path: str, op: str) -> Any:
    tokens = _ptr(path)
    if not tokens:
        raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    parent = _container(doc, tokens, op, path)
    key = tokens[-1]
    if isinstance(parent, dict):
        if key not in parent:
            raise PatchError(f"Unable to remove nonexistent key: {key}: missing value")
        del parent[key]
    else:
        del parent[_index(key, len(parent), False, op, path)]
    return doc


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = apply_merge_patch(result.get(k), v)
    return result


#: Strategic merge patch keys for lists of objects (from the ``patchMergeKey`` tags of the
#: k8s.io/api types this server serves). Lists not named here are atomic (replaced whole), as
#: e.g. node ``spec.taints`` and pod ``spec.tolerations`` are in the real API.
SMP_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
    "env": "name", "imagePullSecrets": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "ports": "containerPort", "conditions": "type", "addresses": "type", "ownerReferences": "uid",
    "hostAliases": "ip", "resourceClaims": "name", "schedulingGates": "name",
    "topologySpreadConstraints": "topologyKey",
}
#: Lists of scalars with ``patchStrategy:"merge"`` (set union on patch).
SMP_PRIMITIVE_MERGE = {"finalizers"}


def apply_strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    orders: dict[str, list] = {}
    deletes: dict[str, list] = {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v or []
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            deletes[k.split("/", 1)[1]] = v or []
            continue
        if k in ("$patch", "$retainKeys"):
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, dict):
            if v.get("$patch") == "delete":
                result.pop(k, None)
            else:
                result[k] = apply_strategic_merge_patch(result.get(k), v)
        elif isinstance(v, list) and k in SMP_MERGE_KEYS and all(isinstance(i, dict) for i in v):
            result[k] = _smp_merge_list(result.get(k) or [], v, SMP_MERGE_KEYS[k])
        elif isinstance(v, list) and k in SMP_PRIMITIVE_MERGE:
            cur = list(result.get(k) or [])
            result[k] = cur + [i for i in v if i not in cur]
        else:
            result[k] = copy.deepcopy(v)
    for k, vals in deletes.items():
        if isinstance(result.get(k), list):
            result[k] = [i for i in result[k] if i not in vals]
    for k, order in orders.items():
        if isinstance(result.get(k), list):
            key = SMP_MERGE_KEYS.get(k)

            def pos(item: Any, key: str | None = key, order: list = order) -> int:
                ident = item.get(key) if (key and isinstance(item, dict)) else item
                for i, o in enumerate(order):
                    if (o.get(key) if (key and isinstance(o, dict)) else o) == ident:
                        return i
                return len(order)

            result[k] = sorted(result[k], key=pos)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_merge_list(orig: list, patch: list, key: str) -> list:
    if any(i.get("$patch") == "replace" for i in patch):
        return [{k: copy.deepcopy(v) for k, v in i.items() if not k.startswith("$")}
                for i in patch if i.get("$patch") != "replace"]
    result = copy.deepcopy(orig)
    for item in patch:
        ident = item.get(key)
        idx = next((n for n, o in enumerate(result) if isinstance(o, dict) and o.get(key) == ident), None)
        if item.get("$patch") == "delete":
            result = [o for o in result if not (isinstance(o, dict) and o.get(key) == ident)]
        elif idx is None:
            result.append({k: copy.deepcopy(v) for k, v in item.items() if not k.startswith("$")})
        else:
            result[idx] = apply_strategic_merge_patch(result[idx], item)
    return result


# --------------------------------------------------------------------------------------------
# Records, faults, events
# --------------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One HTTP request as the server saw it. ``status`` is 0 until answered (and for drops)."""

    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any  # parsed JSON, the raw text when not JSON, or None when empty
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def dry_run(self) -> bool:
        """``dryRun=All`` in the query, or in a DeleteOptions / Eviction body."""
        if "All" in self.query.get("dryRun", []):
            return True
        if isinstance(self.body, dict):
            opts = self.body.get("deleteOptions") if "deleteOptions" in self.body else self.body
            return "All" in ((opts or {}).get("dryRun") or [])
        return False

    @property
    def is_write(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


@dataclass
class _Fault:
    method: str | None
    path: str | None
    status: int | None
    reason: str | None
    message: str
    delay_s: float
    drop: bool
    times: int
    retry_after_s: int | None


@dataclass
class _Event:
    rv: int
    res_id: str
    type: str
    obj: dict
    old: dict | None


class _Watcher:
    def __init__(self, res_id: str, namespace: str | None):
        self.res_id = res_id
        self.namespace = namespace
        self.queue: queue.Queue[_Event] = queue.Queue()


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class FakeApiServer:
    """A stateful fake kube-apiserver on 127.0.0.1. See the module docstring."""

    def __init__(self, *, version: str = "v1.34.1", deletion_delay_s: float = 0.0,
                 require_token: bool = False, auto_namespaces: bool = True,
                 resources: Iterable[Resource] = RESOURCES,
                 tls_cert: str | Path | None = None, tls_key: str | Path | None = None,
                 client_ca: str | Path | None = None):
        """``tls_cert``/``tls_key`` (PEM files) serve HTTPS instead of HTTP; ``client_ca`` then also
        requires a client certificate signed by that CA (kubeconfig ``client-certificate``)."""
        self._lock = threading.RLock()
        self.tls_cert = tls_cert
        self.tls_key = tls_key
        self.client_ca = client_ca
        self._resources: dict[str, Resource] = {}
        for r in resources:
            self._resources[r.id] = r
        self._store: dict[str, dict[tuple[str, str], dict]] = {}
        self._rv = 1000
        self._history: list[_Event] = []
        self._pruned_rv = 0
        self._watchers: list[_Watcher] = []
        self._change_callbacks: list[Callable[[str, dict], None]] = []
        self._request_callbacks: list[Callable[[RecordedRequest], None]] = []
        self._faults: list[_Fault] = []
        self._forbidden: list[tuple[str, str, str | None]] = []
        self._timers: set[threading.Timer] = set()
        self._conns: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.deletion_delay_s = deletion_delay_s
        self.require_token = require_token
        self.token = FAKE_TOKEN
        self.user = FAKE_USER
        self.auto_namespaces = auto_namespaces
        self.url = ""
        self.requests: list[RecordedRequest] = []
        #: Exceptions raised by callbacks or by the server itself while handling requests.
        self.errors: list[str] = []
        self.eviction_hook: Callable[[dict, dict], tuple[int, str] | None] | None = None
        self.version_info: dict[str, str] = {}
        self.set_version(version)

    # ---- lifecycle -------------------------------------------------------------------------

    def handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class bound to this fake (for callers running their own server)."""
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        return Handler

    def start(self) -> "FakeApiServer":
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server(("127.0.0.1", 0), self.handler(), bind_and_activate=False)
        httpd.daemon_threads = True
        httpd.request_queue_size = 64
        httpd.allow_reuse_address = True
        httpd.server_bind()
        httpd.server_activate()
        scheme = "http"
        if self.tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(self.tls_cert), str(self.tls_key) if self.tls_key else None)
            if self.client_ca:
                ctx.verify_mode = ssl.CERT_REQUIRED
                ctx.load_verify_locations(str(self.client_ca))
            # The handshake runs on the handler thread (_Handler.setup), so a client that fails it
            # (an untrusted certificate) never stalls the accept loop.
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
            scheme = "https"
        self._httpd = httpd
        self.url = f"{scheme}://127.0.0.1:{httpd.server_address[1]}"
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        with self._lock:
            conns = list(self._conns)
            timers = list(self._timers)
            self._timers.clear()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in timers:
            t.cancel()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "FakeApiServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1]) if self.url else 0

    def write_kubeconfig(self, path: str | Path, *, context: str = "fake", namespace: str = "default",
                         ca: str | Path | None = None, insecure: bool = False,
                         client_cert: str | Path | None = None, client_key: str | Path | None = None) -> Path:
        """Write a kubeconfig (bearer token ``fake-token``) pointing at this server. For HTTPS: ``ca``
        (a PEM file, written inline as certificate-authority-data) or ``insecure``
        (insecure-skip-tls-verify), and ``client_cert``/``client_key`` for client-certificate auth."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        q = json.dumps

        def data(pem: str | Path) -> str:
            return base64.b64encode(Path(pem).read_bytes()).decode()

        tls = ""
        if ca:
            tls += f"    certificate-authority-data: {data(ca)}\n"
        if insecure:
            tls += "    insecure-skip-tls-verify: true\n"
        user_tls = ""
        if client_cert:
            user_tls += f"    client-certificate-data: {data(client_cert)}\n"
            user_tls += f"    client-key-data: {data(client_key or client_cert)}\n"
        path.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            f"- name: {q(context)}\n"
            "  cluster:\n"
            f"    server: {q(self.url)}\n"
            f"{tls}"
            "contexts:\n"
            f"- name: {q(context)}\n"
            "  context:\n"
            f"    cluster: {q(context)}\n"
            f"    user: {q(self.user)}\n"
            f"    namespace: {q(namespace)}\n"
            f"current-context: {q(context)}\n"
            "preferences: {}\n"
            "users:\n"
            f"- name: {q(self.user)}\n"
            "  user:\n"
            f"    token: {q(self.token)}\n"
            f"{user_tls}"
        )
        return path

    def set_version(self, git_version: str) -> None:
        m = re.match(r"v?(\d+)\.(\d+)", git_version)
        if not m:
            raise ValueError(f"not a Kubernetes version: {git_version!r}")
        major, minor = m.group(1), m.group(2)
        info = {
            "major": major,
            "minor": minor,
            "gitVersion": git_version,
            "gitCommit": "0123456789abcdef0123456789abcdef01234567",
            "gitTreeState": "clean",
            "buildDate": "2025-09-09T19:44:50Z",
            "goVersion": "go1.24.6",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
        if (int(major), int(minor)) >= (1, 34):
            info.update({"emulationMajor": major, "emulationMinor": minor,
                         "minCompatibilityMajor": major, "minCompatibilityMinor": str(int(minor) - 1)})
        with self._lock:
            self.version_info = info

    # ---- resource table --------------------------------------------------------------------

    def add_resource(self, res: Resource) -> None:
        with self._lock:
            self._resources[res.id] = res

    def remove_resource(self, name: str) -> None:
        """Stop serving a resource (``"kubevirts.kubevirt.io"``, ``"KubeVirt"`` or ``"nodes"``),
        e.g. to simulate a CRD that is not installed or an API group the cluster lacks."""
        with self._lock:
            res = self._resolve(name)
            del self._resources[res.id]

    def resources(self) -> list[Resource]:
        with self._lock:
            return list(self._resources.values())

    def _resolve(self, kind: str, api_version: str | None = None) -> Resource:
        group = None
        if api_version is not None:
            group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        cands = list(self._resources.values())
        for match in (
            lambda r: r.kind == kind,
            lambda r: r.id == kind,
            lambda r: r.plural == kind or r.singular_name == kind.lower(),
            lambda r: kind.lower() in r.short_names or r.kind.lower() == kind.lower(),
        ):
            found = [r for r in cands if match(r) and (group is None or r.group == group)]
            if found:
                return found[0]
        raise KeyError(f"resource not served by the fake apiserver: {kind!r} ({api_version})")

    def _find(self, group: str, version: str, plural: str) -> Resource | None:
        for r in self._resources.values():
            if r.group == group and r.version == version and r.plural == plural:
                return r
        return None

    # ---- state API (thread-safe) -----------------------------------------------------------

    def add(self, *objs: dict) -> None:
        """Seed objects. uid/resourceVersion/creationTimestamp/generation are set when missing."""
        events: list[_Event] = []
        with self._lock:
            for obj in objs:
                res = self._resolve(obj.get("kind", ""), obj.get("apiVersion"))
                obj = copy.deepcopy(obj)
                obj.setdefault("apiVersion", res.api_version)
                obj.setdefault("kind", res.kind)
                md = obj.setdefault("metadata", {})
                if not md.get("name"):
                    raise ValueError(f"{res.kind} without metadata.name")
                if res.namespaced:
                    md.setdefault("namespace", "default")
                else:
                    md.pop("namespace", None)
                key = (md.get("namespace", ""), md["name"])
                if key in self._bucket(res):
                    raise ValueError(f"{res.kind} {key} already exists")
                if res.namespaced:
                    events += self._ensure_namespace(md["namespace"])
                md.setdefault("uid", str(uuid.uuid4()))
                md.setdefault("creationTimestamp", _ts())
                md.setdefault("generation", 1)
                md.pop("resourceVersion", None)
                events.append(self._commit(res, "ADDED", obj, None))
        self._notify(events)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        with self._lock:
            res = self._resolve(kind)
            obj = self._bucket(res).get((self._ns(res, namespace), name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: str, namespace: str | None = None) -> list[dict]:
        with self._lock:
            res = self._resolve(kind)
            items = [o for (ns, _), o in self._bucket(res).items() if namespace is None or ns == namespace]
            return copy.deepcopy(sorted(items, key=_sort_key))

    def update(self, obj: dict) -> dict:
        """Server-side replace (no resourceVersion check). Keeps uid/creationTimestamp when absent,
        bumps resourceVersion (and generation when the spec changed), notifies watchers."""
        with self._lock:
            out, events = self._update_locked(obj)
        self._notify(events)
        return out

    def mutate(self, kind: str, name: str, namespace: str | None = None,
               fn: Callable[[dict], dict | None] | None = None) -> dict:
        """Atomic read-modify-write: ``fn`` edits a copy of the object in place (or returns a new
        object dict with ``metadata``; any other return value, e.g. of ``dict.pop``, is ignored),
        which is then stored as by ``update``. Raises KeyError when the object is missing."""
        assert fn is not None
        with self._lock:
            res = self._resolve(kind)
            cur = self._bucket(res).get((self._ns(res, namespace), name))
            if cur is None:
                raise KeyError(f"{res.kind} {namespace}/{name} not found")
            cur = copy.deepcopy(cur)
            result = fn(cur)
            use = result if isinstance(result, dict) and "metadata" in result else cur
            out, events = self._update_locked(use)
        self._notify(events)
        return out

    def _update_locked(self, obj: dict) -> tuple[dict, list[_Event]]:
        res = self._resolve(obj.get("kind", ""), obj.get("apiVersion"))
        md = obj.get("metadata") or {}
        key = (self._ns(res, md.get("namespace")), md.get("name", ""))
        old = self._bucket(res).get(key)
        if old is None:
            raise KeyError(f"{res.kind} {key} not found")
        new = copy.deepcopy(obj)
        new.setdefault("apiVersion", res.api_version)
        new.setdefault("kind", res.kind)
        nmd = new.setdefault("metadata", {})
        for k in ("uid", "creationTimestamp", "generation"):
            if k not in nmd and k in old["metadata"]:
                nmd[k] = old["metadata"][k]
        if res.namespaced:
            nmd["namespace"] = key[0]
        events = self._store_update(res, key, copy.deepcopy(old), new)
        stored = self._bucket(res).get(key)
        return copy.deepcopy(stored if stored is not None else events[-1].obj), events

    def delete_now(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Remove an object at once (no grace period, finalizers ignored)."""
        with self._lock:
            res = self._resolve(kind)
            key = (self._ns(res, namespace), name)
            obj = self._bucket(res).get(key)
            if obj is None:
                raise KeyError(f"{res.kind} {key} not found")
            events = self._remove(res, key)
        self._notify(events)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """Delete as an API DELETE would (graceful pod deletion, finalizers). Returns the object
        as the server answers it, or None when it did not exist."""
        with self._lock:
            res = self._resolve(kind)
            key = (self._ns(res, namespace), name)
            if key not in self._bucket(res):
                return None
            out, events = self._delete_obj(res, key, {}, dry_run=False)
        self._notify(events)
        return out

    # ---- requests, hooks, faults, authz ------------------------------------------------------

    def writes(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if r.is_write]

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def on_change(self, callback: Callable[[str, dict], None]) -> Callable[[], None]:
        """Call ``callback(event, obj)`` (ADDED/MODIFIED/DELETED, a copy of the object) after every
        committed change, outside the lock, on the thread that made it (for HTTP writes: before
        the response is sent). Exceptions land in ``errors``. Returns a function that unsubscribes."""
        with self._lock:
            self._change_callbacks.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._change_callbacks:
                    self._change_callbacks.remove(callback)

        return unsubscribe

    def on_request(self, callback: Callable[[RecordedRequest], None]) -> Callable[[], None]:
        """Call ``callback(req)`` before handling each request (outside the lock; ``req.status``
        is 0 then). A test can change state here between a client's read and its write."""
        with self._lock:
            self._request_callbacks.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._request_callbacks:
                    self._request_callbacks.remove(callback)

        return unsubscribe

    def inject_fault(self, *, method: str | None = None, path: str | None = None, status: int | None = 500,
                     reason: str | None = None, message: str = "injected fault", delay_s: float = 0.0,
                     drop: bool = False, times: int = 1, retry_after_s: int | None = None) -> None:
        """The next ``times`` requests matching ``method`` and ``path`` (regex, ``re.search`` on the
        path without query) wait ``delay_s``, then: the connection is dropped (``drop``), or a Status
        with ``status`` is returned, or (``status=None``) the request is served normally."""
        with self._lock:
            self._faults.append(_Fault(method.upper() if method else None, path, status, reason, message,
                                       delay_s, drop, times, retry_after_s))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def forbid(self, verb: str, resource: str, namespace: str | None = None) -> None:
        """Make matching requests fail with a real-style 403. ``verb`` may be ``*``; ``resource``
        is ``nodes``, ``pods/eviction``, ``kubevirts`` or group-qualified ``kubevirts.kubevirt.io``;
        ``namespace`` None matches every namespace and the cluster scope."""
        with self._lock:
            self._forbidden.append((verb, resource, namespace))

    def allow_all(self) -> None:
        with self._lock:
            self._forbidden.clear()

    # ---- internals: store --------------------------------------------------------------------

    def _bucket(self, res: Resource) -> dict[tuple[str, str], dict]:
        return self._store.setdefault(res.id, {})

    @staticmethod
    def _ns(res: Resource, namespace: str | None) -> str:
        if not res.namespaced:
            return ""
        return namespace if namespace is not None else "default"

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _commit(self, res: Resource, etype: str, obj: dict, old: dict | None) -> _Event:
        """Store (or remove, for DELETED) ``obj`` with a new resourceVersion. Lock held."""
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if etype == "DELETED":
            self._bucket(res).pop(key, None)
        else:
            self._bucket(res)[key] = obj
        if res.id == "customresourcedefinitions.apiextensions.k8s.io" and etype != "DELETED":
            self._serve_crd(obj)
        ev = _Event(rv, res.id, etype, copy.deepcopy(obj), copy.deepcopy(old) if old is not None else None)
        self._history.append(ev)
        if len(self._history) > _HISTORY_LIMIT:
            drop = len(self._history) - _HISTORY_LIMIT
            self._pruned_rv = self._history[drop - 1].rv
            del self._history[:drop]
        for w in self._watchers:
            if w.res_id == res.id and (w.namespace is None or w.namespace == key[0]):
                w.queue.put(ev)
        return ev

    def _serve_crd(self, crd: dict) -> None:
        """Serve the resource a newly added CRD defines, unless the table already has it."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
        if not (spec.get("group") and names.get("plural") and names.get("kind") and versions):
            return
        if f"{names['plural']}.{spec['group']}" in self._resources:
            return
        v = next((v for v in versions if v.get("storage")), versions[0])
        subs = ("status",) if "status" in (v.get("subresources") or {}) else ()
        res = Resource(spec["group"], v["name"], names["plural"], names["kind"], spec.get("scope") != "Cluster",
                       tuple(names.get("shortNames") or ()), subs, custom=True, singular=names.get("singular", ""))
        self._resources[res.id] = res

    def _notify(self, events: list[_Event]) -> None:
        if not events:
            return
        with self._lock:
            callbacks = list(self._change_callbacks)
        for ev in events:
            for cb in callbacks:
                try:
                    cb(ev.type, copy.deepcopy(ev.obj))
                except Exception as exc:  # noqa: BLE001 - recorded for the test to see
                    self.errors.append(f"on_change callback {cb!r} raised {exc!r}")

    def _ensure_namespace(self, ns: str) -> list[_Event]:
        if not self.auto_namespaces or not ns:
            return []
        res = self._resources.get("namespaces")
        if res is None or ("", ns) in self._bucket(res):
            return []
        obj = {"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": ns, "uid": str(uuid.uuid4()), "creationTimestamp": _ts(),
                            "labels": {"kubernetes.io/metadata.name": ns}},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        return [self._commit(res, "ADDED", obj, None)]

    def _store_update(self, res: Resource, key: tuple[str, str], old: dict, new: dict) -> list[_Event]:
        """Commit ``new`` over ``old`` unless nothing changed. Handles generation and finalizers."""
        nmd = new["metadata"]
        if _spec_part(new) != _spec_part(old):
            nmd["generation"] = int(old["metadata"].get("generation", 1)) + 1
        elif "generation" in old["metadata"]:
            nmd["generation"] = old["metadata"]["generation"]
        if _without_rv(new) == _without_rv(old):
            new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
            self._bucket(res)[key] = new
            return []
        events = [self._commit(res, "MODIFIED", new, old)]
        if nmd.get("deletionTimestamp") and not nmd.get("finalizers") and not self._graceful_pending(res, new):
            events += self._remove(res, key)
        return events

    def _graceful_pending(self, res: Resource, obj: dict) -> bool:
        return res.id == "pods" and obj["metadata"].get("deletionGracePeriodSeconds", 0) > 0

    def _remove(self, res: Resource, key: tuple[str, str]) -> list[_Event]:
        obj = self._bucket(res).get(key)
        if obj is None:
            return []
        events = [self._commit(res, "DELETED", copy.deepcopy(obj), obj)]
        if res.id == "namespaces":
            for other in list(self._resources.values()):
                if other.namespaced:
                    for k in [k for k in self._bucket(other) if k[0] == key[1]]:
                        events += self._remove(other, k)
        return events

    def _pod_delay(self, pod: dict) -> float:
        ann = (pod["metadata"].get("annotations") or {}).get(DELETION_DELAY_ANNOTATION)
        if ann is not None:
            try:
                return float(ann)
            except ValueError:
                pass
        return float(self.deletion_delay_s)

    def _delete_obj(self, res: Resource, key: tuple[str, str], options: dict,
                    dry_run: bool) -> tuple[dict, list[_Event]]:
        """The DELETE semantics. Returns (response body, events). Lock held."""
        obj = self._bucket(res)[key]
        pre = options.get("preconditions") or {}
        md = obj["metadata"]
        if pre.get("uid") and pre["uid"] != md.get("uid"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_gr(res)} "{key[1]}": '
                           f'Precondition failed: UID in precondition: {pre["uid"]}, UID in object meta: {md.get("uid")}',
                           _details(res, key[1]))
        if pre.get("resourceVersion") and pre["resourceVersion"] != md.get("resourceVersion"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_gr(res)} "{key[1]}": '
                           f'Precondition failed: ResourceVersion in precondition: {pre["resourceVersion"]}, '
                           f'ResourceVersion in object meta: {md.get("resourceVersion")}', _details(res, key[1]))
        grace = options.get("gracePeriodSeconds")
        graceful = False
        delay = 0.0
        if res.id == "pods":
            delay = self._pod_delay(obj)
            phase = (obj.get("status") or {}).get("phase")
            graceful = (delay > 0 and grace != 0 and bool((obj.get("spec") or {}).get("nodeName"))
                        and phase not in ("Succeeded", "Failed"))
        if md.get("deletionTimestamp"):
            if res.id == "pods" and grace == 0 and not md.get("finalizers"):
                out = copy.deepcopy(obj)
                return out, ([] if dry_run else self._remove(res, key))
            return copy.deepcopy(obj), []
        finalizers = md.get("finalizers") or []
        if graceful or finalizers:
            new = copy.deepcopy(obj)
            if graceful:
                if grace is None:
                    grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                grace = max(int(grace), 1)
                new["metadata"]["deletionTimestamp"] = _ts(_now() + timedelta(seconds=grace))
                new["metadata"]["deletionGracePeriodSeconds"] = grace
            else:
                new["metadata"]["deletionTimestamp"] = _ts()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
            if dry_run:
                return new, []
            events = [self._commit(res, "MODIFIED", new, obj)]
            if graceful:
                self._schedule(delay, self._finish_graceful, res.id, key, new["metadata"].get("uid"))
            return copy.deepcopy(new), events
        out = copy.deepcopy(obj)
        if dry_run:
            return out, []
        events = self._remove(res, key)
        out = copy.deepcopy(events[0].obj)
        return out, events

    def _schedule(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            with self._lock:
                self._timers.discard(timer)
            if not self._stopping.is_set():
                fn(*args)

        timer = threading.Timer(delay, run)
        timer.daemon = True
        with self._lock:
            self._timers.add(timer)
        timer.start()

    def _finish_graceful(self, res_id: str, key: tuple[str, str], uid: str | None) -> None:
        with self._lock:
            res = self._resources.get(res_id)
            if res is None:
                return
            obj = self._bucket(res).get(key)
            if obj is None or obj["metadata"].get("uid") != uid or not obj["metadata"].get("deletionTimestamp"):
                return
            if obj["metadata"].get("finalizers"):
                new = copy.deepcopy(obj)
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                events = [self._commit(res, "MODIFIED", new, obj)]
            else:
                events = self._remove(res, key)
        self._notify(events)

    # ---- internals: request handling -----------------------------------------------------------

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)
            callbacks = list(self._request_callbacks)
        for cb in callbacks:
            try:
                cb(req)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"on_request callback {cb!r} raised {exc!r}")

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        with self._lock:
            for f in self._faults:
                if f.times <= 0:
                    continue
                if f.method and f.method != method:
                    continue
                if f.path and not re.search(f.path, path):
                    continue
                f.times -= 1
                fault = copy.copy(f)
                self._faults = [x for x in self._faults if x.times > 0]
                return fault
        return None

    def _check_forbidden(self, verb: str, res: Resource, sub: str | None, name: str | None,
                         namespace: str | None) -> None:
        rname = f"{res.plural}/{sub}" if sub else res.plural
        with self._lock:
            rules = list(self._forbidden)
        for v, r, ns in rules:
            if v not in ("*", verb):
                continue
            qualified = f"{res.plural}.{res.group}" + (f"/{sub}" if sub else "") if res.group else rname
            if r not in ("*", rname, qualified):
                continue
            if ns is not None and ns != namespace:
                continue
            scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            who = f'{_gr(res)} "{name}"' if name else _gr(res)
            msg = (f'{who} is forbidden: User "{self.user}" cannot {verb} resource "{rname}" '
                   f'in API group "{res.group}" {scope}')
            raise ApiError(403, "Forbidden", msg, _details(res, name))

    # -- discovery

    def _discovery(self, path: str, host: str) -> dict | None:
        with self._lock:
            resources = list(self._resources.values())
            version = dict(self.version_info)
        if path in ("/version", "/version/"):
            return version
        if path in ("/api", "/api/"):
            return {"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}
        if path in ("/apis", "/apis/"):
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": self._groups(resources)}
        m = re.fullmatch(r"/apis/([^/]+)/?", path)
        if m:
            for g in self._groups(resources):
                if g["name"] == m.group(1):
                    return {"kind": "APIGroup", "apiVersion": "v1", **g}
            raise _unknown_path()
        m = re.fullmatch(r"/api/(v1)/?|/apis/([^/]+)/([^/]+)/?", path)
        if m:
            group, version_ = ("", "v1") if m.group(1) else (m.group(2), m.group(3))
            rs = [r for r in resources if r.group == group and r.version == version_]
            if not rs:
                raise _unknown_path()
            gv = f"{group}/{version_}" if group else version_
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                    "resources": self._api_resources(rs)}
        return None

    @staticmethod
    def _groups(resources: list[Resource]) -> list[dict]:
        groups: dict[str, list[str]] = {}
        for r in resources:
            if r.group and r.version not in groups.setdefault(r.group, []):
                groups[r.group].append(r.version)
        out = []
        for g, versions in groups.items():
            vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in versions]
            out.append({"name": g, "versions": vs, "preferredVersion": vs[0]})
        return out

    @staticmethod
    def _api_resources(rs: list[Resource]) -> list[dict]:
        out = []
        for r in rs:
            entry: dict[str, Any] = {"name": r.plural, "singularName": r.singular_name, "namespaced": r.namespaced,
                                     "kind": r.kind, "verbs": list(ALL_VERBS)}
            if r.short_names:
                entry["shortNames"] = list(r.short_names)
            if r.categories:
                entry["categories"] = list(r.categories)
            entry["storageVersionHash"] = base64.b64encode(r.id.encode())[:11].decode()
            out.append(entry)
            for sub in r.subresources:
                s: dict[str, Any] = {"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                                     "kind": r.kind, "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"])}
                if sub in _SUBRESOURCE_KIND:
                    g, v, k = _SUBRESOURCE_KIND[sub]
                    s["kind"] = k
                    if v:
                        s["group"], s["version"] = g, v
                out.append(s)
        return out

    # -- resource routing

    def _route(self, path: str) -> tuple[Resource, str | None, str | None, str | None] | None:
        """(resource, namespace, name, subresource) for a resource path; None when not one."""
        segs = [unquote(s) for s in path.strip("/").split("/")]
        if len(segs) >= 3 and segs[0] == "api" and segs[1] == "v1":
            group, version, rest = "", "v1", segs[2:]
        elif len(segs) >= 4 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            return None
        with self._lock:
            ns = None
            if len(rest) >= 3 and rest[0] == "namespaces":
                inner = self._find(group, version, rest[2])
                if inner is not None and inner.namespaced:
                    ns, rest = rest[1], rest[2:]
            res = self._find(group, version, rest[0])
        if res is None or len(rest) > 3 or any(s == "" for s in rest):
            raise _unknown_path()
        if ns is not None and not res.namespaced:
            raise _unknown_path()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if name is not None and res.namespaced and ns is None:
            raise _unknown_path()
        if sub is not None and sub not in res.subresources:
            raise _unknown_path()
        return res, ns, name, sub

    def _handle_resource(self, h: "_Handler", req: RecordedRequest, route: tuple) -> tuple[int, Any]:
        res, ns, name, sub = route
        method = req.method
        q = req.query
        watch = _first(q, "watch") in ("1", "true", "True")
        verb = {"GET": "get" if name else ("watch" if watch else "list"), "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}.get(method)
        if verb is None:
            raise _method_not_allowed()
        self._check_forbidden(verb, res, sub, name, ns)
        dry = q.get("dryRun")
        if dry and any(v != "All" for v in dry):
            raise _bad_request(f"Invalid dry run value: {dry}")
        dry_run = bool(dry)
        if sub in ("log", "proxy", "binding", "finalize", "scale"):
            raise _method_not_allowed()
        if method == "GET":
            if name is None:
                if watch:
                    return self._watch(h, res, ns, q)
                return 200, self._list(res, ns, q)
            if sub not in (None, "status"):
                raise _method_not_allowed()
            obj = self.get(res.id, name, ns)
            if obj is None:
                raise not_found(res, name)
            return 200, obj
        if method == "POST":
            if name is None:
                if res.namespaced and ns is None:
                    raise _method_not_allowed()
                return self._create(res, ns, req.body, dry_run)
            if sub == "eviction":
                return self._evict(res, ns, name, req.body, dry_run)
            raise _method_not_allowed()
        if method == "PUT":
            if name is None or sub not in (None, "status"):
                raise _method_not_allowed()
            return self._put(res, ns, name, sub, req.body, dry_run)
        if method == "PATCH":
            if name is None or sub not in (None, "status"):
                raise _method_not_allowed()
            return self._patch(res, ns, name, sub, req, dry_run)
        if method == "DELETE":
            if sub is not None:
                raise _method_not_allowed()
            options = req.body if isinstance(req.body, dict) else {}
            if "gracePeriodSeconds" in q:
                options = {**options, "gracePeriodSeconds": int(_first(q, "gracePeriodSeconds"))}
            if (options.get("dryRun") or []) and "All" in options.get("dryRun"):
                dry_run = True
            if name is None:
                return self._delete_collection(res, ns, q, options, dry_run)
            with self._lock:
                key = (self._ns(res, ns), name)
                if key not in self._bucket(res):
                    raise not_found(res, name)
                out, events = self._delete_obj(res, key, options, dry_run)
            self._notify(events)
            if out.get("metadata", {}).get("deletionTimestamp") and key in self._bucket(res):
                return 200, out
            if res.returns_deleted_object:
                return 200, out
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "details": {**_details(res, name), "uid": out["metadata"].get("uid")}}
        raise _method_not_allowed()

    def _list(self, res: Resource, ns: str | None, q: dict[str, list[str]]) -> dict:
        label_sel = _first(q, "labelSelector") or ""
        field_sel = _first(q, "fieldSelector") or ""
        lmatch = parse_label_selector(label_sel)
        fmatch = parse_field_selector(field_sel, res)
        limit = int(_first(q, "limit") or 0)
        cont = _first(q, "continue")
        with self._lock:
            rv = str(self._rv)
            items = [o for (ons, _), o in self._bucket(res).items() if ns is None or ons == ns]
            items = sorted(items, key=_sort_key)
            items = [copy.deepcopy(o) for o in items
                     if lmatch(o["metadata"].get("labels") or {}) and fmatch(o)]
        if cont:
            try:
                token = json.loads(base64.urlsafe_b64decode(cont.encode()).decode())
                start = tuple(token["start"])
            except Exception:
                raise _bad_request("continue key is not valid: illegal base64 data")
            items = [o for o in items if _sort_key(o) > start]
        meta: dict[str, Any] = {"resourceVersion": rv}
        if limit > 0 and len(items) > limit:
            page, rest = items[:limit], items[limit:]
            last = _sort_key(page[-1])
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"rv": rv, "start": list(last)}).encode()).decode()
            if not label_sel and not field_sel:
                meta["remainingItemCount"] = len(rest)
            items = page
        if not res.custom:
            for o in items:
                o.pop("kind", None)
                o.pop("apiVersion", None)
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}

    def _validate_body(self, res: Resource, body: Any, ns: str | None, name: str | None) -> dict:
        if not isinstance(body, dict):
            raise _bad_request("the body of the request is not a JSON object")
        if body.get("kind") not in (None, "", res.kind):
            raise _bad_request(f'the kind of the provided object ({body.get("kind")}) does not match the '
                               f"expected kind ({res.kind})")
        if body.get("apiVersion") not in (None, "", res.api_version):
            raise _bad_request(f"the API version in the data ({body.get('apiVersion')}) does not match the "
                               f"expected API version ({res.api_version})")
        md = body.get("metadata") or {}
        if res.namespaced and md.get("namespace") not in (None, "", ns):
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if name is not None and md.get("name") not in (None, "", name):
            raise _bad_request(f"the name of the object ({md.get('name')}) does not match the name on the URL ({name})")
        obj = copy.deepcopy(body)
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        obj.setdefault("metadata", {})
        if obj["metadata"] is None:
            obj["metadata"] = {}
        if res.namespaced:
            obj["metadata"]["namespace"] = ns
        else:
            obj["metadata"].pop("namespace", None)
        return obj

    def _create(self, res: Resource, ns: str | None, body: Any, dry_run: bool) -> tuple[int, dict]:
        obj = self._validate_body(res, body, ns, None)
        md = obj["metadata"]
        if md.get("resourceVersion"):
            raise _bad_request("resourceVersion should not be set on objects to be created")
        if not md.get("name"):
            if md.get("generateName"):
                md["name"] = md["generateName"] + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789")
                                                          for _ in range(5))
            else:
                raise invalid(res, "", [("FieldValueRequired", "metadata.name",
                                         "Required value: name or generateName is required")])
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            md.pop(k, None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = _ts()
        md["generation"] = 1
        if res.id == "pods":
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif res.custom and res.has_status:
            obj.pop("status", None)
        with self._lock:
            if res.namespaced and not self.auto_namespaces and self._resources.get("namespaces") is not None \
                    and ("", ns) not in self._bucket(self._resources["namespaces"]):
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
            key = (self._ns(res, ns), md["name"])
            if key in self._bucket(res):
                raise ApiError(409, "AlreadyExists", f'{_gr(res)} "{md["name"]}" already exists',
                               _details(res, md["name"]))
            if dry_run:
                return 201, obj
            events = self._ensure_namespace(ns) if res.namespaced else []
            events.append(self._commit(res, "ADDED", obj, None))
            out = copy.deepcopy(self._bucket(res)[key])
        self._notify(events)
        return 201, out

    def _replace(self, res: Resource, ns: str | None, name: str, sub: str | None, new: dict, dry_run: bool,
                 old: dict) -> tuple[int, dict, list[_Event]]:
        """Shared tail of PUT and PATCH: conflict check, status handling, commit. Lock held."""
        key = (self._ns(res, ns), name)
        rv = (new.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"].get("resourceVersion"):
            raise conflict(res, name)
        if sub == "status":
            merged = copy.deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            new = merged
        else:
            nmd = new.setdefault("metadata", {})
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
                if k in old["metadata"]:
                    nmd[k] = old["metadata"][k]
                else:
                    nmd.pop(k, None)
            if res.has_status:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
        new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
        if dry_run:
            out = copy.deepcopy(new)
            if _spec_part(out) != _spec_part(old):
                out["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
            return 200, out, []
        events = self._store_update(res, key, old, new)
        stored = self._bucket(res).get(key)
        out = copy.deepcopy(stored if stored is not None else events[-1].obj)
        return 200, out, events

    def _put(self, res: Resource, ns: str | None, name: str, sub: str | None, body: Any,
             dry_run: bool) -> tuple[int, dict]:
        new = self._validate_body(res, body, ns, name)
        new["metadata"]["name"] = name
        with self._lock:
            old = self._bucket(res).get((self._ns(res, ns), name))
            if old is None:
                raise not_found(res, name)
            result = self._replace(res, ns, name, sub, new, dry_run, copy.deepcopy(old))
        return self._finish(result)

    def _finish(self, result: tuple[int, dict, list[_Event]]) -> tuple[int, dict]:
        code, out, events = result
        self._notify(events)
        return code, out

    def _patch(self, res: Resource, ns: str | None, name: str, sub: str | None, req: RecordedRequest,
               dry_run: bool) -> tuple[int, dict]:
        ctype = (req.content_type or "").split(";")[0].strip().lower()
        accepted = ["application/json-patch+json", "application/merge-patch+json"]
        if not res.custom:
            accepted.append("application/strategic-merge-patch+json")
        accepted.append("application/apply-patch+yaml")
        if ctype not in accepted:
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - accepted media types include: "
                           f"{', '.join(accepted)}")
        body = req.body
        if isinstance(body, str):
            raise _bad_request(f"error decoding patch: invalid JSON: {body[:80]!r}")
        if ctype == "application/apply-patch+yaml":
            if not _first(req.query, "fieldManager"):
                raise ApiError(422, "Invalid",
                               'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                               "is required for apply patch",
                               {"group": "meta.k8s.io", "kind": "PatchOptions",
                                "causes": [{"reason": "FieldValueRequired", "message": "Required value: is required for apply patch",
                                            "field": "fieldManager"}]})
        key = (self._ns(res, ns), name)
        if ctype == "application/apply-patch+yaml" and sub is None:
            with self._lock:
                missing = key not in self._bucket(res)
            if missing:
                body = copy.deepcopy(body) if isinstance(body, dict) else {}
                body.setdefault("metadata", {})["name"] = name
                return self._create(res, ns, body, dry_run)
        with self._lock:
            old = self._bucket(res).get(key)
            if old is None:
                raise not_found(res, name)
            old = copy.deepcopy(old)
            try:
                if ctype == "application/json-patch+json":
                    if not isinstance(body, list):
                        raise _bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
                    new = apply_json_patch(old, body)
                elif ctype == "application/merge-patch+json":
                    new = apply_merge_patch(old, body if body is not None else {})
                elif ctype == "application/strategic-merge-patch+json" or not res.custom:
                    if not isinstance(body, dict):
                        raise _bad_request("the body of a strategic merge patch must be a JSON object")
                    new = apply_strategic_merge_patch(old, body)
                else:
                    new = apply_merge_patch(old, body if body is not None else {})
            except PatchError as exc:
                raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request",
                               {"causes": [{"reason": "UnexpectedServerResponse", "message": str(exc)}]})
            if not isinstance(new, dict):
                raise _bad_request("the patched object is not a JSON object")
            nmd = new.get("metadata") or {}
            if nmd.get("name") != name:
                raise _bad_request(f"the name of the object ({nmd.get('name')}) does not match the name on the URL ({name})")
            if res.namespaced and nmd.get("namespace") != key[0]:
                raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
            new["kind"], new["apiVersion"] = res.kind, res.api_version
            result = self._replace(res, ns, name, sub, new, dry_run, old)
        return self._finish(result)

    def _delete_collection(self, res: Resource, ns: str | None, q: dict, options: dict,
                           dry_run: bool) -> tuple[int, dict]:
        listed = self._list(res, ns, {k: v for k, v in q.items() if k in ("labelSelector", "fieldSelector")})
        out, events = [], []
        with self._lock:
            for item in listed["items"]:
                key = (item["metadata"].get("namespace", ""), item["metadata"]["name"])
                if key in self._bucket(res):
                    o, ev = self._delete_obj(res, key, options, dry_run)
                    out.append(o)
                    events += ev
        self._notify(events)
        return 200, {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                     "metadata": {"resourceVersion": str(self._rv)}, "items": out}

    # -- eviction

    def _evict(self, res: Resource, ns: str | None, name: str, body: Any, dry_run: bool) -> tuple[int, dict]:
        if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
            raise _bad_request("the body of the request is not an Eviction")
        if body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1"):
            raise _bad_request(f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
                               "API version (policy/v1)")
        bmd = body.get("metadata") or {}
        if bmd.get("name") not in (None, "", name):
            raise _bad_request("name in URL does not match name in Eviction object")
        if bmd.get("namespace") not in (None, "", ns):
            raise _bad_request("namespace in URL does not match namespace in Eviction object")
        options = dict(body.get("deleteOptions") or {})
        if "All" in (options.get("dryRun") or []):
            dry_run = True
        pod = self.get("pods", name, ns)
        if pod is None:
            raise not_found(res, name)
        if self.eviction_hook is not None:
            verdict = self.eviction_hook(pod, copy.deepcopy(body))
            if verdict is not None:
                code, msg = verdict
                raise ApiError(code, _REASONS.get(code, "Unknown"), msg)
        with self._lock:
            key = (self._ns(res, ns), name)
            pod = self._bucket(res).get(key)
            if pod is None:
                raise not_found(res, name)
            phase = (pod.get("status") or {}).get("phase")
            if not (pod["metadata"].get("deletionTimestamp") or phase in ("Succeeded", "Failed", "Pending")):
                self._check_pdbs(pod)
            _, events = self._delete_obj(res, key, options, dry_run)
        self._notify(events)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _check_pdbs(self, pod: dict) -> None:
        pdb_res = self._resources.get("poddisruptionbudgets.policy")
        if pdb_res is None:
            return
        ns = pod["metadata"]["namespace"]
        labels = pod["metadata"].get("labels") or {}
        pdbs = [p for (pns, _), p in sorted(self._bucket(pdb_res).items())
                if pns == ns and label_selector_matches((p.get("spec") or {}).get("selector"), labels)]
        if not pdbs:
            return
        if len(pdbs) > 1:
            raise ApiError(500, "InternalError",
                           "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
        pdb = pdbs[0]
        spec = pdb.get("spec") or {}
        pods = [p for (pns, _), p in self._bucket(self._resources["pods"]).items()
                if pns == ns and label_selector_matches(spec.get("selector"), p["metadata"].get("labels"))
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        expected = self._expected_pods(ns, pods)
        healthy = sum(1 for p in pods if _pod_healthy(p))
        if spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected, round_up=True)
        elif spec.get("maxUnavailable") is not None:
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, round_up=True))
        else:
            desired = expected  # a PDB with neither field: minAvailable 100% in effect
        if not _pod_healthy(pod) and healthy >= desired:
            return  # unhealthy pods may go while the budget holds (IfHealthyBudget)
        if healthy - 1 >= desired:
            return
        raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                       {"causes": [{"reason": "DisruptionBudget",
                                    "message": f"The disruption budget {pdb['metadata']['name']} needs {desired} "
                                               f"healthy pods and has {healthy} currently"}]})

    def _expected_pods(self, ns: str, pods: list[dict]) -> int:
        """What the disruption controller calls expectedCount: the scale (spec.replicas) of each
        controller owning matching pods; a pod whose controller is not in the store counts as 1."""
        scales: dict[str, int] = {}
        loose = 0
        for p in pods:
            ref = next((r for r in p["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            owner = None
            if ref is not None:
                for res in self._resources.values():
                    if res.kind == ref.get("kind") and res.namespaced:
                        owner = self._bucket(res).get((ns, ref.get("name")))
                        break
            replicas = ((owner or {}).get("spec") or {}).get("replicas")
            if owner is not None and isinstance(replicas, int):
                scales[owner["metadata"].get("uid") or ref["name"]] = replicas
            else:
                loose += 1
        return sum(scales.values()) + loose

    # -- watch

    def _watch(self, h: "_Handler", res: Resource, ns: str | None, q: dict) -> tuple[int, Any]:
        lmatch = parse_label_selector(_first(q, "labelSelector") or "")
        fmatch = parse_field_selector(_first(q, "fieldSelector") or "", res)
        timeout = _first(q, "timeoutSeconds")
        deadline = time.monotonic() + float(timeout) if timeout else None
        rv_param = _first(q, "resourceVersion")

        def matches(o: dict | None) -> bool:
            return o is not None and lmatch(o["metadata"].get("labels") or {}) and fmatch(o)

        watcher = _Watcher(res.id, ns)
        initial: list[tuple[str, dict]] = []
        with self._lock:
            if rv_param not in (None, "", "0"):
                try:
                    since = int(rv_param)
                except ValueError:
                    raise _bad_request(f"invalid resource version: {rv_param}")
                if since < self._pruned_rv:
                    gone = status_body(410, "Expired", f"too old resource version: {since} ({self._pruned_rv + 1})")
                    initial.append(("ERROR", gone))
                    since = None  # type: ignore[assignment]
                if since is not None:
                    for ev in self._history:
                        if ev.rv > since and ev.res_id == res.id and (
                                ns is None or ev.obj["metadata"].get("namespace", "") == ns):
                            watcher.queue.put(ev)
            else:
                for (ons, _), o in sorted(self._bucket(res).items()):
                    if (ns is None or ons == ns) and matches(o):
                        initial.append(("ADDED", copy.deepcopy(o)))
            if not initial or initial[0][0] != "ERROR":
                self._watchers.append(watcher)
        h._start_chunked(200)
        try:
            for etype, obj in initial:
                h._write_chunk({"type": etype, "object": obj})
            if initial and initial[0][0] == "ERROR":
                h._end_chunked()
                return -1, None
            while not self._stopping.is_set():
                wait = 0.1
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    wait = min(wait, left)
                try:
                    ev = watcher.queue.get(timeout=wait)
                except queue.Empty:
                    continue
                now_m, old_m = matches(ev.obj), matches(ev.old)
                etype = ev.type
                if etype == "MODIFIED":
                    if now_m and not old_m:
                        etype = "ADDED"
                    elif old_m and not now_m:
                        etype = "DELETED"
                    elif not now_m:
                        continue
                elif not now_m:
                    continue
                h._write_chunk({"type": etype, "object": ev.obj})
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True
            return -1, None
        finally:
            with self._lock:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)
        h._end_chunked()
        return -1, None


def _first(q: dict[str, list[str]], key: str) -> str | None:
    v = q.get(key)
    return v[0] if v else None


def _sort_key(o: dict) -> tuple[str, str]:
    md = o.get("metadata") or {}
    return (md.get("namespace", ""), md.get("name", ""))


def _pod_healthy(p: dict) -> bool:
    if p["metadata"].get("deletionTimestamp"):
        return False
    st = p.get("status") or {}
    if st.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def _scaled(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        pct = int(value[:-1])
        x = total * pct / 100
        return int(math.ceil(x)) if round_up else int(math.floor(x))
    return int(value)


# --------------------------------------------------------------------------------------------
# HTTP handler
# --------------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up on the TLS handshake (as it should on an untrusted certificate) is
        not a server error; anything else still prints the usual traceback."""
        import sys

        if isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"
    sys_version = ""
    fake: FakeApiServer

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle + delayed ACK add ~40 ms
        # to every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.fake._lock:
            self.fake._conns.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.fake._lock:
                self.fake._conns.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    # -- plumbing

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                line = self.rfile.readline()
                size = int(line.strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _start_chunked(self, code: int) -> None:
        self._req.status = code
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def _write_chunk(self, obj: Any) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_chunked(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _dispatch(self) -> None:
        fake = self.fake
        parts = urlsplit(self.path)
        path = parts.path or "/"
        query = parse_qs(parts.query, keep_blank_values=True)
        raw = self._read_body()
        ctype = self.headers.get("Content-Type")
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        req = RecordedRequest(self.command, path, query, ctype, body,
                              headers={k.lower(): v for k, v in self.headers.items()})
        self._req = req
        fake._record(req)
        fault = fake._take_fault(self.command, path)
        if fault is not None:
            if fault.delay_s:
                time.sleep(fault.delay_s)
            if fault.drop:
                req.status = 0
                self._drop()
                return
            if fault.status is not None:
                req.status = fault.status
                headers = {}
                details = None
                if fault.retry_after_s is not None:
                    headers["Retry-After"] = str(fault.retry_after_s)
                    details = {"retryAfterSeconds": fault.retry_after_s}
                self._send_json(fault.status, status_body(fault.status, fault.reason, fault.message, details), headers)
                return
        try:
            code, out, headers = self._handle(req, path)
        except ApiError as exc:
            code, out, headers = exc.code, exc.body, exc.headers
        except Exception as exc:  # noqa: BLE001 - a bug in the fake: answer 500 and record it
            fake.errors.append(f"{self.command} {self.path}: {exc!r}")
            code, out, headers = 500, status_body(500, "InternalError", f"fake apiserver error: {exc!r}"), {}
        if code < 0:  # streamed already
            return
        req.status = code
        try:
            if isinstance(out, str):
                data = out.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._send_json(code, out, headers)
        except OSError:
            self.close_connection = True

    def _handle(self, req: RecordedRequest, path: str) -> tuple[int, Any, dict[str, str]]:
        fake = self.fake
        if fake.require_token:
            # The scheme is case-insensitive, as in the real bearer-token authenticator (the
            # kubernetes client sends "bearer <token>" for an in-cluster service account).
            scheme, _, token = (self.headers.get("Authorization") or "").strip().partition(" ")
            if scheme.lower() != "bearer" or token.strip() != fake.token:
                return 401, status_body(401, "Unauthorized", "Unauthorized"), {}
        if path in ("/healthz", "/readyz", "/livez"):
            return 200, "ok", {}
        if path.startswith("/openapi/"):
            raise _unknown_path()
        route = fake._route(path)
        if route is None:
            if req.method != "GET":
                raise _method_not_allowed()
            out = fake._discovery(path, self.headers.get("Host") or f"127.0.0.1:{fake.port}")
            if out is None:
                raise _unknown_path()
            return 200, out, {}
        code, out = fake._handle_resource(self, req, route)
        return code, out, {}
