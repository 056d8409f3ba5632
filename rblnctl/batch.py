"""The one rule for a command that changes many objects: try each, say what became of each, stop only when unsafe.

Every object is tried, whatever happened to the one before, unless that failure makes trying the rest
unsafe or pointless (`stops_the_rest`: the API server is unreachable or rejects our credentials, and
whatever the command itself names, such as a KubeVirt CR that could not be renamed before its VMs).
Each object ends as one ItemOutcome: done, unchanged (nothing to do), failed (and why) or not attempted
(and why not). A run that did not end every object done or unchanged raises rblnctl.errors.Partial with
the result attached (exit code 6, docs/exit-codes.md); the front end shows the result, then the command
that finishes the job with every flag given (rblnctl.cli.rerun). docs/architecture.md states the rule.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from rblnctl.errors import AuthError, ClusterUnreachable, Forbidden, OutcomeUnknown, RblnError
from rblnctl.errors import one_line as _line
from rblnctl.remedy import Remedy


class State(enum.StrEnum):
    """What became of one object."""

    DONE = "done"
    UNCHANGED = "unchanged"  # it already was as asked (or was deleted meanwhile): nothing to write
    FAILED = "failed"
    NOT_ATTEMPTED = "not-attempted"


@dataclass(frozen=True, kw_only=True)
class ItemOutcome:
    """One object of a multi-object command."""

    kind: str  # VirtualMachine, KubeVirt, Node
    name: str  # namespace/name, or name
    state: State
    reason: str = ""  # failed: the error; not attempted: why not; unchanged: why nothing was written
    remedy: Remedy | None = None  # failed: what fixes it (the front end spells its command after the reason)

    @property
    def ok(self) -> bool:
        """Done or unchanged: nothing left to do for it."""
        return self.state in (State.DONE, State.UNCHANGED)


def stops_the_rest(err: BaseException) -> str | None:
    """Why a failure makes trying the other objects pointless (None: they are tried).

    No answer from the API server (a write whose outcome is unknown aside: the server did answer
    others), or credentials it rejects: the next object would fail the same way. A 403 does not stop
    the rest: RBAC is often per namespace.
    """
    if isinstance(err, ClusterUnreachable) and not isinstance(err, OutcomeUnknown):
        return f"the API server could not be reached ({_line(err)})"
    if isinstance(err, AuthError) and not isinstance(err, Forbidden):
        return "the API server rejected the credentials"
    return None


def one_line(err: BaseException) -> str:
    """An error as one line, with its blockers."""
    text = _line(err)
    blockers = getattr(err, "blockers", None) or []
    if blockers:
        text += ": " + "; ".join(_line(b) for b in blockers)
    return text


def summary(outcomes: Sequence[ItemOutcome]) -> str:
    """`2 done, 1 failed, 3 not attempted` (the states present, in that order)."""
    counts = {s: sum(1 for o in outcomes if o.state == s) for s in State}
    return ", ".join(f"{n} {s.value.replace('-', ' ')}" for s, n in counts.items() if n)


def complete(outcomes: Sequence[ItemOutcome]) -> bool:
    """Every object done or unchanged."""
    return all(o.ok for o in outcomes)


def failures(outcomes: Sequence[ItemOutcome]) -> list[str | Remedy]:
    """One line per object not done: `VirtualMachine ns/a (failed): why`, for an error's details; a Remedy when the
    object's fix names a command (the front end spells it)."""
    return [f"{o.kind} {o.name} ({o.state.value}): {o.reason}" if o.remedy is None else
            Remedy(f"{o.kind} {o.name} ({o.state.value}): {o.reason}; {o.remedy.text}", o.remedy.command,
                   o.remedy.more) for o in outcomes if not o.ok]


def partial(what: str, outcomes: Sequence[ItemOutcome], result: object) -> RblnError:
    """The Partial error of a run that did not finish every object (message, details, result attached)."""
    from rblnctl.errors import Partial

    err = Partial(f"{what}: {summary(outcomes)}", result=result, outcomes=outcomes)
    return err.with_details(failures(outcomes))
