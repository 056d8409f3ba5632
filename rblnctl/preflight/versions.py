"""The version a Deployment or DaemonSet declares: strict X.Y.Z from its labels or image tags, never guessed."""

from __future__ import annotations

import re

from rblnctl import constants as C

# A version in a label or an image tag: require major.minor.patch so "2024-01" or "latest" never pass.
_STRICT_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+._].*)?$")


def strict_version(text: str | None) -> tuple[int, int, int] | None:
    """major.minor.patch from a label value or image tag that is a version; None otherwise (never guessed)."""
    m = _STRICT_VERSION.match((text or "").strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def image_tag(image: str) -> str | None:
    """The tag of an image reference (`repo/name:tag@sha256:...` -> tag); None without one."""
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def containers(obj: dict) -> list[dict]:
    """The containers of a workload's pod template."""
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return list(spec.get("containers") or [])


def version_from_labels(obj: dict, chart: str) -> tuple[str, str] | None:
    """(version, source) from app.kubernetes.io/version or helm.sh/chart `<chart>-X.Y.Z` on an object."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    v = labels.get(C.APP_VERSION_LABEL)
    if strict_version(v):
        return str(v), f"label {C.APP_VERSION_LABEL}"
    helm = str(labels.get(C.HELM_CHART_LABEL, ""))
    if helm.startswith(chart + "-") and strict_version(helm[len(chart) + 1:]):
        return helm[len(chart) + 1:], f"label {C.HELM_CHART_LABEL}={helm}"
    return None


def version_from_images(obj: dict, prefer: str = "") -> tuple[str, str] | None:
    """(tag, source) from the first container image whose tag is a version (those matching `prefer` first)."""
    images = [str(c.get("image") or "") for c in containers(obj)]
    images.sort(key=lambda i: prefer not in i)
    for image in images:
        tag = image_tag(image)
        if strict_version(tag):
            return str(tag), f"image {image}"
    return None
