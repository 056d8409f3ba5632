"""`rblnctl node list | set-mode | drain`: NPU node inventory, safe mode switching, NPU-aware drain."""

from __future__ import annotations

from rblnctl.errors import one_line

from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import typer

from rblnctl.cli import completion
from rblnctl.cli.console import Progress
from rblnctl.cli.options import (
    Mutating,
    OptionGroup,
    OutputOpt,
    SelectorOpt,
    WatchOpt,
    examples,
    grouped,
    output_option,
    sort_by_option,
    timeout_s,
)
from rblnctl.cli.output import Cell, Column, Format
from rblnctl.cli.rerun import spell
from rblnctl.cli.state import state
from rblnctl.node.defaults import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from rblnctl.node.options import DrainOptions

app = typer.Typer(
    help="Inspect NPU nodes, switch their workload mode (container or vm-passthrough), drain their NPU pods, "
    "and show who did so (history).",
    no_args_is_help=True,
)


ShowLabelsOpt = Annotated[
    bool, typer.Option("--show-labels", help="Add a LABELS column with every label of the node (as kubectl get).")
]
SortByOpt = Annotated[str | None, sort_by_option("'{.npuCount}' or .name")]


@app.command("list", short_help="List NPU nodes and their mode.", epilog=examples(
    "rblnctl node list",
    "rblnctl node list npu-a01 npu-a02 -o wide           # these nodes only, as kubectl get node NAME",
    "rblnctl node list -l rebellions.ai/npu.workload.config=vm-passthrough",
    "rblnctl node list --show-labels --sort-by=.npuCount",
    "rblnctl node list -o custom-columns=NAME:.name,MODE:.mode,POOL:.labels.pool",
    "rblnctl node list --watch                        # then every change, until Ctrl-C",
))
def list_nodes(
    ctx: typer.Context,
    names: Annotated[list[str] | None, typer.Argument(help="Only these nodes (as kubectl get node NAME...).",
                                                      metavar="[NODE]...", show_default=False,
                                                      autocompletion=completion.complete_npu_nodes)] = None,
    selector: SelectorOpt = None,
    watch: WatchOpt = False,
    show_labels: ShowLabelsOpt = False,
    sort_by: SortByOpt = None,
    output: OutputOpt = "table",
) -> None:
    """List NPU nodes with their mode, schedulability, operator components and NPU resources."""
    from rblnctl.cli.output import check_sort_by, emit
    from rblnctl.errors import InvalidInput, NotFound
    from rblnctl.kube import validate_name
    from rblnctl.node.inventory import named_npu_nodes, read_npu_nodes
    from rblnctl.operator.cluster import read_operator

    names = [validate_name(n) for n in names or []]  # bad input fails before connecting
    if names and selector:
        raise InvalidInput("name the nodes or give -l SELECTOR, not both (as kubectl: a name cannot be provided "
                           "when a selector is specified)")
    check_sort_by(sort_by)
    kube = state(ctx).kube(from_cache=True)

    def view_of(nodes: list[Any]) -> Any:
        return _nodes_view(nodes, show_labels=show_labels, sort_by=sort_by, named=bool(names))

    if watch:
        from rblnctl.cli.status import warn_retrying, follow
        from rblnctl.node.inventory import node_changes, watch_npu_nodes

        def only(nodes: list[Any]) -> list[Any]:
            return [n for n in nodes if n.name in names] if names else nodes

        follow(watch_npu_nodes(kube, selector=selector, on_retry=warn_retrying),
               view_of=lambda snap: view_of(only(snap.nodes)),
               changes_of=lambda a, b: node_changes(only(a.nodes), only(b.nodes)), output=output)
        return
    if not names:
        emit(view_of(read_npu_nodes(kube, selector=selector)[1]), output)
        return
    view = read_operator(kube)
    policy = view.policy
    nodes, errors = named_npu_nodes(kube, policy, names, namespace=view.namespace)
    emit(view_of(nodes), output)
    if errors:  # as kubectl get: what was found is printed, then one error line per name (exit 1)
        raise NotFound(errors[0]).with_details(errors[1:])


def _nodes_view(nodes: list[Any], *, show_labels: bool = False, sort_by: str | None = None, named: bool = False
                ) -> Any:
    """The NpuNodeList view; `named`: the user named the nodes, so a name not found is the error's to say (as
    kubectl get), never "No NPU nodes found" about a cluster that has some."""
    from types import SimpleNamespace

    from rblnctl.cli.output import View
    from rblnctl.cli.render import capacity_notes, hold_notes, npu_nodes_table, switch_notes
    from rblnctl.clock import SYSTEM_CLOCK
    from rblnctl.cli.output import sort_order
    from rblnctl.documents import NPU_NODE_LIST

    doc = NPU_NODE_LIST(SimpleNamespace(nodes=nodes))
    order = sort_order(doc["items"], sort_by)  # each document built once, sorted as printed
    nodes, doc["items"] = [nodes[i] for i in order], [doc["items"][i] for i in order]
    return View(kind="NpuNodeList", body=doc,
                tables=[npu_nodes_table(doc["items"], show_labels=show_labels)] if nodes else [],
                names=[f"node/{n.name}" for n in nodes],
                notes=switch_notes(nodes) + capacity_notes(nodes) + hold_notes(nodes, now=SYSTEM_CLOCK.now()) if nodes
                else [] if named else [
                    "No NPU nodes found (NFD labels nodes with feature.node.kubernetes.io/pci-1eff.present or "
                    "pci-1200_1eff.present)."])


HISTORY_FORMATS = (Format.table, Format.wide, Format.json, Format.yaml, Format.jsonpath)


@app.command("history", short_help="Who switched or drained a node, when, and how it ended.", epilog=examples(
    "rblnctl node history npu-a01",
    "rblnctl node history npu-a01 -o wide                 # with when each run ended, and its message",
    "rblnctl node history n1 -o json | jq '.items[] | select(.result != \"done\")'",
))
def history(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(help="The node.", metavar="NODE", show_default=False,
                                        autocompletion=completion.complete_npu_nodes)],
    output: Annotated[Any, output_option(HISTORY_FORMATS, "table, wide, json, yaml or jsonpath=TEMPLATE")
                      ] = "table",
) -> None:
    """Show the mode switches and drains of NODE: who ran them, when, from, to, and the result.

    Read from the Events rblnctl writes on the node (kept for the API server's --event-ttl, 1h by default)
    and the progress record an unfinished switch leaves on it.
    """
    from rblnctl.cli.output import emit
    from rblnctl.kube import validate_name
    from rblnctl.node.history import read_history

    validate_name(node)  # bad input fails before connecting
    emit(_history_view(read_history(state(ctx).kube(), node)), output)


_HISTORY_STYLES = {"done": "green", "failed": "red", "interrupted": "yellow", "in-progress": "yellow"}


def _history_action(e: dict) -> str:
    """A run as the command that ran it (`set-mode vm`, `set-mode container`, `drain`): its target in the words the
    user types, so the default table fits 80 columns (issue 39: with FROM and TO as label values it was 87 wide and
    folded a column under every row); FROM and TO, as the label says them, are -o wide's."""
    from rblnctl.node.mode import short_mode

    return f"{e['action']} {short_mode(e['to'])}" if e["action"] == "set-mode" and e["to"] else e["action"]


# The default table: STARTED (20) ACTION (at most 18) RESULT (at most 11) and USER, who gets 22 columns of 80 (a
# longer name goes under its row, Table.render's rule); -o wide adds what the run went from and to, when it ended,
# where the row was read and its last message.
_HISTORY_COLUMNS = (
    Column("STARTED"), Column("ACTION", value=_history_action),
    Column("RESULT", value=lambda e: Cell(e["result"], _HISTORY_STYLES.get(e["result"], ""))),
    Column("USER", value=lambda e: e["user"] or "<unknown>"),
    Column("FROM", wide=True, value=lambda e: e["from"] or "-"),
    Column("TO", wide=True, value=lambda e: e["to"] or "-"),
    Column("FINISHED", wide=True, value=lambda e: e["finished"] or "-"),
    Column("SOURCE", wide=True), Column("MESSAGE", wide=True, value=lambda e: e["message"]))


def _history_view(h: Any) -> Any:
    from rblnctl import constants as C
    from rblnctl.cli.output import View, rows
    from rblnctl.documents import NODE_HISTORY

    doc = NODE_HISTORY(h)
    t = rows(doc["items"], *_HISTORY_COLUMNS)
    notes = list(h.notes)
    if not h.entries:
        notes.append(f"No switch or drain of node {h.node} on record: rblnctl's Events expire after the API server's "
                     f"--event-ttl ({C.DEFAULT_EVENT_TTL} by default), and no unfinished switch left its record on "
                     "the node.")
    return View(kind="NodeHistory", body=doc, tables=[t] if doc["items"] else [], notes=notes)


# -- shared ----------------------------------------------------------------------------------------

AllPodsOpt = Annotated[
    bool, typer.Option("--all-pods", help="Evict every pod but DaemonSets', not only NPU users (as kubectl "
                       "drain).")
]
EmptyDirOpt = Annotated[
    bool, typer.Option("--delete-emptydir-data", help="Evict pods with emptyDir volumes (data lost).")
]
DisableEvictionOpt = Annotated[
    bool, typer.Option("--disable-eviction", help="DELETE pods: no PodDisruptionBudget holds them.")
]
GracePeriodOpt = Annotated[
    int | None,
    typer.Option("--grace-period", help="Seconds each pod gets to terminate [default: the pod's own].",
                 metavar="SECONDS", min=0, max=2**63 - 1, show_default=False),  # DeleteOptions: int64
]
TimeoutOpt = Annotated[
    str, typer.Option("--timeout", help="How long to wait (evictions, the operator): "
                      "90s, 10m, 1h.", metavar="DURATION")
]
TakeOverOpt = Annotated[
    bool, typer.Option("--take-over", help="Take over the node's lock if its holder expired.")
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Also evict pods no controller recreates (kubectl drain "
                       "--force); nothing else.")
]
EvictVmsOpt = Annotated[
    bool, typer.Option("--evict-vms", help="Evict the VMs using the node's NPUs (they stop: "
                       "no live migration).")
]
# Overrides that --force used to include (before it meant only kubectl's): named when a refusal needs one.
OLD_FORCE_OVERRIDES = frozenset({"evict_vms", "evict_daemonsets", "skip_iommu_check", "skip_release_check",
                                 "take_over", "reverse"})
LockNamespaceOpt = Annotated[
    str | None, typer.Option("--lock-namespace", help="The node lock's (a Lease) [default: the "
                             "operator's].", metavar="NAMESPACE", show_default=False)
]
DEFAULT_TIMEOUT = f"{DEFAULT_TIMEOUT_S / 60:g}m"
MaxUnavailableOpt = Annotated[
    str, typer.Option("--max-unavailable", metavar="N|P%", help="Nodes mid-switch at once: N, or P% of "
                      "them, rounded down (at least 1).")
]
ContinueOnErrorOpt = Annotated[
    bool, typer.Option("--continue-on-error", help="After a failure keep starting nodes, and skip "
                       "refused ones [default: start no more].")
]


class DrainFlags(OptionGroup):
    """The flags of `node drain` and `node set-mode` that select, pace and drain the nodes, declared once; bound to the
    library's options one flag to one field (docs/node.md "Overrides")."""

    selector: SelectorOpt = None
    max_unavailable: MaxUnavailableOpt = "1"
    continue_on_error: ContinueOnErrorOpt = False
    force: ForceOpt = False
    evict_vms: EvictVmsOpt = False
    all_pods: AllPodsOpt = False
    delete_emptydir_data: EmptyDirOpt = False
    disable_eviction: DisableEvictionOpt = False
    grace_period: GracePeriodOpt = None
    timeout: TimeoutOpt = DEFAULT_TIMEOUT
    take_over: TakeOverOpt = False
    lock_namespace: LockNamespaceOpt = None

    def drain_options(self, *, server_dry_run: bool) -> "DrainOptions":
        from rblnctl.node.options import DrainOptions

        return DrainOptions(all_pods=self.all_pods, force=self.force, evict_vms=self.evict_vms,
                            delete_emptydir_data=self.delete_emptydir_data, disable_eviction=self.disable_eviction,
                            grace_period_s=self.grace_period, timeout_s=timeout_s(self.timeout),
                            server_dry_run=server_dry_run, take_over=self.take_over,
                            lock_namespace=self.lock_namespace)

    def pool_options(self) -> Any:
        from rblnctl.errors import InvalidInput
        from rblnctl.node.pool import MaxUnavailable, PoolOptions

        try:
            limit = MaxUnavailable.parse(self.max_unavailable)
        except InvalidInput as e:
            raise InvalidInput(f"--max-unavailable: {e}") from e
        return PoolOptions(max_unavailable=limit, continue_on_error=self.continue_on_error)


EvictDaemonsetsOpt = Annotated[
    bool, typer.Option("--evict-daemonsets", help="Evict DaemonSet pods that use the node's NPUs.")
]
SkipIommuCheckOpt = Annotated[
    bool, typer.Option("--skip-iommu-check", help="To vm although NFD reports the IOMMU off.")
]
SkipReleaseCheckOpt = Annotated[
    bool, typer.Option("--skip-release-check", help="To vm although the operator release serves no VMs "
                       "(the wait times out).")
]
ReverseOpt = Annotated[
    bool, typer.Option("--reverse", help="Go back from the node's unfinished switch to the "
                       "other mode.")
]
UncordonOpt = Annotated[
    bool, typer.Option("--uncordon/--no-uncordon", help="Uncordon at the end (if rblnctl cordoned it).")
]


class ModeFlags(DrainFlags):
    """set-mode's flags: the drain's, and the switch's own among them (in --help where they have always been)."""

    evict_daemonsets: EvictDaemonsetsOpt = False
    skip_iommu_check: SkipIommuCheckOpt = False
    skip_release_check: SkipReleaseCheckOpt = False
    reverse: ReverseOpt = False
    uncordon: UncordonOpt = True

    _order: ClassVar[tuple[str, ...]] = (
        "selector", "max_unavailable", "continue_on_error", "force", "evict_vms", "evict_daemonsets",
        "skip_iommu_check", "skip_release_check", "reverse", "all_pods", "delete_emptydir_data", "disable_eviction",
        "grace_period", "timeout", "uncordon", "take_over", "lock_namespace")

    def mode_options(self, *, server_dry_run: bool) -> Any:
        from rblnctl.node.options import ModeOptions

        return ModeOptions(drain=self.drain_options(server_dry_run=server_dry_run),
                           evict_daemonsets=self.evict_daemonsets, skip_iommu_check=self.skip_iommu_check,
                           skip_release_check=self.skip_release_check, reverse=self.reverse, uncordon=self.uncordon)


def _explain_force(err: Any, force: bool) -> None:
    """A refusal that an override --force used to include would lift: say that --force now means only kubectl's."""
    blockers = list(getattr(err, "blockers", None) or [])
    wanted = {getattr(b, "override", None) for b in blockers} | set(getattr(err, "options", ()) or ())
    if force and wanted & OLD_FORCE_OVERRIDES:
        err.details = [*err.details, "note: --force means only what kubectl drain's does (pods without a "
                       "controller); each other override is its own flag, named above (docs/node.md, Overrides)"]


def _progress(server_dry_run: bool) -> Any:
    """One node's drain or switch on stderr: its steps (the wait spins, a rollback is red), pods and waits."""
    from rblnctl.node.events import Step

    return Progress(server_dry_run=server_dry_run, wait_step=Step.WAIT, rollback_step=Step.ROLLBACK)


def _pods_table(pods: list[dict]) -> Any:
    """One row per pod on the node (the `pods` of a NodeDrain or ModeSwitch plan's document): what the drain does
    with it and why."""
    from rblnctl.cli.output import Cell, Table

    from rblnctl.node.filters import OPERATOR_COMPONENT

    t = Table("NAMESPACE", "NAME", "ACTION", "NPU", "REASON")
    operator: dict[str, int] = {}
    for e in pods:
        blocked = bool(e["blockers"])
        # The operator's own pods (one per component, seven or more) are left alone on every switch: the default
        # table counts them in one row, so the pods that matter and the prompt stay on an 80x24 screen; -o wide
        # (and -o json) lists them.
        mine = not blocked and e["action"] == "ignore" and e["reason"].startswith(OPERATOR_COMPONENT)
        if mine:
            operator[e["namespace"]] = operator.get(e["namespace"], 0) + 1
        t.add_row(e["namespace"], e["name"], Cell("blocked" if blocked else e["action"], "red" if blocked else ""),
                  "yes" if e["npu"] else "no", e["reason"], only="wide" if mine else None)
    for ns, n in operator.items():
        t.add_row(ns, f"({n} operator pods)", "ignore", "no", "RBLN operator components: the operator replaces "
                  "them (-o wide lists them)", only="table")
    return t


def _drain_view(plan: Any, result: Any = None) -> Any:
    from rblnctl.cli.output import View
    from rblnctl.documents import NODE_DRAIN, body

    doc = body(NODE_DRAIN, spell, plan=plan, result=result)
    pods = doc["plan"]["pods"]
    evicting = len(plan.evict)
    head = f"node {plan.node}: {'cordon, then ' if plan.cordon else ''}evict {evicting} pod(s) ({plan.scope} scope)"
    if result is not None:
        head = f"node {plan.node}: evicted {len(result.evicted)} pod(s)" + \
            (" (server dry run)" if result.server_dry_run else "")
    return View(kind="NodeDrain", body=doc, preamble=[head], tables=[_pods_table(pods)] if pods else [],
                names=[f"node/{plan.node}"])


_STEP_COLUMNS = (Column("STEP"), Column("WHAT", value="detail"))


def _mode_view(plan: Any, result: Any = None) -> Any:
    """A mode switch (kind ModeSwitch): the plan, and the result once applied (null on a client dry run)."""
    from rblnctl.cli.output import Table, View, rows
    from rblnctl.documents import MODE_SWITCH, body

    doc = body(MODE_SWITCH, spell, plan=plan, result=result)
    names = [f"node/{plan.node}"]
    if result is not None:
        from rblnctl.cli.pool import human_duration

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
        tables.append(_pods_table(p["pods"]))
    return View(kind="ModeSwitch", body=doc, preamble=head, tables=tables, names=names)


# -- set-mode --------------------------------------------------------------------------------------

SET_MODE_EXAMPLES = examples(
    "rblnctl node set-mode vm npu-node-1               # asks first (-y: not)",
    "rblnctl node set-mode vm npu-node-1 --dry-run     # the plan, no change",
    "rblnctl node set-mode container npu-node-1 --timeout 20m",
    "rblnctl node set-mode vm npu-node-1 --evict-vms   # stop the VMs on its NPUs",
    "rblnctl node set-mode vm npu-node-1 npu-node-2 -y # one node at a time",
    "rblnctl node set-mode vm -l pool=vm --max-unavailable 25% -y",
    "rblnctl node set-mode vm -l pool=vm --max-unavailable 2 --rehearse",
)
DRAIN_EXAMPLES = examples(
    "rblnctl node drain npu-node-1",
    "rblnctl node drain npu-node-1 --all-pods --delete-emptydir-data",
    "rblnctl node drain npu-node-1 --dry-run=server -o yaml",
    "rblnctl node drain -l pool=train --max-unavailable 2 -y",
)
SelectionArg = Annotated[list[str] | None, typer.Argument(help="The nodes (or -l SELECTOR).", metavar="[NODE]...",
                                                          show_default=False,
                                                          autocompletion=completion.complete_npu_nodes)]



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


def _cordon_state(ctx: typer.Context, node: str) -> str:
    """After an interruption, what is true of the node's cordon, read back once: `is cordoned`, `is not cordoned`,
    or (the read failed) `may be left cordoned`."""
    from rblnctl.errors import RblnError
    from rblnctl.kube import NODES

    try:
        obj = state(ctx).kube().get(NODES, node)
    except (RblnError, KeyboardInterrupt):
        return "may be left cordoned"
    return "is cordoned" if (obj.get("spec") or {}).get("unschedulable") else "is not cordoned"


def _selection(nodes: list[str], selector: str | None) -> None:
    """One node, several, or a selector: never both, never neither (exit 2, before connecting)."""
    from rblnctl.errors import InvalidInput
    from rblnctl.kube import validate_name

    if nodes and selector:
        raise InvalidInput("name the nodes or give -l SELECTOR, not both")
    if not nodes and not selector:
        raise InvalidInput("name at least one node, or select nodes with -l SELECTOR")
    for n in nodes:
        validate_name(n)


def _run_pool(ctx: typer.Context, runner: Any, names: list[str], *, selector: str | None, how: str | None, yes: bool,
              output: Any, progress: Any) -> None:
    """Plan every node, confirm once, run the pool through the one flow, and exit 1 if any node failed.

    Every hint repeats the command as run (rblnctl.cli.rerun): the pool's with all its flags, a node's without the
    pool's selection and pacing (POOL_ONLY) but with every other flag, --context first of all."""
    from rblnctl.cli.console import warn
    from rblnctl.cli.flow import Mutation, run
    from rblnctl.cli.pool import pool_plan_view, pool_result_view
    from rblnctl.cli.rerun import POOL_ONLY, command_line, render
    from rblnctl.node.pool import Outcome, PoolFailed
    from rblnctl.errors import WaitTimeout
    from rblnctl.remedy import Command

    plan = runner.plan(names, selector=selector)
    verb = "switch" if plan.operation == "set-mode" else "drain"

    def resume_lines(nodes: list[str]) -> list[str]:
        if plan.operation != "set-mode":
            return [f"resume: {render(ctx, Command.own('node', 'drain', n, again=True), drop=POOL_ONLY)}"
                    for n in nodes]
        from rblnctl.node.mode import short_mode

        switch = [Command.own("node", "set-mode", short_mode(plan.target), n, again=True) for n in nodes]
        return [f"resume:  {render(ctx, c, drop=POOL_ONLY)}" for c in switch]

    def interrupted() -> None:
        stopped = [n for n, i in runner.items.items() if i.outcome == Outcome.INTERRUPTED]
        if stopped:
            states = "; ".join(f"node {n} {_cordon_state(ctx, n)}" for n in stopped)
            warn(f"interrupted mid-{verb}: {states}; re-run `{command_line(ctx)}` to resume the pool, or one node at "
                 "a time:")
            for line in resume_lines(stopped):
                warn(line)

    from rblnctl.node.mode import short_mode

    question = (f"Switch {len(plan.nodes)} node(s) to {short_mode(plan.target)} mode, at most {plan.max_unavailable} "
                "at once?" if plan.operation == "set-mode" else
                f"Cordon and drain {len(plan.nodes)} node(s), at most {plan.max_unavailable} at once?")
    result = run(Mutation(
        plan=plan, apply=runner.apply, refusal=f"refusing to {verb} the pool: nothing was changed", question=question,
        disruptive=True, dry_run=how, yes=yes, output=output, plan_view=pool_plan_view,
        result_view=lambda r: pool_result_view(plan, r),
        noop_message=f"every node is {'already in ' + plan.target + ' mode' if plan.target else 'drained'}; "
                     "nothing to do",
        on_interrupt=interrupted, progress=progress,
    ))
    if result is None or not result.failed:
        return
    details = []
    for item in result.failed:
        details.append(f"{item.node} ({item.outcome}): {one_line(item.error)}")
        details += [f"  {line}" for line in (item.error.details if item.error is not None else [])]
        details += [f"  - {b}" for b in getattr(item.error, "blockers", None) or []]
        recovery = getattr(item.error, "recovery", None)
        if recovery is not None:
            from rblnctl.cli.errors import recovery_lines

            details += [f"  {line}" for line in recovery_lines(recovery, ctx, drop=POOL_ONLY)]
    skipped = result.count(Outcome.SKIPPED)
    only = result.failed[0] if len(result.items) == 1 else None
    if only is not None and isinstance(only.error, WaitTimeout):
        # one node that timed out is no partial result: exit 5, as the README's table and `node drain NODE` say
        raise WaitTimeout(f"node {only.node}: {' '.join(str(only.error).split())}").with_details(
            [line[2:] for line in details[1:]])
    tail = f"; {skipped} node(s) not started" if skipped else ""
    raise PoolFailed(f"{len(result.failed)} of {len(result.items)} node(s) failed or were refused: "
                     f"{', '.join(i.node for i in result.failed)}{tail}", result=result).with_details(details)


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
    from rblnctl.errors import InvalidInput, RblnError

    target, nodes = _mode_and_nodes(args)  # bad input fails before connecting
    _selection(nodes, flags.selector)
    pool_options = flags.pool_options()
    options = flags.mode_options(server_dry_run=mutation.server)
    if rehearse and mutation.how:
        raise InvalidInput("--rehearse writes nothing: it takes no --dry-run")
    try:
        if rehearse:
            from rblnctl.cli.rehearse import run_rehearsal

            run_rehearsal(state(ctx).kube(), target, nodes, selector=flags.selector, options=options,
                          pool=pool_options, output=output)
            return
        _set_mode(ctx, target, nodes, selector=flags.selector, options=options, pool_options=pool_options,
                  how=mutation.how, yes=mutation.yes, output=output)
    except RblnError as err:
        _explain_force(err, flags.force)
        raise


def _set_mode(ctx: typer.Context, target: str, nodes: list[str], *, selector: str | None, options: Any,
              pool_options: Any, how: str | None, yes: bool, output: Any) -> None:
    from rblnctl.cli.console import warn
    from rblnctl.cli.errors import recovery_lines
    from rblnctl.cli.flow import Mutation, run
    from rblnctl.node.mode import ModeSwitcher, short_mode

    if selector is None and len(nodes) == 1:
        node = nodes[0]
        progress = _progress(how == "server")
        switcher = ModeSwitcher(kube=state(ctx).kube(), options=options, events=progress.node_events(),
                                audit=_auditor(ctx))
        plan = switcher.plan(node, target)

        def interrupted() -> None:
            lines = "; ".join(recovery_lines(plan.recovery, ctx))
            warn(f"node {node} {_cordon_state(ctx, node)}, with its progress record, mid-switch; {lines}")

        run(Mutation(
            plan=plan, apply=switcher.apply, refusal=f"refusing to switch node {node} to {short_mode(target)}",
            question=f"Switch node {node} to {short_mode(target)} mode?", disruptive=True, dry_run=how, yes=yes,
            output=output, plan_view=_mode_view, result_view=lambda r: _mode_view(plan, r),
            noop_message=f"node {node} is already in {target} mode; nothing to do",
            on_interrupt=interrupted, progress=progress,
        ))
        return
    from rblnctl.cli.pool import PoolProgress
    from rblnctl.node.pool import PoolRunner, select_nodes

    kube = state(ctx).kube()
    names = select_nodes(kube, names=nodes, selector=selector)
    progress = PoolProgress(names, title=f"switching {len(names)} node(s) to {short_mode(target)}",
                            server_dry_run=how == "server")
    runner = PoolRunner.for_mode(kube, target, options, pool=pool_options, events=progress.events(),
                                 audit=_auditor(ctx))
    _run_pool(ctx, runner, names, selector=selector, how=how, yes=yes, output=output, progress=progress)


def _auditor(ctx: typer.Context) -> Any:
    """The audit trail of this invocation: Events on each node it changes (the library skips a server dry run)."""
    from rblnctl.audit import Auditor

    return Auditor(kube=state(ctx).kube())


# -- drain -----------------------------------------------------------------------------------------


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
    from rblnctl.errors import RblnError

    nodes = list(nodes or [])
    _selection(nodes, flags.selector)  # bad input fails before connecting
    pool_options = flags.pool_options()
    options = flags.drain_options(server_dry_run=mutation.server)
    try:
        _drain(ctx, nodes, selector=flags.selector, options=options, pool_options=pool_options, how=mutation.how,
               yes=mutation.yes, output=output)
    except RblnError as err:
        _explain_force(err, flags.force)
        raise


def _drain(ctx: typer.Context, nodes: list[str], *, selector: str | None, options: Any, pool_options: Any,
           how: str | None, yes: bool, output: Any) -> None:
    from rblnctl.cli.console import warn
    from rblnctl.cli.flow import Mutation, run
    from rblnctl.node.drain import Drainer

    if selector is None and len(nodes) == 1:
        node = nodes[0]
        progress = _progress(how == "server")
        drainer = Drainer(kube=state(ctx).kube(), options=options, events=progress.node_events(), audit=_auditor(ctx))
        plan = drainer.plan(node)

        def interrupted() -> None:
            from rblnctl.cli.rerun import command_line

            warn(f"node {node} {_cordon_state(ctx, node)} and may be partly drained; re-run `{command_line(ctx)}` to "
                 f"finish, or `kubectl uncordon {node}` to make it schedulable again")

        def done(result: Any) -> str:
            if result.cordoned:
                return (f"node {node} cordoned and drained; it stays cordoned: `kubectl uncordon {node}` when you are "
                        "done")
            return f"node {node} drained (it was already cordoned and stays so)"

        run(Mutation(
            plan=plan, apply=drainer.apply, refusal=f"cannot drain node {node}",
            question=f"Cordon node {node} and evict {len(plan.evict)} pod(s)?", disruptive=True, dry_run=how,
            yes=yes, output=output, plan_view=_drain_view, result_view=lambda r: _drain_view(plan, r),
            noop_message=f"node {node} is cordoned and has no pod to evict; nothing to do", done_message=done,
            on_interrupt=interrupted, progress=progress,
        ))
        return
    from rblnctl.cli.pool import PoolProgress
    from rblnctl.node.pool import PoolRunner, select_nodes

    kube = state(ctx).kube()
    names = select_nodes(kube, names=nodes, selector=selector)
    progress = PoolProgress(names, title=f"draining {len(names)} node(s)", server_dry_run=how == "server")
    runner = PoolRunner.for_drain(kube, options, pool=pool_options, events=progress.events(), audit=_auditor(ctx))
    _run_pool(ctx, runner, names, selector=selector, how=how, yes=yes, output=output, progress=progress)
