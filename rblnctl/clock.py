"""The one time seam: every wait, backoff and timestamp in the library reads time through a Clock.

Tests hand in a clock whose sleep advances a counter (tests/fakes/clock.py), so nothing patches
module globals and no test sleeps for real to make time pass.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime


class Clock:
    """Monotonic time for deadlines, wall time for records, and a sleep that a stop event can cut short."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines, durations)."""
        return time.monotonic()

    def now(self) -> datetime:
        """The wall-clock time, timezone-aware UTC (timestamps written to the cluster or a state file)."""
        return datetime.now(UTC)

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        """Sleep up to `seconds`; return True at once when `stop` is (or becomes) set."""
        seconds = max(0.0, seconds)
        if stop is None:
            time.sleep(seconds)
            return False
        return stop.wait(seconds)


SYSTEM_CLOCK = Clock()


def iso_utc(when: datetime) -> str:
    """`2026-12-02T17:34:47Z`: the RFC 3339 form Kubernetes uses for metav1.Time."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
