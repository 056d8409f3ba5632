"""The one time seam: every wait, backoff and timestamp in the library reads time through a Clock.

Tests hand in a clock whose sleep advances a counter (tests/fakes/clock.py), so nothing patches
module globals and no test sleeps for real to make time pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


class Stop(threading.Event):
    """A request to stop that wakes whatever waits on it: Clock.sleep(), linked stops, and callbacks.

    A plain Event wakes sleepers only. A Stop also runs the callbacks registered with on_set() (a
    watch registers the shutdown of its stream, so a thread blocked reading it wakes at once) and
    sets the stops linked to it (an eviction round's own stop, which its first failure also sets,
    without stopping anything beyond the round).
    """

    def __init__(self) -> None:
        super().__init__()
        self._mutex = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def set(self) -> None:
        """Set the flag, then run (once) every callback registered so far, on this thread."""
        with self._mutex:
            if self.is_set():
                return
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` when this is set (at once if it already is); returns a function that unregisters it."""
        with self._mutex:
            if not self.is_set():
                self._callbacks.append(callback)

                def unregister() -> None:
                    with self._mutex:
                        if callback in self._callbacks:
                            self._callbacks.remove(callback)

                return unregister
        callback()
        return lambda: None

    @contextmanager
    def linked(self) -> Iterator["Stop"]:
        """A new Stop that this one sets too (setting it leaves this one alone); unlinked when the block ends."""
        child = Stop()
        unregister = self.on_set(child.set)
        try:
            yield child
        finally:
            unregister()


class Stopped(KeyboardInterrupt):
    """Work gave up because its Stop was set: the run it belongs to was interrupted.

    A KeyboardInterrupt, like Ctrl-C itself, so every path that handles an interrupt (no new
    writes, no rollback, give the lock back) handles it the same way, on any thread.
    """


def iso_utc(when: datetime) -> str:
    """`2026-12-02T17:34:47Z`: the RFC 3339 form Kubernetes uses for metav1.Time."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
