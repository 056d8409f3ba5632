"""Injected faults: what the network, a proxy or an overloaded server does to a request.

A fault matches the next ``times`` requests by method and path (``re.search``) and then does one
of: answer a ``Status`` (``status``; with ``retry_after_s`` the ``Retry-After`` header and
``details.retryAfterSeconds`` as the max-in-flight and priority-and-fairness filters send them),
answer a raw ``body`` (a proxy's HTML, invalid JSON, a JSON value of the wrong shape), drop the
connection before handling (``drop``), or handle the request normally and then drop the connection
instead of replying (``lose_reply``: the change is made, the client cannot know). ``delay_s``
delays the answer (for ``lose_reply``: the drop); ``status=None`` only delays. ``client`` limits a fault
to requests whose User-Agent starts with it (``"rblnctl/"``), so a simulated kubelet or operator sharing the
server cannot take a fault meant for the tool under test. The test harness's own client (config.py
HARNESS_USER_AGENT) never takes a fault unless ``client`` names it. ``watch`` limits a fault to watch requests
(True: ``?watch=true``, a stream being opened) or to every other request (False); None matches both.
``then`` is called once the fault has taken the request: for ``lose_reply`` after the change was committed and
before the connection drops, otherwise before the fault's delay (e.g. a signal to the client under test, timed
to that exact request).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from tests.fakes.apiserver.config import HARNESS_USER_AGENT

UNSET: Any = object()


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
    lose_reply: bool = False
    body: bytes | None = None
    content_type: str = "application/json"
    client: str | None = None  # only requests whose User-Agent starts so (e.g. "rblnctl/"); None: any
    watch: bool | None = None  # only watch requests (True), only others (False), or any (None)
    then: Callable[[], None] | None = None  # called once the fault has the request (see the module docstring)

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}


def encode_body(body: Any) -> bytes:
    """bytes as they are, str as UTF-8, any other value as JSON."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


class FaultBook:
    def __init__(self, lock: threading.RLock):
        self._lock = lock
        self._faults: list[Fault] = []

    def inject(self, *, method: str | None, path: str | None, status: Any, reason: str | None, message: str,
               delay_s: float, drop: bool, times: int, retry_after_s: int | None, lose_reply: bool,
               body: Any, content_type: str, client: str | None = None, watch: bool | None = None,
               then: Callable[[], None] | None = None) -> None:
        if lose_reply and (drop or body is not None or status not in (UNSET, None)):
            raise ValueError("lose_reply handles the request normally: no status, body or drop with it")
        if drop and body is not None:
            raise ValueError("drop and body exclude each other")
        if status is UNSET:
            status = None if lose_reply else 200 if body is not None else 500
        raw = encode_body(body) if body is not None else None
        with self._lock:
            self._faults.append(Fault(method.upper() if method else None, path, status, reason, message, delay_s,
                                      drop, times, retry_after_s, lose_reply, raw, content_type, client, watch,
                                      then))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, method: str, path: str, user_agent: str = "", watch: bool = False) -> Fault | None:
        """The first fault matching this request, with one use consumed."""
        with self._lock:
            for f in self._faults:
                if f.times <= 0 or (f.method and f.method != method) or (f.path and not re.search(f.path, path)):
                    continue
                if f.watch is not None and f.watch != watch:
                    continue
                if f.client and not user_agent.startswith(f.client):
                    continue
                if not f.client and user_agent.startswith(HARNESS_USER_AGENT):
                    continue  # a fault meant for the client under test, not for the simulated operator/kubelets
                f.times -= 1
                fault = copy.copy(f)
                self._faults = [x for x in self._faults if x.times > 0]
                return fault
        return None
