"""One path for one node and a pool (issue 42): `node set-mode` and `node drain` each say what their verb is, once,
as a NodeOperation (the library call, the question, the no-op and refusal words, the views, what to say when
interrupted and how to resume); run_nodes() runs it, for one node or a pool, through the one flow (cli/flow.py).

One node named runs the library's task for that node and shows its own document (ModeSwitch, NodeDrain); several,
or -l SELECTOR, run the pool (rblnctl.node.pool.PoolRunner: each node as the single-node command runs it) and show
the list (ModeSwitchList, NodeDrainList, cli/pool.py). A feature of a node verb is written once, in its operation;
a feature of how nodes are run (progress, interruption, the pool's failures) once, here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

if TYPE_CHECKING:
    import typer

    from rblnctl.audit import Auditor
    from rblnctl.cli.flow import Stoppable
    from rblnctl.cli.output import OutputSpec, View
    from rblnctl.kube import Kube
    from rblnctl.node.events import NodeEvents
    from rblnctl.node.pool import PoolEvents, PoolOptions, PoolPlan, PoolResult, PoolRunner
    from rblnctl.plan import Plan

    P = TypeVar("P", bound=Plan)
    X = TypeVar("X", bound=Plan)
else:
    P = TypeVar("P")  # rblnctl.plan.Plan, named at type-check time only: importing it costs --help nothing
    X = TypeVar("X")
R = TypeVar("R")
Y = TypeVar("Y")


@dataclass(frozen=True, kw_only=True)
class Words:
    """A verb's fixed words, each a str.format template: {node} the node, {count} the pool's nodes, {at_once} its
    --max-unavailable as resolved."""

    refusal: str  # the error's first line when one node's plan has blockers
    noop: str  # one node already where the verb would take it
    title: str  # the pool's progress title
    pool_question: str  # what the pool's confirmation asks
    pool_noop: str  # no node of the pool has anything to do


class NodeOperation(ABC, Generic[P, R]):
    """A node verb (set-mode, drain): its plan P and result R for one node, the library calls that produce them,
    and its words, for one node and for a pool."""

    verb: ClassVar[str]  # `switch`, `drain`: "interrupted mid-switch", "refusing to drain the pool"
    words: Words

    @abstractmethod
    def one(self, kube: Kube, node: str, events: NodeEvents, audit: Auditor) -> tuple[P, Callable[[P], R]]:
        """Plan `node` (reads only); and the call that applies that plan."""

    @abstractmethod
    def pool(self, kube: Kube, options: PoolOptions, events: PoolEvents, audit: Auditor) -> PoolRunner:
        """The pool's runner: this verb on each node, at most options.max_unavailable at once."""

    @abstractmethod
    def question(self, plan: P) -> str:
        """What one node's confirmation asks."""

    @abstractmethod
    def view(self, plan: P, result: R | None = None) -> View:
        """The node's document (ModeSwitch, NodeDrain): the plan, and the result once applied."""

    def done(self, plan: P, result: R) -> str | None:
        """What is said once it ran (None: the result's table says it all)."""
        return None

    @abstractmethod
    def interrupted(self, ctx: typer.Context, plan: P, cordon: str) -> str:
        """What Ctrl-C left on one node (`cordon`: its cordon as read back) and how to go on."""

    @abstractmethod
    def resume(self, ctx: typer.Context, node: str) -> str:
        """The line that resumes one interrupted node of a pool on its own (without the pool's flags)."""


def run_nodes(ctx: typer.Context, op: NodeOperation[P, R], nodes: list[str], *, selector: str | None,
              pool: PoolOptions, how: str | None, yes: bool, output: OutputSpec) -> None:
    """Run `op` on the one node named (its own document) or on the pool named or selected (the list's), through the
    one flow: plan, refuse, confirm, apply, show; a pool with a failed node exits as docs/exit-codes.md says."""
    from rblnctl.audit import Auditor
    from rblnctl.cli.state import state

    kube = state(ctx).kube()
    audit = Auditor(kube=kube)  # Events on each node it changes (the library skips a server dry run)
    if selector is None and len(nodes) == 1:
        _run(_one(ctx, op, kube, nodes[0], audit, how), how=how, yes=yes, output=output)
    else:
        _run(_pool(ctx, op, kube, nodes, selector, pool, audit, how), how=how, yes=yes, output=output)


def _nothing(*_: object) -> None:
    return None


@dataclass(kw_only=True)
class _Run(Generic[X, Y]):
    """What the flow is handed for one node (X, Y: the verb's plan and result) or a pool (PoolPlan, PoolResult)."""

    plan: X
    apply: Callable[[X], Y]
    refusal: str
    question: str
    noop: str
    plan_view: Callable[[X], View]
    result_view: Callable[[Y], View]
    on_interrupt: Callable[[], None]
    progress: Stoppable
    done: Callable[[Y], str | None] = _nothing
    settle: Callable[[Y | None], None] = _nothing  # after the flow: a pool's failed nodes become its error


def _run(r: _Run[X, Y], *, how: str | None, yes: bool, output: OutputSpec) -> None:
    from rblnctl.cli.flow import Mutation, run

    result = run(Mutation(
        plan=r.plan, apply=r.apply, refusal=r.refusal, question=r.question, disruptive=True, dry_run=how, yes=yes,
        output=output, plan_view=r.plan_view, result_view=r.result_view, noop_message=r.noop, done_message=r.done,
        on_interrupt=r.on_interrupt, progress=r.progress,
    ))
    r.settle(result)


def _one(ctx: typer.Context, op: NodeOperation[P, R], kube: Kube, node: str, audit: Auditor,
         how: str | None) -> _Run[P, R]:
    """One node: its steps on stderr (the wait spins, a rollback is red), its pods and waits."""
    from rblnctl.cli.console import Progress, warn
    from rblnctl.cli.flow import SERVER
    from rblnctl.cli.node.common import cordon_state
    from rblnctl.node.events import Step

    progress = Progress(server_dry_run=how == SERVER, wait_step=Step.WAIT, rollback_step=Step.ROLLBACK)
    plan, apply = op.one(kube, node, progress.node_events(), audit)

    def interrupted() -> None:
        warn(op.interrupted(ctx, plan, cordon_state(ctx, node)))

    def result_view(result: R) -> View:
        return op.view(plan, result)

    def done(result: R) -> str | None:
        return op.done(plan, result)

    return _Run(plan=plan, apply=apply, refusal=op.words.refusal.format(node=node), question=op.question(plan),
                noop=op.words.noop.format(node=node), plan_view=op.view, result_view=result_view, done=done,
                on_interrupt=interrupted, progress=progress)


def _pool(ctx: typer.Context, op: NodeOperation[P, R], kube: Kube, nodes: list[str], selector: str | None,
          options: PoolOptions, audit: Auditor, how: str | None) -> _Run[PoolPlan, PoolResult]:
    """A pool: every node planned, confirmed once, run at most --max-unavailable at once (a live table on stderr).

    Every hint repeats the command as run (rblnctl.cli.rerun): the pool's with all its flags, a node's without the
    pool's selection and pacing (POOL_ONLY) but with every other flag, --context first of all."""
    from rblnctl.cli.console import warn
    from rblnctl.cli.flow import SERVER
    from rblnctl.cli.node.common import cordon_state
    from rblnctl.cli.pool import PoolProgress, pool_plan_view, pool_result_view
    from rblnctl.cli.rerun import command_line
    from rblnctl.node.pool import Outcome, select_nodes

    names = select_nodes(kube, names=nodes, selector=selector)
    progress = PoolProgress(names, title=op.words.title.format(count=len(names)), server_dry_run=how == SERVER)
    runner = op.pool(kube, options, progress.events(), audit)
    plan = runner.plan(names, selector=selector)

    def interrupted() -> None:
        stopped = [n for n, i in runner.items.items() if i.outcome == Outcome.INTERRUPTED]
        if stopped:
            states = "; ".join(f"node {n} {cordon_state(ctx, n)}" for n in stopped)
            warn(f"interrupted mid-{op.verb}: {states}; re-run `{command_line(ctx)}` to resume the pool, or one node "
                 "at a time:")
            for n in stopped:
                warn(op.resume(ctx, n))

    def result_view(result: PoolResult) -> View:
        return pool_result_view(plan, result)

    def settle(result: PoolResult | None) -> None:
        if result is not None and result.failed:
            raise _pool_failed(ctx, result)

    return _Run(plan=plan, apply=runner.apply, refusal=f"refusing to {op.verb} the pool: nothing was changed",
                question=op.words.pool_question.format(count=len(plan.nodes), at_once=plan.max_unavailable),
                noop=op.words.pool_noop, plan_view=pool_plan_view,
                result_view=result_view, on_interrupt=interrupted, progress=progress, settle=settle)


def _pool_failed(ctx: typer.Context, result: PoolResult) -> Exception:
    """The error of a pool with failed or refused nodes (exit 6, partial): a line per node, its details, blockers
    and recovery, then the command that finishes the job (every flag given: a node done is a no-op on the re-run,
    one not started starts); a pool of one node that timed out is that node's timeout (exit 5, as
    `node drain NODE`)."""
    from rblnctl.cli.errors import recovery_lines
    from rblnctl.cli.rerun import POOL_ONLY, command_line
    from rblnctl.errors import WaitTimeout, one_line
    from rblnctl.node.pool import Outcome, PoolFailed

    details: list[str] = []
    for item in result.failed:
        details.append(f"{item.node} ({item.outcome}): {one_line(item.error)}")
        details += [f"  {line}" for line in (item.error.details if item.error is not None else [])]
        details += [f"  - {b}" for b in getattr(item.error, "blockers", None) or []]
        recovery = getattr(item.error, "recovery", None)
        if recovery is not None:
            details += [f"  {line}" for line in recovery_lines(recovery, ctx, drop=POOL_ONLY)]
    skipped = result.count(Outcome.SKIPPED)
    only = result.failed[0] if len(result.items) == 1 else None
    if only is not None and isinstance(only.error, WaitTimeout):
        # one node that timed out is no partial result: exit 5, as the README's table and `node drain NODE` say
        return WaitTimeout(f"node {only.node}: {' '.join(str(only.error).split())}").with_details(
            [line[2:] for line in details[1:]])
    tail = f"; {skipped} node(s) not started" if skipped else ""
    details.append(f"finish the job: {command_line(ctx)}")  # as flow.py says it of every other partial change
    return PoolFailed(f"{len(result.failed)} of {len(result.items)} node(s) failed or were refused: "
                      f"{', '.join(i.node for i in result.failed)}{tail}", result=result).with_details(details)
