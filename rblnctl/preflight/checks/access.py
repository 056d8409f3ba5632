"""`rbac.commands`: which rblnctl commands these credentials can run (`kubectl auth can-i` for each).

One SelfSubjectRulesReview in the operator's namespace returns the rules the user holds there
(ClusterRoles and that namespace's Roles); each command's needs (rblnctl.rbac, the table
`rblnctl rbac` prints) are matched against them. A RoleBinding in that namespace can make a
cluster-wide need look granted: the review cannot tell, and kube-apiserver says so only through
`incomplete`; the evidence then says the answer may be partial.
"""

from __future__ import annotations

from rblnctl import rbac
from rblnctl.preflight.checks.common import unreadable
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.remedy import Command, Remedy

ID, TITLE = "rbac.commands", "Commands these credentials can run"


def check_access(f: ClusterFacts, out: Findings) -> None:
    """PASS when every command is allowed; WARN naming each command that is not and what it lacks."""
    if f.access is None:
        return
    if not f.access.ok:
        unreadable(out, ID, TITLE, f.access)
        return
    status = (f.access.value or {}).get("status") or {}
    rules = status.get("resourceRules") or []
    blocked = {c: rbac.missing(c, rules, rules) for c in rbac.COMMANDS}
    blocked = {c: m for c, m in blocked.items() if m}
    partial = " (the API server says its answer may be incomplete)" if status.get("incomplete") else ""
    if not blocked:
        out.add(ID, TITLE, SCOPE_CLUSTER, Status.PASS, f"all {len(rbac.COMMANDS)} commands{partial}")
        return
    read_ok = not any(c in rbac.READ_COMMANDS for c in blocked)
    role = rbac.ROLE_OPERATE if read_ok else rbac.ROLE_READ
    shown = "; ".join(f"{c} (needs {', '.join(m[:3])}{', ...' if len(m) > 3 else ''})" for c, m in blocked.items())
    out.add(ID, TITLE, SCOPE_CLUSTER, Status.WARN, f"cannot run {len(blocked)} of {len(rbac.COMMANDS)}: "
            f"{shown}{partial}",
            Remedy("grant the rules {command} prints to this account (an admin applies them)",
                   Command.own("rbac", role=role, namespace=f.operator_namespace)))
