"""The REST verbs on stored objects: list (selectors, paging), get, create, update (PUT), patch,
delete and deletecollection, with the checks and answers of the generic registry
(k8s.io/apiserver/pkg/registry/generic/registry/store.go): optimistic concurrency on
``metadata.resourceVersion``, ``status`` subresource separation, ``generateName``, ``dryRun``.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import uuid
from typing import Any, Callable

from tests.fakes.apiserver.events import EVENTS_V1_ID, validate_event_v1
from tests.fakes.apiserver.errors import ApiError, already_exists, bad_request, conflict, details, invalid, not_found
from tests.fakes.apiserver.meta import first, sort_key, spec_part, ts
from tests.fakes.apiserver.patch import PatchError, apply_json_patch, apply_merge_patch, apply_strategic_merge_patch
from tests.fakes.apiserver.resources import Resource
from tests.fakes.apiserver.selectors import parse_field_selector, parse_label_selector
from tests.fakes.apiserver.store import Event, Store

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def continue_expired(token: dict) -> ApiError:
    """410 as kube-apiserver v1.36.2 answers a continue token older than etcd's compaction (measured: the Status
    carries, in its metadata, the token that reads the rest as it is now, rv -1)."""
    err = ApiError(410, "Expired", "The provided continue parameter is too old to display a consistent list "
                   "result. You can start a new list without the continue parameter, or use the continue token in "
                   "this response to retrieve the remainder of the results. Continuing with the provided token "
                   "results in an inconsistent list - objects that were created, modified, or deleted between the "
                   "time the first chunk was returned and now may show up in the list.")
    err.body["metadata"] = {"continue": base64.urlsafe_b64encode(json.dumps(token).encode()).decode()}
    return err


def invalid_list_options(message: str) -> ApiError:
    """422 as kube-apiserver v1.36.2 answers a list with bad ListOptions (measured:
    ``The ListOptions "" is invalid: resourceVersionMatch: Forbidden: <message>``)."""
    from types import SimpleNamespace

    return invalid(SimpleNamespace(kind="ListOptions", group=""), "",
                   [("FieldValueForbidden", "resourceVersionMatch", f"Forbidden: {message}")])


class RestApi:
    """The verbs; each returns (status, body) and notifies after releasing the lock."""

    def __init__(self, store: Store):
        self.store = store
        #: Validating admission of an update of a main resource: ``admit(res, old, new)`` -> the warnings it
        #: answers with (KubeVirt's KubeVirt-CR update webhook, kubevirt.py), run after the resourceVersion check.
        self.update_admission: list[Callable[[Resource, dict, dict], list[str]]] = []
        #: Where those warnings go: the reply of the request being served (FakeApiServer wires it).
        self.warn: Callable[[str], None] = lambda text: None

    # ---- reads -------------------------------------------------------------------------------------

    def get(self, res: Resource, ns: str | None, name: str) -> tuple[int, dict]:
        obj = self.store.get(res.id, name, ns)
        if obj is None:
            raise not_found(res, name)
        return 200, obj

    def list(self, res: Resource, ns: str | None, q: dict[str, list[str]]) -> dict:
        label_sel = first(q, "labelSelector") or ""
        field_sel = first(q, "fieldSelector") or ""
        lmatch = parse_label_selector(label_sel)
        fmatch = parse_field_selector(field_sel, res)
        limit = int(first(q, "limit") or 0)
        match = first(q, "resourceVersionMatch")
        if match and not first(q, "resourceVersion"):  # apimachinery's ListOptions validation, as v1.36.2 words it
            raise invalid_list_options("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if match and first(q, "continue"):
            raise invalid_list_options("resourceVersionMatch is forbidden when continue is provided")
        # resourceVersion=N with resourceVersionMatch=NotOlderThan: the watch cache, paged by `limit` (the store
        # here is always at least that new: it is served as a consistent read is)
        if first(q, "resourceVersion") == "0" and not match:
            # kube-apiserver serves resourceVersion=0 from its watch cache and ignores `limit` there: every item,
            # no continue (measured on v1.36.2: ?limit=3&resourceVersion=0 listed all 11 namespaces).
            limit = 0
        cont = first(q, "continue")
        with self.store.lock:
            rv = str(self.store.rv)
            items = [o for (ons, _), o in self.store.bucket(res).items() if ns is None or ons == ns]
            items = [copy.deepcopy(o) for o in sorted(items, key=sort_key)
                     if lmatch(o["metadata"].get("labels") or {}) and fmatch(o)]
        if cont:
            try:
                token = json.loads(base64.urlsafe_b64decode(cont.encode()).decode())
                start = tuple(token["start"])
            except Exception:
                raise bad_request("continue key is not valid: illegal base64 data")
            if 0 < int(token.get("rv") or 0) < self.store.pruned_rv:  # etcd keeps the compacted revision itself
                raise continue_expired({"rv": "-1", "start": list(start)})
            items = [o for o in items if sort_key(o) > start]
            if int(token.get("rv") or 0) > 0:
                # A continued list names the first page's revision, in its reply and its next token (k8s.io/apiserver
                # pkg/storage/etcd3/store.go GetList: returnedRV is the continue key's revision), so a write between two
                # pages never makes a later token younger than the first. (The items here are read as they are now:
                # this fake pins no snapshot, see __init__.)
                rv = str(token["rv"])
        meta: dict[str, Any] = {"resourceVersion": rv}
        if limit > 0 and len(items) > limit:
            page, rest = items[:limit], items[limit:]
            token = {"rv": rv, "start": list(sort_key(page[-1]))}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            if not label_sel and not field_sel:
                meta["remainingItemCount"] = len(rest)
            items = page
        if not res.custom:
            for o in items:
                o.pop("kind", None)
                o.pop("apiVersion", None)
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}

    # ---- create, update, patch ---------------------------------------------------------------------

    @staticmethod
    def validate_body(res: Resource, body: Any, ns: str | None, name: str | None) -> dict:
        if not isinstance(body, dict):
            raise bad_request("the body of the request is not a JSON object")
        if body.get("kind") not in (None, "", res.kind):
            raise bad_request(f'the kind of the provided object ({body.get("kind")}) does not match the '
                              f"expected kind ({res.kind})")
        if body.get("apiVersion") not in (None, "", res.api_version):
            raise bad_request(f"the API version in the data ({body.get('apiVersion')}) does not match the "
                              f"expected API version ({res.api_version})")
        md = body.get("metadata") or {}
        if res.namespaced and md.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if name is not None and md.get("name") not in (None, "", name):
            raise bad_request(f"the name of the object ({md.get('name')}) does not match the name on the URL ({name})")
        obj = copy.deepcopy(body)
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        if obj.get("metadata") is None:
            obj["metadata"] = {}
        if res.namespaced:
            obj["metadata"]["namespace"] = ns
        else:
            obj["metadata"].pop("namespace", None)
        return obj

    def create(self, res: Resource, ns: str | None, body: Any, dry_run: bool) -> tuple[int, dict]:
        obj = self.validate_body(res, body, ns, None)
        md = obj["metadata"]
        if md.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        if not md.get("name"):
            if not md.get("generateName"):
                raise invalid(res, "", [("FieldValueRequired", "metadata.name",
                                         "Required value: name or generateName is required")])
            md["name"] = md["generateName"] + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            md.pop(k, None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = ts()
        md["generation"] = 1
        if res.id == "pods":
            obj["status"] = {"phase": "Pending"}
            _pod_resources(res, md["name"], obj)
            obj["status"]["qosClass"] = _qos_class(obj)
        elif res.custom and res.has_status:
            obj.pop("status", None)
        elif res.id == EVENTS_V1_ID:
            validate_event_v1(res, obj)
        store = self.store
        with store.lock:
            if res.namespaced and store.namespace_missing_locked(ns):
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
            key = store.key(res, ns, md["name"])
            if key in store.bucket(res):
                raise already_exists(res, md["name"])
            if dry_run:
                return 201, obj
            events = store.ensure_namespace_locked(ns or "") if res.namespaced else []
            events.append(store.commit_locked(res, "ADDED", obj, None))
            out = copy.deepcopy(store.bucket(res)[key])
        store.notify(events)
        return 201, out

    def _replace_locked(self, res: Resource, ns: str | None, name: str, sub: str | None, new: dict,
                        dry_run: bool, old: dict) -> tuple[int, dict, list[Event]]:
        """Shared tail of PUT and PATCH: conflict check, status handling, commit."""
        rv = (new.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"].get("resourceVersion"):
            raise conflict(res, name)
        if sub is None:
            for admit in self.update_admission:
                for text in admit(res, old, new):
                    self.warn(text)
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
            if spec_part(out) != spec_part(old):
                out["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
            return 200, out, []
        key = self.store.key(res, ns, name)
        events = self.store.store_update_locked(res, key, old, new)
        stored = self.store.bucket(res).get(key)
        return 200, copy.deepcopy(stored if stored is not None else events[-1].obj), events

    def _finish(self, result: tuple[int, dict, list[Event]]) -> tuple[int, dict]:
        code, out, events = result
        self.store.notify(events)
        return code, out

    def put(self, res: Resource, ns: str | None, name: str, sub: str | None, body: Any,
            dry_run: bool) -> tuple[int, dict]:
        new = self.validate_body(res, body, ns, name)
        new["metadata"]["name"] = name
        with self.store.lock:
            old = self.store.bucket(res).get(self.store.key(res, ns, name))
            if old is None:
                raise not_found(res, name)
            result = self._replace_locked(res, ns, name, sub, new, dry_run, copy.deepcopy(old))
        return self._finish(result)

    def patch(self, res: Resource, ns: str | None, name: str, sub: str | None, content_type: str | None,
              body: Any, query: dict[str, list[str]], dry_run: bool) -> tuple[int, dict]:
        ctype = (content_type or "").split(";")[0].strip().lower()
        accepted = [JSON_PATCH, MERGE_PATCH] + ([] if res.custom else [STRATEGIC_PATCH]) + [APPLY_PATCH]
        if ctype not in accepted:
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - accepted media types include: "
                           f"{', '.join(accepted)}")
        if isinstance(body, str):
            raise bad_request(f"error decoding patch: invalid JSON: {body[:80]!r}")
        if ctype == APPLY_PATCH and not first(query, "fieldManager"):
            cause = {"reason": "FieldValueRequired", "message": "Required value: is required for apply patch",
                     "field": "fieldManager"}
            raise ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                           "is required for apply patch", {"group": "meta.k8s.io", "kind": "PatchOptions",
                                                           "causes": [cause]})
        key = self.store.key(res, ns, name)
        if ctype == APPLY_PATCH and sub is None:
            with self.store.lock:
                missing = key not in self.store.bucket(res)
            if missing:
                body = copy.deepcopy(body) if isinstance(body, dict) else {}
                body.setdefault("metadata", {})["name"] = name
                return self.create(res, ns, body, dry_run)
        with self.store.lock:
            old = self.store.bucket(res).get(key)
            if old is None:
                raise not_found(res, name)
            old = copy.deepcopy(old)
            new = self._apply_patch(res, ctype, old, body)
            nmd = new.get("metadata") or {}
            if nmd.get("name") != name:
                raise bad_request(f"the name of the object ({nmd.get('name')}) does not match the name on the URL "
                                  f"({name})")
            if res.namespaced and nmd.get("namespace") != key[0]:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the "
                                  "request")
            new["kind"], new["apiVersion"] = res.kind, res.api_version
            result = self._replace_locked(res, ns, name, sub, new, dry_run, old)
        return self._finish(result)

    @staticmethod
    def _apply_patch(res: Resource, ctype: str, old: dict, body: Any) -> dict:
        try:
            if ctype == JSON_PATCH:
                if not isinstance(body, list):
                    raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
                new = apply_json_patch(old, body)
            elif ctype == MERGE_PATCH:
                new = apply_merge_patch(old, body if body is not None else {})
            elif ctype == STRATEGIC_PATCH or not res.custom:
                if not isinstance(body, dict):
                    raise bad_request("the body of a strategic merge patch must be a JSON object")
                new = apply_strategic_merge_patch(old, body)
            else:
                new = apply_merge_patch(old, body if body is not None else {})
        except PatchError as exc:
            raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request",
                           {"causes": [{"reason": "UnexpectedServerResponse", "message": str(exc)}]})
        if not isinstance(new, dict):
            raise bad_request("the patched object is not a JSON object")
        return new

    # ---- delete ------------------------------------------------------------------------------------

    def delete(self, res: Resource, ns: str | None, name: str, options: dict, dry_run: bool) -> tuple[int, dict]:
        store = self.store
        with store.lock:
            key = store.key(res, ns, name)
            if key not in store.bucket(res):
                raise not_found(res, name)
            out, events = store.delete_locked(res, key, options, dry_run)
            still_there = key in store.bucket(res)
        store.notify(events)
        if (out.get("metadata", {}).get("deletionTimestamp") and still_there) or res.returns_deleted_object:
            return 200, out
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "details": {**details(res, name), "uid": out["metadata"].get("uid")}}

    def delete_collection(self, res: Resource, ns: str | None, q: dict, options: dict,
                          dry_run: bool) -> tuple[int, dict]:
        listed = self.list(res, ns, {k: v for k, v in q.items() if k in ("labelSelector", "fieldSelector")})
        out, events = [], []
        with self.store.lock:
            for item in listed["items"]:
                key = (item["metadata"].get("namespace", ""), item["metadata"]["name"])
                if key in self.store.bucket(res):
                    o, ev = self.store.delete_locked(res, key, options, dry_run)
                    out.append(o)
                    events += ev
            rv = str(self.store.rv)
        self.store.notify(events)
        return 200, {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                     "metadata": {"resourceVersion": rv}, "items": out}


def _overcommittable(name: str) -> bool:
    """k8s.io/kubernetes pkg/apis/core/helper IsOvercommitAllowed: native resources but hugepages; an extended
    resource (``rebellions.ai/npu``) is not, so a pod must set its limit (and request == limit)."""
    domain = name.split("/", 1)[0] if "/" in name else ""
    native = not domain or domain == "kubernetes.io" or domain.endswith(".kubernetes.io")
    return native and not name.startswith("hugepages-")


def _pod_resources(res: Resource, name: str, pod: dict) -> None:
    """What kube-apiserver does to a new pod's container resources: requests default to limits
    (pkg/apis/core/v1/defaults.go SetDefaults_Pod), then a non-overcommittable resource needs a limit equal to
    its request (pkg/apis/core/validation ValidateResourceRequirements)."""
    spec = pod.get("spec") or {}
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            r = c.get("resources") or {}
            limits, requests = r.get("limits") or {}, r.get("requests") or {}
            for k, v in limits.items():
                requests.setdefault(k, v)
            if requests:
                r["requests"] = requests
            for k, v in requests.items():
                if _overcommittable(k):
                    continue
                field = f"spec.{kind}[{i}].resources"
                if k not in limits:
                    raise invalid(res, name, [("FieldValueRequired", f"{field}.limits",
                                               "Required value: Limit must be set for non overcommitable resources")])
                if str(limits[k]) != str(v):
                    raise invalid(res, name, [("FieldValueInvalid", f"{field}.requests",
                                               f"Invalid value: \"{v}\": must be equal to {k} limit of {limits[k]}")])


def _qos_class(pod: dict) -> str:
    """pkg/apis/core/helper/qos ComputePodQOS, from the containers' cpu and memory (after defaulting)."""
    reqs: dict[str, list] = {}
    lims: dict[str, list] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        r = c.get("resources") or {}
        for k in ("cpu", "memory"):
            if k in (r.get("requests") or {}):
                reqs.setdefault(k, []).append(r["requests"][k])
            if k in (r.get("limits") or {}):
                lims.setdefault(k, []).append(r["limits"][k])
    if not reqs and not lims:
        return "BestEffort"
    n = len((pod.get("spec") or {}).get("containers") or [])
    guaranteed = all(len(lims.get(k, [])) == n for k in ("cpu", "memory")) and \
        all(reqs.get(k, lims[k]) == lims[k] for k in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"
