"""The patch types a PATCH request may carry: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and
Kubernetes strategic merge patch (merge keys of the k8s.io/api types this server serves)."""

from __future__ import annotations

import copy
import re
from typing import Any

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
            # gopkg.in/evanphx/json-patch.v4 (kube-apiserver's) `test`: null matches a member the object lacks
            if op["value"] is None and tokens and _absent_member(doc, tokens):
                continue
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


def _absent_member(doc: Any, tokens: list[str]) -> bool:
    """The path's parent is an object (it exists) and lacks the last member."""
    cur = doc
    for t in tokens[:-1]:
        if not isinstance(cur, dict) or t not in cur:
            return False
        cur = cur[t]
    return isinstance(cur, dict) and tokens[-1] not in cur


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
