"""`rblnctl node list | set-mode | drain`: NPU node inventory, safe mode switching, NPU-aware drain."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rblnctl.cli.console import confirm
from rblnctl.cli.options import (
    DryRunOpt,
    OutputOpt,
    SelectorOpt,
    ServerDryRunOpt,
    YesOpt,
    dry_run_mode,
)
from rblnctl.cli.output import Output

app = typer.Typer(
    help="Inspect NPU nodes, switch their workload mode (container or vm-passthrough), drain their NPU pods.",
    no_args_is_help=True,
)


@app.command("list")
def list_nodes(ctx: typer.Context, selector: SelectorOpt = None, output: OutputOpt = Output.table) -> None:
    """List NPU nodes with their mode, schedulability, operator components and NPU resources."""
    from rblnctl.cli.output import emit
    from rblnctl.cli.render import npu_nodes_table
    from rblnctl.node.inventory import list_npu_nodes
    from rblnctl.operator.cluster import read_operator

    kube = ctx.obj.kube()
    nodes = list_npu_nodes(kube, read_operator(kube).policy, selector=selector)
    emit({"nodes": nodes}, output, lambda: npu_nodes_table(nodes))


# -- shared ----------------------------------------------------------------------------------------

NodeArg = Annotated[str, typer.Argument(help="Name of the node.", metavar="NODE", show_default=False)]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Also evict pods without a controller and NPU VMs (their virt-launcher pods), "
                 "and take over an unfinished switch to the other mode."),
]
DrainForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Also evict pods without a controller and NPU VMs (their virt-launcher pods)."),
]
AllPodsOpt = Annotated[
    bool, typer.Option("--all-pods", help="Evict every pod not managed by a DaemonSet (like kubectl drain), "
                       "not only the pods that use NPUs.")
]
EmptyDirOpt = Annotated[
    bool, typer.Option("--delete-emptydir-data", help="Evict pods with emptyDir volumes (their data is lost).")
]
DisableEvictionOpt = Annotated[
    bool, typer.Option("--disable-eviction", help="DELETE pods instead of evicting them: bypasses "
                       "PodDisruptionBudgets. Use with care.")
]
GracePeriodOpt = Annotated[
    int | None,
    typer.Option("--grace-period", help="Seconds each pod gets to terminate [default: the pod's own].",
                 metavar="SECONDS", min=0, show_default=False),
]
TimeoutOpt = Annotated[
    str, typer.Option("--timeout", help="How long to wait for evictions and (set-mode) the operator: seconds or a "
                      "duration like 90s, 10m, 1h (as kubectl drain).", metavar="DURATION")
]


def _timeout_s(text: str) -> float:
    from rblnctl.cli.errors import parse_duration

    seconds = parse_duration(text, option="--timeout")
    assert seconds is not None  # zero is refused: rblnctl never waits forever on a node
    return seconds


class _Progress:
    """Routes the library's callbacks to the stderr console: one line per step and pod, a spinner while waiting."""

    def __init__(self) -> None:
        from rblnctl.cli.console import stderr

        self.console = stderr()
        self.status: Any = None

    def line(self, text: str, style: str = "") -> None:
        from rich.markup import escape

        msg = escape(text)
        self.console.print(f"[{style}]{msg}[/]" if style else msg, soft_wrap=True)

    def step(self, step: str, detail: str) -> None:
        if step == "wait" and self.console.is_terminal:
            self.stop()
            self.status = self.console.status(detail)
            self.status.start()
            return
        self.stop()
        self.line(f"{step}: {detail}", "red" if step == "rollback" else "")

    def waiting(self, missing: list[str]) -> None:
        text = f"waiting for the operator: {'; '.join(missing[:3])}" + (" ..." if len(missing) > 3 else "")
        if self.status is not None:
            from rich.markup import escape

            self.status.update(escape(text))
        else:
            self.line(text, "dim")

    def evicted(self, pod: Any) -> None:
        self.line(f"  evicted {pod}")

    def deleted(self, pod: Any) -> None:
        self.line(f"  gone    {pod}")

    def pdb_blocked(self, pod: Any, message: str, attempt: int) -> None:
        self.line(f"  {pod}: a PodDisruptionBudget refuses the eviction (attempt {attempt}); retrying: {message}",
                  "yellow")

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def _pods_table(title: str, entries: list[Any]) -> Any:
    from rich.markup import escape

    from rblnctl.cli.output import make_table

    t = make_table("POD", "NPU", "WHY", title=title)
    for e in entries:
        t.add_row(escape(f"{e.namespace}/{e.name}"), "yes" if e.npu else "", escape(e.reason))
    if not entries:
        t.caption = "none"
    return t


def _drain_plan_renderables(plan: Any) -> list[Any]:
    from rich.markup import escape
    from rich.text import Text

    parts: list[Any] = [_pods_table(f"evict from {plan.node} ({plan.scope} scope)", plan.evict)]
    if plan.ignored:
        parts.append(_pods_table("left in place", plan.ignored))
    for b in plan.blockers:
        parts.append(Text.from_markup(f"[red]blocker:[/] {escape(b)}"))
    return parts


def _mode_plan_table(plan: Any) -> Any:
    from rich.console import Group
    from rich.markup import escape
    from rich.text import Text

    from rblnctl.cli.output import make_table

    head = Text(f"node {plan.node}: {plan.current_mode} -> {plan.target}"
                + (" (resuming an unfinished switch)" if plan.resume else ""))
    if plan.noop:
        return Group(head, Text(f"already in {plan.target} mode and the operator has converged: nothing to do"))
    steps = make_table("STEP", "WHAT", title="steps")
    for s in plan.steps:
        steps.add_row(s.step, escape(s.detail))
    parts: list[Any] = [head, steps]
    if plan.drain is not None:
        parts += _drain_plan_renderables(plan.drain)
    for v in plan.vms:
        parts.append(Text(f"VM holding NPUs: {v}"))
    for b in plan.blockers:
        if plan.drain is None or b not in plan.drain.blockers:
            parts.append(Text.from_markup(f"[red]blocker:[/] {escape(b)}"))
    return Group(*parts)


def _mode_result_table(res: Any) -> Any:
    from rblnctl.cli.output import make_table

    t = make_table("NODE", "FROM", "TO", "CHANGED", "EVICTED", "CORDONED", "UNCORDONED")
    t.add_row(res.node, res.previous_mode, res.mode, "dry run (server)" if res.server_dry_run else
              ("yes" if res.changed else "no"), str(len(res.evicted)), "yes" if res.cordoned else "no",
              "yes" if res.uncordoned else "no")
    return t


# -- set-mode --------------------------------------------------------------------------------------


@app.command("set-mode")
def set_mode(
    ctx: typer.Context,
    node: NodeArg,
    mode: Annotated[str, typer.Argument(help="vm (vm-passthrough) or container.", metavar="MODE",
                                        show_default=False)],
    force: ForceOpt = False,
    all_pods: AllPodsOpt = False,
    delete_emptydir_data: EmptyDirOpt = False,
    disable_eviction: DisableEvictionOpt = False,
    grace_period: GracePeriodOpt = None,
    timeout: TimeoutOpt = "10m",
    uncordon: Annotated[
        bool, typer.Option("--uncordon/--no-uncordon", help="Uncordon at the end (only if rblnctl cordoned it).")
    ] = True,
    dry_run: DryRunOpt = False,
    server_dry_run: ServerDryRunOpt = False,
    yes: YesOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Switch NODE's NPUs to vm (vm-passthrough) or container mode: cordon, drain, relabel, wait, uncordon."""
    from rblnctl.cli.console import info, warn
    from rblnctl.cli.output import emit
    from rblnctl.errors import Refused
    from rblnctl.node.mode import ModeSwitcher, parse_mode, recovery_hint, short_mode

    target = parse_mode(mode)  # bad input fails before connecting
    how = dry_run_mode(dry_run, server_dry_run)
    progress = _Progress()
    switcher = ModeSwitcher(
        kube=ctx.obj.kube(), timeout_s=_timeout_s(timeout), force=force, all_pods=all_pods,
        delete_emptydir_data=delete_emptydir_data, disable_eviction=disable_eviction, grace_period_s=grace_period,
        server_dry_run=how == "server", uncordon=uncordon, on_step=progress.step, on_waiting=progress.waiting,
        on_evicted=progress.evicted, on_deleted=progress.deleted, on_pdb_blocked=progress.pdb_blocked,
    )
    plan = switcher.plan(node, target)
    for w in plan.warnings:
        warn(w)
    if how == "client":
        emit({"plan": plan, "result": None}, output, lambda: _mode_plan_table(plan))
        if plan.blockers:
            raise Refused(f"refusing to switch node {node} to {short_mode(target)}", blockers=plan.blockers)
        info("dry run: nothing was sent" if not plan.noop else f"node {node} is already in {target} mode")
        return
    if plan.blockers:
        raise Refused(f"refusing to switch node {node} to {short_mode(target)}", blockers=plan.blockers)
    if not plan.noop:
        confirm(f"Switch node {node} to {short_mode(target)} mode?", yes=yes, show=_mode_plan_table(plan))
    try:
        result = switcher.run(plan)
    except KeyboardInterrupt:
        progress.stop()
        if not plan.noop and how != "server":
            warn(f"node {node} may be left cordoned, with its progress annotation, mid-switch; "
                 f"{recovery_hint(plan)}")
        raise
    finally:
        progress.stop()
    emit({"plan": plan, "result": result}, output, lambda: _mode_result_table(result))


# -- drain -----------------------------------------------------------------------------------------


@app.command("drain")
def drain(
    ctx: typer.Context,
    node: NodeArg,
    force: DrainForceOpt = False,
    all_pods: AllPodsOpt = False,
    delete_emptydir_data: EmptyDirOpt = False,
    disable_eviction: DisableEvictionOpt = False,
    grace_period: GracePeriodOpt = None,
    timeout: TimeoutOpt = "10m",
    dry_run: DryRunOpt = False,
    server_dry_run: ServerDryRunOpt = False,
    yes: YesOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Cordon NODE and evict the pods that use its NPUs (--all-pods: every pod); the node stays cordoned."""
    from rich.console import Group

    from rblnctl.cli.console import info, warn
    from rblnctl.cli.output import emit
    from rblnctl.errors import Refused
    from rblnctl.node.drain import Drainer

    how = dry_run_mode(dry_run, server_dry_run)
    progress = _Progress()
    drainer = Drainer(
        kube=ctx.obj.kube(), all_pods=all_pods, force=force, delete_emptydir_data=delete_emptydir_data,
        evict_vms=force, disable_eviction=disable_eviction, grace_period_s=grace_period, timeout_s=_timeout_s(timeout),
        cordon=True, server_dry_run=how == "server",
        on_cordoned=lambda n: progress.line(f"cordoned node {n}"), on_evicted=progress.evicted,
        on_deleted=progress.deleted, on_pdb_blocked=progress.pdb_blocked,
    )
    plan = drainer.plan(node)

    def table() -> Any:
        return Group(*_drain_plan_renderables(plan))

    if how == "client":
        emit({"plan": plan, "result": None}, output, table)
        if plan.blockers:
            raise Refused(f"cannot drain node {node}", blockers=plan.blockers)
        info("dry run: nothing was sent")
        return
    if plan.blockers:
        raise Refused(f"cannot drain node {node}", blockers=plan.blockers)
    confirm(f"Cordon node {node} and evict {len(plan.evict)} pod(s)?", yes=yes, show=table())
    try:
        result = drainer.run(plan)
    except KeyboardInterrupt:
        if how != "server":
            warn(f"node {node} may be left cordoned and partly drained; re-run `rblnctl node drain {node}` to "
                 f"finish, or `kubectl uncordon {node}` to make it schedulable again")
        raise
    if how == "server":
        info("server dry run: every write was accepted; nothing persisted")
    elif result.cordoned:
        info(f"node {node} cordoned and drained; it stays cordoned: `kubectl uncordon {node}` when you are done")
    else:
        info(f"node {node} drained (it was already cordoned and stays so)")
    emit({"plan": plan, "result": result}, output, table)
