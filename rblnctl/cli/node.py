"""`rblnctl node ...`: NPU node inventory (and, as the node group grows, mode switching)."""

from __future__ import annotations

import typer

from rblnctl.cli.options import OutputOpt, SelectorOpt
from rblnctl.cli.output import Output

app = typer.Typer(
    help="Inspect NPU nodes and their workload mode (container or vm-passthrough).",
    no_args_is_help=True,
)


@app.command("list")
def list_nodes(ctx: typer.Context, selector: SelectorOpt = None, output: OutputOpt = Output.table) -> None:
    """List NPU nodes with their mode, schedulability, operator components and NPU resources."""
    from rblnctl.cli.output import emit
    from rblnctl.cli.render import npu_nodes_table
    from rblnctl.node.inventory import list_npu_nodes

    nodes = list_npu_nodes(ctx.obj.kube(), selector=selector)
    emit({"nodes": nodes}, output, lambda: npu_nodes_table(nodes))
