"""The audit trail: Kubernetes Events on the objects a mode switch, a drain or a method change changes.

Each run writes two events.k8s.io/v1 Events about the object (a Node, the RBLNClusterPolicy): one when it
starts changing it, one when it ends (done, failed or interrupted). Both carry who ran it (the user the API
server authenticated, from one SelfSubjectReview: authentication.k8s.io/v1, what `kubectl auth whoami` asks),
from and to, and the run as JSON in the annotation C.AUDIT_ANNOTATION, which `node history` reads back.

Best effort: an Event that cannot be written (RBAC, an API server that refuses it) is reported to the run's
`on_failed` (the command prints it as a warning) and logged, and the operation goes on; nothing is written under
a server dry run (the callers do not audit one). Every Event goes through the write helper (rblnctl.kube.writes):
its name is chosen here, so a lost reply is settled by reading it back.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock, iso_utc
from rblnctl.errors import RblnError, one_line  # one_line: drain and set-method import it from here
from rblnctl.kube import EVENTS_V1, SELF_SUBJECT_REVIEWS, Kube, writes

log = logging.getLogger(__name__)


def _noop(*_: Any) -> None:
    return None


STARTED = "started"
DONE = "done"
FAILED = "failed"
INTERRUPTED = "interrupted"

# kube-apiserver's limits on an events.k8s.io/v1 Event (pkg/apis/core/validation/events.go): note 1024 bytes,
# reportingInstance 128 characters, a name that is a DNS subdomain (253).
NOTE_LIMIT = 1024
INSTANCE_LIMIT = 128
NAME_LIMIT = 253


@dataclass(frozen=True, kw_only=True)
class Regarding:
    """The object an Event is about (its uid makes `kubectl describe` find the Event)."""

    api_version: str
    kind: str
    name: str
    uid: str = ""

    @classmethod
    def node(cls, name: str, uid: str = "") -> Regarding:
        return cls(api_version="v1", kind="Node", name=name, uid=uid)

    @classmethod
    def policy(cls, name: str, uid: str = "") -> Regarding:
        return cls(api_version=f"{C.CLUSTER_POLICY_GROUP}/{C.CLUSTER_POLICY_VERSION}", kind="RBLNClusterPolicy",
                   name=name, uid=uid)

    def as_dict(self) -> dict[str, Any]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.uid:
            out["uid"] = self.uid
        return out


def default_instance() -> str:
    """`rblnctl@HOST`: which rblnctl reported (events.k8s.io reportingInstance, at most 128 characters)."""
    return f"{C.REPORTING_CONTROLLER}@{socket.gethostname()}"[:INSTANCE_LIMIT]


def micro_time(when: datetime) -> str:
    """metav1.MicroTime (an Event's eventTime) as the API server writes it."""
    return iso_utc(when).removesuffix("Z") + when.strftime(".%fZ")


def event_name(regarding: str, when: datetime) -> str:
    """`NAME.<hex nanoseconds><4 random hex>`: client-go's tools/events name (`%v.%x` of the time), made unique
    when two Events of one object share a clock tick (a DNS subdomain: cut to fit)."""
    suffix = f".{int(when.timestamp() * 1e9):x}{uuid.uuid4().hex[:4]}"
    return regarding[:NAME_LIMIT - len(suffix)].rstrip(".-") + suffix


@dataclass(kw_only=True)
class Auditor:
    """Writes the audit Events of one rblnctl invocation (thread-safe: a pool's nodes share it)."""

    kube: Kube
    clock: Clock = SYSTEM_CLOCK
    instance: str = field(default_factory=default_instance)
    _user: str | None = field(default=None, init=False, repr=False)
    _user_read: bool = field(default=False, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def user(self) -> str | None:
        """Who the API server says we are (SelfSubjectReview status.userInfo.username), asked once; None when it
        cannot tell (a server before 1.28 has no such API; RBAC may refuse it)."""
        with self._lock:
            if not self._user_read:
                self._user_read = True
                try:
                    reply = writes.review(self.kube, SELF_SUBJECT_REVIEWS, {
                        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
                    name = ((reply or {}).get("status") or {}).get("userInfo", {}).get("username")
                    self._user = str(name) if name else None
                except RblnError as e:
                    log.debug("cannot tell who is running rblnctl (SelfSubjectReview): %s", e)
            return self._user

    def run(self, regarding: Regarding, action: str, *, from_: str | None = None, to: str | None = None,
            started: str | None = None, on_failed: Callable[[str], None] = _noop) -> AuditRun:
        """A run of `action` (C.AUDIT_SET_MODE, ...) on `regarding`; `started` overrides the run's start time (a
        resumed switch keeps the one of its record); `on_failed(why)` hears of each Event that could not be
        written."""
        if action not in C.AUDIT_EVENTS:
            raise ValueError(f"unknown audit action {action!r}")
        return AuditRun(auditor=self, regarding=regarding, action=action, from_=from_, to=to,
                        started=started or iso_utc(self.clock.now()), run_id=uuid.uuid4().hex[:12],
                        on_failed=on_failed)

    def record(self, regarding: Regarding, *, action: str, reason: str, warning: bool, note: str,
               details: dict[str, Any]) -> str | None:
        """Write one Event; None when written, else why not (logged). Never raises an RblnError."""
        now = self.clock.now()
        name = event_name(regarding.name, now)
        body = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": C.EVENT_NAMESPACE,
                         "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY},
                         "annotations": {C.AUDIT_ANNOTATION: json.dumps(details, sort_keys=True)}},
            "eventTime": micro_time(now),
            "reportingController": C.REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": action, "reason": reason, "type": "Warning" if warning else "Normal",
            "regarding": regarding.as_dict(),
            "note": note.encode()[:NOTE_LIMIT].decode(errors="ignore"),
        }

        def next_write(state: object) -> writes.Write | None:
            if state is not writes.UNREAD and state is not None:
                return None  # it landed (a lost reply, read back)
            return writes.create(EVENTS_V1, body, namespace=C.EVENT_NAMESPACE)

        try:
            writes.settle(self.kube, next_write, what=f"Event {C.EVENT_NAMESPACE}/{name}",
                          read=lambda: self.kube.get_optional(EVENTS_V1, name, namespace=C.EVENT_NAMESPACE))
            return None
        except RblnError as e:
            why = (f"could not record Event {reason} ({details.get('result')}) on {regarding.kind} {regarding.name}: "
                   f"{one_line(e)}; the audit trail misses it")
            log.info("%s", why)
            return why


@dataclass(kw_only=True)
class AuditRun:
    """One run on one object: start() when it begins changing it, finish() when it ends."""

    auditor: Auditor
    regarding: Regarding
    action: str
    from_: str | None
    to: str | None
    started: str
    run_id: str
    on_failed: Callable[[str], None] = _noop
    finished: bool = False

    def _details(self, result: str, user: str | None) -> dict[str, Any]:
        out = {"run": self.run_id, "action": self.action, "user": user, "from": self.from_, "to": self.to,
               "result": result, "started": self.started}
        if result != STARTED:
            out["finished"] = iso_utc(self.auditor.clock.now())
        return out

    def _write(self, result: str, note: str) -> bool:
        action, started, done, failed, interrupted = C.AUDIT_EVENTS[self.action]
        reason = {STARTED: started, DONE: done, FAILED: failed, INTERRUPTED: interrupted}[result]
        user = self.auditor.user()
        who = user or "an unknown user"
        why = self.auditor.record(self.regarding, action=action, reason=reason,
                                  warning=result in (FAILED, INTERRUPTED), note=f"{note} (by {who})",
                                  details=self._details(result, user))
        if why is not None:
            self.on_failed(why)
        return why is None

    def start(self, note: str) -> bool:
        """The run begins changing the object."""
        return self._write(STARTED, note)

    def finish(self, result: str, note: str) -> bool:
        """The run ended: DONE, FAILED or INTERRUPTED (once; later calls write nothing)."""
        if result not in (DONE, FAILED, INTERRUPTED):
            raise ValueError(f"not an end of a run: {result!r}")
        if self.finished:
            return False
        self.finished = True
        return self._write(result, note)


def outcome_of(err: BaseException) -> str:
    """The result an exception ends a run with: INTERRUPTED for Ctrl-C and signals (rblnctl.clock.Stopped is a
    KeyboardInterrupt), else FAILED."""
    return INTERRUPTED if isinstance(err, KeyboardInterrupt) else FAILED
