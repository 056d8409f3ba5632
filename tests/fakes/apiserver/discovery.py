"""Discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/{g}``, ``/apis/{g}/{v}``.

The legacy (non-aggregated) form only: clients that ask for aggregated discovery
(``application/json;g=apidiscovery.k8s.io;v=v2``) fall back to it, as they do against any server
that answers plain ``application/json``.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from tests.fakes.apiserver.errors import unknown_path
from tests.fakes.apiserver.resources import SUBRESOURCE_KIND, SUBRESOURCE_VERBS, Resource

#: An extra API group served outside the resource table: (group, version, APIResource entries).
ExtraGroup = tuple[str, str, list[dict]]
#: What kube-apiserver's mux (Go's http.NotFound, text/plain) answers for a path nothing is routed to.
MUX_NOT_FOUND = "404 page not found\n"
_ROUTED = ("/version", "/api", "/healthz", "/readyz", "/livez", "/openapi", "/metrics")


def served_path(path: str, resources: list[Resource], extra: list[ExtraGroup]) -> bool:
    """Whether the real server's mux routes ``path`` to a handler: the fixed paths, /apis, and everything under
    an API group it serves (a served group answers a JSON Status 404 for an unknown version or resource; an
    unserved group, e.g. ``/apis/kubevirt.io/v1/kubevirts`` before KubeVirt's CRDs exist, a plain-text 404)."""
    segs = [s for s in path.split("/") if s]
    if not segs:
        return False
    if segs[0] != "apis":
        return any(path == p or path.startswith(p + "/") for p in _ROUTED)
    if len(segs) == 1:
        return True
    return any(g["name"] == segs[1] for g in _groups(resources, extra))


def version_info(git_version: str) -> dict[str, str]:
    """``/version`` as a kube-apiserver of that version answers it (1.34 adds the emulation fields)."""
    m = re.match(r"v?(\d+)\.(\d+)", git_version)
    if not m:
        raise ValueError(f"not a Kubernetes version: {git_version!r}")
    major, minor = m.group(1), m.group(2)
    info = {
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "0123456789abcdef0123456789abcdef01234567",
        "gitTreeState": "clean",
        "buildDate": "2025-09-09T19:44:50Z",
        "goVersion": "go1.24.6",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
    if (int(major), int(minor)) >= (1, 34):
        info.update({"emulationMajor": major, "emulationMinor": minor,
                     "minCompatibilityMajor": major, "minCompatibilityMinor": str(int(minor) - 1)})
    return info


def discovery(path: str, host: str, resources: list[Resource], version: dict[str, str],
              extra: list[ExtraGroup]) -> dict | None:
    """The discovery document for ``path``, or None when ``path`` is not a discovery path."""
    if path in ("/version", "/version/"):
        return version
    if path in ("/api", "/api/"):
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}
    if path in ("/apis", "/apis/"):
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": _groups(resources, extra)}
    m = re.fullmatch(r"/apis/([^/]+)/?", path)
    if m:
        for g in _groups(resources, extra):
            if g["name"] == m.group(1):
                return {"kind": "APIGroup", "apiVersion": "v1", **g}
        raise unknown_path()
    m = re.fullmatch(r"/api/(v1)/?|/apis/([^/]+)/([^/]+)/?", path)
    if m:
        group, version_ = ("", "v1") if m.group(1) else (m.group(2), m.group(3))
        gv = f"{group}/{version_}" if group else version_
        entries = [e for g, v, es in extra if (g, v) == (group, version_) for e in es]
        rs = [r for r in resources if r.group == group and r.version == version_]
        if not rs and not entries:
            raise unknown_path()
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                "resources": _api_resources(rs) + entries}
    return None


def _groups(resources: list[Resource], extra: list[ExtraGroup]) -> list[dict]:
    groups: dict[str, list[str]] = {}
    for group, version in [(r.group, r.version) for r in resources] + [(g, v) for g, v, _ in extra]:
        if group and version not in groups.setdefault(group, []):
            groups[group].append(version)
    out = []
    for g, versions in groups.items():
        vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in versions]
        out.append({"name": g, "versions": vs, "preferredVersion": vs[0]})
    return out


def _api_resources(rs: list[Resource]) -> list[dict]:
    out = []
    for r in rs:
        entry: dict[str, Any] = {"name": r.plural, "singularName": r.singular_name, "namespaced": r.namespaced,
                                 "kind": r.kind, "verbs": list(r.verbs)}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        entry["storageVersionHash"] = base64.b64encode(r.id.encode())[:11].decode()
        out.append(entry)
        for sub in r.subresources:
            s: dict[str, Any] = {"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                                 "kind": r.kind, "verbs": SUBRESOURCE_VERBS.get(sub, ["get"])}
            if sub in SUBRESOURCE_KIND:
                g, v, k = SUBRESOURCE_KIND[sub]
                s["kind"] = k
                if v:
                    s["group"], s["version"] = g, v
            out.append(s)
    return out
