"""The progress record of a mode switch, kept on the node so that any later run can resume it.

The annotation `rebellions.ai/rblnctl.set-mode` holds JSON `{target, from, started,
cordoned_by_rblnctl, step}` (and `by`, the user of the run that wrote it, when the API server told)
from the first write of a switch to its last. The keys are a contract across rblnctl versions: a newer
rblnctl resumes what an older one started.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rblnctl import constants as C
from rblnctl.node.events import Step
from rblnctl.remedy import Command, Remedy

ANNOTATION = C.SET_MODE_ANNOTATION


@dataclass(frozen=True, kw_only=True)
class SwitchRecord:
    """An unfinished switch of one node."""

    target: str
    from_mode: str
    started: str
    cordoned_by_rblnctl: bool
    step: Step
    by: str | None = None  # the user running the switch (rblnctl.audit: a SelfSubjectReview); None: unknown

    def to_json(self) -> str:
        data = {"target": self.target, "from": self.from_mode, "started": self.started,
                "cordoned_by_rblnctl": self.cordoned_by_rblnctl, "step": str(self.step)}
        if self.by:
            data["by"] = self.by
        return json.dumps(data, sort_keys=True)

    def at(self, step: Step, **changes: object) -> "SwitchRecord":
        """The record moved to `step` (and any other field changed)."""
        return replace(self, step=step, **changes)  # type: ignore[arg-type]


def parse_record(raw: str | None) -> SwitchRecord | None:
    """Read the annotation; None when absent. Raises ValueError when it is not a record rblnctl wrote."""
    if raw is None:
        return None
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("target") not in C.WORKLOAD_MODES:
        raise ValueError("no valid target")
    try:
        step = Step(str(data.get("step") or Step.RECORD))
    except ValueError:
        step = Step.RECORD
    return SwitchRecord(target=data["target"], from_mode=str(data.get("from") or ""),
                        started=str(data.get("started") or ""),
                        cordoned_by_rblnctl=bool(data.get("cordoned_by_rblnctl")), step=step,
                        by=str(data["by"]) if data.get("by") else None)


def read_record(node: Mapping[str, Any]) -> tuple[SwitchRecord | None, str | None]:
    """The record on a Node object, and the warning when its annotation does not parse (then no record)."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    try:
        return parse_record(raw), None
    except ValueError:
        name = (node.get("metadata") or {}).get("name")
        return None, f"ignoring an unreadable {ANNOTATION} annotation on {name}: {str(raw)[:80]!r}"


def record_of(node: Mapping[str, Any]) -> SwitchRecord | None:
    """The record on a Node object; None when there is none or it is unreadable."""
    return read_record(node)[0]


def annotation_patch(record: SwitchRecord | None) -> dict:
    """The metadata fragment that writes (or, with None, removes) the record."""
    return {"metadata": {"annotations": {ANNOTATION: None if record is None else record.to_json()}}}


@dataclass(frozen=True, kw_only=True)
class Recovery:
    """How to finish or undo an interrupted switch, as data: the front end phrases the commands."""

    node: str
    target: str  # resume: switch to this again
    back: str  # go back: switch to this, overriding the unfinished switch
    resumable: bool = True  # False: set-mode would refuse the resume now (the operator's release serves no VM)

    @property
    def remedies(self) -> tuple[Remedy, ...]:
        """Resume (the same switch again, every option of the run kept) and go back (the other mode, `reverse`:
        exactly what lets a switch through while the other one's record is on the node); only go back when the
        resume would be refused."""
        back = Remedy("go back", Command.own("node", "set-mode", _short(self.back), self.node, again=True,
                                             reverse=True))
        if not self.resumable:
            return (back,)
        return (Remedy("resume", Command.own("node", "set-mode", _short(self.target), self.node, again=True)), back)


def switch_command(node: dict, mode: str) -> Command:
    """`node set-mode MODE NODE` as set-mode accepts it for this node now: with `reverse` when the node carries the
    record of an unfinished switch to the other mode (rblnctl.node.mode refuses the switch without it)."""
    name = str((node.get("metadata") or {}).get("name") or "")
    record = record_of(node)
    other = record is not None and record.target != mode
    return Command.own("node", "set-mode", _short(mode), name, reverse=other)


def _short(mode: str) -> str:
    """`vm` for vm-passthrough, as a command spells the mode (rblnctl.node.mode.short_mode, which imports this)."""
    return "vm" if mode == C.MODE_VM else mode
