"""The bodies of the documents `node set-mode` and `node drain` print (ModeSwitch, NodeDrain: docs/output.md), for
one node and, item by item, for a pool (rblnctl.cli.pool): one place, imported by both."""

from __future__ import annotations

from typing import Any
from rblnctl.cli.rerun import spell


def pod_document(e: Any) -> dict:
    return {"namespace": e.namespace, "name": e.name, "uid": e.uid, "action": str(e.action), "reason": e.reason,
            "npu": e.npu, "vmi": e.vmi, "blockers": [blocker_document(b) for b in e.blockers]}


def blocker_document(b: Any) -> dict:
    return {"message": b.message, "override": b.override}


def ref_document(r: Any) -> dict:
    return {"namespace": r.namespace, "name": r.name, "uid": r.uid}


def drain_plan_document(plan: Any) -> dict:
    return {"node": plan.node, "scope": plan.scope, "cordon": plan.cordon, "unschedulable": plan.unschedulable,
            "pods": [pod_document(e) for e in list(plan.evict) + list(plan.ignored)],
            "blockers": [blocker_document(b) for b in plan.blockers], "warnings": [spell(w) for w in plan.warnings]}


def drain_document(plan: Any, result: Any = None) -> dict:
    """The body of a NodeDrain document: the plan, and the result once applied (null before)."""
    return {"node": plan.node, "plan": drain_plan_document(plan),
            "result": None if result is None else {
                "cordoned": result.cordoned, "evicted": [ref_document(r) for r in result.evicted],
                "rounds": result.rounds, "serverDryRun": result.server_dry_run}}


def mode_plan_document(plan: Any) -> dict:
    return {"node": plan.node, "target": plan.target, "currentMode": plan.current_mode, "fromMode": plan.from_mode,
            "modeLabel": plan.mode_label,
            "noop": plan.noop, "resume": plan.resume, "converged": plan.converged,
            "unschedulable": plan.unschedulable, "started": plan.started,
            "steps": [{"step": str(s.step), "detail": s.detail} for s in plan.steps],
            "vms": list(plan.vms),
            "pods": [] if plan.drain is None else [pod_document(e) for e in
                                                   list(plan.drain.evict) + list(plan.drain.ignored)],
            "pending": list(plan.pending),
            "blockers": [blocker_document(b) for b in plan.blockers], "warnings": [spell(w) for w in plan.warnings]}


def mode_switch_document(plan: Any, result: Any = None) -> dict:
    """The body of a ModeSwitch document: the plan, and the result once applied (null on a client dry run)."""
    return {"node": plan.node, "plan": mode_plan_document(plan),
            "result": None if result is None else {
                "previousMode": result.previous_mode, "mode": result.mode, "changed": result.changed,
                "resumed": result.resumed, "cordoned": result.cordoned, "uncordoned": result.uncordoned,
                "evicted": [ref_document(r) for r in result.evicted], "serverDryRun": result.server_dry_run,
                "elapsedSeconds": round(result.elapsed_s, 3)}}
