"""Views shared by several commands: NPU node rows (node list, status) and the policy summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rblnctl.cli.output import Cell, Column, Table, joined, yes_no


def node_document(n: Any) -> dict:
    """One NPU node in the documents of `node list` and `status`."""
    return {
        "name": n.name,
        "mode": n.mode,
        "modeLabel": n.mode_label,
        "modeLabelValid": n.mode_label_valid,
        "ready": n.ready,
        "schedulable": n.schedulable,
        "deploySkip": n.deploy_skip,
        "components": list(n.components),
        "pausedComponents": list(n.paused),
        "resources": dict(n.resources),
        "product": n.product,
        "npuCount": n.count,
        "family": n.family,
        "labels": dict(n.labels),
    }


def policy_document(p: Any, *, release: Any = None) -> dict | None:
    """The active RBLNClusterPolicy, as far as the commands show it. With the operator's `release`,
    vmMethod counts only a VM allocator that release makes serve VMs (rblnctl.operator.release)."""
    if p is None:
        return None
    return {
        "name": p.name,
        "workloadType": p.workload_type,
        "vmMethod": p.vm_method_on(release),
        "enabled": {k: bool(v) for k, v in p.enabled.items()},
        "state": p.state,
    }


def _mode_cell(n: Any) -> str:
    mode = n.mode if n.mode_label_valid else f"{n.mode}(label:{n.mode_label}:invalid)"
    return mode + (",deploy.skip" if n.deploy_skip else "")


def npu_nodes_table(nodes: list[Any], vms: Mapping[str, list[str]] | None = None, *,
                    show_labels: bool = False) -> Table:
    """NPU nodes as kubectl prints nodes: NAME first, one line each; -o wide adds the operator components.

    With `vms` (node -> VMs holding NPUs there) a VMS column counts them and -o wide names them.
    `show_labels` adds LABELS last, as `kubectl get nodes --show-labels` (every label, `k=v,...`).
    """
    extra = [] if vms is None else ["VMS"]
    wide_extra = [] if vms is None else [Column("NPU VMS", wide=True)]
    t = Table("NAME", "MODE", "STATUS", "NPUS", *extra, "RESOURCES", Column("PRODUCT", wide=True),
              Column("COMPONENTS", wide=True), *wide_extra, *(["LABELS"] if show_labels else []))
    for n in nodes:
        status = "Ready" if n.ready else "NotReady"
        if not n.schedulable:
            status += ",SchedulingDisabled"  # kubectl get nodes spells a cordoned node this way
        components = list(n.components) + [f"{c}(paused)" for c in n.paused]
        held = [] if vms is None else list(vms.get(n.name, []))
        t.add_row(
            n.name,
            _mode_cell(n),
            Cell(status, "" if n.ready and n.schedulable else "yellow" if n.ready else "red"),
            str(sum(n.resources.values())) if n.resources else "0",
            *([] if vms is None else [str(len(held))]),
            joined(f"{k.removeprefix('rebellions.ai/')}={v}" for k, v in n.resources.items()),
            n.product or "<unknown>",
            joined(components),
            *([] if vms is None else [joined(held)]),
            *([joined(f"{k}={v}" for k, v in n.labels.items())] if show_labels else []),
        )
    return t


__all__ = ["node_document", "npu_nodes_table", "policy_document", "yes_no"]
