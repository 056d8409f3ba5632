"""Injected faults: what the network or an overloaded server does to a request.

A fault matches the next ``times`` requests by method and path (``re.search``) and then answers a
``Status`` (``status``; with ``retry_after_s`` the ``Retry-After`` header and
``details.retryAfterSeconds``) or drops the connection before handling (``drop``). ``delay_s``
delays the answer; ``status=None`` only delays.
"""

from __future__ import annotations

import copy
import re
import threading
from dataclasses import dataclass


@dataclass
class Fault:
    method: str | None
    path: str | None
    status: int | None
    reason: str | None
    message: str
    delay_s: float
    drop: bool
    times: int
    retry_after_s: int | None

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}


class FaultBook:
    def __init__(self, lock: threading.RLock):
        self._lock = lock
        self._faults: list[Fault] = []

    def inject(self, *, method: str | None, path: str | None, status: int | None, reason: str | None, message: str,
               delay_s: float, drop: bool, times: int, retry_after_s: int | None) -> None:
        with self._lock:
            self._faults.append(Fault(method.upper() if method else None, path, status, reason, message, delay_s,
                                      drop, times, retry_after_s))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, method: str, path: str) -> Fault | None:
        """The first fault matching this request, with one use consumed."""
        with self._lock:
            for f in self._faults:
                if f.times <= 0 or (f.method and f.method != method) or (f.path and not re.search(f.path, path)):
                    continue
                f.times -= 1
                fault = copy.copy(f)
                self._faults = [x for x in self._faults if x.times > 0]
                return fault
        return None
