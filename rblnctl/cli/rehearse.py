"""`rblnctl node set-mode MODE NODE... | -l SEL --rehearse`: the pool's predicted run, rendered (writes nothing).

The library reads the facts once and predicts (rblnctl.node.rehearse); this module only shows the prediction:
a table of the waves, a table of the evictions (where each pod's replacement could go), then the budgets, the
refusals, the operator's rollouts and the estimate with its basis. `-o json|yaml` is the ModeRehearsal document
(docs/output.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rblnctl.cli.output import Cell, Column, View, rows
from rblnctl.cli.waits import human_duration

if TYPE_CHECKING:
    from rblnctl.cli.output import OutputSpec
    from rblnctl.kube import Kube
    from rblnctl.node.options import ModeOptions
    from rblnctl.node.pool import PoolOptions
    from rblnctl.node.rehearse.plan import Rehearsal

_STYLE = {"switch": "green", "unchanged": "", "refused": "red", "fails": "red", "skipped": "yellow"}


def _to(e: dict) -> str:
    if not e["recreated"]:
        return "<not recreated>"
    return e["likely"] or "<nowhere: Pending>"


_NODE_COLUMNS = (
    Column("WAVE"), Column("NODE"), Column("FROM", value=lambda n: n["fromMode"] or "-"),
    Column("RESULT", value=lambda n: Cell(n["outcome"], _STYLE.get(n["outcome"], ""))),
    Column("EVICT", value=lambda n: str(len(n["evictions"]))),
    Column("ESTIMATE", value=lambda n: human_duration(n["estimateSeconds"]) if n["estimateSeconds"] else "-"))
_EVICTION_COLUMNS = (
    Column("WAVE"), Column("NODE"), Column("POD", value="pod"), Column("TO", value=_to),
    Column("OWNER", wide=True, value=lambda e: e["owner"] or "<none>"),
    Column("COULD-GO", wide=True, value=lambda e: ",".join(e["places"]) or "-"))


def rehearsal_view(r: Rehearsal) -> View:
    """The rehearsal in every format; the tables are read from its document, as every view's are."""
    from rblnctl.cli.rerun import spell
    from rblnctl.documents import MODE_REHEARSAL
    from rblnctl.node.mode import short_mode

    doc = MODE_REHEARSAL(r, spell)
    node_rows = [{**n, "wave": str(w["number"])} for w in doc["waves"] for n in w["nodes"]]
    node_rows += [{**n, "wave": "-"} for n in doc["refused"]]
    evictions = [{**e, "wave": str(w["number"])} for w in doc["waves"] for n in w["nodes"] for e in n["evictions"]]
    where = f" (selector {r.selector})" if r.selector else ""
    head = [f"rehearsal: switch {len(node_rows)} node(s) to {short_mode(r.target)}, at most {r.max_unavailable} at "
            f"once{where}; nothing was written"]
    tables = [rows(node_rows, *_NODE_COLUMNS)]
    if evictions:
        tables.append(rows(evictions, *_EVICTION_COLUMNS))
    lines: list[str] = []
    for w in r.waves:
        for b in w.budgets:
            said = "its status is not written yet" if b.allowed is None else f"allows {b.allowed} at once"
            tail = "; it refuses every eviction: the switch will time out" if b.blocks else \
                (f"; {b.waiting} wait(s) for replacements to be Ready" if b.waiting else "")
            lines.append(f"wave {w.number}: PodDisruptionBudget {b.budget} {said}, {b.evicting} eviction(s)"
                           f"{tail}")
        for n in w.nodes:
            stuck = [e for e in n.evictions if e.recreated and e.nowhere]
            if stuck:
                lines.append(f"wave {w.number}: {len(stuck)} pod(s) from node {n.node} would have nowhere to go "
                               f"(stay Pending): {stuck[0].nowhere}")
            for why in n.blockers:
                lines.append(f"wave {w.number}: node {n.node} {n.outcome}: {why}")
            if n.vms:
                lines.append(f"node {n.node}: VMs holding its NPUs: {', '.join(n.vms)}")
            if n.rollout is not None:
                ro = n.rollout
                parts = ([f"removes {', '.join(ro.removes)}"] if ro.removes else []) + \
                    ([f"deploys {', '.join(ro.deploys)}"] if ro.deploys else [])
                lines.append(f"node {n.node}: the operator " + "; ".join(parts or ["has nothing to roll out"]))
            if n.outcome in ("switch", "fails"):
                lines.append(f"node {n.node}: ~{human_duration(n.estimate_seconds)} ({n.basis})")
    for n in r.refused:
        for why in n.blockers:
            lines.append(f"refused: node {n.node}: {why}")
        if n.vms:
            lines.append(f"node {n.node}: VMs holding its NPUs: {', '.join(n.vms)}")
    if r.pool_refused:
        lines.append("the pool would be refused before any write: nothing would change")
    else:
        lines.append(f"estimate: ~{human_duration(r.estimate_s)} in {len(r.waves)} wave(s) (each wave its longest "
                       "node)")
    lines.append(f"what it assumes: {len(r.assumptions)} assumption(s) in -o json (.assumptions)")
    return View(kind="ModeRehearsal", body=doc, preamble=head, tables=tables, epilogue=lines, notes=list(r.notes),
                names=[f"node/{n['node']}" for n in node_rows])


def run_rehearsal(kube: Kube, target: str, nodes: list[str], *, selector: str | None, options: ModeOptions,
                  pool: PoolOptions, output: OutputSpec) -> None:
    """Read, predict, show; a pool the real run would refuse exits as a refused dry run does (1), after its
    document."""
    from rblnctl.cli.output import emit
    from rblnctl.errors import Refused
    from rblnctl.node.pool import select_nodes
    from rblnctl.node.rehearse.facts import gather
    from rblnctl.node.rehearse.plan import rehearse

    names = select_nodes(kube, names=nodes, selector=selector)
    r = rehearse(gather(kube, target, names, options, selector=selector, pool=pool))
    for w in r.warnings:
        from rblnctl.cli.console import warn

        warn(w)
    emit(rehearsal_view(r), output)
    if r.pool_refused:
        raise Refused("the pool would be refused: nothing would change", blockers=r.blockers)
