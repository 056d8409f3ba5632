"""Which of the explorer's cases a run takes: every one with RBLNCTL_EXPLORE=full (CI, .ci/run, sets it), else a
deterministic sample (a developer's `pytest`, within the suite's 5 minutes), each world's cases
sorted and every k-th taken from an offset fixed by the world's name, so that every world is in the default run and
the same cases are in every run (and in every xdist worker, which collect on their own). docs/testing.md has the
sizes and times.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable
from typing import Any


def full() -> bool:
    """The whole matrix with RBLNCTL_EXPLORE=full (CI); anything else takes the sample."""
    return os.environ.get("RBLNCTL_EXPLORE", "").lower() == "full"


def sample(cases: Iterable[tuple[str, str, Any]], every: int,
           order: Callable[[tuple[str, str, Any]], Any] | None = None) -> list[tuple[str, str, Any]]:
    """`cases` as (world, id, value): all of them in full(), else every `every`-th of each world's, by id (or by
    `order`: a stride through ids made of two parts, point x actor, takes the same actor at every point when the
    number of actors divides `every`, so the other-actor cases order actor first)."""
    cases = list(cases)
    if full() or every <= 1:
        return cases
    by_world: dict[str, list[tuple[str, str, Any]]] = {}
    for c in cases:
        by_world.setdefault(c[0], []).append(c)
    kept = []
    for world, group in by_world.items():
        group.sort(key=order or (lambda c: c[1]))
        offset = zlib.crc32(world.encode()) % every
        kept += group[offset % len(group)::every] if len(group) > offset else group[:1]
    chosen = {c[1] for c in kept}
    return [c for c in cases if c[1] in chosen]
