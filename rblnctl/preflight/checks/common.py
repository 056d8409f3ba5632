"""Helpers several cluster checks share: a failed read as a finding, and the commands remedies name."""

from __future__ import annotations

from typing import Any

from rblnctl import constants as C
from rblnctl.preflight.facts import ClusterFacts, Fetch
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status


def unreadable(out: Findings, id_: str, title: str, fetch_: Fetch) -> None:
    """A WARN for a read that was refused or failed, with the permission to grant or the error."""
    what = "forbidden" if fetch_.forbidden else "failed"
    out.add(id_, title, SCOPE_CLUSTER, Status.WARN, f"cannot {fetch_.verb} {fetch_.resource} ({what}): "
            f"{fetch_.error}", fetch_.remedy(), fetch_.can_i() if fetch_.forbidden else "")


def pick(f: ClusterFacts, st: Any) -> str:
    """` --name N -n NS` when several KubeVirt CRs exist (`rblnctl kubevirt` refuses to guess), else ""."""
    several = f.kubevirts.ok and len(f.kubevirts.value or []) > 1
    return f" --name {st.name} -n {st.namespace}" if several else ""


def helm_release(f: ClusterFacts) -> tuple[str, str]:
    """(release, namespace) of the operator's Helm release: its Deployment's labels, else the documented defaults."""
    deps = (f.operator.value or []) if f.operator.ok else []
    if deps:
        meta = deps[0].get("metadata") or {}
        release = (meta.get("labels") or {}).get(C.HELM_INSTANCE_LABEL)
        if release and meta.get("namespace"):
            return str(release), str(meta["namespace"])
    return C.OPERATOR_HELM_CHART, C.OPERATOR_NAMESPACE


def helm_set(f: ClusterFacts, *values: str) -> str:
    """`helm upgrade` of the operator's release that keeps its values and sets these (`key=value`)."""
    release, namespace = helm_release(f)
    sets = "".join(f" --set {v}" for v in values)
    return f"helm upgrade {release} {C.OPERATOR_HELM_REPO_CHART} -n {namespace} --reuse-values{sets}"
