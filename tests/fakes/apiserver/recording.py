"""The request log: every HTTP request as the server saw it, and what became of it."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from tests.fakes.apiserver.config import HARNESS_USER_AGENT


@dataclass
class RecordedRequest:
    """One HTTP request as the server saw it. ``status`` is 0 until answered (and for drops).

    ``applied`` is True when the server's real handling ran (whatever it answered: 200, 404,
    409...), False when an injected fault answered instead or the connection was dropped first.
    ``reply_lost`` is True when the reply of an applied request was never sent (``lose_reply``):
    the client saw a dropped connection, ``status`` is what it would have received. ``at`` is the
    ``time.monotonic()`` of arrival."""

    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any  # parsed JSON, the raw text when not JSON, or None when empty
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    at: float = field(default_factory=time.monotonic)
    applied: bool = False
    reply_lost: bool = False
    #: The texts of the ``Warning`` headers its reply carried (admission warnings), in order, each once.
    warnings: list[str] = field(default_factory=list, repr=False)

    @property
    def dry_run(self) -> bool:
        """``dryRun=All`` as the server applies it: in a DELETE's DeleteOptions body when it has one (the query is
        then ignored), else in the query, or in an Eviction's deleteOptions."""
        if self.method == "DELETE" and isinstance(self.body, dict):
            return "All" in (self.body.get("dryRun") or [])
        if "All" in self.query.get("dryRun", []):
            return True
        if isinstance(self.body, dict):
            opts = self.body.get("deleteOptions") if "deleteOptions" in self.body else self.body
            return "All" in ((opts or {}).get("dryRun") or [])
        return False

    @property
    def is_write(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")

    @property
    def user_agent(self) -> str:
        return self.headers.get("user-agent") or ""

    @property
    def from_harness(self) -> bool:
        """Sent by the test harness's own client (the simulated operator and kubelets), not by a client under test."""
        return self.user_agent.startswith(HARNESS_USER_AGENT)


class RequestLog:
    """``requests``: what the clients under test sent; ``harness_requests``: the harness's own (config.py
    HARNESS_USER_AGENT), kept apart so that a simulated operator or kubelet acting over HTTP changes nothing a
    test asserts about rblnctl (its writes, its request counts, the on_request hooks that react to them)."""

    def __init__(self, lock: threading.RLock, errors: list[str]):
        self._lock = lock
        self.errors = errors
        self.requests: list[RecordedRequest] = []
        self.harness_requests: list[RecordedRequest] = []
        self._callbacks: list[Callable[[RecordedRequest], None]] = []
        self._handled_callbacks: list[Callable[[RecordedRequest], None]] = []

    def record(self, req: RecordedRequest) -> None:
        """Append ``req`` and run the on_request callbacks (outside the lock); the harness's requests go to
        ``harness_requests`` and run none."""
        with self._lock:
            if req.from_harness:
                self.harness_requests.append(req)
                return
            self.requests.append(req)
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb(req)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"on_request callback {cb!r} raised {exc!r}")

    def on_request(self, callback: Callable[[RecordedRequest], None]) -> Callable[[], None]:
        with self._lock:
            self._callbacks.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return unsubscribe

    def handled(self, req: RecordedRequest) -> None:
        """Run the on_handled callbacks for ``req`` (a client's, handled and committed, its reply not yet sent)."""
        if req.from_harness:
            return
        with self._lock:
            callbacks = list(self._handled_callbacks)
        for cb in callbacks:
            try:
                cb(req)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"on_handled callback {cb!r} raised {exc!r}")

    def on_handled(self, callback: Callable[[RecordedRequest], None]) -> Callable[[], None]:
        with self._lock:
            self._handled_callbacks.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._handled_callbacks:
                    self._handled_callbacks.remove(callback)

        return unsubscribe

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self.harness_requests.clear()

    def matching(self, method: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        """The requests with that method (any when None) whose path ``re.search``-matches ``path``."""
        with self._lock:
            reqs = list(self.requests)
        return [r for r in reqs if (method is None or r.method == method.upper())
                and (path is None or re.search(path, r.path))]
