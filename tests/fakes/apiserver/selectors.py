"""Label and field selectors as the API server parses them (``?labelSelector=``, ``?fieldSelector=``),
and metav1.LabelSelector matching (PodDisruptionBudget selectors)."""

from __future__ import annotations

import re
from typing import Any, Callable

from tests.fakes.apiserver.errors import bad_request
from tests.fakes.apiserver.meta import lookup_path
from tests.fakes.apiserver.resources import Resource

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
                    raise bad_request("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be "
                                      "an integer")
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
        raise bad_request(f"unable to parse requirement: found '{part}', expected: in, notin, =, ==, !=, gt, lt")
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


def _field_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(expr: str, res: Resource) -> Callable[[dict], bool]:
    allowed = {"metadata.name", "metadata.namespace", *res.field_selectors}
    reqs: list[Callable[[dict], bool]] = []
    for part in _split_fields(expr or ""):
        m = re.fullmatch(r"([^=!]+?)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise bad_request(f"invalid selector: '{expr}'; can't understand '{part}'")
        key, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if key not in allowed:
            raise bad_request(f'field label not supported: {key}')
        if op == "!=":
            reqs.append(lambda o, k=key, v=value: _field_string(lookup_path(o, k)) != v)
        else:
            reqs.append(lambda o, k=key, v=value: _field_string(lookup_path(o, k)) == v)
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
