"""The stopped mark of a VM rblnctl stops (C.VM_STOPPED_ANNOTATION) and the record of the template a VM left
(C.VM_TEMPLATE_LEFT_ANNOTATION): their values, what they say, and the JSON patch tests of a VM held stopped (pure).

The rule: docs/architecture.md, "VMs rblnctl stops". The writes are rblnctl.vm.attach.marker's (the mark) and
rblnctl.vm.attach.patcher's (the record, in the VM's NPU patch).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from datetime import UTC, datetime

from rblnctl import constants as C
from rblnctl.errors import Refused
from rblnctl.kube.lease import LockState, lease_state
from rblnctl.kubevirt.cr import value_tests
from rblnctl.vm.attach.model import RUN_STATE_SPEC
from rblnctl.vm.lifecycle import run_strategy


def stale_mark(vm: dict) -> str | None:
    """Why the VM's stopped-by-rblnctl mark is not rblnctl's to act on, or None: no mark, or one rblnctl may act on.

    The rule (docs/architecture.md, "VMs rblnctl stops"): the mark records what the VM was when rblnctl last knew
    it stopped by itself (mark_value): its uid, the generation its last VMI started from (status.observedGeneration,
    which virt-controller sets from every VMI it starts: kubevirt/kubevirt@v1.9.0 pkg/virt-controller/watch/vm/
    vm.go syncGenerationInfo), and its runStrategy. Not rblnctl's:
    - a mark set before a stop the run never saw land (MARK_STOPPING: the run was interrupted then; its stop, or
      someone else's later, stopped the VM: rblnctl cannot tell which);
    - another uid: the VM was deleted and re-created (a copy of the annotation is not rblnctl's);
    - another observedGeneration: a VMI was started since (its owner's `virtctl start`, then a stop): that holds for
      every runStrategy, Manual too, whose start and stop only write status.stateChangeRequests;
    - another runStrategy: its owner chose how it runs since (an edit to Manual, Always...);
    - a state change request pending (Manual, RerunOnFailure): someone is starting or stopping it now.
    An edit of the VM's spec (its memory) is none of these: the mark stands, and the printed re-run starts the VM.
    A mark of an older rblnctl (no uid) is judged by its generation: the VM's spec changed more often than one run
    changes it (started, stopped or edited by someone else) makes it stale.
    """
    meta = vm.get("metadata") or {}
    value = str((meta.get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION) or "")
    if _MARK_STOPPING.search(value):
        return (f"that was about to stop it ({value.split()[0]}), but that run was interrupted before it saw its stop "
                "land: whether its stop or someone else's stopped the VM, rblnctl cannot tell")
    when = value.split()[0] if value else ""
    evidence = dict(_MARK_FIELD.findall(value))
    if "uid" in evidence:
        status = vm.get("status") or {}
        if evidence["uid"] != str(meta.get("uid") or ""):
            return (f"that stopped a VM of this name ({when}), but this VM is another one (uid {meta.get('uid')}, "
                    f"not {evidence['uid']}): it was deleted and re-created since")
        observed = str(status.get("observedGeneration") if status.get("observedGeneration") is not None else "none")
        if observed not in evidence.get("observed", observed).split(","):
            return (f"that stopped it ({when}), but it was started since (its last VMI ran generation {observed}, "
                    f"not {evidence['observed'].replace(',', ' or ')}) and stopped again: by someone else")
        if evidence.get("run", run_strategy(vm)) != run_strategy(vm):
            return (f"that stopped it ({when}), but its runStrategy was changed since ({evidence['run']} -> "
                    f"{run_strategy(vm)}): by someone else")
        # a Start request pending: someone is starting it (a Stop request virt-controller has not cleared yet, left
        # by a stop whose VMI is gone, changes nothing: v1.9.0 vm.go isTrimFirstChangeRequestNeeded)
        if any(isinstance(r, dict) and r.get("action") == "Start" for r in status.get("stateChangeRequests") or []):
            return f"that stopped it ({when}), but someone asked to start it since (a Start request is pending)"
        return None
    marked = _MARK_GENERATION.search(value)
    if not marked or meta.get("generation") is None:
        return None
    then, now = int(marked.group(1)), int(meta["generation"])
    if now <= then + C.VM_STOPPED_MARK_WRITES:
        return None
    return (f"that stopped it, but its spec changed {now - then} times since ({when}; generation "
            f"{then} -> {now}, one run makes at most {C.VM_STOPPED_MARK_WRITES}): someone started, stopped or edited "
            "it since")


MARK_STOPPING = "stopping"  # the mark's state before the stop is seen to land
MARK_STOPPED = "stopped"


def mark_value(when: str, vm: dict | None = None, *, stopping: bool = False, generation: int | None = None,
               holder: str | None = None, lease_s: int | None = None) -> str:
    """The stopped mark's value: the time, then what the VM was as rblnctl set it (stale_mark() compares it with the
    VM later): `uid=`, `generation=`, `observed=` (status.observedGeneration: the generation its last VMI started
    from, `none` before any), `run=` (its runStrategy); while a run holds it, `holder=` (that run) and `lease=` (the
    seconds from the time it counts as live: mark_holder); and, set before the stop until rblnctl sees its stop land,
    the word `stopping`. Without `vm`, the older form: the time and `generation`."""
    if vm is None:
        value = when if generation is None else f"{when} generation={generation}"
    else:
        meta, status = vm.get("metadata") or {}, vm.get("status") or {}
        # observedGeneration is final once the VMI is gone; while one may be there (status.created), virt-controller
        # may still move it to the VM's generation (kubevirt/kubevirt@v1.9.0 pkg/virt-controller/watch/vm/vm.go: the
        # VMI's generation annotation follows a change that leaves the template alone, measured after a stop's
        # runStrategy flip), so both are recorded
        seen = [status.get("observedGeneration")]
        if status.get("created") and meta.get("generation") is not None:
            seen.append(meta.get("generation"))
        observed = ",".join(dict.fromkeys("none" if g is None else str(g) for g in seen))
        run = run_strategy(vm)
        if stopping and run in ("Always", "Once"):  # set before the stop: as virt-api's stop leaves it (Halted)
            run = "Halted"
        value = (f"{when} uid={meta.get('uid')} generation={meta.get('generation')} "
                 f"observed={observed} run={run}")
    if holder is not None:
        value += f" holder={holder} lease={int(lease_s or 0)}"
    return f"{value} {C.VM_STOPPED_MARK_STOPPING}" if stopping else value


_MARK_GENERATION = re.compile(r"\bgeneration=(\d+)\b")
_MARK_FIELD = re.compile(r"\b(uid|observed|run)=(\S+)")
_MARK_STOPPING = re.compile(rf"\b{C.VM_STOPPED_MARK_STOPPING}\b")
_MARK_HOLDER = re.compile(r" holder=(\S+) lease=(\d+)")


def run_identity() -> str:
    """This run as its mark names it: `rblnctl@HOST/PID/RANDOM` (no spaces; a second run of the same process, as a
    test runs them, is another holder)."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:63] or "host"
    return f"rblnctl@{host}/{os.getpid()}/{secrets.token_hex(4)}"


def mark_holder(vm: dict, now: datetime) -> LockState | None:
    """The run holding the VM's stopped mark, as a lease (rblnctl.kube.lease, the node lock's too: holder, last
    renewal = the mark's time, duration = its `lease=`, expired); None: no mark, or one no run holds (released, or of
    an older rblnctl)."""
    value = str(((vm.get("metadata") or {}).get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION) or "")
    found = _MARK_HOLDER.search(value)
    if not found:
        return None
    try:
        renewed: datetime | None = datetime.strptime(value.split()[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        renewed = None
    return lease_state(found.group(1), renewed, int(found.group(2)), now)


def released(value: str) -> str:
    """The mark's value with no holder: what a run leaves when it stops holding the VM (the evidence kept)."""
    return _MARK_HOLDER.sub("", value)


class MarkHeld(Refused):
    """Another rblnctl run holds the VM's stopped mark (live: it is stopping, changing or starting the VM now)."""


class StartedMeanwhile(Refused):
    """Someone else started the VM rblnctl held stopped, before its NPU patch: nothing was written. Or started a VM
    read as stopped as its patch landed, and it runs without the change (in its spec: a restart applies it)."""


_LEFT = re.compile(r"(\S+) uid=(\S+)")


def template_left(vm: dict) -> tuple[str, str] | None:
    """(name, uid) of the template the VM's last NPU patch moved it off (C.VM_TEMPLATE_LEFT_ANNOTATION), if any."""
    found = _LEFT.fullmatch(str(((vm.get("metadata") or {}).get("annotations") or {}).get(
        C.VM_TEMPLATE_LEFT_ANNOTATION) or ""))
    return (found.group(1), found.group(2)) if found else None


def left_ops(vm: dict, left: str | None) -> list[dict]:
    """The NPU patch's ops on C.VM_TEMPLATE_LEFT_ANNOTATION: record the template the VM leaves, or drop an old one."""
    annotations = (vm.get("metadata") or {}).get("annotations")
    key = "/metadata/annotations/" + C.VM_TEMPLATE_LEFT_ANNOTATION.replace("~", "~0").replace("/", "~1")
    have = (annotations or {}).get(C.VM_TEMPLATE_LEFT_ANNOTATION)
    if left is None:  # tested first: one removed meanwhile is a failed test (re-read, re-planned), not a 422 remove
        return [{"op": "test", "path": key, "value": have}, {"op": "remove", "path": key}] if have is not None else []
    if annotations is None:  # the whole map, only while there is none (one added meanwhile fails the test: re-read)
        return [{"op": "test", "path": "/metadata/annotations", "value": None},
                {"op": "add", "path": "/metadata/annotations", "value": {C.VM_TEMPLATE_LEFT_ANNOTATION: left}}]
    return [{"op": "add", "path": key, "value": left}]



def mark_key() -> str:
    """The JSON pointer of the stopped mark's annotation."""
    return "/metadata/annotations/" + C.VM_STOPPED_ANNOTATION.replace("~", "~0").replace("/", "~1")


def held_guards(vm: dict) -> list[dict]:
    """JSON patch tests of what an owner's start or another run changes on a VM rblnctl holds stopped: the spec
    members of RUN_STATE (virt-api's start flips spec.runStrategy or spec.running; a test of null passes on a member
    the VM lacks: kubevirt.cr.value_tests) and the stopped mark as read (another run taking it over rewrites it)."""
    mark = ((vm.get("metadata") or {}).get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION)
    return [*value_tests(vm, RUN_STATE_SPEC), {"op": "test", "path": mark_key(), "value": mark}]


def marked_stopping(value: str) -> bool:
    """Whether a mark's value is one set before its stop was seen to land (MARK_STOPPING)."""
    return bool(_MARK_STOPPING.search(value))
