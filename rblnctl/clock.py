"""The one time seam: every wait, backoff and timestamp in the library reads time through a Clock.

Tests hand in a clock whose sleep advances a counter (tests/fakes/clock.py), so nothing patches
module globals and no test sleeps for real to make time pass.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeVar

T = TypeVar("T")

# The longest the main thread blocks in one wait on another thread (a queue, a join, a future) before it looks for
# a signal. CPython runs a signal's handler (Ctrl-C's KeyboardInterrupt, SIGTERM's Interrupted) between bytecodes;
# a signal that arrives after the interpreter last looked and before the thread blocks in a lock (it lands while
# the thread hands the GIL over: drop_gil waits for another thread to take it) does not interrupt that lock, and
# its handler waits until something else wakes the thread: for ever, for `node list -w` on a quiet cluster (one
# Ctrl-C in 15 ignored under load). A wait in slices of this length runs it within one slice.
SIGNAL_CHECK_S = 0.1


class Clock:
    """Monotonic time for deadlines, wall time for records, and a sleep that a stop event can cut short."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines, durations)."""
        return time.monotonic()

    def now(self) -> datetime:
        """The wall-clock time, timezone-aware UTC (timestamps written to the cluster or a state file)."""
        return datetime.now(UTC)

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        """Sleep up to `seconds`; return True at once when `stop` is (or becomes) set. On the main thread in slices
        of SIGNAL_CHECK_S (sliced): a Ctrl-C is run at once, not when the sleep ends."""
        seconds = max(0.0, seconds)
        if stop is None:
            return sliced(_sleep, seconds)
        return sliced(stop.wait, seconds)


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def sliced(wait_for: Callable[[float], bool], seconds: float) -> bool:
    """`wait_for(seconds)` (an Event's wait, a sleep: True when what it waits for came) for the main thread: in
    waits of at most SIGNAL_CHECK_S until one returns True (True at once) or `seconds` have passed (False), so that
    a signal (Ctrl-C) is handled at once whenever it arrives (next_item). Another thread, where no signal handler
    runs, waits in one go."""
    if threading.current_thread() is not threading.main_thread():
        return wait_for(seconds)
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if wait_for(max(0.0, min(SIGNAL_CHECK_S, left))):
            return True
        if left <= SIGNAL_CHECK_S:
            return False


SYSTEM_CLOCK = Clock()


def next_item(items: queue.Queue[T]) -> T:
    """`items.get()` for the main thread: blocks until an item comes, in waits of SIGNAL_CHECK_S, so that a signal
    (Ctrl-C) is handled at once whenever it arrives."""
    while True:
        try:
            return items.get(timeout=SIGNAL_CHECK_S)
        except queue.Empty:
            continue


def first_done(futures: Collection[Future[T]]) -> set[Future[T]]:
    """`concurrent.futures.wait(futures, return_when=FIRST_COMPLETED)`'s done set for the main thread, waiting in
    slices of SIGNAL_CHECK_S (next_item)."""
    while True:
        done, _ = wait(futures, timeout=SIGNAL_CHECK_S, return_when=FIRST_COMPLETED)
        if done or not futures:
            return done


def result_of(future: Future[T]) -> T:
    """`future.result()` for the main thread, waiting in slices of SIGNAL_CHECK_S (next_item); its own error raised
    (a TimeoutError of the call itself included)."""
    while not future.done():
        wait((future,), timeout=SIGNAL_CHECK_S)
    return future.result()


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

    def wait(self, timeout: float | None = None) -> bool:
        """Event.wait, on the main thread in slices of SIGNAL_CHECK_S (sliced): a Ctrl-C is run at once, not when
        the wait ends; True as soon as this is set, False when `timeout` passed first."""
        if timeout is None:
            while not super().wait(SIGNAL_CHECK_S if threading.current_thread() is threading.main_thread() else None):
                pass
            return True
        return sliced(super().wait, max(0.0, timeout))

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
