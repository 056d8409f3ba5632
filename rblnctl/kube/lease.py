"""A lease as a coordination.k8s.io/v1 Lease and client-go's leader election record hold it: who holds it, when it
was last renewed, for how long a renewal counts, and whether that time has passed. The node lock (rblnctl/node/
lock.py, a Lease object) and the stopped mark of a VM (rblnctl/vm/attach/mark.py, an annotation) judge liveness by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, kw_only=True)
class LockState:
    """Who holds a lease (a node's lock, a VM's stopped mark), as its record says."""

    holder: str
    renewed: datetime | None
    duration_s: int
    expired: bool

    def describe(self, now: datetime) -> str:
        """`rblnctl@h pid 1: set-mode vm, last renewed 12s ago`."""
        if self.renewed is None:
            return f"{self.holder}, never renewed"
        age = max(0, int((now - self.renewed).total_seconds()))
        return f"{self.holder}, last renewed {age}s ago ({self.renewed:%Y-%m-%dT%H:%M:%SZ})"


def lease_state(holder: str, renewed: datetime | None, duration_s: int, now: datetime) -> LockState:
    """The lease `holder` renewed at `renewed` for `duration_s`: expired once that has passed (or the renewal time is
    unknown)."""
    expired = renewed is None or now >= renewed + timedelta(seconds=duration_s)
    return LockState(holder=holder, renewed=renewed, duration_s=int(duration_s), expired=expired)
