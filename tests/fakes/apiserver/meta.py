"""Small helpers about object metadata, timestamps and query strings, shared by the components."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

Key = tuple[str, str]  # (namespace or "", name)


def now() -> datetime:
    return datetime.now(timezone.utc)


def ts(dt: datetime | None = None) -> str:
    """A metav1.Time as the API serialises it (second precision)."""
    return (dt or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_ts(dt: datetime | None = None) -> str:
    """A metav1.MicroTime (``eventTime``, lease times)."""
    return (dt or now()).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def first(q: dict[str, list[str]], key: str) -> str | None:
    v = q.get(key)
    return v[0] if v else None


def truthy(value: str | None) -> bool:
    """A boolean query parameter as Go's strconv.ParseBool reads it."""
    return value in ("1", "t", "T", "true", "True", "TRUE")


def sort_key(o: dict) -> Key:
    md = o.get("metadata") or {}
    return (md.get("namespace", ""), md.get("name", ""))


def lookup_path(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def spec_part(obj: dict) -> dict:
    """Everything but metadata, status and TypeMeta: what a generation bump looks at."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def without_rv(obj: dict) -> dict:
    o = copy.deepcopy(obj)
    o.get("metadata", {}).pop("resourceVersion", None)
    o.get("metadata", {}).pop("managedFields", None)
    return o
