"""`kubernetes.version`: the API server's version against the method's floor."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.preflight.checks.common import unreadable
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.versions import format_version, parse_version


def check_kubernetes(f: ClusterFacts, out: Findings) -> None:
    """Kubernetes >= 1.34 for DRA (resource.k8s.io/v1), >= 1.19 for the sandbox method."""
    title = "Kubernetes version"
    if not f.version.ok:
        unreadable(out, "kubernetes.version", title, f.version)
        return
    text = (f.version.value or {}).get("gitVersion")
    floor = C.MIN_KUBERNETES[f.method]
    v = parse_version(text)
    if v is None:
        out.add("kubernetes.version", title, SCOPE_CLUSTER, Status.WARN, f"server reports no version ({text!r})",
                "check `kubectl version`", "kubectl version")
    elif v >= floor:
        out.add("kubernetes.version", title, SCOPE_CLUSTER, Status.PASS,
                f"{text} >= {format_version(floor)} ({f.method})")
    else:
        fix = (f"upgrade Kubernetes to {format_version(floor)} or later"
               + (", or use the sandbox method (Kubernetes >= 1.19)" if f.method == C.METHOD_DRA else ""))
        out.add("kubernetes.version", title, SCOPE_CLUSTER, Status.FAIL,
                f"{text} < {format_version(floor)}, the {f.method} method's floor", fix)
