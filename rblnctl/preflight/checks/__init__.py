"""Cluster checks: pure functions of ClusterFacts, one module per area, run in report order by check_cluster()."""

from __future__ import annotations

from rblnctl.preflight.checks.access import check_access
from rblnctl.preflight.checks.dra import check_dra
from rblnctl.preflight.checks.helm import check_helm
from rblnctl.preflight.checks.kubernetes import check_kubernetes
from rblnctl.preflight.checks.kubevirt import check_kubevirt
from rblnctl.preflight.checks.nfd import check_nfd
from rblnctl.preflight.checks.nodes import check_nodes
from rblnctl.preflight.checks.operator import check_operator, check_release_line
from rblnctl.preflight.checks.permitted_devices import check_permitted_devices
from rblnctl.preflight.checks.policy import check_policy
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, CheckResult, Findings


def check_cluster(f: ClusterFacts) -> list[CheckResult]:
    """Turn cluster facts into findings: cluster-wide checks first, then per NPU node."""
    out = Findings()
    out.add("cluster.method", "Allocation method", SCOPE_CLUSTER, f.method_status,
            f"{f.method}: {f.method_note}", f.method_remedy)
    check_kubernetes(f, out)
    check_operator(f, out)
    check_release_line(f, out)
    check_policy(f, out)
    kv = check_kubevirt(f, out)
    check_permitted_devices(f, kv, out)
    check_dra(f, out)
    check_helm(f, out)
    check_access(f, out)
    check_nfd(f, out)
    check_nodes(f, out)
    return out.items


__all__ = ["check_cluster"]
