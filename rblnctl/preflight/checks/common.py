"""Helpers several cluster checks share: a failed read as a finding, and picking one KubeVirt CR in a command."""

from __future__ import annotations

from typing import Any

from rblnctl.preflight.facts import ClusterFacts, Fetch
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status


def unreadable(out: Findings, id_: str, title: str, fetch_: Fetch) -> None:
    """A WARN for a read that was refused or failed, with the permission to grant or the error."""
    what = "forbidden" if fetch_.forbidden else "failed"
    out.add(id_, title, SCOPE_CLUSTER, Status.WARN, f"cannot {fetch_.verb} {fetch_.resource} ({what}): "
            f"{fetch_.error}", fetch_.remedy())


def pick(f: ClusterFacts, st: Any) -> str:
    """` --name N -n NS` when several KubeVirt CRs exist (`rblnctl kubevirt` refuses to guess), else ""."""
    several = f.kubevirts.ok and len(f.kubevirts.value or []) > 1
    return f" --name {st.name} -n {st.namespace}" if several else ""
