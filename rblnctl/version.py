"""What `rblnctl version` reports: this client (version, commit) and, from a cluster, the versions that matter.

The cluster side reads Kubernetes (`/version`), KubeVirt (each CR's `status.observedKubeVirtVersion`),
the RBLN NPU Operator (its Deployment, rblnctl.operator.release.operator_version) and the RBLN DRA
driver (its kubelet-plugin DaemonSet, rblnctl.operator.dra): each one a component with its version,
where the version was read, or why it is not known. A read that is refused or fails leaves that
component unknown with the reason; only an unreachable cluster or rejected credentials end the run.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from rblnctl import __version__
from rblnctl import constants as C
from rblnctl.errors import ApiNotServed, AuthError, ClusterError, ClusterUnreachable, Forbidden, RblnError, one_line


@dataclass(frozen=True, kw_only=True)
class Component:
    """One versioned part of the cluster."""

    name: str  # kubernetes | kubevirt | operator | draDriver
    version: str | None  # None: not installed, or not known (see `note`)
    source: str | None = None  # where the version was read (a label, an image tag, a status field)
    note: str | None = None  # why there is no version ("not installed", "forbidden: ...")


@dataclass(frozen=True, kw_only=True)
class ClientVersion:
    version: str
    commit: str | None  # the git commit of a source checkout; None for an installed release
    python: str


def client_version() -> ClientVersion:
    """This rblnctl: its version, and its commit when it runs from a git checkout."""
    return ClientVersion(version=__version__, commit=_git_commit(Path(__file__).resolve().parent.parent),
                         python=platform.python_version())


def _git_commit(top: Path) -> str | None:
    """The commit a checkout is at, read from .git (no git binary needed); None when it is not a checkout."""
    git = top / ".git"
    try:
        if git.is_file():  # a worktree: `gitdir: <path>`
            git = (top / git.read_text().split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head[:12] or None
        ref = head.split(":", 1)[1].strip()
        common = git / "commondir"
        roots = [git] + ([(git / common.read_text().strip()).resolve()] if common.is_file() else [])
        for root in roots:
            if (root / ref).is_file():
                return (root / ref).read_text().strip()[:12]
            packed = root / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    sha, _, name = line.partition(" ")
                    if name == ref:
                        return sha[:12]
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    return None


def cluster_components(kube: object) -> list[Component]:
    """The cluster's versions; raises ClusterUnreachable / AuthError when there is no cluster to ask."""
    from rblnctl.kube import DAEMONSETS, KUBEVIRTS
    from rblnctl.operator.release import operator_deployments, operator_version
    from rblnctl.operator.dra import dra_driver_version, is_dra_daemonset

    server = kube.server_version()  # type: ignore[attr-defined]
    out = [Component(name="kubernetes", version=str(server.get("gitVersion") or "") or None, source="/version")]

    def read(name: str, produce: object) -> None:
        try:
            out.append(produce())  # type: ignore[operator]
        except Forbidden as e:  # this one read: the component is unknown, the others still count
            out.append(Component(name=name, version=None, note=one_line(e)))
        except (ClusterUnreachable, AuthError):
            raise
        except (ClusterError, RblnError) as e:
            out.append(Component(name=name, version=None, note=one_line(e)))

    def kubevirt() -> Component:
        try:
            crs = kube.list(KUBEVIRTS)  # type: ignore[attr-defined]
        except ApiNotServed:
            return Component(name="kubevirt", version=None, note="not installed (no kubevirts.kubevirt.io CRD)")
        found = [(cr["metadata"].get("namespace"), (cr.get("status") or {}).get("observedKubeVirtVersion"))
                 for cr in crs]
        if not found:
            return Component(name="kubevirt", version=None, note="not installed (no KubeVirt CR)")
        ns, version = next(((n, v) for n, v in found if v), found[0])
        return Component(name="kubevirt", version=version or None, source=f"KubeVirt CR in {ns}",
                         note=None if version else "the CR reports no version yet")

    def operator() -> Component:
        deps = operator_deployments(kube)  # type: ignore[arg-type]
        if not deps:
            return Component(name="operator", version=None,
                             note=f"no Deployment labelled {C.OPERATOR_DEPLOYMENT_SELECTOR} (or it cannot be listed)")
        found = operator_version(deps[0])
        where = f"{deps[0]['metadata'].get('namespace')}/{deps[0]['metadata'].get('name')}"
        return Component(name="operator", version=found[0] if found else None,
                         source=f"Deployment {where}: {found[1]}" if found else f"Deployment {where}",
                         note=None if found else "no version in its labels or image tag")

    def dra() -> Component:
        sets = [d for d in kube.list(DAEMONSETS) if is_dra_daemonset(d)]  # type: ignore[attr-defined]
        if not sets:
            return Component(name="draDriver", version=None, note="not installed (no DRA kubelet plugin DaemonSet)")
        found = dra_driver_version(sets[0])
        where = f"{sets[0]['metadata'].get('namespace')}/{sets[0]['metadata'].get('name')}"
        return Component(name="draDriver", version=found[0] if found else None,
                         source=f"DaemonSet {where}: {found[1]}" if found else f"DaemonSet {where}",
                         note=None if found else "no version in its image tag or labels")

    read("kubevirt", kubevirt)
    read("operator", operator)
    read("draDriver", dra)
    return out
