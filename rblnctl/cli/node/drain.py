"""`rblnctl node drain NODE... | -l SELECTOR`: cordon nodes and evict their NPU pods (one node, or a pool at most
--max-unavailable at once: cli/node/operation.py); they stay cordoned."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from rblnctl.cli.node.common import SelectionArg, app, force_explained, pods_table, selection
from rblnctl.cli.node.operation import NodeOperation, Words, run_nodes
from rblnctl.cli.options import DrainFlags, Mutating, OutputOpt, examples, grouped

if TYPE_CHECKING:
    from rblnctl.audit import Auditor
    from rblnctl.cli.output import View
    from rblnctl.kube import Kube
    from rblnctl.node.drain import DrainPlan, DrainResult
    from rblnctl.node.events import NodeEvents
    from rblnctl.node.options import DrainOptions
    from rblnctl.node.pool import PoolEvents, PoolOptions, PoolRunner

DRAIN_EXAMPLES = examples(
    "rblnctl node drain npu-node-1",
    "rblnctl node drain npu-node-1 --all-pods --delete-emptydir-data",
    "rblnctl node drain npu-node-1 --dry-run=server -o yaml",
    "rblnctl node drain -l pool=train --max-unavailable 2 -y",
)


@app.command("drain", short_help="Cordon nodes and evict their NPU pods.", epilog=DRAIN_EXAMPLES)
@grouped
def drain(
    ctx: typer.Context,
    nodes: SelectionArg = None,
    flags: DrainFlags = DrainFlags.options(),
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Cordon nodes and evict their NPU pods; they stay cordoned."""
    nodes = list(nodes or [])
    selection(nodes, flags.selector)  # bad input fails before connecting
    pool_options = flags.pool_options()
    options = flags.drain_options(server_dry_run=mutation.server)
    with force_explained(flags.force):
        run_nodes(ctx, Drain(options), nodes, selector=flags.selector, pool=pool_options, how=mutation.how,
                  yes=mutation.yes, output=output)


class Drain(NodeOperation["DrainPlan", "DrainResult"]):
    """A drain (cordon, evict), for run_nodes."""

    verb = "drain"

    words = Words(refusal="cannot drain node {node}",
                  noop="node {node} is cordoned and has no pod to evict; nothing to do",
                  title="draining {count} node(s)",
                  pool_question="Cordon and drain {count} node(s), at most {at_once} at once?",
                  pool_noop="every node is drained; nothing to do")

    def __init__(self, options: DrainOptions) -> None:
        self.options = options

    def one(self, kube: Kube, node: str, events: NodeEvents, audit: Auditor
            ) -> tuple[DrainPlan, Callable[[DrainPlan], DrainResult]]:
        from rblnctl.node.drain import Drainer

        drainer = Drainer(kube=kube, options=self.options, events=events, audit=audit)
        return drainer.plan(node), drainer.apply

    def pool(self, kube: Kube, options: PoolOptions, events: PoolEvents, audit: Auditor) -> PoolRunner:
        from rblnctl.node.pool import PoolRunner

        return PoolRunner.for_drain(kube, self.options, pool=options, events=events, audit=audit)

    def question(self, plan: DrainPlan) -> str:
        return f"Cordon node {plan.node} and evict {len(plan.evict)} pod(s)?"

    def done(self, plan: DrainPlan, result: DrainResult) -> str:
        node = plan.node
        if result.cordoned:
            return f"node {node} cordoned and drained; it stays cordoned: `kubectl uncordon {node}` when you are done"
        return f"node {node} drained (it was already cordoned and stays so)"

    def view(self, plan: DrainPlan, result: DrainResult | None = None) -> View:
        return drain_view(plan, result)

    def interrupted(self, ctx: typer.Context, plan: DrainPlan, cordon: str) -> str:
        from rblnctl.cli.rerun import command_line

        node = plan.node
        return (f"node {node} {cordon} and may be partly drained; re-run `{command_line(ctx)}` to finish, or "
                f"`kubectl uncordon {node}` to make it schedulable again")

    def resume(self, ctx: typer.Context, node: str) -> str:
        from rblnctl.cli.rerun import POOL_ONLY, render
        from rblnctl.remedy import Command

        return f"resume: {render(ctx, Command.own('node', 'drain', node, again=True), drop=POOL_ONLY)}"


def drain_view(plan: DrainPlan, result: DrainResult | None = None) -> View:
    """A drain (kind NodeDrain): the plan and its pods, and what was evicted once applied."""
    from rblnctl.cli.output import View
    from rblnctl.cli.rerun import spell
    from rblnctl.documents import NODE_DRAIN, body

    doc = body(NODE_DRAIN, spell, plan=plan, result=result)
    pods = doc["plan"]["pods"]
    head = f"node {plan.node}: {'cordon, then ' if plan.cordon else ''}evict {len(plan.evict)} pod(s) ({plan.scope} " \
        "scope)"
    if result is not None:
        head = f"node {plan.node}: evicted {len(result.evicted)} pod(s)" + \
            (" (server dry run)" if result.server_dry_run else "")
    return View(kind="NodeDrain", body=doc, preamble=[head], tables=[pods_table(pods)] if pods else [],
                names=[f"node/{plan.node}"])
