"""Views shared by several commands: NPU node rows (node list, status) and the policy summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rblnctl.cli.output import Cell, Column, Table, joined, rows, yes_no
from rblnctl.documents import unfinished_switch

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from datetime import datetime

    from rblnctl.operator.nodes import NpuNode


def hold_notes(nodes: list[NpuNode], now: datetime | None = None) -> list[str]:
    """One note per component pod held in an init container: the pod, the container, its state, kubectl's STATUS,
    what it waits for and its last log line (rblnctl.operator.components.InitHold.describe)."""
    return [f"note: node {n.name}: {h.describe(now)}" for n in nodes for h in n.holds]


def _count(value: int | None) -> str:
    return "<unknown>" if value is None else str(value)


def _mode_cell(n: dict) -> str:
    mode = n["mode"] if n["modeLabelValid"] else f"{n['mode']}(label:{n['modeLabel']}:invalid)"
    return mode + (",deploy.skip" if n["deploySkip"] else "")


def _status_cell(n: dict) -> Cell:
    status = "Ready" if n["ready"] else "NotReady"
    if not n["schedulable"]:
        status += ",SchedulingDisabled"  # kubectl get nodes spells a cordoned node this way
    if n["switch"] is not None:
        status += ",Switching"  # a set-mode runs now or was interrupted: its record is still on the node
    held = list(dict.fromkeys(f",{h['status']}" for h in n["initHeld"]))
    status += "".join(held)  # an operator component's pod held in an init container (`Init:0/2`): why NPUS says 0
    return Cell(status, "" if n["ready"] and n["schedulable"] and n["switch"] is None and not held else "yellow"
                if n["ready"] else "red")


def _dra_cell(u: dict) -> str:
    tainted = f",{len(u['tainted'])} tainted" if u["tainted"] else ""
    return f"{u['name']}={u['allocatable']}(dra{tainted})"


def _resources_cell(n: dict) -> str:
    return joined([*(f"{k.removeprefix('rebellions.ai/')}={v}" for k, v in n["resources"].items()),
                   *(_dra_cell(u) for u in n["npuResources"] if u["dra"])])


def _components_cell(n: dict) -> str:
    held = {h["component"]: h["status"] for h in n["initHeld"]}
    return joined([f"{c}({held[c]})" if c in held else c for c in n["components"]]
                  + [f"{c}(paused)" for c in n["pausedComponents"]])


_NODE_COLUMNS = (
    Column("NAME"), Column("MODE", value=_mode_cell), Column("STATUS", value=_status_cell),
    Column("NPUS", value=lambda n: str(n["npuAllocatable"] if n["npuAllocatable"] is not None
                                       else sum(n["resources"].values()))),
    Column("ALLOCATED", value=lambda n: _count(n["npuAllocated"])),
    Column("FREE", value=lambda n: _count(n["npuFree"])))
_NODE_WIDE = (Column("RESOURCES", wide=True, value=_resources_cell),
              Column("PRODUCT", wide=True, value=lambda n: n["product"] or "<unknown>"),
              Column("COMPONENTS", wide=True, value=_components_cell))


def npu_nodes_table(nodes: list[dict], vms: Mapping[str, list[str]] | None = None, *,
                    show_labels: bool = False) -> Table:
    """NPU nodes (their documents: NpuNodeList items, ClusterStatus nodes) as kubectl prints nodes: NAME first, one
    line each, narrow enough for 80 columns; -o wide adds the resources, the product and the operator components.

    NPUS, ALLOCATED and FREE count the node's NPUs as the scheduler does (rblnctl.operator.capacity: device
    plugin resources and DRA devices; `<unknown>` when the pods holding them could not be read; a DRA device
    with a NoSchedule/NoExecute taint is in NPUS but not FREE, and RESOURCES says how many are tainted). STATUS
    is kubectl's (`Ready`, `,SchedulingDisabled`), `,Switching` while a set-mode's record is on the node, and
    `,Init:0/2` (kubectl's pod STATUS) for an operator component's pod held in an init container (issue 39: why
    NPUS is 0 is in the table, not only in a note on stderr). With `vms`
    (node -> VMs holding NPUs there: ClusterStatus's npuVms) a VMS column counts them and -o wide names them.
    `show_labels` adds LABELS last, as `kubectl get nodes --show-labels` (every label, `k=v,...`).
    """
    held = ((Column("VMS", value=lambda n: str(len(vms.get(n["name"], [])))),),
            (Column("NPU VMS", wide=True, value=lambda n: joined(vms.get(n["name"], []))),)) if vms is not None \
        else ((), ())
    labels = (Column("LABELS", value=lambda n: joined(f"{k}={v}" for k, v in n["labels"].items())),) \
        if show_labels else ()
    return rows(nodes, *_NODE_COLUMNS, *held[0], *_NODE_WIDE, *held[1], *labels)


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


__all__ = ["capacity_notes", "hold_notes", "npu_nodes_table", "switch_notes", "unfinished_switch", "yes_no"]
