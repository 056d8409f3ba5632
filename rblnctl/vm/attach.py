"""Give a VirtualMachine's template N NPUs, or take them away: plan() reads, apply() writes conflict-safely.

Declarative: `npus` is how many NPUs the VM should have, so a re-run is a no-op and another N adds or
removes the difference. Host devices that are not NPUs, and claims that are not rblnctl's, are kept.

- sandbox: hostDevices `npu0..` with `deviceName` the resource the sandbox device plugin advertises
  on vm-mode nodes;
- DRA: rblnctl's `resourceClaims` entry `rbln-npu` names the ResourceClaimTemplate `rbln-npu-<N>`
  (created when missing, shared by the namespace's VMs), and hostDevices `npu0..` carry
  `claimName: rbln-npu`, `requestName: npu<i>` (one device per request: see rblnctl.vm.devices).

Re-expressing a VM's NPUs with the other method (what `policy set-method --convert-vms` needs, per VM):
`AttachPlanner(kube=..., options=AttachOptions(method=M, convert=True)).plan(name, namespace)`; with
`npus=None` the VM keeps its count. One planner reads the cluster once for every VM it plans.

The VM write is a JSON patch whose `test` ops guard exactly the lists the change was decided on (a concurrent edit
of them: 422, re-read, re-plan, retry, bounded; virt-controller's own writes of the VM never conflict with it); a
lost reply is settled by reading the VM back. A running VM is refused unless `restart`: stop through virt-api,
patch, start, wait until Ready (the stopped mark: apply()); or `next_restart`: patch its template only, the VM
keeps running, and the change applies at its next restart (rblnctl.vm.pending).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock, iso_utc
from rblnctl.errors import (
    ClusterError,
    Conflict,
    InvalidInput,
    NotFound,
    OutcomeUnknown,
    RblnError,
    Refused,
    Replaced,
    WaitTimeout,
    one_line,
)
from rblnctl.kube import RESOURCE_CLAIM_TEMPLATES, VMIS, VMS, Kube, validate_name, writes
from rblnctl.kubevirt.cr import identity_test, is_conflict, value_tests
from rblnctl.kube.lease import LockState, lease_state
from rblnctl.plan import Advice, Blocker
from rblnctl.remedy import Command, Remedy
from rblnctl.vm import devices as D
from rblnctl.vm import pending as P
from rblnctl.vm.cluster import (
    Check,
    ClaimIndex,
    VmCluster,
    check_advertised,
    check_device_class,
    check_gates,
    check_permitted,
    check_slices,
    choose_method,
    claim_index,
    pick_resource,
    product_missing,
    read_cluster,
    with_dra,
)
from rblnctl.vm.fit import FitOptions, FitReader, VmFit
from rblnctl.vm.model import NpuDevice, VmBlocker, VmNpus, VmRef, npu_choice
from rblnctl.vm.placement import placement_of
from rblnctl.vm.lifecycle import (
    FINAL_PHASES,
    MANUAL_RECOVERY,
    START,
    STOP,
    VmLifecycle,
    needs_manual_recovery,
    replaced,
    run_strategy,
)

log = logging.getLogger(__name__)

ATTACH = "attach"
# What a stopped VM's NPU patch tests besides its lists (rblnctl/kubevirt/cr.py value_tests): how it runs, and what a
# start changes first. virt-api's start sets spec.runStrategy Always (Halted VMs) or, for Manual and RerunOnFailure,
# appends a Start request to status.stateChangeRequests; virt-controller then sets status.created once the VMI exists
# (kubevirt/kubevirt@v1.9.0 pkg/virt-api/rest/lifecycle.go StartVMRequestHandler, pkg/virt-controller/watch/vm/
# vm.go). A JSON patch's tests see the whole object, status included (kube-apiserver applies it to the stored one).
RUNS = ("Always", "RerunOnFailure", "Once")  # run strategies virt-controller starts a stopped VM for
# What an owner's start changes on a stopped VM: its runStrategy (Halted -> Always), `running`, or a Start request
# (Manual). Not status.created: virt-controller's own observation, which lags a stop just made (a 422 and a retry on
# every attach right after `vm stop --wait`, seen on real KubeVirt v1.9.0) and follows the three above anyway.
RUN_STATE = (("spec", "runStrategy"), ("spec", "running"), ("status", "stateChangeRequests"))
_RUN_STATE_PATHS = frozenset("/" + "/".join(p) for p in RUN_STATE)


def _of_run_state(path: str) -> bool:
    """Whether a `test` at `path` is one of value_tests(vm, RUN_STATE)'s (a member, or its first missing parent)."""
    return any(p == path or p.startswith(path + "/") for p in _RUN_STATE_PATHS)


DETACH = "detach"
RETRY_BACKOFF_S = 0.2  # first wait after a conflict; doubles


def _noop(*_: Any) -> None:
    return None


def virtctl_start(ref: VmRef) -> str:
    """The command that starts a VM rblnctl left stopped, as every message and the document's startCommand spell it."""
    return f"virtctl start {ref.name} -n {ref.namespace}"


# -- options ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WriteOptions:
    """How a VM change is written: restart a running VM, server dry run, retries, the wait for Ready."""

    restart: bool = False  # a running VM: stop it, patch, start it, wait until Ready
    next_restart: bool = False  # a running VM: patch its template only; the change applies when it next restarts
    server_dry_run: bool = False  # send every write with dryRun=All; nothing persists, nothing is waited for
    max_attempts: int = 5  # VM patches sent before giving up on a VM that keeps changing
    ready_timeout_s: float = C.VM_READY_TIMEOUT_S
    poll_s: float = C.VM_POLL_S

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidInput("max_attempts must be at least 1")
        if self.ready_timeout_s <= 0 or self.poll_s <= 0:
            raise InvalidInput("timeouts and poll intervals must be above 0 seconds")
        if self.restart and self.next_restart:
            raise InvalidInput("a change cannot both restart the VM now and wait for its next restart")


@dataclass(frozen=True, kw_only=True)
class AttachOptions(WriteOptions):
    """What NPUs a VM should have."""

    npus: int | None = None  # how many; None: as many as it has now (1 when it has none)
    method: str | None = None  # sandbox | dra; None: the policy's, else the VM's own, else sandbox
    resource: str | None = None  # sandbox: the resource (rebellions.ai/RBLN-CA22_PF); None: picked
    product: str | None = None  # sandbox: pick the resource of this product card (RBLN-CA22)
    convert: bool = False  # rewrite the NPUs the VM has through the other method
    force: bool = False  # restart a running VM onto more NPUs than any node it may run on offers (it cannot start)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.npus is not None and not 0 <= self.npus <= C.MAX_VM_NPUS:
            raise InvalidInput(f"the number of NPUs must be 0 to {C.MAX_VM_NPUS}, not {self.npus}")
        object.__setattr__(self, "resource", npu_choice(self.method, self.resource, self.product))


@dataclass(frozen=True, kw_only=True)
class DetachOptions(WriteOptions):
    """Which NPUs to take from a VM."""

    device: str | None = None  # one host device by name (npu1); None: every NPU


@dataclass(frozen=True, kw_only=True)
class VmEvents:
    """Progress of an apply; every callback defaults to doing nothing."""

    on_step: Callable[[str], None] = _noop  # a step starts (stop, create, patch, delete, start, wait)
    on_retry: Callable[[int, str], None] = _noop  # a patch conflicted (attempt, why); re-read and re-planned


# -- plans --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Target:
    """What a plan makes true of the VM's spec; kept so a conflict re-plans the same change."""

    action: str  # attach | detach
    method: str | None
    npus: int
    resource: str | None = None  # sandbox
    device_class: str | None = None  # dra
    convert: bool = False
    remove: tuple[str, ...] = ()  # detach: host devices to remove
    npu_claims: tuple[str, ...] = ()  # resourceClaims entries (not rblnctl's) judged to be NPU claims
    claim: str = C.VM_DRA_CLAIM  # rblnctl's pod-level claim name for this VM (rblnctl.vm.devices.claim_name)


@dataclass(frozen=True, kw_only=True)
class VmNpuPlan:
    """What a change of a VM's NPUs would write; `noop` when the VM already has them.

    The VM write is `patch` (a JSON patch guarded by `test` ops on the lists read). DRA adds the template to
    create first (`template_create`) and the rblnctl templates to delete after (`templates_delete`:
    made by rblnctl and used by no other VM or VMI of the namespace); `templates_kept` says which
    stay and why.
    """

    vm: VmRef
    target: Target
    method: str | None  # after the change (None: no NPU)
    resource: str | None
    device_class: str | None
    npus_before: int
    npus_after: int
    devices_before: list[NpuDevice]
    devices_after: list[NpuDevice]
    host_devices_before: list[dict]
    host_devices_after: list[dict]
    resource_claims_before: list[dict]
    resource_claims_after: list[dict]
    added: list[str]  # host devices added (names)
    removed: list[str]  # host devices removed (names)
    template: str | None  # the ResourceClaimTemplate rblnctl's claim names after the change
    template_create: dict | None
    templates_delete: list[str]
    templates_kept: list[str]
    running: bool  # a VMI runs (or is starting): the change needs a restart to take effect
    node: str | None  # where the VMI runs
    restart: bool  # apply() stops and starts the VM
    patch: list[dict] | None  # the guarded JSON patch of the VM (devices.guarded_patch)
    noop: bool
    start: bool = False  # rblnctl stopped this VM in an earlier run and did not start it again: apply() starts it
    warnings: list[str | Advice | Remedy] = field(default_factory=list)  # a Remedy: names the command fixing it
    blockers: list[Blocker] = field(default_factory=list)
    generation: int | None = None  # the VM's metadata.generation as read: what the stopped mark records
    stale_mark: bool = False  # the VM carries a stopped mark someone else's start or stop made stale: apply() clears it
    next_restart: bool = False  # a running VM's template is changed, it keeps running: the change waits for a restart
    running_npus: int | None = None  # the NPUs its running VMI passes (None: no running VMI)
    uid: str | None = None  # the VM's metadata.uid as read: every write of apply() tests it (Replaced otherwise)
    run_strategy: str | None = None  # its runStrategy as read: a VM planned stopped is patched only while it stays so
    template_left: str | None = None  # the patch's record of the template it moves the VM off (VM_TEMPLATE_LEFT_...)


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
    """Someone else started the VM rblnctl held stopped, before its NPU patch: nothing was written."""


_LEFT = re.compile(r"(\S+) uid=(\S+)")


def template_left(vm: dict) -> tuple[str, str] | None:
    """(name, uid) of the template the VM's last NPU patch moved it off (C.VM_TEMPLATE_LEFT_ANNOTATION), if any."""
    found = _LEFT.fullmatch(str(((vm.get("metadata") or {}).get("annotations") or {}).get(
        C.VM_TEMPLATE_LEFT_ANNOTATION) or ""))
    return (found.group(1), found.group(2)) if found else None


def _left_ops(vm: dict, left: str | None) -> list[dict]:
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


def _held_guards(vm: dict) -> list[dict]:
    """JSON patch tests of what an owner's start or another run changes on a VM rblnctl holds stopped: spec.runStrategy
    and spec.running (virt-api's start flips them; a test of null passes on a member the VM lacks: devices.
    guarded_patch) and the stopped mark as read (another run taking it over rewrites it)."""
    spec = vm.get("spec") or {}
    key = "/metadata/annotations/" + C.VM_STOPPED_ANNOTATION.replace("~", "~0").replace("/", "~1")
    mark = ((vm.get("metadata") or {}).get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION)
    return [{"op": "test", "path": "/spec/runStrategy", "value": spec.get("runStrategy")},
            {"op": "test", "path": "/spec/running", "value": spec.get("running")},
            {"op": "test", "path": key, "value": mark}]


@dataclass(kw_only=True)
class _Restart:
    """How far apply() got with a VM it stops and starts (what a failure or an interruption must undo)."""

    ours: bool = False  # rblnctl stopped this VM (its stop landed, or an earlier run's mark says so)
    confirmed: bool = False  # the mark on the VM says "stopped" (not "stopping")
    marked: bool = False  # this run may have set the mark (sent before the stop)
    changed: bool = False  # the VM patch went through
    started: bool = False  # rblnctl's start went through (or the VM was found starting)
    not_restarted: str | None = None  # why the planned restart was not made


@dataclass(frozen=True, kw_only=True)
class VmNpuResult:
    """What apply() did."""

    plan: VmNpuPlan  # after conflicts, the re-plan finally written (or found done)
    changed: bool  # the VM patch went through (server dry run: was validated)
    attempts: int  # VM patches sent
    template_created: str | None = None
    templates_deleted: list[str] = field(default_factory=list)
    templates_kept: list[str] = field(default_factory=list)
    restarted: bool = False
    ready: bool | None = None  # after a restart: the VM came back Ready (None: no restart)
    server_dry_run: bool = False
    left_stopped: bool = False  # rblnctl stopped the VM and could not start it again (start_command says how)
    start_command: str | None = None  # how to start it, when left_stopped
    not_restarted: str | None = None  # the planned restart was not made: someone else stopped the VM first
    started_by_others: bool = False  # ...or someone else started it after rblnctl's stop: it runs (or is starting)


# -- the spec change (pure) -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Layout:
    host_devices: list[dict]
    claims: list[dict]
    added: list[str]
    removed: list[str]
    template: str | None
    warnings: list[str]
    blockers: list[Blocker]


def _relayout(spec: dict, have: VmNpus, *, drop: set[str], managed: list[str], new_sandbox: list[dict],
              dra_npus: int | None, claim: str) -> tuple[list[dict], list[dict], str | None]:
    """Apply a change to the spec's lists: drop names, renumber rblnctl's DRA devices (`managed`, in order:
    requests npu0..), append new sandbox entries, and point rblnctl's claim at rbln-npu-<count>.

    rblnctl's claim entry is named `claim` (the VM's own name, rblnctl.vm.devices.claim_name): an entry
    written under another name (the old fixed rbln-npu, or a VM copied from another) is renamed, and its
    host devices follow.
    """
    index = {name: i for i, name in enumerate(managed)}
    devices = []
    for d in D.host_devices(spec):
        name = str(d.get("name") or "")
        if name in drop:
            continue
        devices.append(D.dra_device(name, index[name], d, claim=claim) if name in index else d)
    present = {str(d.get("name")) for d in devices}
    devices += [D.dra_device(n, index[n], claim=claim) for n in managed if n not in present]
    devices += new_sandbox
    count = len(managed) if dra_npus is None else dra_npus
    template = D.template_name(count) if count else None
    referenced = {str(d.get("claimName")) for d in devices if d.get("claimName")}
    referenced |= {str(g.get("claimName")) for g in ((spec.get("domain") or {}).get("devices") or {}).get("gpus") or []
                   if isinstance(g, dict) and g.get("claimName")}
    npu_claims = {d.claim for d in have.dra}
    claims = []
    seen_managed = False
    for c in D.resource_claims(spec):
        name = str(c.get("name") or "")
        if D.is_managed_claim(c) and name not in referenced - {claim}:
            if template and not seen_managed:
                want = D.claim_entry(template, claim=claim)
                claims.append(c if c == want else want)
            seen_managed = True
        elif name in npu_claims and name not in referenced:
            continue  # an NPU claim no host device uses any more
        else:
            claims.append(c)
    if template and not seen_managed:
        claims.append(D.claim_entry(template, claim=claim))
    return devices, claims, template


def express(spec: dict, have: VmNpus, target: Target) -> _Layout:
    """The spec lists that give the VM `target.npus` NPUs of `target.method` (pure)."""
    warnings: list[str] = []
    blockers: list[Blocker] = []
    drop: set[str] = set()
    other = have.dra if target.method == C.METHOD_SANDBOX else have.sandbox
    other_method = C.METHOD_DRA if target.method == C.METHOD_SANDBOX else C.METHOD_SANDBOX
    if other:
        names = ", ".join(d.name for d in other)
        if target.convert:
            drop |= {d.name for d in other}
            warnings.append(f"rewriting {len(other)} NPU(s) the VM gets through {other_method} ({names}) as "
                            f"{target.method}")
        else:
            blockers.append(VmBlocker(f"the VM gets {len(other)} NPU(s) through {other_method} ({names}), not "
                                      f"{target.method}: rewriting them changes how the VM gets its NPUs",
                                      override="convert"))
    managed: list[str] = []
    new_sandbox: list[dict] = []
    if target.method == C.METHOD_SANDBOX:
        keep = [d for d in have.sandbox if d.resource == target.resource][: target.npus]
        replaced = [d for d in have.sandbox if d.resource != target.resource]
        if replaced and target.npus:
            old = ", ".join(dict.fromkeys(str(d.resource) for d in replaced))
            warnings.append(f"replacing {len(replaced)} NPU(s) of {old} with {target.resource}")
        drop |= {d.name for d in have.sandbox if d not in keep}
        used = [str(d.get("name")) for d in D.host_devices(spec) if str(d.get("name")) not in drop]
        new = D.free_names(used, target.npus - len(keep))
        new_sandbox = [D.sandbox_device(n, str(target.resource)) for n in new]
        managed = [] if target.convert or not have.dra else [d.name for d in have.dra if d.managed]
        dra_npus = None
    else:
        mine = [d for d in have.dra if d.managed]
        foreign = [d for d in have.dra if not d.managed]
        if foreign:
            warnings.append(f"kept: {len(foreign)} NPU(s) through claims rblnctl does not manage "
                            f"({', '.join(sorted({str(d.claim) for d in foreign}))}); the VM gets them on top of "
                            f"the {target.npus} in {target.claim}")
        keep = mine[: target.npus]
        drop |= {d.name for d in mine[target.npus:]}
        used = [str(d.get("name")) for d in D.host_devices(spec) if str(d.get("name")) not in drop]
        new = D.free_names(used, target.npus - len(keep))
        managed = [d.name for d in keep] + new
        dra_npus = target.npus
    devices, claims, template = _relayout(spec, have, drop=drop, managed=managed, new_sandbox=new_sandbox,
                                          dra_npus=dra_npus, claim=target.claim)
    before = [str(d.get("name")) for d in D.host_devices(spec)]
    return _Layout(host_devices=devices, claims=claims, added=new,
                   removed=[n for n in before if n in drop], template=template, warnings=warnings, blockers=blockers)


def remove(spec: dict, have: VmNpus, names: Iterable[str], *, claim: str) -> _Layout:
    """The spec lists without the named NPU host devices; rblnctl's remaining DRA devices renumbered (pure)."""
    drop = set(names)
    managed = [d.name for d in have.dra if d.managed and d.name not in drop]
    devices, claims, template = _relayout(spec, have, drop=drop, managed=managed, new_sandbox=[], dra_npus=None,
                                          claim=claim)
    before = [str(d.get("name")) for d in D.host_devices(spec)]
    return _Layout(host_devices=devices, claims=claims, added=[], removed=[n for n in before if n in drop],
                   template=template, warnings=[], blockers=[])


def is_running(vmi: dict | None) -> bool:
    """A VMI exists and has not finished: the VM's spec changes only take effect after a restart."""
    return vmi is not None and (vmi.get("status") or {}).get("phase") not in FINAL_PHASES


def layout_for(vm: dict, target: Target) -> _Layout:
    """The change `target` asks of this VM object (pure)."""
    spec = D.vm_spec(vm)
    have = D.npus_of(spec, npu_claim=lambda e: e.get("name") in target.npu_claims)
    if target.action == DETACH:
        return remove(spec, have, target.remove, claim=target.claim)
    return express(spec, have, target)


# -- the planner ------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class AttachPlanner:
    """Plan and apply a change of a VM's NPUs; reads the cluster once per planner (reuse it across VMs)."""

    kube: Kube
    options: AttachOptions = AttachOptions()
    events: VmEvents = VmEvents()
    clock: Clock = SYSTEM_CLOCK
    cluster: VmCluster | None = None  # facts read on first use (or handed in)
    recovery: list[str] = field(default_factory=list)  # after apply() failed or was interrupted: what it left
    left_stopped: bool = False  # ...and the VM is left stopped by rblnctl, carrying its mark: a re-run starts it
    interrupted: VmNpuResult | None = None  # after apply() was interrupted (Ctrl-C, a signal): what it had done
    identity: str = field(default_factory=run_identity)  # the holder this run's stopped marks name (mark_holder)
    # what the caller's decision rests on beyond the VM, checked before the template create and each VM patch: it
    # raises to stop the change (policy set-method: the policy still selects the method converted to)
    guard: Callable[[], None] | None = None
    _claims: ClaimIndex | None = None
    _fits: FitReader | None = None

    # -- reading -----------------------------------------------------------------------------------------

    def facts(self, *, dra: bool = False) -> VmCluster:
        """The cluster facts (read once; DRA facts added when first needed)."""
        if self.cluster is None:
            self.cluster = read_cluster(self.kube)
        if dra and self.cluster.dra is None:
            self.cluster = with_dra(self.kube, self.cluster)
        return self.cluster

    def _claim_index(self) -> ClaimIndex:
        if self._claims is None:
            self._claims = claim_index(self.kube, self.facts())
        return self._claims

    def _read(self, name: str, namespace: str) -> tuple[dict, dict | None]:
        validate_name(name, kind="VirtualMachine")
        vm = self.kube.get_optional(VMS, name, namespace=namespace)
        if vm is None:
            from rblnctl.vm.where import not_found

            raise not_found(self.kube, name, namespace)
        return vm, self.kube.get_optional(VMIS, name, namespace=namespace)

    def _npus(self, vm: dict) -> tuple[VmNpus, tuple[str, ...]]:
        """The VM's NPUs, and the names of its claim entries (not rblnctl's) that ask for NPUs."""
        ns = vm["metadata"].get("namespace", "")
        spec = D.vm_spec(vm)
        entries = [c for c in D.resource_claims(spec) if not D.is_managed_claim(c)]
        index = self._claim_index() if entries else None
        npu_claims = tuple(str(c.get("name")) for c in entries if index is not None and index.is_npu(ns, c))
        return D.npus_of(spec, npu_claim=lambda e: e.get("name") in npu_claims), npu_claims

    def template_users(self, namespace: str, template: str, *, exclude: str, vm_too: bool = False) -> list[str]:
        """VMs and unfinished VMIs of the namespace (other than `exclude`; `vm_too`: the VirtualMachine `exclude`
        counts too, its VMI not) whose specs name `template`."""
        users = []
        for vm in self.kube.iter_list(VMS, namespace=namespace):
            name = vm["metadata"]["name"]
            if (name != exclude or vm_too) and template in D.templates_used(D.vm_spec(vm)):
                users.append(f"VirtualMachine {name}")
        for vmi in self.kube.iter_list(VMIS, namespace=namespace):
            name = vmi["metadata"]["name"]
            if name != exclude and is_running(vmi) and template in D.templates_used(D.vmi_spec(vmi)):
                users.append(f"VirtualMachineInstance {name}")
        return sorted(set(users))

    def unused_templates(self, namespace: str, *, keep: Iterable[str | None] = ()) -> list[str]:
        """rblnctl's ResourceClaimTemplates of the namespace (labelled managed-by=rblnctl) that no VM and no unfinished
        VMI names, but those in `keep`: what a run interrupted between its VM patch and its template delete left (a
        re-run deletes them: `_delete_templates` checks again just before, with the uid as a precondition). One
        LIST each of templates, VMs and VMIs; none when the DRA API is not served."""
        from rblnctl.kube.optional import OnForbidden, optional

        selector = f"{C.MANAGED_BY_LABEL}={C.MANAGED_BY}"
        # a note, not a step of the change: not served (404) or refused by RBAC (403), there is nothing to name
        mine = optional(lambda: list(self.kube.iter_list(RESOURCE_CLAIM_TEMPLATES, namespace=namespace,
                                                         label_selector=selector)),
                        what=f"list ResourceClaimTemplates in namespace {namespace}", absent=[],
                        on_forbidden=OnForbidden.UNKNOWN).value or []
        names = sorted({str(t["metadata"]["name"]) for t in mine if D.is_managed(t)} - {k for k in keep if k})
        if not names:
            return []
        used: set[str] = set()
        for vm in self.kube.iter_list(VMS, namespace=namespace):
            used |= D.templates_used(D.vm_spec(vm))
        for vmi in self.kube.iter_list(VMIS, namespace=namespace):
            if is_running(vmi):
                used |= D.templates_used(D.vmi_spec(vmi))
        return [n for n in names if n not in used]

    def _unused_notes(self, namespace: str, keep: set[str | None]) -> list[str]:
        """A note per rblnctl template of the namespace no VM or VMI names (unused_templates), with the command that
        deletes it. Not deleted here: a template another rblnctl run has just created for a VM it is about to patch
        looks the same until that patch lands (the explorer's vm-attach-dra second-opposite at after-01), and rblnctl
        holds no lock that would tell the two apart."""
        return [f"ResourceClaimTemplate {namespace}/{n} is rblnctl's and no VM or VMI of the namespace names it (an "
                f"interrupted rblnctl run left it): unless an rblnctl run is changing a VM of {namespace} now, "
                f"`kubectl delete resourceclaimtemplate {n} -n {namespace}` deletes it"
                for n in self.unused_templates(namespace, keep=keep)]

    # -- planning ----------------------------------------------------------------------------------------

    def plan(self, name: str, namespace: str, *, uid: str | None = None, while_: str = "planned its change"
             ) -> VmNpuPlan:
        """Read the VM and the cluster, resolve method, count and resource, and plan the change (reads only).

        `uid`: the VM the caller decided on (policy set-method read it earlier): a VM of that name with another uid
        raises Replaced ("... while rblnctl {while_}"), nothing planned for it. Raises NotFound (no such VM),
        Ambiguous (several resources could be meant: the caller must name one) and InvalidInput. Everything else that
        stops the change is a blocker on the plan.
        """
        vm, vmi = self._read(name, namespace)
        if uid is not None and (vm.get("metadata") or {}).get("uid") != uid:
            raise replaced(_ref(vm), while_)
        have, npu_claims = self._npus(vm)
        o = self.options
        current = have.method if have.method in C.METHODS else None
        method, chosen = choose_method(o.method, self.facts(), current)
        warnings: list[str | Remedy] = list(chosen)
        cluster = self.facts(dra=method == C.METHOD_DRA)
        npus = o.npus if o.npus is not None else (have.count or 1)
        resource = None
        if method == C.METHOD_SANDBOX and npus:
            resource = pick_resource(cluster, resource=o.resource, product=o.product, current=have.resources)
            if resource is None:  # nothing to name: refuse with what the cluster offers
                missing = check_advertised(cluster, None)
                if o.product and missing.ok is False and cluster.vm_nodes:
                    # what the nodes have, not "advertises nothing ... (advertised: X)", which contradicted itself
                    missing = dataclasses.replace(missing, evidence=(product_missing(cluster, o.product),))
                return self._refusal(vm, vmi, have, method, npus, [missing], warnings)
        target = Target(action=ATTACH, method=method, npus=npus, resource=resource,
                        device_class=cluster.device_class if method == C.METHOD_DRA else None, convert=o.convert,
                        npu_claims=npu_claims, claim=D.claim_name(namespace, name))
        checks = self._checks(cluster, method, resource) if npus else []
        never: VmFit | None = None
        if npus:
            fit_warnings, never = self._fit_warnings(vm, vmi, method, resource, npus)
            warnings += fit_warnings
        plan = self._plan(vm, vmi, target, checks=checks, warnings=warnings + list(cluster.notes))
        return self._never_runs(plan, never)

    def _never_runs(self, plan: VmNpuPlan, never: VmFit | None) -> VmNpuPlan:
        """A restart onto more NPUs than any node the VM may run on has at all (free or not) stops a running VM that
        can never start again: refused unless forced (the verdict the question would hide), with the count that fits."""
        most = never.most if never is not None else None
        if not plan.restart or never is None or most is None:
            return plan
        warning = never.warning()
        if self.options.force:
            return dataclasses.replace(plan, warnings=[*plan.warnings, f"restarting VM {plan.vm} anyway (forced): "
                                                       "it will not start again until a node offers that many"])
        ref = plan.vm
        blocker = VmBlocker(
            f"{warning}: restarting stops VM {ref}, which runs now, and it could not start again", override="force",
            remedy=Remedy(f"ask for at most {most[0]} NPU(s)", Command.own(
                "vm", "attach", ref.name, namespace=ref.namespace, npus=str(most[0]), restart=True)))
        return dataclasses.replace(plan, warnings=[w for w in plan.warnings if str(w) != warning],
                                   blockers=[*plan.blockers, blocker])

    def _fit_warnings(self, vm: dict, vmi: dict | None, method: str, resource: str | None, npus: int
                      ) -> tuple[list[str | Remedy], VmFit | None]:
        """The warning when the VM, once changed, would not be scheduled now (rblnctl.vm.fit, the computation `vm
        fit` and `vm manifest` use): its own virt-launcher's NPUs count as free (a restart gives them back). And,
        for a resource container-mode nodes advertise too (VmFit.shared_with), that the scheduler may put it there.
        Second: the fit when no node the VM may run on has that many NPUs at all (VmFit.never), else None."""
        if method == C.METHOD_SANDBOX and not resource:
            return [], None
        if self._fits is None or self._fits.cluster is not self.cluster:
            self._fits = FitReader(kube=self.kube, cluster=self.facts(dra=method == C.METHOD_DRA))
        own = str(((vmi or {}).get("metadata") or {}).get("uid") or "") if is_running(vmi) else ""
        fit = self._fits.fit(FitOptions(npus=min(npus, C.MAX_VM_NPUS), method=method, resource=resource,
                                        placement=placement_of(D.vm_spec(vm)), own_vmi=own or None))
        warning = fit.warning()
        return [w for w in (fit.shared, warning) if w], fit if fit.never else None

    def _checks(self, cluster: VmCluster, method: str, resource: str | None) -> list[Check]:
        checks = [check_gates(cluster, method)]
        if method == C.METHOD_SANDBOX and resource:
            advertised = check_advertised(cluster, resource)
            # a name no node advertises (a typo: ATOM_MAXPT) gets no remedy that would permit it in KubeVirt
            checks += [advertised] + ([check_permitted(cluster, resource)] if advertised.ok else [])
        elif method == C.METHOD_DRA:
            checks += [check_device_class(cluster), check_slices(cluster)]
        return checks

    def _refusal(self, vm: dict, vmi: dict | None, have: VmNpus, method: str, npus: int, checks: list[Check],
                 warnings: Sequence[str | Remedy]) -> VmNpuPlan:
        """A plan that cannot be made (no resource to name): nothing to write, the failing checks as blockers."""
        target = Target(action=ATTACH, method=method, npus=npus)
        spec = D.vm_spec(vm)
        return VmNpuPlan(
            vm=_ref(vm), target=target, method=method, resource=None, device_class=None, npus_before=have.count,
            npus_after=have.count, devices_before=list(have.devices), devices_after=list(have.devices),
            host_devices_before=D.host_devices(spec), host_devices_after=D.host_devices(spec),
            resource_claims_before=D.resource_claims(spec), resource_claims_after=D.resource_claims(spec), added=[],
            removed=[], template=have.managed_template, template_create=None, templates_delete=[], templates_kept=[],
            running=is_running(vmi), node=_node(vmi), restart=False, patch=None, noop=False, warnings=list(warnings),
            blockers=[_blocker(c) for c in checks if not c.ok])

    def _plan(self, vm: dict, vmi: dict | None, target: Target, *, checks: Sequence[Check] = (),
              warnings: Sequence[str | Advice | Remedy] = (), templates: tuple | None = None) -> VmNpuPlan:
        """Plan `target` against this VM object; `templates` (create, delete, kept) reuses an earlier plan's."""
        ref = _ref(vm)
        spec = D.vm_spec(vm)
        have = D.npus_of(spec, npu_claim=lambda e: e.get("name") in target.npu_claims)
        layout = layout_for(vm, target)
        claims_before = D.resource_claims(spec)
        devices_before = D.host_devices(spec)
        changed = layout.host_devices != devices_before or layout.claims != claims_before
        warns: list[str | Advice | Remedy] = [*warnings, *layout.warnings]
        old_claim = (have.managed_claim or {}).get("name")
        if changed and old_claim and old_claim != target.claim and layout.template:
            warns.append(f"renaming rblnctl's pod-level claim {old_claim} to {target.claim}, this VM's own: the RBLN "
                         "DRA driver cannot prepare two claims of one name on a node (docs/vm.md, Claim names)")
        blockers: list[Blocker] = list(layout.blockers)
        for c in checks:
            if c.warning:
                warns.append(c.warning)
            if not c.ok:
                if changed:
                    blockers.append(_blocker(c))
                else:
                    warns.append(f"{c.message} (the VM already has what was asked; nothing to change)")
        if templates is None:
            templates = self._templates(ref, have, layout, target, blockers) if changed else \
                (None, self._left_behind(vm, layout.template), [], None)
            if target.method == C.METHOD_DRA or have.dra or have.managed_template or templates[1]:
                create, delete, kept, _ = templates
                keep = {layout.template, *delete} | ({create["metadata"]["name"]} if create else set())
                warns += self._unused_notes(ref.namespace, keep)
        create, delete, kept, left = templates
        if delete and not changed:
            warns.append(f"ResourceClaimTemplate {ref.namespace}/{delete[0]}: an interrupted rblnctl run moved VM "
                         f"{ref} off it and did not delete it; no VM or VMI names it: deleting it")
        running = is_running(vmi)
        meta = vm.get("metadata") or {}
        annotated = bool((meta.get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION))
        if running and annotated and ((vmi or {}).get("metadata") or {}).get("deletionTimestamp") \
                and not stale_mark(vm):
            running = False  # rblnctl's own stop, still being carried out (an interrupted run): stopped, to this plan
        if changed and meta.get("deletionTimestamp"):
            blockers.append(VmBlocker(f"VM {ref} is being deleted"))
        if changed and running and self.options.restart and needs_manual_recovery(vm):
            # stopped, it could not be started again: refuse before stopping it
            blockers.append(VmBlocker(f"VM {ref} cannot be restarted by rblnctl: {MANUAL_RECOVERY}"))
        if changed and running and not self.options.restart:
            blockers.append(VmBlocker(f"VM {ref} is running (VMI {_phase(vmi)}"
                                      + (f" on {_node(vmi)}" if _node(vmi) else "")
                                      + "): a change to its NPUs takes effect only when it restarts",
                                      override="restart"))  # the CLI names the flag next (--restart's help says
                                                            # what a restart does): the way on comes first
        spec_after = {"domain": {"devices": {"hostDevices": layout.host_devices}}, "resourceClaims": layout.claims}
        after = D.npus_of(spec_after, npu_claim=lambda e: e.get("name") in target.npu_claims)
        patch = None
        if changed:
            patch = D.guarded_patch(vm, layout.host_devices, layout.claims)
            if not running:  # changed as a stopped VM: only while it stays stopped (started meanwhile: 422, refused)
                patch[1:1] = value_tests(vm, RUN_STATE)
            patch += _left_ops(vm, left)
        now = self.clock.now()
        holder = mark_holder(vm, now) if annotated else None
        other = holder if holder is not None and holder.holder != self.identity else None
        marked = annotated and not running and not (other is not None and not other.expired)
        stale = stale_mark(vm) if marked else None
        stopped_by_us = marked and not stale
        if other is not None and not other.expired:
            # another run holds the VM now (stopping, changing or starting it): its mark is no one else's to act on
            why = (f"VM {ref} is held by another rblnctl run ({other.describe(now)}), which is stopping, changing or "
                   f"starting it now: wait for that run to finish; if it is gone, its mark expires "
                   f"{other.duration_s}s after its last renewal and a re-run then takes it over")
            if changed:
                blockers.append(VmBlocker(why))
            else:
                warns.append(why)
        elif other is not None and marked:
            warns.append(f"VM {ref}: the rblnctl run that set its stopped mark ({other.describe(now)}) stopped "
                         "renewing it: its lease expired, rblnctl takes the mark over")
        if stale:
            warns.append(f"VM {ref} carries the mark of an rblnctl run {stale}: rblnctl leaves it "
                         f"stopped (`{virtctl_start(ref)}` starts it) and "
                         + ("clears the mark with this change" if changed else "the mark is only a note now (`kubectl "
                            f"annotate vm {ref.name} -n {ref.namespace} {C.VM_STOPPED_ANNOTATION}-` removes it)"))
        if stopped_by_us:
            warns.append(f"VM {ref} was stopped by an earlier rblnctl run that could not start it again: starting it "
                         f"(after the change, if any)")
        if self.options.next_restart:  # the change waits for the VM's next restart: running is no refusal
            blockers = [b for b in blockers if b.override != "restart"]
        held = P.held_npus(vmi, npu_claim=lambda e: e.get("name") in target.npu_claims)
        if held is not None and not changed and P.differ(held.devices, after.devices):
            warns.append(f"VM {ref}: {P.staged_words(held.count, after.count)} (a change made earlier)")
        return VmNpuPlan(
            vm=ref, target=target, method=after.method if after.count else None, resource=target.resource,
            device_class=target.device_class, npus_before=have.count, npus_after=after.count,
            devices_before=list(have.devices), devices_after=list(after.devices), host_devices_before=devices_before,
            host_devices_after=layout.host_devices, resource_claims_before=claims_before,
            resource_claims_after=layout.claims, added=layout.added, removed=layout.removed, template=layout.template,
            template_create=create, templates_delete=list(delete), templates_kept=list(kept), running=running,
            node=_node(vmi), restart=bool(changed and running and self.options.restart), patch=patch,
            noop=not changed and not stopped_by_us and not delete, template_left=left,
            warnings=warns, blockers=blockers, start=stopped_by_us,
            generation=meta.get("generation"), stale_mark=bool(stale), uid=meta.get("uid") or None,
            run_strategy=run_strategy(vm),
            next_restart=bool(changed and self.options.next_restart and held is not None
                              and P.differ(held.devices, after.devices)),
            running_npus=held.count if held is not None else None)

    def _templates(self, ref: VmRef, have: VmNpus, layout: _Layout, target: Target,
                   blockers: list[Blocker]) -> tuple[dict | None, list[str], list[str], str | None]:
        """(template to create, rblnctl templates to delete, lines about templates kept, the record of the template
        the VM leaves for the patch to carry: C.VM_TEMPLATE_LEFT_ANNOTATION) for this change."""
        create = None
        left = None
        old = have.managed_template
        old_obj = self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, old, namespace=ref.namespace) if old else None
        if layout.template is not None:
            # Attach names the class; a detach that keeps some DRA NPUs keeps the class they had.
            cls = target.device_class or next((c for _, c, _ in D.claim_requests(old_obj or {}) if c),
                                              C.DRA_DEVICECLASS_VM)
            count = _count(layout.template)
            existing = old_obj if layout.template == old else \
                self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, layout.template, namespace=ref.namespace)
            if existing is None:
                create = D.claim_template(count, cls, namespace=ref.namespace)
            elif not D.template_fits(existing, count, cls):
                asks = ", ".join(f"{n}: {c} x{k}" for n, c, k in D.claim_requests(existing)) or "nothing"
                blockers.append(VmBlocker(
                    f"ResourceClaimTemplate {ref.namespace}/{layout.template} exists but asks for something else "
                    f"({asks}); rblnctl does not change templates it did not write: delete or rename it"))
        delete: list[str] = []
        kept: list[str] = []
        if old and old != layout.template and old_obj is not None:
            if not D.is_managed(old_obj):
                kept.append(f"ResourceClaimTemplate {old} kept: rblnctl did not create it")
            else:
                users = self.template_users(ref.namespace, old, exclude=ref.name)
                if self.options.next_restart:  # its own VMI runs on with a claim made from it until it restarts
                    users += P.vmi_naming(self.kube.get_optional(VMIS, ref.name, namespace=ref.namespace), old)
                if users:
                    kept.append(f"ResourceClaimTemplate {old} kept: {', '.join(users)} still "
                                f"{'uses' if len(users) == 1 else 'use'} it")
                else:
                    delete.append(old)
                    left = f"{old} uid={(old_obj.get('metadata') or {}).get('uid')}"
        return create, delete, kept, left

    def clean_up_left(self, name: str, namespace: str, *, uid: str | None = None) -> list[str]:
        """Only delete the template the VM's last NPU patch moved it off and an interrupted run left (_left_behind),
        changing nothing else (set-method's clean-up of a VM it converted already: no NPU count is planned, so a VM
        with none keeps none). Returns the templates deleted. Raises Replaced (another uid) and NotFound."""
        vm, _ = self._read(name, namespace)
        if uid is not None and (vm.get("metadata") or {}).get("uid") != uid:
            raise replaced(_ref(vm), "cleaned up after its conversion")
        have, _ = self._npus(vm)
        names = self._left_behind(vm, have.managed_template)
        if not names:
            return []
        deleted, _ = self._delete_templates(_ref(vm), names)
        return deleted

    def _left_behind(self, vm: dict, current: str | None) -> list[str]:
        """The template an interrupted run moved this VM off and did not delete (C.VM_TEMPLATE_LEFT_ANNOTATION), when
        it is still that object (its uid), rblnctl's, and named by no VM (this one included) or VMI: [name], else []."""
        left = template_left(vm)
        if left is None or left[0] == current:
            return []
        (name, uid), ns = left, _ref(vm).namespace
        obj = self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name, namespace=ns)
        if obj is None or (obj.get("metadata") or {}).get("uid") != uid or not D.is_managed(obj):
            return []
        if self.template_users(ns, name, exclude="", vm_too=True):
            return []
        return [name]

    # -- applying ----------------------------------------------------------------------------------------

    def apply(self, plan: VmNpuPlan) -> VmNpuResult:
        """Make the plan true; idempotent (a no-op plan writes nothing).

        Order (restart): mark the VM as about to be stopped (annotation VM_STOPPED_ANNOTATION, "stopping"), ask for
        the stop, wait until stopped, mark it stopped (its stop landed; the mark's evidence read now, final); create
        the template, patch the VM (a JSON patch testing the uid and the lists the plan read), delete the templates
        no one uses any more (checked again just before); start it, clear the mark, wait until Ready with the NPUs
        its spec asks for. The rule (docs/architecture.md, "VMs rblnctl
        stops"): the mark goes on before the stop is sent and comes off only once the VM is started again, or
        rblnctl knows its stop never landed; a VM rblnctl did not stop is never started (one its owner stopped
        between the plan and the stop is changed and left stopped: `not_restarted` says so; one someone else
        started, or started and stopped, after rblnctl's stop is not started or called restarted: `_not_ours_now`,
        just before the start). Every write tests the VM's uid (Replaced: deleted and re-created under rblnctl,
        nothing written).

        What rblnctl stopped it starts again: on any failure (or Ctrl-C, a signal) after its stop the VM is started
        before the error is raised, and when even that fails the mark stays, the error (and its `result`,
        left_stopped) says how to start it, and the next run starts it (plan.start). `recovery` holds what the VM
        was left as, for an interrupted run's message. Raises Refused (blockers, or the VM changed into something
        the plan cannot take), Conflict (it kept changing), WaitTimeout (not Ready in time: the change is made;
        details say why), API errors as they are.
        """
        if plan.blockers:
            raise Refused(f"refusing to change the NPUs of VM {plan.vm}", blockers=plan.blockers)
        dry = self.options.server_dry_run
        self.recovery, self.left_stopped, self.interrupted = [], False, None
        if plan.noop:
            return VmNpuResult(plan=plan, changed=False, attempts=0, templates_kept=list(plan.templates_kept),
                               server_dry_run=dry)
        restarter = VmLifecycle(kube=self.kube, clock=self.clock, timeout_s=self.options.ready_timeout_s,
                                backoff_s=self.options.poll_s / 4, server_dry_run=dry, on_step=self.events.on_step)
        run = _Restart(ours=plan.start, confirmed=plan.start)
        final, attempts, created = plan, 0, None
        deleted: list[str] = []
        kept: list[str] = []
        try:
            if plan.restart:
                run.marked = True
                self._mark(plan, MARK_STOPPING)  # before the stop is sent
                if restarter.ask_stop(plan.vm, uid=plan.uid):
                    run.ours = True
                else:  # stopped (or stopping) already, by someone else: not rblnctl's to start
                    run.not_restarted = (f"VM {plan.vm} was stopped by someone else before rblnctl stopped it (between "
                                         "the plan and the stop): its NPUs are changed and it is left stopped")
                    self._mark(plan, None)
                    run.marked = False
                if not dry:
                    restarter.wait_stopped(plan.vm)
                    if run.ours:  # its stop landed and the VM is stopped: the mark is certain, its evidence final
                        self._mark(plan, MARK_STOPPED)  # (virt-controller moves observedGeneration while a VMI is
                        run.confirmed = True  # there: it follows a runStrategy flip that leaves the template alone)
            elif run.ours:  # the earlier run's mark, taken (this run holds it now) and renewed for its writes
                self._mark(plan, MARK_STOPPED)
            if plan.patch is not None:
                if self.guard is not None and plan.patch is not None:
                    self.guard()
                created = self._create_template(plan) if plan.template_create else None
                final, attempts = self._write(plan, held=run.ours and not dry)
                run.changed = True
                deleted, kept = self._delete_templates(final.vm, final.templates_delete)
                if plan.stale_mark and not run.ours:
                    self._mark(plan, None)
            elif plan.templates_delete:  # nothing to change but the template an interrupted run left (_left_behind)
                deleted, kept = self._delete_templates(plan.vm, plan.templates_delete)
        except BaseException as err:  # an API error, Ctrl-C, SIGTERM: start what we stopped, then raise
            if not dry:
                self._recover(restarter, plan, err, run)
            if created and not run.changed and isinstance(err, RblnError):  # said, so "not changed" is true
                err.details = [*err.details, f"ResourceClaimTemplate {plan.vm.namespace}/{created} was created for "
                               "the change and no VM uses it yet: the command that makes the change uses it"]
            self._if_interrupted(err, VmNpuResult(
                plan=final, changed=run.changed, attempts=attempts, template_created=created,
                templates_deleted=deleted, templates_kept=[*final.templates_kept, *kept], server_dry_run=dry,
                restarted=run.started and not dry, not_restarted=run.not_restarted))
            raise
        result = VmNpuResult(plan=final, changed=run.changed, attempts=attempts, template_created=created,
                             templates_deleted=deleted, templates_kept=[*final.templates_kept, *kept],
                             restarted=run.ours and not dry, server_dry_run=dry, not_restarted=run.not_restarted)
        if not run.ours or dry:
            if run.changed and not dry:
                self._still_the_vm(plan)
            return result
        others: str | None = None
        try:
            others = self._not_ours_now(restarter, plan)
            if others is None and not restarter.start(plan.vm, uid=plan.uid):
                others = self._not_ours_now(restarter, plan) or \
                    f"VM {plan.vm} was started by someone else before rblnctl started it again"
            if others is None:
                run.started = True
            self._mark(plan, None)  # started by rblnctl, or by someone else: the mark is no longer true
            run.ours = False
        except BaseException as err:
            refused = isinstance(err, RblnError) and not writes.unknown(err) and not run.started
            self._recover(restarter, plan, err, run, retry_start=not refused)
            self._if_interrupted(err, dataclasses.replace(result, restarted=run.started))
            raise
        if others is not None:  # someone else started (or started and stopped) the VM rblnctl stopped: theirs now
            now = restarter.read(plan.vm, full=False)
            going = now is not None and ((now.live and not now.stopping) or now.run_strategy == "Always"
                                         or "Start" in now.requests)
            return dataclasses.replace(result, restarted=False, not_restarted=others, started_by_others=going)
        try:
            restarter.wait_ready(plan.vm, as_specified=True)
        except KeyboardInterrupt as err:  # changed and started: only the wait for Ready was cut short
            self._if_interrupted(err, result)
            raise
        except WaitTimeout as e:
            from rblnctl.vm.diagnose import diagnose

            why = diagnose(self.kube, plan.vm.name, plan.vm.namespace).broken
            details = [f"{why.failure or why.title}: {why.message}"] if why else []
            raise WaitTimeout(f"the NPUs of VM {plan.vm} were changed and it was started, but {e}") \
                .with_details(details) from e
        return dataclasses.replace(result, ready=True)

    def _mark(self, plan: VmNpuPlan, state: str | None, *, within: VmLifecycle | None = None,
              release: bool = False) -> None:
        """Set VM_STOPPED_ANNOTATION (MARK_STOPPING: about to stop it; MARK_STOPPED: rblnctl stopped it), or clear it
        (None). Its value is the time and what the VM read just before is (mark_value: uid, generation,
        observedGeneration, runStrategy: what stale_mark() compares later) and this run as its holder (renewed by each
        write, for the run's --timeout and a margin: mark_holder); `release`: no holder (the run leaves the mark for
        a later one), and with `state` "keep" the value on the VM is kept but for its holder. A JSON patch carrying
        the VM's identity (a `test` of /metadata/uid, and of the annotation's value as read), settled by reading the
        VM back; a VM of another uid raises Replaced, nothing written; a mark another run holds live raises
        MarkHeld, nothing written. `within`: a clean-up's bounded lifecycle, whose connection and deadline it
        shares."""
        kube = self.kube if within is None else within.kube
        ns, name = plan.vm.namespace, plan.vm.name
        now = self.clock.now()
        when = iso_utc(now)
        lease = int(self.options.ready_timeout_s + C.VM_STOPPED_MARK_LEASE_MARGIN_S)
        wanted: list[str | None] = []  # the value this call writes, fixed on its first read

        def next_write(vm: Any) -> writes.Write | None:
            if vm is None:
                raise NotFound(f"VirtualMachine {plan.vm} was deleted while rblnctl changed its NPUs")
            meta = vm.get("metadata") or {}
            if plan.uid is not None and meta.get("uid") != plan.uid:
                raise replaced(plan.vm, "changed its NPUs")
            annotations = meta.get("annotations")
            have = (annotations or {}).get(C.VM_STOPPED_ANNOTATION)
            other = mark_holder(vm, self.clock.now())
            if other is not None and other.holder != self.identity and not other.expired:
                raise MarkHeld(f"VM {plan.vm} is held by another rblnctl run ({other.describe(self.clock.now())}): "
                               "rblnctl leaves it to that run", blockers=[VmBlocker(
                                   "wait for that run to finish, then re-run this command")])
            if not wanted:
                if state == "keep":
                    wanted.append(released(str(have)) if have else None)
                elif state:
                    wanted.append(mark_value(when, vm, stopping=state == MARK_STOPPING,
                                             holder=None if release else self.identity, lease_s=lease))
                else:
                    wanted.append(None)
            value = wanted[0]
            if have == value:
                return None
            key = "/metadata/annotations/" + C.VM_STOPPED_ANNOTATION.replace("~", "~0").replace("/", "~1")
            ops: list[dict] = identity_test(vm)
            if value is None:
                ops += [{"op": "test", "path": key, "value": have}, {"op": "remove", "path": key}]
            elif annotations is None:
                ops += [{"op": "add", "path": "/metadata/annotations", "value": {C.VM_STOPPED_ANNOTATION: value}}]
            else:
                ops += [{"op": "test", "path": key, "value": have}, {"op": "add", "path": key, "value": value}]
            return writes.patch(VMS, name, ops, patch_type="json", namespace=ns)

        writes.settle(kube, next_write, read=lambda: kube.get_optional(VMS, name, namespace=ns), read_first=True,
                      what=f"VM {plan.vm}", dry_run=self.options.server_dry_run, retry=is_conflict,
                      clock=SYSTEM_CLOCK if within is None else within.clock,
                      deadline=None if within is None else within.deadline)

    @staticmethod
    def _still_stopped(plan: VmNpuPlan, vm: dict, running: bool) -> None:
        """A VM planned as stopped (its patch tests RUN_STATE) read again: Refused when someone started it since (a
        VMI runs, its runStrategy changed, a Start request is pending). Its change was decided for a stopped VM: on a
        running one it would wait for a restart that no one asked for, under a message that says done."""
        now = run_strategy(vm)
        why = None
        if running:
            why = "a VMI runs now"
        elif plan.run_strategy is not None and now != plan.run_strategy and now in RUNS:
            why = f"its runStrategy {plan.run_strategy} -> {now}"
        elif any(isinstance(r, dict) and r.get("action") == "Start"
                 for r in (vm.get("status") or {}).get("stateChangeRequests") or []):
            why = "a Start request is pending"
        if why is None:
            return
        ref = plan.vm
        raise Refused(
            f"VM {ref} was started by someone else after rblnctl read it as stopped ({why}): its NPUs were not "
            "changed", blockers=[VmBlocker(
                "a change to its NPUs takes effect only when it restarts; restarting stops it, patches it, starts it "
                "and waits until it is Ready", remedy=Remedy("restart it onto the change with {command}", Command.own(
                    "vm", plan.target.action, ref.name, namespace=ref.namespace, restart=True, again=True)))])

    def _still_the_vm(self, plan: VmNpuPlan) -> None:
        """After a change that starts nothing: the VM read back is the one changed (its uid), or Replaced. A VM
        deleted and re-created after the patch landed is another one, which holds none of the change: not done (the
        templates it names are kept: `_delete_templates` read its users just before)."""
        vm = self.kube.get_optional(VMS, plan.vm.name, namespace=plan.vm.namespace)
        uid = (vm or {}).get("metadata", {}).get("uid")
        if vm is not None and plan.uid is not None and uid != plan.uid:
            raise replaced(plan.vm, "changed its NPUs").with_details([
                f"the change was made to the VM rblnctl read (uid {plan.uid}), deleted since; the one there now (uid "
                f"{uid}) has the NPUs its own manifest gives it: re-run the command to change it"])

    def _not_ours_now(self, life: VmLifecycle, plan: VmNpuPlan, *, stop_seen: bool = True,
                      changed: bool = True) -> str | None:
        """Just before rblnctl starts the VM it stopped: None when it still may (the VM as it left it), else why not,
        in words, for `not_restarted`. Raises Replaced (another uid) and NotFound (deleted).

        Someone else acted since rblnctl's stop when a VMI runs (their `virtctl start`: the VM is theirs now, and
        says whether it runs with the NPUs its spec asks for), or when the VM's mark no longer matches it
        (stale_mark: a VMI was started and stopped again since, its runStrategy changed, a request is pending)."""
        vm = life.kube.get_optional(VMS, plan.vm.name, namespace=plan.vm.namespace)
        if vm is None:
            raise NotFound(f"VirtualMachine {plan.vm} was deleted while rblnctl changed its NPUs")
        if plan.uid is not None and (vm.get("metadata") or {}).get("uid") != plan.uid:
            raise replaced(plan.vm, "had it stopped")
        state = life.read(plan.vm)
        if state is not None and state.live and not state.stopping:
            a = state.attachment
            if a is not None and a.pending_change:
                return (f"VM {plan.vm} was started by someone else after rblnctl stopped it and before it started it "
                        f"again: {P.staged_words(a.held, a.wanted)}; `vm restart {plan.vm.name} -n "
                        f"{plan.vm.namespace} --wait` applies the change")
            if not changed:
                return (f"VM {plan.vm} was started by someone else after rblnctl stopped it: it runs as they started "
                        "it, with the NPUs it had; re-run this command to restart it with the change")
            return (f"VM {plan.vm} was started by someone else after rblnctl stopped it: it runs with the NPUs of its "
                    "changed spec, not restarted by rblnctl")
        value = str(((vm.get("metadata") or {}).get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION) or "")
        if stop_seen and _MARK_STOPPING.search(value):
            return None  # this run saw its own stop land, its mark not yet confirmed: its evidence predates the stop
        why = stale_mark(vm)
        if why is not None and state is not None and (run_strategy(vm) == "Always" or "Start" in state.requests):
            return (f"VM {plan.vm} was started by someone else after rblnctl stopped it (the mark of the rblnctl run "
                    f"{why}): rblnctl neither started it nor waited for it; `vm diagnose {plan.vm.name} -n "
                    f"{plan.vm.namespace}` shows whether it runs with the NPUs of its changed spec")
        if why is not None and (state is None or not state.live):
            return (f"VM {plan.vm} is left stopped, as someone else left it: the mark of the rblnctl run {why}; "
                    f"`{virtctl_start(plan.vm)}` starts it")
        return None

    def _recover(self, restarter: VmLifecycle, plan: VmNpuPlan, err: BaseException, run: _Restart, *,
                 retry_start: bool = True) -> None:
        """After a failure or an interruption: leave the VM as the rule says, and say so (`recovery`; for an RblnError
        also a detail line, and when the VM stays stopped a `result` with left_stopped and the command that starts
        it, which the front end prints, -o json too).

        - rblnctl stopped it (its stop landed, or an earlier run's mark): start it (again: a start is idempotent, so
          one interrupted in flight is finished) and clear the mark; when that fails, the mark stays, certain, and
          the next run starts it;
        - its stop never went out, or was refused: it never landed, so the mark goes and nothing is started;
        - its stop went out and its answer never came: the VM read back says whether it landed (then as the first
          case); when it shows nothing yet, the stop may still land, and rblnctl cannot tell that from a stop of
          someone else later: the "stopping" mark stays (the next run does not start the VM) and `virtctl start` is
          named.
        """
        how = virtctl_start(plan.vm)
        what = "the NPU change was made" if run.changed else "its NPUs were not changed"
        lines: list[str] = []
        interrupted = isinstance(err, KeyboardInterrupt)
        # interrupted: the process ends promptly, so the whole clean-up (its reads, the start, the mark) shares
        # CLEANUP_TIMEOUT_S (an unresponsive virt-api is not retried for a minute) and a VM still stopping is not
        # waited for
        life = restarter.bounded(C.CLEANUP_TIMEOUT_S) if interrupted else restarter
        within = life if interrupted else None
        if isinstance(err, MarkHeld):  # another run holds the VM (took an expired mark over, or its owner cleared it)
            lines.append(f"VM {plan.vm} is left to the rblnctl run that holds it now, or as its owner left it ({what})")
            self.recovery = lines
            if isinstance(err, RblnError):
                err.details = [*err.details, *lines]
            return
        if not run.ours and run.marked:
            if restarter.asked != STOP or restarter.refused:  # our stop never landed: the mark goes
                self._best_effort(lambda: self._mark(plan, None, within=within))
                why = "its stop was refused" if restarter.asked == STOP else "rblnctl stopped before asking"
                lines.append(f"VM {plan.vm} was not stopped ({why}) and {what}")
            else:
                if life.settle_asked(plan.vm):  # the VM read back once: the stop landed
                    run.ours = True  # ours, started again below
                else:  # the "stopping" mark stays, no run's (the re-run it names must not wait for this one)
                    self._best_effort(lambda: self._mark(plan, "keep", within=within))
                    lines.append(f"the stop request for VM {plan.vm} may have reached virt-api and had not taken "
                                 f"effect when rblnctl stopped ({what}); if it does, the VM ends stopped: start it "
                                 f"with `{how}` (rblnctl cannot tell that stop from someone else's later, so it will "
                                 "not start the VM itself)")
        if run.ours:
            problem: BaseException | None = None
            others: str | None = None
            if not run.started:
                if retry_start and life.asked == START and life.settle_asked(plan.vm):
                    run.started = True  # its own start went through (its answer cut short): the VM runs because of it
                elif retry_start:
                    try:
                        others = self._not_ours_now(life, plan, changed=run.changed)
                        if others is None and not life.start(plan.vm, wait_stopping=not interrupted, uid=plan.uid):
                            others = f"VM {plan.vm} was started by someone else before rblnctl started it again"
                        run.started = others is None
                    except (RblnError, KeyboardInterrupt) as e:
                        problem = e
                else:
                    problem = err
            if others is not None:  # someone else started (or started and stopped) it since: theirs, as they left it
                self._best_effort(lambda: self._mark(plan, None, within=within))
                lines.append(f"{others} ({what})")
            elif problem is None:
                self._best_effort(lambda: self._mark(plan, None, within=within))
                lines.append(f"VM {plan.vm} was stopped by rblnctl and has been started again ({what})")
            elif isinstance(problem, Replaced):  # another VM of the name now: nothing of rblnctl's to start or mark
                lines.append(one_line(problem))
            else:
                if not run.confirmed:  # the stop is known to have landed: the mark says so, for the next run
                    self._best_effort(lambda: self._mark(plan, MARK_STOPPED, within=within, release=True))
                else:  # the mark stays, held by no run: the re-run this names takes it at once
                    self._best_effort(lambda: self._mark(plan, "keep", within=within))
                self.left_stopped = True
                why = one_line(problem)
                if interrupted and retry_start and isinstance(problem, RblnError):
                    why = f"not within the {C.CLEANUP_TIMEOUT_S:g}s an interrupted run gives it: {why}"
                lines.append(f"VM {plan.vm} is left stopped: rblnctl stopped it to change its NPUs ({what}) and could "
                             f"not start it again ({why}); start it with `{how}`, or re-run "
                             "this command: it starts a VM rblnctl stopped")
                if isinstance(err, RblnError):
                    err.result = VmNpuResult(plan=plan, changed=run.changed, attempts=0,  # type: ignore[attr-defined]
                                             server_dry_run=False, left_stopped=True, start_command=how)
        self.recovery = lines
        if isinstance(err, RblnError):
            err.details = [*err.details, *lines]

    def _if_interrupted(self, err: BaseException, done: VmNpuResult) -> None:
        """After an interruption (Ctrl-C, a signal), once the clean-up ran: what was done (`interrupted`), for the
        front end to show, the VM left stopped and how to start it included. Not put on the exception: a caller
        that runs this planner inside its own command (policy set-method --convert-vms) has results of its own."""
        if not isinstance(err, KeyboardInterrupt):
            return
        if self.left_stopped:
            done = dataclasses.replace(done, left_stopped=True, restarted=False,
                                       start_command=virtctl_start(done.plan.vm))
        self.interrupted = done

    @staticmethod
    def _best_effort(fn: Callable[[], Any]) -> Any:
        """A clean-up step that must not hide the error being handled (a second Ctrl-C ends it too)."""
        try:
            return fn()
        except (RblnError, KeyboardInterrupt) as e:
            log.debug("clean-up step failed: %s", e)
            return None

    def _create_template(self, plan: VmNpuPlan) -> str:
        """Create rblnctl's ResourceClaimTemplate; a create whose outcome is unknown is settled by reading it back."""
        tpl = plan.template_create or {}
        name = tpl["metadata"]["name"]
        ns = plan.vm.namespace
        cls = next((c for _, c, _ in D.claim_requests(tpl)), C.DRA_DEVICECLASS_VM)
        self.events.on_step(f"creating ResourceClaimTemplate {ns}/{name}")

        def different(existing: dict | None) -> Conflict:
            return Conflict(f"ResourceClaimTemplate {ns}/{name} could not be created as rblnctl writes it "
                            f"({'it is not there' if existing is None else 'another one with that name appeared'}); "
                            "nothing else was changed", status=409, reason="Conflict")

        def next_write(existing: Any) -> writes.Write | None:
            if existing is writes.UNREAD or existing is None:
                return writes.create(RESOURCE_CLAIM_TEMPLATES, tpl, namespace=ns)
            if D.template_fits(existing, _count(name), cls):
                return None
            raise different(existing)

        try:
            writes.settle(self.kube, next_write, what=f"ResourceClaimTemplate {ns}/{name}",
                          read=lambda: self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name, namespace=ns),
                          dry_run=self.options.server_dry_run)
            return name
        except Conflict as e:  # AlreadyExists: made in between (another rblnctl?); fine if it is the same
            if e.reason != "AlreadyExists" and "already exists" not in str(e):
                raise
        existing = self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name, namespace=ns)
        if existing is None or not D.template_fits(existing, _count(name), cls):
            raise different(existing)
        return name

    def _write(self, plan: VmNpuPlan, *, held: bool = False) -> tuple[VmNpuPlan, int]:
        """Patch the VM (a JSON patch whose `test` ops guard the lists the plan read: devices.guarded_patch) until it
        holds the plan's lists.

        `held`: this run holds the VM stopped (its stop landed, its mark names it): the VM is read first and must
        still be as the run left it, and the patch also tests what an owner's start or another run would change (the
        runStrategy / running that virt-api's start flips, the mark as this run wrote it). Someone else started it
        since (a VMI, a Start request, another runStrategy): StartedMeanwhile, nothing written, the VM left running
        as they started it; the mark taken or removed: MarkHeld.

        A failed test (422; or a 409) re-reads the VM and re-plans the same target (bounded, with a backoff); a patch
        whose outcome is unknown is settled by reading the VM back (rblnctl.kube.writes): the lists are there, done;
        else the re-plan is sent. The re-plan keeps what this run decided about starting the VM and what it warned
        of: the stopped mark on the VM now is this run's own, not an earlier run's.
        """
        ns, name = plan.vm.namespace, plan.vm.name
        current = [plan]
        guards: list[dict] = []  # held: the tests of the VM's run state and mark, as last read
        said: list[bool] = []

        def next_write(state: Any) -> writes.Write | None:
            if state is not writes.UNREAD:
                if state is None:
                    raise NotFound(f"VirtualMachine {plan.vm} was deleted while rblnctl changed its NPUs")
                vm, vmi = state
                if plan.uid is not None and (vm.get("metadata") or {}).get("uid") != plan.uid:
                    raise replaced(plan.vm, "changed its NPUs")  # its patch tests the uid: none of it landed
                if _lists(vm) == (current[0].host_devices_after, current[0].resource_claims_after):
                    return None  # it holds the change (our patch landed, its reply lost)
                if held:
                    self._still_held(plan, vm, vmi)
                    guards[:] = _held_guards(vm)
                replan = self._plan(vm, vmi, current[0].target, templates=(None, current[0].templates_delete,
                                                                           current[0].templates_kept,
                                                                           current[0].template_left))
                if plan.restart and replan.running:
                    raise Refused(f"VM {plan.vm} was started again while rblnctl changed its NPUs; nothing was "
                                  "written", blockers=[VmBlocker("start it only after the change is made")])
                if not plan.running and not plan.restart:
                    self._still_stopped(plan, vm, replan.running)
                replan = dataclasses.replace(replan, restart=plan.restart, start=plan.start, stale_mark=plan.stale_mark,
                                             uid=plan.uid,
                                             noop=replan.patch is None, warnings=list(plan.warnings), blockers=[
                                                 b for b in replan.blockers
                                                 if not (plan.restart and b.override == "restart")])
                if replan.blockers:
                    raise Refused(f"VM {plan.vm} changed under us and the change no longer applies",
                                  blockers=replan.blockers)
                current[0] = replan
                if replan.noop:
                    return None
            if self.guard is not None:
                self.guard()
            if not said:  # a retry says why (on_retry)
                said.append(True)
                self.events.on_step(f"patching VM {plan.vm}")
            patch = current[0].patch or []
            if guards:  # held: the guards test what rblnctl left (spec, its mark); the plan's run-state tests would
                # add virt-controller's status, which lags the stop rblnctl just made (a 422 and a retry each time)
                patch = [op for op in patch if not (op.get("op") == "test" and _of_run_state(str(op.get("path"))))]
            return writes.patch(VMS, name, patch[:1] + guards + patch[1:], patch_type="json", namespace=ns)

        def gave_up(last: ClusterError, sent: int) -> RblnError:
            if writes.unknown(last) and not isinstance(last, Conflict):
                return last if not isinstance(last, OutcomeUnknown) else OutcomeUnknown(
                    f"{last}; VM {plan.vm} still does not hold the change after {sent} tries")
            return Conflict(f"VM {plan.vm} kept changing while rblnctl wrote it: gave up after {sent} attempts; "
                            "rerun once the other writer is done", status=409, reason="Conflict")

        done = writes.settle(self.kube, next_write, read=lambda: self._read(name, ns), what=f"VM {plan.vm}",
                             retry=is_conflict, attempts=self.options.max_attempts, backoff_s=RETRY_BACKOFF_S,
                             clock=self.clock, on_retry=self.events.on_retry, dry_run=self.options.server_dry_run,
                             exhausted=gave_up, read_first=held)
        return current[0], max(done.sent, 1)

    def _still_held(self, plan: VmNpuPlan, vm: dict, vmi: dict | None) -> None:
        """Raise unless the VM is still as this run left it stopped: its mark names this run, no VMI runs and its
        mark's evidence holds (stale_mark: no Start request, the runStrategy and observedGeneration it left)."""
        mine = mark_holder(vm, self.clock.now())
        if mine is None or mine.holder != self.identity:
            whose = "removed" if mine is None else f"taken over by another rblnctl run ({mine.holder})"
            raise MarkHeld(f"the stopped mark of VM {plan.vm} was {whose} while rblnctl had the VM stopped: nothing "
                           "was written; rblnctl leaves the VM as it is", blockers=[VmBlocker(
                               "see `vm list` for what the VM is now, then re-run this command")])
        why = stale_mark(vm)
        # a VMI being deleted is rblnctl's own stop still being carried out (an earlier run's, taken over), no start
        runs = is_running(vmi) and not ((vmi or {}).get("metadata") or {}).get("deletionTimestamp")
        if runs or why is not None:
            raise StartedMeanwhile(
                f"VM {plan.vm} was started by someone else after rblnctl stopped it and before it changed its NPUs "
                f"({'a VMI runs' if runs else f'the mark of this run {why}'}): nothing was written",
                blockers=[VmBlocker("it runs as they started it, with the NPUs it had; re-run this command to "
                                    "restart it with the change")])

    def _delete_templates(self, ref: VmRef, names: Sequence[str]) -> tuple[list[str], list[str]]:
        deleted: list[str] = []
        kept: list[str] = []
        ns = ref.namespace
        for name in names:
            # The VM itself too: after rblnctl's patch its spec names the template only if someone put it back
            # meanwhile (a second rblnctl's opposite change reuses it: issue 37's explorer, second-opposite).
            users = [] if self.options.server_dry_run else self.template_users(ns, name, exclude=ref.name,
                                                                                vm_too=True)
            if users:
                kept.append(f"ResourceClaimTemplate {name} kept: {', '.join(users)} now "
                            f"{'uses' if len(users) == 1 else 'use'} it")
                continue
            obj = self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name, namespace=ns)
            if obj is None or not D.is_managed(obj):
                continue
            self.events.on_step(f"deleting ResourceClaimTemplate {ns}/{name} (no VM uses it any more)")
            uid = obj["metadata"].get("uid")

            def next_delete(current: Any, name: str = name, obj: dict = obj, uid: Any = uid) -> writes.Write | None:
                found = obj if current is writes.UNREAD else current
                if found is None or found["metadata"].get("uid") != uid:
                    return None  # gone (our delete landed), or replaced by another object
                if not D.is_managed(found):  # relabelled since (a 409 re-read it): someone else's now
                    raise Conflict(f"ResourceClaimTemplate {ns}/{name} is no longer labelled as rblnctl's",
                                   status=409, reason="Conflict")
                body = {"apiVersion": "v1", "kind": "DeleteOptions",
                        "preconditions": {"uid": uid, "resourceVersion": found["metadata"].get("resourceVersion")}}
                return writes.delete(RESOURCE_CLAIM_TEMPLATES, name, namespace=ns, body=body)

            try:
                writes.settle(self.kube, next_delete, what=f"ResourceClaimTemplate {ns}/{name}",
                              read=lambda name=name: self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name,  # type: ignore[misc]
                                                                            namespace=ns),
                              retry=writes.is_409, backoff_s=RETRY_BACKOFF_S, clock=self.clock,
                              attempts=self.options.max_attempts,  # a precondition's 409 (its resourceVersion
                              dry_run=self.options.server_dry_run)  # moved): read again, judged again
            except NotFound:
                continue
            except Conflict:
                kept.append(f"ResourceClaimTemplate {name} kept: it changed while rblnctl was deleting it")
                continue
            deleted.append(name)
        return deleted, kept


@dataclass(kw_only=True)
class DetachPlanner(AttachPlanner):
    """Take NPUs from a VM: all of them, or one host device by name; the same writes and guarantees as attach."""

    detach: DetachOptions = DetachOptions()

    def __post_init__(self) -> None:
        # The write path reads restart/dry-run/retry settings from `options`.
        self.options = AttachOptions(**{f.name: getattr(self.detach, f.name)
                                        for f in dataclasses.fields(WriteOptions)})

    def plan(self, name: str, namespace: str, *, uid: str | None = None, while_: str = "planned its change"
             ) -> VmNpuPlan:
        """Read the VM and plan removing its NPUs (reads only). InvalidInput when `device` is not one of them;
        Replaced when `uid` is given and the VM is another one (AttachPlanner.plan)."""
        vm, vmi = self._read(name, namespace)
        if uid is not None and (vm.get("metadata") or {}).get("uid") != uid:
            raise replaced(_ref(vm), while_)
        have, npu_claims = self._npus(vm)
        device = self.detach.device
        warnings: list[str | Advice] = []
        if device is not None:
            names = [d.name for d in have.devices]
            listed = ", ".join(names) or "none"
            if device in names:
                remove_names: tuple[str, ...] = (device,)
            elif any(d.get("name") == device for d in D.host_devices(D.vm_spec(vm))):
                raise InvalidInput(f"VM {_ref(vm)} has no NPU host device {device!r} (its NPU devices: {listed})")
            elif not _maybe_detached(vm, device, names):
                # a name no earlier detach can have removed: as `kubectl delete` of an object that is not there,
                # NotFound (a typo, `npu7` of a VM with npu0 and npu1, is never "nothing to do" with exit 0)
                raise NotFound(f"VM {_ref(vm)} has no host device {device!r} (its NPU devices: {listed}); "
                               "nothing was detached")
            else:  # gone already, and the VM still carries the stop mark of the run that removed it: a re-run of
                # a detach that landed finishes the job (starts what the earlier run stopped) instead of failing
                warnings.append(f"VM {_ref(vm)} has no host device {device!r} (its NPU devices: {listed}): "
                                "nothing to detach")
                remove_names = ()
        else:
            remove_names = tuple(d.name for d in have.devices)
        left = [d for d in have.devices if d.name not in remove_names]
        method = left[0].method if left else None
        target = Target(action=DETACH, method=method, npus=len(left), remove=remove_names, npu_claims=npu_claims,
                        claim=D.claim_name(namespace, name))
        return self._plan(vm, vmi, target, warnings=warnings)


# -- helpers ------------------------------------------------------------------------------------------------------


_NPU_NAME = re.compile(r"npu(\d+)")


def _maybe_detached(vm: dict, device: str, names: Sequence[str]) -> bool:
    """Whether an earlier detach may have removed `device` from this VM (a re-run of one that landed, its reply
    lost or its run cut short, must finish rather than fail): the VM still carries the stop mark of the run that
    removed it, or the name is one of rblnctl's (`npu<i>`, numbered from 0) at most one past the highest left.
    A name beyond that (`npu7` beside npu0 and npu1) no detach removed: a typo."""
    if ((vm.get("metadata") or {}).get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION):
        return True
    wanted = _NPU_NAME.fullmatch(device)
    if wanted is None:
        return False
    left = [int(m.group(1)) for n in names if (m := _NPU_NAME.fullmatch(n))]
    return int(wanted.group(1)) <= max(left, default=-1) + 1


def _ref(vm: dict) -> VmRef:
    meta = vm.get("metadata") or {}
    return VmRef(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""))


def _node(vmi: dict | None) -> str | None:
    return ((vmi or {}).get("status") or {}).get("nodeName") or None


def _phase(vmi: dict | None) -> str:
    return str(((vmi or {}).get("status") or {}).get("phase") or "Pending")


def _count(template: str) -> int:
    return int(template.removeprefix(C.VM_DRA_TEMPLATE_PREFIX))


def _lists(vm: dict) -> tuple[list[dict], list[dict]]:
    spec = D.vm_spec(vm)
    return D.host_devices(spec), D.resource_claims(spec)


def _blocker(check: Check) -> VmBlocker:
    return VmBlocker(check.message, remedy=check.remedy)
