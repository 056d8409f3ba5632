"""The one flow every mutating command runs: warn -> dry run -> refuse -> confirm -> apply -> emit.

When it asks, the warnings come after the plan, as the last lines before the question (its verdict).

Commands build a Mutation (their plan, how to apply it, how to show it) and hand it to run();
nothing else in the CLI confirms, refuses or applies. Prompts are only for disruptive work
(draining, switching modes, rebinding devices, restarting VMs); reversible edits and every dry run
never prompt, as kubectl and helm do not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from rblnctl.cli.output import OutputSpec, View

if TYPE_CHECKING:
    from rblnctl.plan import Plan

    P = TypeVar("P", bound=Plan)
else:
    P = TypeVar("P")  # rblnctl.plan.Plan, named at type-check time only: importing it costs --help nothing
R = TypeVar("R")


class Stoppable(Protocol):
    """A progress display: stopped before anything is printed after apply."""

    def stop(self) -> None: ...

CLIENT = "client"
SERVER = "server"


def _none(*_: object) -> None:
    return None


@dataclass(kw_only=True)
class Mutation(Generic[P, R]):
    """One mutating command's plan (a rblnctl.plan.Plan), and how to apply and show it: `apply` takes that plan and
    returns R, `plan_view` shows the plan, `result_view` the result, so mypy tells a view handed the wrong one."""

    plan: P
    apply: Callable[[P], R]
    refusal: str  # the error's first line when the plan has blockers
    question: str  # the confirmation question, for disruptive work
    disruptive: bool
    dry_run: str | None  # None, "client" or "server"
    yes: bool
    output: OutputSpec
    plan_view: Callable[[P], View]  # what a client dry run prints (the confirmation shows its tables too)
    result_view: Callable[[R], View]  # what a run prints
    question_detail: str | None = None  # shown above the question instead of the plan's tables
    # or a function of the result (None: a dry run, which has none)
    noop_message: str | Callable[[R | None], str] = "nothing to do"
    dry_run_message: str = "dry run: nothing was sent"
    done_message: Callable[[R], str | None] = _none
    on_interrupt: Callable[[], None] = _none  # Ctrl-C or a signal during apply: say how to recover
    interrupted_result: Callable[[], R | None] = _none  # ...and what apply() had done (for result_view), if known
    progress: Stoppable | None = None  # stopped before anything is printed after apply
    rerun: str | None = None  # the command that finishes the job (every flag given: cli/rerun.py), for Partial


def run(m: Mutation[P, R]) -> R | None:
    """Run the flow; return the apply() result (None for a client dry run). Raises Refused on blockers."""
    from rblnctl.cli.console import confirm, info, stdin_is_tty, warn
    import sys

    from rblnctl.cli.output import emit, render_tables, terminal_width
    from rblnctl.errors import Partial, RblnError, Refused

    # A question is asked next to its verdict: when rblnctl will ask, the warnings that bear on the answer are the
    # last lines before `[y/N]` (after the plan's tables, which may be a screen long), not scrolled off above them.
    asks = (m.disruptive and not m.plan.noop and m.dry_run is None and not m.plan.blockers and not m.yes
            and stdin_is_tty())
    if not asks:
        for w in m.plan.warnings:
            warn(w)
    if m.dry_run == CLIENT:
        emit(m.plan_view(m.plan), m.output)
        if m.plan.blockers:
            raise Refused(m.refusal, blockers=m.plan.blockers)
        noop = m.noop_message(None) if callable(m.noop_message) else m.noop_message  # no result on a dry run
        info(noop if m.plan.noop else m.dry_run_message)
        return None
    if m.plan.blockers:
        raise Refused(m.refusal, blockers=m.plan.blockers)
    if m.disruptive and not m.plan.noop and m.dry_run != SERVER:
        detail = m.question_detail
        confirm(m.question, yes=m.yes,
                show=(lambda: detail + "\n") if detail else lambda: render_tables(
                    m.plan_view(m.plan), wide=m.output.format == "wide", width=terminal_width(sys.stderr)),
                verdict=m.plan.warnings if asks else ())
    try:
        result = m.apply(m.plan)
    except KeyboardInterrupt:
        if m.progress is not None:
            m.progress.stop()
        if m.dry_run != SERVER:
            m.on_interrupt()
        # What was done before the interruption, when the command can say (a VM's NPUs changed or not, left
        # stopped): stdout gets its document, as a failure's (below) and an interrupted pool's (-o json included).
        result = m.interrupted_result()
        if result is not None:
            emit(m.result_view(result), m.output)
        raise
    except RblnError as err:
        # A failure that still has a result (Partial: what was done, what failed and why, what was not
        # attempted; a VM left stopped and how to start it): stdout gets it, stderr the error and its details,
        # and for Partial the command that finishes the job.
        if m.progress is not None:
            m.progress.stop()
        result = getattr(err, "result", None)
        if result is not None:
            emit(m.result_view(result), m.output)
        if isinstance(err, Partial) and m.rerun:
            err.details = [*err.details, f"finish the job: {m.rerun}"]
        raise
    finally:
        if m.progress is not None:
            m.progress.stop()
    if m.plan.noop:  # nothing was sent, server dry run or not: saying the server accepted it would mislead
        info(m.noop_message(result) if callable(m.noop_message) else m.noop_message)
    elif m.dry_run == SERVER:
        info("server dry run: the API server accepted every write; nothing was persisted")
    else:
        done = m.done_message(result)
        if done:
            info(done)
    emit(m.result_view(result), m.output)
    return result
