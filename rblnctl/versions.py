"""Parse and compare the version strings clusters report (v1.34.1, 1.9.0-rc.1, v1.30.4+k3s1, 0.6.0)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rblnctl import constants as C

_VERSION = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")
# A version in a label or an image tag: require major.minor.patch so "2024-01" or "latest" never pass.
_STRICT_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+._].*)?$")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """Return (major, minor, patch) from the first version-looking part of text; None when there is none.

    Pre-release and build suffixes are ignored: `v1.9.0-rc.1` compares as 1.9.0, which is what a
    floor check wants to know about an installed release candidate.
    """
    if not text:
        return None
    m = _VERSION.search(str(text))
    if not m:
        return None
    return int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)


def format_version(v: tuple[int, ...]) -> str:
    """(1, 34, 0) -> "1.34.0"."""
    return ".".join(str(x) for x in v)


# -- the version a workload object declares (preflight, policy set-method) ------------------------


def strict_version(text: str | None) -> tuple[int, int, int] | None:
    """major.minor.patch from a label value or image tag that is a version; None otherwise (never guessed)."""
    m = _STRICT_VERSION.match((text or "").strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def image_tag(image: str) -> str | None:
    """The tag of a container image reference (`repo/name:v1.2.3@sha256:...` -> `v1.2.3`); None without one."""
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def pod_containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers of a workload's pod template (Deployment, DaemonSet)."""
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return list(spec.get("containers") or [])


def chart_label(value: str | None, charts: Sequence[str]) -> tuple[str, str] | None:
    """(chart, version) from a helm.sh/chart value `<chart>-<version>` naming one of `charts`; None otherwise.

    Both operator chart names are tried (`rbln-npu-operator-chart-0.6.0` also starts with
    `rbln-npu-operator-`, whose remainder `chart-0.6.0` is no version); the version keeps a leading
    `v` when the chart has one (`rbln-npu-operator-v0.2.1`), since that is the chart's own version.
    """
    text = str(value or "")
    for chart in charts:
        rest = text[len(chart) + 1:] if text.startswith(chart + "-") else ""
        if strict_version(rest):
            return chart, rest
    return None


def version_from_labels(obj: dict[str, Any], *charts: str) -> tuple[str, str] | None:
    """(version, source) from app.kubernetes.io/version or helm.sh/chart `<chart>-X.Y.Z` (any of `charts`)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    v = labels.get(C.APP_VERSION_LABEL)
    if strict_version(v):
        return str(v), f"label {C.APP_VERSION_LABEL}"
    helm = str(labels.get(C.HELM_CHART_LABEL, ""))
    found = chart_label(helm, charts)
    if found:
        return found[1], f"label {C.HELM_CHART_LABEL}={helm}"
    return None


def version_from_images(obj: dict[str, Any], prefer: str = "") -> tuple[str, str] | None:
    """(tag, source) from the first container image whose tag is a version (those matching `prefer` first)."""
    images = [str(c.get("image") or "") for c in pod_containers(obj)]
    images.sort(key=lambda i: prefer not in i)
    for image in images:
        tag = image_tag(image)
        if strict_version(tag):
            return str(tag), f"image {image}"
    return None
