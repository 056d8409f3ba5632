"""Views shared by several commands: NPU node rows (node list, status) and the policy summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rblnctl.cli.output import Cell, Column, Table, joined, yes_no

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from datetime import datetime

    from rblnctl.node.record import SwitchRecord
    from rblnctl.operator.capacity import ResourceUse
    from rblnctl.operator.components import InitHold
    from rblnctl.operator.nodes import NpuNode
    from rblnctl.operator.policy import Policy
    from rblnctl.operator.release import OperatorRelease


def node_document(n: NpuNode) -> dict:
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
        "npuAllocatable": n.capacity.allocatable if n.capacity is not None else None,
        "npuAllocated": n.capacity.allocated if n.capacity is not None else None,
        "npuFree": n.capacity.free if n.capacity is not None else None,
        "npuResources": [_use_document(u, n.capacity.known) for u in n.capacity.resources]
        if n.capacity is not None else [],
        "family": n.family,
        "labels": dict(n.labels),
        "initHeld": [hold_document(h) for h in n.holds],
        "switch": _switch_document(unfinished_switch(n)),
    }


def _switch_document(r: SwitchRecord | None) -> dict | None:
    """The unfinished switch on a node (null: none), as `node history` names its parts."""
    if r is None:
        return None
    return {"from": r.from_mode or None, "to": r.target, "step": str(r.step), "started": r.started, "user": r.by}


def hold_document(h: InitHold) -> dict:
    """A component pod held in an init container (rblnctl.operator.components.InitHold), in documents."""
    return {"namespace": h.namespace, "pod": h.pod, "component": h.component, "initContainer": h.container,
            "state": h.state, "startedAt": h.started, "status": h.status, "restarts": h.restarts,
            "stuck": h.stuck, "waitsFor": h.waits_for, "lastLogLine": h.log}


def hold_notes(nodes: list[NpuNode], now: datetime | None = None) -> list[str]:
    """One note per component pod held in an init container: the pod, the container, its state, kubectl's STATUS,
    what it waits for and its last log line (rblnctl.operator.components.InitHold.describe)."""
    return [f"note: node {n.name}: {h.describe(now)}" for n in nodes for h in n.holds]


def _use_document(u: ResourceUse, known: bool) -> dict:
    return {"name": u.name, "dra": u.dra, "allocatable": u.allocatable, "allocated": u.allocated if known else None,
            "free": u.free if known else None, "holders": list(u.holders),
            "tainted": [{"device": t.device, "taint": t.taint} for t in u.tainted]}


def _count(value: int | None) -> str:
    return "<unknown>" if value is None else str(value)


def policy_document(p: Policy | None, *, release: OperatorRelease | None = None) -> dict | None:
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


def _mode_cell(n: NpuNode) -> str:
    mode = n.mode if n.mode_label_valid else f"{n.mode}(label:{n.mode_label}:invalid)"
    return mode + (",deploy.skip" if n.deploy_skip else "")


def npu_nodes_table(nodes: list[NpuNode], vms: Mapping[str, list[str]] | None = None, *,
                    show_labels: bool = False) -> Table:
    """NPU nodes as kubectl prints nodes: NAME first, one line each, narrow enough for 80 columns; -o wide adds the
    resources, the product and the operator components.

    NPUS, ALLOCATED and FREE count the node's NPUs as the scheduler does (rblnctl.operator.capacity: device
    plugin resources and DRA devices; `<unknown>` when the pods holding them could not be read; a DRA device
    with a NoSchedule/NoExecute taint is in NPUS but not FREE, and RESOURCES says how many are tainted). STATUS
    is kubectl's (`Ready`, `,SchedulingDisabled`) and `,Switching` while a set-mode's record is on the node. With `vms`
    (node -> VMs holding NPUs there) a VMS column counts them and -o wide names them.
    `show_labels` adds LABELS last, as `kubectl get nodes --show-labels` (every label, `k=v,...`).
    """
    extra = [] if vms is None else ["VMS"]
    wide_extra = [] if vms is None else [Column("NPU VMS", wide=True)]
    t = Table("NAME", "MODE", "STATUS", "NPUS", "ALLOCATED", "FREE", *extra, Column("RESOURCES", wide=True),
              Column("PRODUCT", wide=True),
              Column("COMPONENTS", wide=True), *wide_extra, *(["LABELS"] if show_labels else []))
    for n in nodes:
        status = "Ready" if n.ready else "NotReady"
        if not n.schedulable:
            status += ",SchedulingDisabled"  # kubectl get nodes spells a cordoned node this way
        switch = unfinished_switch(n)
        if switch is not None:
            status += ",Switching"  # a set-mode runs now or was interrupted: its record is still on the node
        held = {h.component: h.status for h in n.holds}
        components = [f"{c}({held[c]})" if c in held else c for c in n.components] + [
            f"{c}(paused)" for c in n.paused]
        vm_names = [] if vms is None else list(vms.get(n.name, []))
        t.add_row(
            n.name,
            _mode_cell(n),
            Cell(status, "" if n.ready and n.schedulable and switch is None else "yellow" if n.ready else "red"),
            str(n.capacity.allocatable) if n.capacity is not None else str(sum(n.resources.values())),
            _count(n.capacity.allocated if n.capacity is not None else None),
            _count(n.capacity.free if n.capacity is not None else None),
            *([] if vms is None else [str(len(vm_names))]),
            joined([*(f"{k.removeprefix('rebellions.ai/')}={v}" for k, v in n.resources.items()),
                    *(f"{u.name}={u.allocatable}(dra{f',{len(u.tainted)} tainted' if u.tainted else ''})"
                      for u in (n.capacity.resources if n.capacity else ()) if u.dra)]),
            n.product or "<unknown>",
            joined(components),
            *([] if vms is None else [joined(vm_names)]),
            *([joined(f"{k}={v}" for k, v in n.labels.items())] if show_labels else []),
        )
    return t


def unfinished_switch(n: NpuNode) -> SwitchRecord | None:
    """The unfinished mode switch recorded on NPU node `n` (rblnctl.node.record.SwitchRecord), or None."""
    from rblnctl.node.record import parse_record

    try:
        return parse_record(getattr(n, "switch_record", None))
    except ValueError:
        return None


def switch_notes(nodes: list[NpuNode]) -> list[str]:
    """One note per node whose STATUS says Switching: where the switch goes, its step, since when and by whom, and
    how to tell a running switch from an interrupted one (node history) and to finish or undo it."""
    from rblnctl.node.mode import short_mode

    out = []
    for n in nodes:
        r = unfinished_switch(n)
        if r is None:
            continue
        by = f" by {r.by}" if r.by else ""
        out.append(f"note: node {n.name}: Switching: set-mode {r.from_mode or '?'} -> {r.target} started {r.started}"
                   f"{by} is unfinished (at step {r.step}): it runs now or was interrupted; `rblnctl node history "
                   f"{n.name}` says which, `rblnctl node set-mode {short_mode(r.target)} {n.name}` finishes it")
    return out


def capacity_notes(nodes: list[NpuNode]) -> list[str]:
    """One note when some node's allocated NPUs could not be counted (the reads that were refused), one when DRA
    devices are left out of FREE because of their taints."""
    out = []
    problems = list(dict.fromkeys(n.capacity.problem for n in nodes
                                  if n.capacity is not None and not n.capacity.known and n.capacity.problem))
    if problems:
        out.append(f"note: ALLOCATED and FREE unknown: {'; '.join(problems)}")
    tainted = [f"{n.name} {t.device} ({t.taint})" for n in nodes if n.capacity is not None
               for u in n.capacity.resources for t in u.tainted]
    if tainted:
        more = " ..." if len(tainted) > 5 else ""
        out.append(f"note: FREE leaves out {len(tainted)} DRA device(s) whose NoSchedule/NoExecute taint keeps them "
                   f"from a claim that does not tolerate it: {', '.join(tainted[:5])}{more}")
    return out


__all__ = ["capacity_notes", "hold_document", "hold_notes", "node_document", "npu_nodes_table", "policy_document",
           "switch_notes", "unfinished_switch", "yes_no"]
