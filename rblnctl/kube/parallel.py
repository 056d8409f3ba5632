"""Reads of independent collections sent at once: one daemon thread per read, joined for its result.

Daemon threads, not a ThreadPoolExecutor: an executor's workers are joined at interpreter exit, so Ctrl-C during
a slow list would wait for it (the reason rblnctl.kube.watch pumps its streams from daemon threads too). A Kube
is safe to share between threads: its transport is a urllib3 pool, and each request is independent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """A call running in a daemon thread; result() waits for it and returns its value or raises its error."""

    def __init__(self, fn: Callable[..., T], *args: object, **kwargs: object) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = fn(*args, **kwargs)
            except BaseException as e:  # handed to result(), in the caller's thread
                self._error = e

        self._thread = threading.Thread(target=run, name=f"rblnctl-read-{getattr(fn, '__name__', 'call')}",
                                        daemon=True)
        self._thread.start()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def started(fn: Callable[..., T], *args: object, **kwargs: object) -> Pending[T]:
    """Start `fn(*args, **kwargs)` now, in the background; `.result()` when its value is needed."""
    return Pending(fn, *args, **kwargs)
