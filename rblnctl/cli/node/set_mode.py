"""`rblnctl node set-mode MODE NODE... | -l SELECTOR`: switch nodes to vm or container mode, safely (one node, or a
pool at most --max-unavailable at once: cli/node/operation.py), or predict the pool's run (--rehearse)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli import completion
from rblnctl.cli.node.common import app, force_explained, pods_table, selection
from rblnctl.cli.node.operation import NodeOperation, Words, run_nodes
from rblnctl.cli.options import ModeFlags, Mutating, OutputOpt, examples, grouped
from rblnctl.cli.output import Column
from rblnctl.cli.state import state

if TYPE_CHECKING:
    from rblnctl.audit import Auditor
    from rblnctl.cli.output import View
    from rblnctl.kube import Kube
    from rblnctl.node.events import NodeEvents
    from rblnctl.node.mode import ModePlan, ModeResult
    from rblnctl.node.options import ModeOptions
    from rblnctl.node.pool import PoolEvents, PoolOptions, PoolRunner

SET_MODE_EXAMPLES = examples(
    "rblnctl node set-mode vm npu-node-1               # asks first (-y: not)",
    "rblnctl node set-mode vm npu-node-1 --dry-run     # the plan, no change",
    "rblnctl node set-mode container npu-node-1 --timeout 20m",
    "rblnctl node set-mode vm npu-node-1 --evict-vms   # stop the VMs on its NPUs",
    "rblnctl node set-mode vm npu-node-1 npu-node-2 -y # one node at a time",
    "rblnctl node set-mode vm -l pool=vm --max-unavailable 25% -y",
    "rblnctl node set-mode vm -l pool=vm --max-unavailable 2 --rehearse",
)
RehearseOpt = Annotated[
    bool, typer.Option("--rehearse", help="Predict the run, writing nothing: waves, evictions, PDB "
                       "pacing, refusals, time.")
]


@app.command("set-mode", short_help="Switch nodes to vm or container mode.", epilog=SET_MODE_EXAMPLES)
@grouped
def set_mode(
    ctx: typer.Context,
    args: Annotated[list[str], typer.Argument(autocompletion=completion.complete_set_mode_args,
                                              help="The mode (vm or container), then the nodes (or -l SELECTOR); "
                                              "`NODE MODE` works too.", metavar="MODE [NODE]...",
                                              show_default=False)],
    flags: ModeFlags = ModeFlags.options(),
    mutation: Mutating = Mutating.options(),
    rehearse: RehearseOpt = False,
    output: OutputOpt = "table",
) -> None:
    """Switch NPU nodes to vm or container mode, safely."""
    from rblnctl.errors import InvalidInput

    target, nodes = _mode_and_nodes(args)  # bad input fails before connecting
    selection(nodes, flags.selector)
    pool_options = flags.pool_options()
    options = flags.mode_options(server_dry_run=mutation.server)
    if rehearse and mutation.how:
        raise InvalidInput("--rehearse writes nothing: it takes no --dry-run")
    with force_explained(flags.force):
        if rehearse:
            from rblnctl.cli.rehearse import run_rehearsal

            run_rehearsal(state(ctx).kube(), target, nodes, selector=flags.selector, options=options,
                          pool=pool_options, output=output)
            return
        run_nodes(ctx, Switch(target, options), nodes, selector=flags.selector, pool=pool_options, how=mutation.how,
                  yes=mutation.yes, output=output)


def _mode_and_nodes(args: list[str]) -> tuple[str, list[str]]:
    """`MODE NODE...` (the documented order), or `NODE MODE` (still accepted for one node).

    The mode is recognised by name; bad input is refused before connecting.
    """
    from rblnctl.errors import InvalidInput
    from rblnctl.node.mode import parse_mode, suggest_mode

    usage = "rblnctl node set-mode vm|container NODE..."
    if not args:
        raise InvalidInput(f"set-mode takes a mode, then the nodes (or -l SELECTOR): {usage}")
    try:
        return parse_mode(args[0]), list(args[1:])
    except InvalidInput:
        pass
    if len(args) == 2:
        try:
            return parse_mode(args[1]), [args[0]]
        except InvalidInput:
            pass
    # Neither word is a mode. Name the one that looks like a misspelt mode, in either order (`vmm npu-0000`,
    # `npu-0000 vmm`), with the command as it should read; otherwise name both.
    for i, word in enumerate(args[:2]):
        hint = suggest_mode(word)
        if hint:
            rest = [a for j, a in enumerate(args) if j != i] or ["NODE"]
            raise InvalidInput(f"unknown mode {word!r} (did you mean {hint}?): the mode comes first, then the "
                               f"nodes: rblnctl node set-mode {hint} {' '.join(rest)}")
    if len(args) == 2:
        raise InvalidInput(f"neither {args[0]!r} nor {args[1]!r} is a mode (vm, vm-passthrough or container): "
                           f"{usage}")
    raise InvalidInput(f"unknown mode {args[0]!r}: the mode comes first (vm, vm-passthrough or container), then the "
                       f"nodes: {usage}")


class Switch(NodeOperation["ModePlan", "ModeResult"]):
    """A mode switch to `target` (the label value), for run_nodes."""

    verb = "switch"

    def __init__(self, target: str, options: ModeOptions) -> None:
        from rblnctl.node.mode import short_mode

        self.target, self.options, self.mode = target, options, short_mode(target)
        self.words = Words(
            refusal=f"refusing to switch node {{node}} to {self.mode}",
            noop=f"node {{node}} is already in {target} mode; nothing to do",
            title=f"switching {{count}} node(s) to {self.mode}",
            pool_question=f"Switch {{count}} node(s) to {self.mode} mode, at most {{at_once}} at once?",
            pool_noop=f"every node is already in {target} mode; nothing to do")

    def one(self, kube: Kube, node: str, events: NodeEvents, audit: Auditor
            ) -> tuple[ModePlan, Callable[[ModePlan], ModeResult]]:
        from rblnctl.node.mode import ModeSwitcher

        switcher = ModeSwitcher(kube=kube, options=self.options, events=events, audit=audit)
        return switcher.plan(node, self.target), switcher.apply

    def pool(self, kube: Kube, options: PoolOptions, events: PoolEvents, audit: Auditor) -> PoolRunner:
        from rblnctl.node.pool import PoolRunner

        return PoolRunner.for_mode(kube, self.target, self.options, pool=options, events=events, audit=audit)

    def question(self, plan: ModePlan) -> str:
        return f"Switch node {plan.node} to {self.mode} mode?"

    def view(self, plan: ModePlan, result: ModeResult | None = None) -> View:
        return mode_view(plan, result)

    def interrupted(self, ctx: typer.Context, plan: ModePlan, cordon: str) -> str:
        from rblnctl.cli.errors import recovery_lines

        return (f"node {plan.node} {cordon}, with its progress record, mid-switch; "
                f"{'; '.join(recovery_lines(plan.recovery, ctx))}")

    def resume(self, ctx: typer.Context, node: str) -> str:
        from rblnctl.cli.rerun import POOL_ONLY, render
        from rblnctl.remedy import Command

        # aligned as recovery_lines aligns `resume:` with `go back:` (the single node's hint)
        return f"resume:  {render(ctx, Command.own('node', 'set-mode', self.mode, node, again=True), drop=POOL_ONLY)}"


_STEP_COLUMNS = (Column("STEP"), Column("WHAT", value="detail"))


def mode_view(plan: ModePlan, result: ModeResult | None = None) -> View:
    """A mode switch (kind ModeSwitch): the plan, and the result once applied (null on a client dry run)."""
    from rblnctl.cli.output import Table, View, rows
    from rblnctl.cli.rerun import spell
    from rblnctl.cli.waits import human_duration
    from rblnctl.documents import MODE_SWITCH, body

    doc = body(MODE_SWITCH, spell, plan=plan, result=result)
    names = [f"node/{plan.node}"]
    if result is not None:
        # The pool's result columns (one vocabulary for one node or many), narrow enough for 80 columns; who
        # cordoned and uncordoned is in -o json (result.cordoned, result.uncordoned) and on stderr.
        r = doc["result"]
        t = Table("NODE", "FROM", "TO", "RESULT", "DURATION", "EVICTED")
        outcome = "server-dry-run" if r["serverDryRun"] else "done" if r["changed"] else "unchanged"
        t.add_row(doc["node"], r["previousMode"], r["mode"], outcome, human_duration(r["elapsedSeconds"]),
                  str(len(r["evicted"])))
        return View(kind="ModeSwitch", body=doc, tables=[t], names=names)
    p = doc["plan"]
    head = [f"node {p['node']}: {p['fromMode']} -> {p['target']}"
            + (" (resuming an unfinished switch)" if p["resume"] else "")]
    if p["noop"]:
        head.append(f"already in {p['target']} mode and the operator has converged: nothing to do")
        return View(kind="ModeSwitch", body=doc, preamble=head, names=names)
    head += [f"VM holding NPUs: {v}" for v in p["vms"]]
    tables = [rows(p["steps"], *_STEP_COLUMNS)]
    if p["pods"]:
        tables.append(pods_table(p["pods"]))
    return View(kind="ModeSwitch", body=doc, preamble=head, tables=tables, names=names)
