"""Helpers several cluster checks share: a failed read as a finding, and the operator's Helm release remedies name
(the commands themselves are built by rblnctl.operator.install)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rblnctl.operator.install import HelmRelease, change_policy, helm_release_of
from rblnctl.preflight.facts import ClusterFacts, Fetch
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.remedy import Remedy


def unreadable(out: Findings, id_: str, title: str, fetch_: Fetch) -> None:
    """A WARN for a read that was refused, failed or found nothing there (404), with the permission to grant or
    the error: never `(failed): None` (a 404 carries no error text)."""
    if fetch_.error is None:
        evidence = f"cannot {fetch_.verb} {fetch_.resource}: the API server answered 404 (not found or not served)"
    else:
        what = "forbidden" if fetch_.forbidden else "failed"
        evidence = f"cannot {fetch_.verb} {fetch_.resource} ({what}): {fetch_.error}"
    out.add(id_, title, SCOPE_CLUSTER, Status.WARN, evidence, fetch_.remedy(), fetch_.can_i() if fetch_.forbidden
            else "")


def pick(f: ClusterFacts, st: Any) -> dict[str, Any]:
    """The options naming the KubeVirt CR (`name`, `namespace`) when several exist (the kubevirt commands refuse to
    guess), else none."""
    several = f.kubevirts.ok and len(f.kubevirts.value or []) > 1
    return {"name": st.name, "namespace": st.namespace} if several else {}


def helm_release(f: ClusterFacts) -> HelmRelease | None:
    """The operator's Helm release: its Deployment's labels first, then the active policy's (the chart labels both)."""
    deps = (f.operator.value or []) if f.operator.ok else []
    active = f.policy
    items = (f.policies.value or []) if f.policies.ok else []
    policies = [p for p in items if active and (p.get("metadata") or {}).get("name") == active.name]
    return helm_release_of([*deps, *policies], namespace=f.operator_namespace)


def runnable(remedy: Remedy) -> str:
    """The remedy's external command (kubectl, helm) as a finding's remedyCommand; "" when it has none."""
    return remedy.command.line if remedy.command is not None and remedy.command.program else ""


def policy_remedy(f: ClusterFacts, values: Mapping[str, bool]) -> Remedy:
    """Set `<key>.enabled` on the active policy: kubectl patch, with Helm as the durable way (one builder for all)."""
    return change_policy(f.policy.name if f.policy else None, values, helm_release(f))

