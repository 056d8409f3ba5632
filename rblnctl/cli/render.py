"""Rich renderables shared by several commands (imported lazily, inside commands)."""

from __future__ import annotations

from typing import Any

from rblnctl.cli.output import make_table


def npu_nodes_table(nodes: list[Any]) -> Any:
    """A table of NpuNode rows."""
    from rich.markup import escape

    t = make_table("NODE", "MODE", "READY", "SCHEDULABLE", "COMPONENTS", "NPU RESOURCES")
    for n in nodes:
        mode = n.mode if n.mode_label_valid else f"{n.mode} (label {n.mode_label!r} invalid)"
        if n.deploy_skip:
            mode += " [deploy.skip]"
        t.add_row(
            escape(n.name),
            escape(mode),
            "yes" if n.ready else "NO",
            "yes" if n.schedulable else "cordoned",
            escape(",".join(n.components + [f"{c}(paused)" for c in n.paused]) or "-"),
            escape(", ".join(f"{k.removeprefix('rebellions.ai/')}={v}" for k, v in n.resources.items()) or "-"),
        )
    if not nodes:
        t.caption = "no NPU nodes found (NFD labels feature.node.kubernetes.io/pci-*1eff.present)"
    return t
