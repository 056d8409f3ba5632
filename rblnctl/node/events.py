"""Progress of drain and set-mode as one events object: the front end decides how to show it."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rblnctl.node.pods import PodRef


class Step(enum.StrEnum):
    """The steps of a drain or a mode switch, in order (as reported and as recorded on the node)."""

    LOCK = "lock"
    RECORD = "record"
    CORDON = "cordon"
    EVICT = "evict"
    RELABEL = "relabel"
    WAIT = "wait"
    UNCORDON = "uncordon"
    FINISH = "finish"
    ROLLBACK = "rollback"


def _noop(*_: Any) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class NodeEvents:
    """Callbacks for what happens to a node; every one defaults to doing nothing."""

    on_step: Callable[[Step, str], None] = _noop  # a step starts (detail says what)
    on_evicted: Callable[[PodRef], None] = _noop  # an eviction (or delete) was accepted
    on_gone: Callable[[PodRef], None] = _noop  # an evicted pod has left the node
    on_pdb_blocked: Callable[[PodRef, str, int], None] = _noop  # a disruption budget refused (message, attempt)
    on_waiting: Callable[[list[str]], None] = _noop  # what the operator still has to do (when it changes)
    on_warning: Callable[[str], None] = _noop  # something worth saying that does not stop the run
