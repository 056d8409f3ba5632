"""`rblnctl node list`: the NPU nodes, their mode, schedulability, operator components and NPUs (as kubectl get)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli import completion
from rblnctl.cli.node.common import app
from rblnctl.cli.options import OutputOpt, SelectorOpt, WatchOpt, examples, sort_by_option
from rblnctl.cli.state import state

if TYPE_CHECKING:
    from rblnctl.cli.output import View
    from rblnctl.kube import Change
    from rblnctl.node.inventory import NodesSnapshot
    from rblnctl.operator.nodes import NpuNode

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

    def view_of(nodes: list[NpuNode]) -> View:
        return _nodes_view(nodes, show_labels=show_labels, sort_by=sort_by, named=bool(names))

    if watch:
        from rblnctl.cli.status import follow, warn_retrying
        from rblnctl.node.inventory import node_changes, watch_npu_nodes

        def only(nodes: list[NpuNode]) -> list[NpuNode]:
            return [n for n in nodes if n.name in names] if names else nodes

        def view_of_snapshot(snap: NodesSnapshot) -> View:
            return view_of(only(snap.nodes))

        def changes_of(a: NodesSnapshot, b: NodesSnapshot) -> list[Change]:
            return node_changes(only(a.nodes), only(b.nodes))

        follow(watch_npu_nodes(kube, selector=selector, on_retry=warn_retrying), view_of=view_of_snapshot,
               changes_of=changes_of, output=output)
        return
    if not names:
        emit(view_of(read_npu_nodes(kube, selector=selector)[1]), output)
        return
    view = read_operator(kube)
    nodes, errors = named_npu_nodes(kube, view.policy, names, namespace=view.namespace)
    emit(view_of(nodes), output)
    if errors:  # as kubectl get: what was found is printed, then one error line per name (exit 1)
        raise NotFound(errors[0]).with_details(errors[1:])


def _nodes_view(nodes: list[NpuNode], *, show_labels: bool = False, sort_by: str | None = None,
                named: bool = False) -> View:
    """The NpuNodeList view; `named`: the user named the nodes, so a name not found is the error's to say (as
    kubectl get), never "No NPU nodes found" about a cluster that has some."""
    from types import SimpleNamespace

    from rblnctl.cli.output import View, sort_order
    from rblnctl.cli.render import capacity_notes, hold_notes, npu_nodes_table, switch_notes
    from rblnctl.clock import SYSTEM_CLOCK
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
