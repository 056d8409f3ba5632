"""A node's switch history: the audit Events rblnctl wrote on it (rblnctl.audit) and its progress record.

Events expire: kube-apiserver deletes each one --event-ttl after it was written (1h unless the cluster sets
more), so the history reaches back that far. The progress record (rblnctl.node.record) stays on the node for as
long as a switch is unfinished, whatever its age: it still tells who started which switch, when, from and to,
and which step it reached.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field

from rblnctl import audit
from rblnctl import constants as C
from rblnctl.errors import NotFound
from rblnctl.kube import EVENTS_V1, NODES, Kube, validate_name
from rblnctl.kube.optional import OnForbidden, optional
from rblnctl.node.record import SwitchRecord, record_of

log = logging.getLogger(__name__)

IN_PROGRESS = "in-progress"  # the record is on the node: the switch is unfinished
UNKNOWN = "unknown"  # a start without an end, and no record: the run stopped without saying how it ended
SOURCE_EVENTS = "events"
SOURCE_RECORD = "record"


@dataclass(frozen=True, kw_only=True)
class HistoryEntry:
    """One run of set-mode or drain on the node."""

    run: str | None  # the run's id (its Events share it); None for a record with no Event left
    action: str  # C.AUDIT_SET_MODE or C.AUDIT_DRAIN
    user: str | None
    started: str  # RFC 3339
    finished: str | None
    from_mode: str | None
    to_mode: str | None
    result: str  # done, failed, interrupted, in-progress, unknown
    message: str  # the last Event's note (or what the record says)
    source: str  # events | record


@dataclass(frozen=True, kw_only=True)
class NodeHistory:
    """What `node history` shows: the runs, oldest first, and the record on the node."""

    node: str
    entries: list[HistoryEntry] = field(default_factory=list)
    record: SwitchRecord | None = None
    node_exists: bool = True
    events_read: bool = True  # False: the Events could not be listed (RBAC, no events.k8s.io API)
    notes: list[str] = field(default_factory=list)


RESULTS = (audit.DONE, audit.FAILED, audit.INTERRUPTED, IN_PROGRESS, UNKNOWN)


def _text(value: object) -> str | None:
    """A field of the audit annotation as text; None when it is missing, empty or not a string (an Event anyone with
    `create events` may write, claiming reportingController rblnctl: never trusted to hold the types rblnctl writes)."""
    return value if isinstance(value, str) and value else None


def _details(event: dict) -> dict | None:
    raw = ((event.get("metadata") or {}).get("annotations") or {}).get(C.AUDIT_ANNOTATION)
    try:
        data = json.loads(raw) if isinstance(raw, str) and raw else None
    except ValueError:
        return None
    return data if isinstance(data, dict) and _text(data.get("run")) else None


def _of_record(data: dict, record: SwitchRecord | None) -> bool:
    """Whether a set-mode run belongs to the switch the node's record is about (its runs share target and start)."""
    return record is not None and data.get("action") == C.AUDIT_SET_MODE and record.target == data.get("to") \
        and record.started == data.get("started")


def entries_from_events(events: list[dict], record: SwitchRecord | None) -> list[HistoryEntry]:
    """One entry per run among rblnctl's Events (by their audit annotation), judged with the node's record: a run
    that started and said nothing more is in progress while its switch's record is on the node (else its end is
    unknown); the last run of an unfinished switch says so in its message."""
    runs: dict[str, list[tuple[dict, dict]]] = {}
    for ev in events:
        data = _details(ev)
        if data is None or data.get("action") not in (C.AUDIT_SET_MODE, C.AUDIT_DRAIN):
            continue
        runs.setdefault(str(data["run"]), []).append((data, ev))
    out = []
    for run, items in runs.items():
        items.sort(key=lambda de: (de[0].get("result") != audit.STARTED, _text(de[1].get("eventTime")) or ""))
        data, last = items[-1]
        result = _text(data.get("result")) or UNKNOWN
        if result == audit.STARTED:
            result = IN_PROGRESS if _of_record(data, record) else UNKNOWN
        out.append(HistoryEntry(run=run, action=str(data.get("action")), user=_text(data.get("user")),
                                started=_text(data.get("started")) or _text(items[0][1].get("eventTime")) or "",
                                finished=_text(data.get("finished")), from_mode=_text(data.get("from")),
                                to_mode=_text(data.get("to")), result=result if result in RESULTS else UNKNOWN,
                                message=_text(last.get("note")) or "", source=SOURCE_EVENTS))
    return out


def read_history(kube: Kube, node: str) -> NodeHistory:
    """Read the node (its record) and rblnctl's Events about it: one GET and one LIST.

    NotFound when the node does not exist and no Event names it.
    """
    validate_name(node)
    node_obj = kube.get_optional(NODES, node)
    record = record_of(node_obj) if node_obj is not None else None
    notes: list[str] = []
    events: list[dict] = []
    read = optional(lambda: kube.list(EVENTS_V1, namespace=C.EVENT_NAMESPACE, field_selector=(
        f"regarding.kind=Node,regarding.name={node},reportingController={C.REPORTING_CONTROLLER}")),
        what="list events.k8s.io Events", on_forbidden=OnForbidden.UNKNOWN)
    events_read = read.known and not read.absent
    if not events_read:
        why = read.forbidden or f"events.k8s.io/v1 is not served in namespace {C.EVENT_NAMESPACE}"
        notes.append(f"the Events could not be read ({why}): only the node's record is shown")
    else:
        events = read.value
    if node_obj is None and not events:
        raise NotFound(f'nodes "{node}" not found')
    entries = entries_from_events(events, record)
    if record is not None:
        unfinished = (f"unfinished: the record on the node says it reached step {record.step}"
                      + (", cordoned by rblnctl" if record.cordoned_by_rblnctl else ""))
        ours = [i for i, e in enumerate(entries) if e.action == C.AUDIT_SET_MODE and e.to_mode == record.target
                and e.started == record.started]
        if ours:  # the switch's last run tells how it stopped; the record, that it is not over
            last = max(ours, key=lambda i: entries[i].finished or "~")
            e = entries[last]
            if e.result != audit.DONE:
                entries[last] = dataclasses.replace(e, message=f"{e.message}; {unfinished}")
        else:  # the switch left no Event (expired, not written, or by an rblnctl before them): the record alone
            entries.append(HistoryEntry(
                run=None, action=C.AUDIT_SET_MODE, user=record.by, started=record.started, finished=None,
                from_mode=record.from_mode or None, to_mode=record.target, result=IN_PROGRESS, message=unfinished,
                source=SOURCE_RECORD))
    entries.sort(key=lambda e: e.started)
    if node_obj is None:
        notes.append(f"node {node} no longer exists; its Events remain until they expire")
    return NodeHistory(node=node, entries=entries, record=record, node_exists=node_obj is not None,
                       events_read=events_read, notes=notes)
