"""`rblnctl status`: one-screen overview of the operator policy, KubeVirt and NPU nodes."""

from __future__ import annotations

from typing import Any

import typer

from rblnctl.cli.options import OutputOpt, SelectorOpt
from rblnctl.cli.output import Output


def status(ctx: typer.Context, selector: SelectorOpt = None, output: OutputOpt = Output.table) -> None:
    """Show the operator policy, KubeVirt gates and every NPU node's mode at a glance."""
    from rblnctl.cli.output import emit
    from rblnctl.status import cluster_status

    from rblnctl.cli.console import waiting

    with waiting("reading the cluster..."):
        st = cluster_status(ctx.obj.kube(), selector=selector)
    emit(st, output, lambda: _table(st))


def _table(st: Any) -> Any:
    from rich.console import Group
    from rich.markup import escape
    from rich.text import Text

    from rblnctl.cli.render import npu_nodes_table

    lines = [Text(f"Kubernetes {st.server_version}")]
    p = st.policy
    if p:
        lines.append(Text(f"Policy {p.name}: {p.switches()} (components in {st.operator_namespace})"))
    for kv in st.kubevirt:
        gates = ",".join(kv.feature_gates) or "none"
        line = f"KubeVirt {kv.namespace}/{kv.name}: {kv.phase or '?'} {kv.version or ''} gates={gates}"
        if kv.disabled_feature_gates:
            line += f" disabled={','.join(kv.disabled_feature_gates)}"
        lines.append(Text(line))
    modes = ", ".join(f"{m}={n}" for m, n in st.modes.items()) or "none"
    lines.append(Text(f"NPU nodes: {len(st.nodes)} ({modes})"))
    for n in st.notes:
        lines.append(Text.from_markup(f"[yellow]note:[/] {escape(n)}"))
    return Group(*lines, npu_nodes_table(st.nodes))


def register(app: typer.Typer) -> None:
    """Mount the command on the root app."""
    app.command("status")(status)
