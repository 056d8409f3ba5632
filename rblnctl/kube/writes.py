"""Writes: the one place the library sends a write request, and the one rule for a write whose outcome is unknown.

A write that gets no answer (its reply lost, the connection reset, a timeout) or a 5xx may or may not
have been applied, and may still be applied later. Like client-go's controllers, rblnctl never
re-sends such a write blindly and never takes it for failed: it reads the object back and judges
what the server holds.

    state = read() (or the caller's plan) -> next_write(state): None? done -> send it
      -> accepted: done
      -> outcome unknown (lost reply, reset, timeout, 5xx): read back -> next_write(state) again:
         None (it landed, or someone made the same change): done; else send it again
      -> a conflict the caller retries on (`retry`): back off, read again, next_write again
      -> any other refusal: raised as it is
    bounded by `attempts` writes; a read-back that fails after a lost reply is OutcomeUnknown.

`next_write` carries the caller's judgement of one state: a cordon is done when the node is
unschedulable, an eviction when its pod is gone or terminating, a Lease create when the Lease names
us, a VM stop when virt-api says the VM is not running. Writes whose re-sending is unsafe are guarded
(a resourceVersion, a JSON Patch `test`, DeleteOptions preconditions), so of two tries at most one
applies. A server dry run (`dry_run`) sends the write once: nothing persists, so there is nothing
to read back.

Every write of the library goes through `send()` (tests/test_layers.py checks that no other module
calls Kube.patch/create/delete or sends a write with Kube.request).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import ClusterError, Conflict, NotFound, OutcomeUnknown, RblnError, one_line
from rblnctl.kube.client import PATCH_TYPES, Kube
from rblnctl.kube.replies import outcome_unknown
from rblnctl.kube.resources import Resource

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 5  # writes sent for one change before giving up


class _Unread:
    """The state before anything was read (the first write is the caller's plan)."""

    def __repr__(self) -> str:
        return "UNREAD"


UNREAD: Any = _Unread()


@dataclass(frozen=True, kw_only=True)
class Write:
    """One write request as data: what send() sends."""

    method: str  # POST, PUT, PATCH or DELETE
    res: Resource
    name: str | None = None  # None: a create (POST to the collection)
    namespace: str | None = None
    body: Any = None
    patch_type: str | None = None  # PATCH: json, merge or strategic
    sub: str | None = None  # a subresource: eviction, start, stop

    def describe(self) -> str:
        """`PATCH nodes/n1`, `POST pods/p/eviction` (for messages)."""
        where = f"{self.namespace}/" if self.namespace else ""
        target = f"{self.res.plural}/{where}{self.name}" if self.name else f"{self.res.plural} in {where or '/'}"
        return f"{self.method} {target}" + (f"/{self.sub}" if self.sub else "")


def patch(res: Resource, name: str, body: Any, *, patch_type: str, namespace: str | None = None) -> Write:
    """A PATCH (json, merge or strategic)."""
    if patch_type not in PATCH_TYPES:
        raise ValueError(f"unknown patch type {patch_type!r}")
    return Write(method="PATCH", res=res, name=name, namespace=namespace, body=body, patch_type=patch_type)


def create(res: Resource, body: dict, *, namespace: str | None = None, sub_of: str | None = None,
           sub: str | None = None) -> Write:
    """A POST to a collection, or to a subresource of `sub_of` (an eviction)."""
    return Write(method="POST", res=res, name=sub_of, namespace=namespace, body=body, sub=sub)


def delete(res: Resource, name: str, *, namespace: str | None = None, body: dict | None = None) -> Write:
    """A DELETE (body: DeleteOptions, e.g. preconditions)."""
    return Write(method="DELETE", res=res, name=name, namespace=namespace, body=body)


def put(res: Resource, name: str, *, sub: str, namespace: str | None = None, body: Any = None) -> Write:
    """A PUT to a subresource (virt-api's start and stop)."""
    return Write(method="PUT", res=res, name=name, namespace=namespace, body=body, sub=sub)


def send(kube: Kube, w: Write, *, dry_run: bool = False) -> Any:
    """Send one write (dryRun=All with `dry_run`); the reply, or the typed error of kube.request()."""
    if w.method == "PATCH":
        return kube.patch(w.res, str(w.name), w.body, patch_type=str(w.patch_type), namespace=w.namespace,
                          sub=w.sub, dry_run=dry_run)
    if w.method == "POST":
        return kube.create(w.res, w.body, namespace=w.namespace, sub_of=w.name, sub=w.sub, dry_run=dry_run)
    if w.method == "DELETE":
        return kube.delete(w.res, str(w.name), namespace=w.namespace, body=w.body, dry_run=dry_run)
    if w.method == "PUT":
        body = w.body
        if dry_run:  # virt-api's subresources take dryRun in their body (StartOptions, StopOptions)
            body = {**(body or {}), "dryRun": ["All"]}
        return kube.request("PUT", w.res.path(w.name, namespace=w.namespace, sub=w.sub), body=body)
    raise ValueError(f"not a write: {w.method}")


def review(kube: Kube, res: Resource, body: dict) -> Any:
    """POST a review (SelfSubjectAccessReview, SelfSubjectRulesReview): an answer, nothing persisted.

    Sent like a read: a review changes nothing, so sending it again is always safe.
    """
    return kube.create(res, body)


def unknown(err: BaseException) -> bool:
    """Whether a write that failed with `err` may have been applied: a lost reply, a reset, a timeout, a 5xx."""
    return outcome_unknown(err) or (isinstance(err, ClusterError) and 500 <= err.status <= 599)


def is_409(err: ClusterError) -> bool:
    """A 409 Conflict (a stale resourceVersion, or AlreadyExists)."""
    return isinstance(err, Conflict) or err.status == 409


@dataclass(frozen=True, kw_only=True)
class Settled:
    """How a write was settled."""

    reply: Any  # the answer to the write that went through (None when settled by reading back, or none sent)
    state: Any  # the last state read (UNREAD when nothing was read)
    sent: int  # write requests sent
    changed: bool  # a write of ours went through, or one whose reply was lost is found applied
    retried: int = 0  # writes sent again after a lost reply or a conflict


def _verb(w: Write) -> str:
    return w.sub or {"PATCH": "patch", "POST": "create", "DELETE": "delete"}.get(w.method, w.method.lower())


def settle(kube: Kube, next_write: Callable[[Any], Write | None], *, read: Callable[[], Any], what: str,
           read_first: bool = False, retry: Callable[[ClusterError], bool] | None = None,
           attempts: int = WRITE_ATTEMPTS, backoff_s: float = 0.0, clock: Clock = SYSTEM_CLOCK,
           on_retry: Callable[[int, str], None] | None = None, on_lost: Callable[[int, str], None] | None = None,
           dry_run: bool = False, exhausted: Callable[[ClusterError, int], RblnError] | None = None,
           deadline: float | None = None) -> Settled:
    """Make a change whose next write `next_write(state)` names (None: the state already shows it).

    `read()` returns the object's state (or None when absent; it may raise NotFound too); with
    `read_first` it is read before the first write, else next_write() gets UNREAD and sends the
    caller's planned write. A write whose outcome is unknown is settled by reading back; a failure
    `retry` accepts (by default none; CrWriter passes 409 and failed JSON Patch tests) is read again
    after `backoff_s` (doubling; 5xx answers wait too) and judged again. `on_lost(writes sent, why)`
    hears of each write whose outcome is unknown, before the read-back; `on_retry(writes sent, why)` of
    each write about to be sent again, and why. Raises OutcomeUnknown when a read-back fails after an
    unknown outcome, `exhausted(last error, writes sent)` (default: Conflict, or the last error) after
    `attempts` writes, and every other error as it is. With `deadline` (`clock`'s monotonic seconds: a clean-up
    that must end) nothing is sent again once it has passed, and backoffs end at it: it gives up as after `attempts`.
    """
    state = read() if read_first else UNREAD
    if dry_run:
        w = next_write(state)
        if w is None:
            return Settled(reply=None, state=state, sent=0, changed=False)
        return Settled(reply=send(kube, w, dry_run=True), state=state, sent=1, changed=True)
    sent = 0
    lost_any = False
    last: ClusterError | None = None

    def give_up() -> RblnError:
        assert last is not None
        if exhausted is not None:
            return exhausted(last, sent)
        if unknown(last):
            if isinstance(last, OutcomeUnknown):
                return OutcomeUnknown(f"{last}; {what} still does not show the change after {sent} tries")
            return last
        return Conflict(f"{what} kept changing while rblnctl wrote it: gave up after {sent} attempts; rerun once "
                        "the other writer is done", status=409, reason="Conflict")

    why = ""
    while True:
        w = next_write(state)
        if w is None:
            return Settled(reply=None, state=state, sent=sent, changed=lost_any, retried=max(0, sent - 1))
        if sent >= attempts:
            raise give_up() from last
        if sent and deadline is not None and clock.monotonic() >= deadline:
            raise give_up() from last
        if sent and on_retry is not None:
            on_retry(sent, why)
        sent += 1
        try:
            reply = send(kube, w)
            return Settled(reply=reply, state=state, sent=sent, changed=True, retried=sent - 1)
        except ClusterError as e:
            lost = unknown(e)
            if not lost and not (retry is not None and retry(e)):
                raise
            last = e
            lost_any = lost_any or lost
        if isinstance(last, OutcomeUnknown):
            seen = f"the reply to the {_verb(w)} was lost"
        elif lost:
            seen = f"the {_verb(w)} was answered {last.status} ({one_line(last)[:200]})"
        else:
            seen = ""
        if lost:
            log.debug("%s: %s (attempt %d); reading it back", what, seen, sent)
            if on_lost is not None:
                on_lost(sent, f"{seen} (attempt {sent}); reading {what} back")
            why = f"{seen} and {what} read back does not hold the change"
        else:
            why = f"{what} changed under us (attempt {sent}): {one_line(last)}; reading it again"
            log.debug("%s", why)
            if sent >= attempts:
                raise give_up() from last
        if backoff_s and not isinstance(last, OutcomeUnknown):  # a conflict, or a 5xx: give the server a moment
            pause = backoff_s * 2 ** (sent - 1)
            clock.sleep(pause if deadline is None else min(pause, deadline - clock.monotonic()))
        try:
            state = read()
        except NotFound:
            state = None
        except RblnError as e:
            if lost:
                raise OutcomeUnknown(f"{last}; reading {what} back to see whether it landed failed too: "
                                     f"{one_line(e)}") from last
            raise
