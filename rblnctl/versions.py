"""Parse and compare the version strings clusters report (v1.34.1, 1.9.0-rc.1, v1.30.4+k3s1, 0.6.0)."""

from __future__ import annotations

import re

_VERSION = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


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


def at_least(text: str | None, floor: tuple[int, int, int]) -> bool | None:
    """True/False when text parses, None when it does not (unknown is not a pass)."""
    v = parse_version(text)
    return None if v is None else v >= floor
