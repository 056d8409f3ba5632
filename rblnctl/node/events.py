"""Progress of drain and set-mode as one events object: the front end decides how to show it."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rblnctl.node.pods import PodRef

if TYPE_CHECKING:
    from rblnctl.operator.convergence import Pending


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
class WaitState:
    """Where set-mode's wait for the operator stands: what is still missing (component pods held in an init
    container first, stuck ones before the others), what the policy's status says is not ready, and the time.

    `log_problem` says why a held pod's init container log could not be read (RBAC without pods/log, a kubelet
    that does not answer); None when it was read or not tried.
    """

    node: str
    target: str
    pending: tuple["Pending", ...]
    operator: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    timeout_s: float = 0.0
    log_problem: str | None = None

    @property
    def remaining_s(self) -> float:
        return max(0.0, self.timeout_s - self.elapsed_s)

    @property
    def first(self) -> "Pending | None":
        """What holds the node up most: a stuck held pod, another held pod, else the first thing missing."""
        ranked = sorted(self.pending, key=lambda p: (p.hold is None, not (p.hold is not None and p.hold.stuck)))
        return ranked[0] if ranked else None


@dataclass(frozen=True, kw_only=True)
class NodeEvents:
    """Callbacks for what happens to a node; every one defaults to doing nothing."""

    on_step: Callable[[Step, str], None] = _noop  # a step starts (detail says what)
    on_evicted: Callable[[PodRef], None] = _noop  # an eviction (or delete) was accepted
    on_gone: Callable[[PodRef], None] = _noop  # an evicted pod has left the node
    on_pdb_blocked: Callable[[PodRef, str, int], None] = _noop  # a disruption budget refused (message, attempt)
    on_waiting: Callable[[list[str]], None] = _noop  # what the operator still has to do (when it changes)
    on_wait: Callable[[WaitState], None] = _noop  # the same, as data with the time (when it changes)
    on_warning: Callable[[str], None] = _noop  # something worth saying that does not stop the run
