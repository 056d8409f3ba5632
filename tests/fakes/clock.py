"""A Clock whose sleep makes time pass at once: waits and backoffs run instantly and are recorded."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from rblnctl.clock import Clock


class FakeClock(Clock):
    """Monotonic seconds start at `start`; sleep() advances them (and the wall clock) and records the request.

    Thread-safe: concurrent sleepers each advance the shared time by what they asked for.
    """

    def __init__(self, start: float = 1000.0, *, wall: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._t = start
        self._start = start
        self._wall0 = wall or datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        with self._lock:
            return self._t

    def now(self) -> datetime:
        with self._lock:
            return self._wall0 + timedelta(seconds=self._t - self._start)

    def advance(self, seconds: float) -> None:
        """Let time pass without anyone sleeping (another actor's delay)."""
        with self._lock:
            self._t += seconds

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return True
        with self._lock:
            self.sleeps.append(seconds)
            self._t += max(0.0, seconds)
        return stop.is_set() if stop is not None else False
