"""Independent reads at once: a display command's collections are fetched side by side, not one after another.

Threads, because the wait is the API server's (urllib3's PoolManager is thread-safe, and the Kube's pool keeps
CONNECTION_POOL_SIZE connections: rblnctl.kube.kubeconfig). Daemon threads, so that Ctrl-C ends the command at
once instead of waiting for a read in flight (concurrent.futures joins its workers at exit). A caller collects
the results in the order it would have read them one by one, so the error it raises is the one the sequential
reads raised first (the reads after it cost nothing but time: they are reads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from rblnctl.clock import SIGNAL_CHECK_S

T = TypeVar("T")


class Started(Generic[T]):
    """A read running on its own thread; result() waits for it and returns its value or raises its error."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), name="rblnctl-read", daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], T]) -> None:
        try:
            self._value = call()
        except BaseException as e:  # handed to the caller's thread by result()
            self._error = e

    def result(self) -> T:
        while self._thread.is_alive():
            self._thread.join(SIGNAL_CHECK_S)  # a bounded join: the main thread stays interruptible (Ctrl-C)
        if self._error is not None:
            raise self._error
        return self._value


def start(call: Callable[[], T]) -> Started[T]:
    """Start one independent read now; collect it with .result()."""
    return Started(call)
