"""Which nodes a VM's virt-launcher pod may land on: nodeSelector, required node affinity, taints and tolerations.

The scheduler's rules, restricted to what decides NPU placement (k8s.io/component-helpers
scheduling/corev1/nodeaffinity: terms ORed, expressions ANDed, an empty term matches nothing;
Gt/Lt compare integers; matchFields supports metadata.name. Taints with effect NoSchedule or
NoExecute must be tolerated, as in k8s.io/api core/v1 Toleration.ToleratesTaint; PreferNoSchedule
never blocks). KubeVirt copies the VMI's nodeSelector, affinity and tolerations to the pod
(kubevirt/kubevirt@v1.9.0 pkg/virt-controller/services/template.go).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rblnctl.vm import devices as D

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_INT = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a VMI spec lets its pod run."""

    node_selector: dict[str, str]
    terms: tuple[dict, ...]  # required nodeSelectorTerms (ORed); () means any node
    tolerations: tuple[dict, ...]

    def describe(self) -> str:
        """One phrase for evidence lines."""
        parts = []
        if self.node_selector:
            parts.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items())))
        if self.terms:
            parts.append(f"{len(self.terms)} required node affinity term(s)")
        if self.tolerations:
            parts.append(f"{len(self.tolerations)} toleration(s)")
        return "; ".join(parts) or "no placement constraints"


def placement_of(spec: Mapping) -> Placement:
    """Read a VMI spec's placement."""
    return Placement(node_selector=D.node_selector(spec), terms=tuple(D.required_node_terms(spec)),
                     tolerations=tuple(D.tolerations(spec)))


def why_not(node: Mapping, placement: Placement) -> str | None:
    """Why the pod cannot land on `node` (the first reason), or None when it can."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = str(meta.get("name") or "")
    for k, v in placement.node_selector.items():
        if labels.get(k) != v:
            have = labels.get(k)
            return f"nodeSelector {k}={v} (node has {k}={have})" if have is not None else \
                f"nodeSelector {k}={v} (node has no {k} label)"
    if placement.terms and not any(_term_matches(t, labels, name) for t in placement.terms):
        return "required node affinity"
    taints = list(((node.get("spec") or {}).get("taints")) or [])
    if (node.get("spec") or {}).get("unschedulable") and not any(
            t.get("key") == "node.kubernetes.io/unschedulable" for t in taints):
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    for taint in taints:
        if taint.get("effect") in _BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in placement.tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"untolerated taint {taint.get('key')}{value}:{taint.get('effect')}"
    return None


def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    """core/v1 Toleration.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def _term_matches(term: Mapping, labels: Mapping, name: str) -> bool:
    exprs: Sequence[Mapping] = term.get("matchExpressions") or []
    fields: Sequence[Mapping] = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(_expr(e, labels) for e in exprs) and all(_expr(f, {"metadata.name": name}) for f in fields)


def _expr(expr: Mapping, labels: Mapping) -> bool:
    key, op = expr.get("key"), expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    value = str(labels.get(key)) if present else None
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        # k8s.io/apimachinery pkg/labels/selector.go Requirement.Matches: strconv.ParseInt(v, 10, 64), else no
        # match (a sign is taken; Python's int() would also take `1_6` and spaces)
        if not (_INT.fullmatch(str(value)) and _INT.fullmatch(values[0])):
            return False
        have, want = int(str(value)), int(values[0])
        if not all(-(2 ** 63) <= n < 2 ** 63 for n in (have, want)):  # ParseInt's range error
            return False
        return have > want if op == "Gt" else have < want
    return False
