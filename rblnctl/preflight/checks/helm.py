"""`helm.version`: the local helm client, where there is one, is >= 3.9 (the operator chart's floor)."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.versions import format_version, parse_version


def check_helm(f: ClusterFacts, out: Findings) -> None:
    """SKIP without helm on PATH (never a failure); WARN when it fails or prints no version; FAIL below 3.9."""
    id_, title = "helm.version", "Helm client version"
    h = f.helm
    floor = C.MIN_HELM
    if h.path is None:
        out.add(id_, title, SCOPE_CLUSTER, Status.SKIP,
                "helm is not on PATH here (needed only where you install the operator)")
    elif h.error:
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN, h.error, f"check {h.path}; the charts need Helm >= 3.9")
    else:
        v = parse_version(h.output)
        if v is None:
            out.add(id_, title, SCOPE_CLUSTER, Status.WARN, f"{h.path} printed {h.output!r}, no version",
                    "check `helm version`; the charts need Helm >= 3.9", "helm version")
        elif v >= floor:
            out.add(id_, title, SCOPE_CLUSTER, Status.PASS, f"{h.output} >= {format_version(floor)}")
        else:
            out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, f"{h.output} < {format_version(floor)} ({h.path})",
                    f"upgrade Helm to {format_version(floor)} or later")
