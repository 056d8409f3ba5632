"""Start, stop and restart a VirtualMachine through virt-api, and wait until it is Ready with its NPUs attached
(or, stopped, has let them go): `vm start|stop|restart`, and the restart `vm attach --restart` makes.

virt-api's subresources, `PUT /apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachines/NAME/ACTION`
with a Start/Stop/RestartOptions body (`dryRun: ["All"]` validates only), answer 202 and act on the VM
(kubevirt/kubevirt@v1.9.0 pkg/virt-api/rest/lifecycle.go):

- start: 409 "VM is already running" while a VMI exists that has not finished and whose phase is set;
  runStrategy Halted becomes Always (a JSON patch of the VM); Manual and RerunOnFailure get a Start state
  change request (with a Stop first when the last VMI finished; RerunOnFailure refuses a Failed one);
  Always and Once answer 409 "<strategy> does not support manual start requests" (KubeVirt runs them itself).
- stop: Always and Once become Halted; Manual and RerunOnFailure get a Stop request, or 409 "VM is not
  running" without a live VMI; Halted answers 409 "VM is not running" without a live VMI, else 409 "Halted only
  supports manual stop requests with a shorter graceperiod" (its stop is under way).
- restart: runStrategy is checked before the VMI: Halted and Once answer 409 "RunStategy <s> does not support manual
  restart requests" (sic); no VMI, 409 "VM is not running: Halted"; else the requests Stop (the VMI's uid) and
  Start: a new VMI.

rblnctl reads the VM first and decides as virt-api would, so a stop of a stopped VM, or a start of a running
one, sends nothing (exit 0). A restart of a stopped VM starts it, as `systemctl restart` starts a stopped unit.
A start (or restart) of a VM still stopping (VmState.stopping: virt-api would answer 409 "already running" and
the VM would end stopped) waits until it has stopped, then asks for the start.
Each request is idempotent and settled by rblnctl.kube.writes: a lost reply (or a 5xx) is judged by reading the VM
and its VMI back (runStrategy flipped, a state change request queued, the VMI gone or replaced by a new one), never
re-sent blindly. A refusal (409, 403, 422) is never "done": it is raised as virt-api said it (with the VM's state
now), unless a request of ours whose reply was lost is found to have landed. `vm attach --restart` asks through
ask_stop() / start(), which say whether its own request went through (a VM found stopped, or started, by someone
else is not rblnctl's to start, or to have started).

Waits watch the VM, its VMI, the namespace's virt-launcher pods and (DRA) ResourceClaims (rblnctl.kube.watch), and
the verdict is taken from one final read of them all, the state the result shows (the watch's streams may lag one
another):
- stopped: no VMI (or a finished one) and no unfinished virt-launcher pod of the VM: its NPUs are free; and the VM
  itself no longer says otherwise (not ready, printableStatus not Stopping, Terminating, Starting or Running:
  virt-controller writes it after the VMI is gone);
- Ready: the VM reports ready and printableStatus Running, its VMI is Running and Ready (after a restart: a new
  VMI; not one being deleted
  or about to be replaced by pending Stop/Start requests), and its NPUs are
  attached: the VMI passes the NPUs the VM's template asks for, its virt-launcher pod is Running and
  requests each sandbox resource (KubeVirt renders one request per host device: pkg/virt-controller/
  services/renderresources.go WithHostDevicesDevicePlugins), and each DRA claim of the pod is allocated
  (`status.resourceClaimStatuses` names the claim; its `status.allocation` holds the devices).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock, Stop
from rblnctl.errors import Conflict, InvalidInput, NotFound, RblnError, Refused, Replaced, WaitTimeout, one_line
from rblnctl.kube import (
    PODS,
    RESOURCE_CLAIMS,
    VM_SUBRESOURCES,
    VMIS,
    VMS,
    Kube,
    Mirror,
    WatchSpec,
    validate_name,
    watch_until,
    writes,
)
from rblnctl.kube.optional import ERROR, optional
from rblnctl.operator.capacity import pod_requests
from rblnctl.plan import Blocker
from rblnctl.remedy import Command, Remedy
from rblnctl.vm import devices as D
from rblnctl.vm.model import VmRef

log = logging.getLogger(__name__)


class StillStopping(Conflict):
    """A start not asked because the VM's old VMI is still going (virt-api would refuse it with a 409)."""

START, STOP, RESTART = "start", "stop", "restart"
ACTIONS = (START, STOP, RESTART)
FINAL_PHASES = ("Succeeded", "Failed")
# printableStatus of a VM on its way between stopped and running (kubevirt/kubevirt@v1.9.0
# staging/src/kubevirt.io/api/core/v1/types.go VirtualMachinePrintableStatus): not a stopped VM yet.
_MOVING = ("Stopping", "Terminating", "Starting", "Running")
LAUNCHER_SELECTOR = f"{C.VIRT_LAUNCHER_LABEL}={C.VIRT_LAUNCHER_VALUE}"


def _noop(*_: Any) -> None:
    return None


def run_strategy(vm: Mapping) -> str:
    """The VM's runStrategy (`spec.running` true/false read as Always/Halted, as KubeVirt does)."""
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return str(spec["runStrategy"])
    return "Always" if spec.get("running") else "Halted"


def _phase(vmi: Mapping | None) -> str | None:
    return None if vmi is None else str((vmi.get("status") or {}).get("phase") or "")


def _final(phase: str | None) -> bool:
    return phase in FINAL_PHASES


# -- what the VM shows (pure) -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """Whether a running VMI has its NPUs: what its VM asks, what it passes, and what is still missing."""

    wanted: int  # NPUs (host devices) the VM's template passes
    held: int  # the ones its VMI passes
    launcher: str | None = None  # its virt-launcher pod
    missing: tuple[str, ...] = ()  # what of the VMI's NPUs is not there yet, in words (empty: attached)
    pending_change: str | None = None  # the VM asks for other NPUs than its VMI passes: they come with a restart

    @property
    def attached(self) -> bool:
        return not self.missing


@dataclass(frozen=True, kw_only=True)
class VmState:
    """What a VM, its VMI, their virt-launcher pods and claims say at one moment."""

    exists: bool = True
    uid: str | None = None  # the VM's metadata.uid (another one: deleted and re-created)
    run_strategy: str | None = None
    status_run_strategy: str | None = None  # what virt-controller last acted on (status.runStrategy); "" unset
    printable_status: str | None = None
    ready: bool = False  # the VM's status.ready
    vmi_uid: str | None = None
    vmi_phase: str | None = None  # None: no VMI ("" while KubeVirt has not set one)
    vmi_deleting: bool = False  # the VMI has a deletionTimestamp: its guest is shutting down
    vmi_ready: bool = False
    node: str | None = None
    conditions: tuple[str, ...] = ()  # the VMI's False conditions (type: reason message)
    requests: tuple[str, ...] = ()  # pending state change requests (Start, Stop)
    launchers: tuple[str, ...] = ()  # unfinished virt-launcher pods of the VM's VMIs
    attachment: Attachment | None = None  # None: no VMI to judge
    manual_recovery: bool = False  # the VM's ManualRecoveryRequired condition: virt-api refuses every start
    volumes_change: bool = False  # the VM's VolumesChange condition: virt-api refuses every restart

    @property
    def live(self) -> bool:
        """A VMI exists that has not finished (virt-api's stop sees a VM to stop)."""
        return self.vmi_phase is not None and not _final(self.vmi_phase)

    @property
    def stopping(self) -> bool:
        """A live VMI on its way out that nothing will replace by itself: runStrategy Halted, a Stop request not
        followed by a Start, or (Manual) a VMI being deleted. virt-api's start still says "already running"."""
        return self.live and (self.run_strategy == "Halted" or ("Stop" in self.requests and "Start" not in
                                                                  self.requests)
                              or (self.run_strategy == "Manual" and self.vmi_deleting))

    @property
    def running(self) -> bool:
        """virt-api's start says "already running": a live VMI whose phase is set (not Unknown)."""
        return self.live and self.vmi_phase not in ("", "Unknown")

    @property
    def stopped(self) -> bool:
        """No live VMI and no virt-launcher pod left (its NPUs are free), and the VM's own status agrees:
        virt-controller writes printableStatus Stopped (after Stopping or Terminating) once the VMI is final or
        gone, in a write of its own (kubevirt/kubevirt@v1.9.0 pkg/virt-controller/watch/vm/vm.go
        setPrintableStatus), so a state between the two is not yet stopped. A finished VMI of a Halted VM is deleted
        by virt-controller (syncRunStrategy), and until then the VM's status may still tell of it (ErrorUnschedulable
        with a VMI Failed before it was scheduled: setPrintableStatus ranks those above Stopped), or say Stopped
        beside it (seen on real v1.9.0): not stopped until that VMI is gone, so what `vm stop --wait` shows after
        "stopped" is not stale (issue 39)."""
        leftover = self.vmi_phase is not None and self.run_strategy == "Halted"
        return (not self.live and not self.launchers and not self.ready and self.printable_status not in _MOVING
                and not leftover)

    @property
    def up(self) -> bool:
        """Ready with its NPUs attached, on a VMI that stays: not one being deleted, nor one a pending Stop or Start
        request (a restart under way) is about to replace; and the VM's printableStatus says Running."""
        return (self.ready and self.printable_status == "Running" and self.vmi_phase == "Running" and self.vmi_ready
                and self.attachment is not None and self.attachment.attached and not self.vmi_deleting
                and not self.requests)

    @property
    def up_as_specified(self) -> bool:
        """up, and its VMI passes the NPUs its VM's spec asks for now: not a VMI started before a change of them
        (attachment.pending_change), which `vm attach --restart` must never call restarted and Ready."""
        return self.up and self.attachment is not None and self.attachment.pending_change is None

    def describe(self) -> str:
        """One phrase for progress lines and errors."""
        parts = [f"status {self.printable_status or '<none>'}",
                 f"VMI {self.vmi_phase or 'absent'}" + (f" on {self.node}" if self.node else "")
                 + (" (being deleted)" if self.vmi_deleting and self.vmi_phase is not None else "")]
        if self.requests:  # a restart under way: virt-controller has not taken them yet
            parts.append(f"requested: {', '.join(self.requests)}")
        a = self.attachment
        if a is not None and self.live:
            parts.append(f"{a.held} NPU(s) attached" if a.attached else "; ".join(a.missing[:2]))
        elif self.launchers and not self.live:
            parts.append(f"virt-launcher {', '.join(self.launchers)} still there")
        return ", ".join(parts + list(self.conditions[:2]))


def _launchers_of(pods: Iterable[Mapping], vm_name: str) -> list[Mapping]:
    """The unfinished virt-launcher pods of the VM's VMIs (owned by a VMI of its name), oldest first."""
    out = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(C.VIRT_LAUNCHER_LABEL)
           == C.VIRT_LAUNCHER_VALUE and (p.get("status") or {}).get("phase") not in FINAL_PHASES
           and any(o.get("kind") == "VirtualMachineInstance" and o.get("name") == vm_name
                   for o in (p.get("metadata") or {}).get("ownerReferences") or [])]
    return sorted(out, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))


def attachment(vm: Mapping | None, vmi: Mapping, pods: Iterable[Mapping], claims: Iterable[Mapping]) -> Attachment:
    """Whether the VMI has the NPUs its VM asks for: passed by the VMI, requested (sandbox) or allocated (DRA) for
    its virt-launcher pod, that pod Running (pure)."""
    every = lambda _entry: True  # noqa: E731 - every claim a host device names is judged
    held = D.npus_of(D.vmi_spec(vmi), npu_claim=every)
    want = D.npus_of(D.vm_spec(vm), npu_claim=every) if vm is not None else held
    missing: list[str] = []
    pending = None
    if sorted(d.source for d in want.devices) != sorted(d.source for d in held.devices):
        pending = (f"its VMI passes {held.count} NPU(s), its VM asks for {want.count} (changed after it started): "
                   "a restart applies them")
    uid = (vmi.get("metadata") or {}).get("uid")
    mine = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(C.LAUNCHER_CREATED_BY_LABEL)
            == uid and (p.get("status") or {}).get("phase") not in FINAL_PHASES]
    pod = sorted(mine, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))[-1] if mine else None
    name = str(pod["metadata"]["name"]) if pod is not None else None
    if not held.count:
        return Attachment(wanted=want.count, held=0, launcher=name, pending_change=pending)
    if pod is None:
        missing.append("no virt-launcher pod yet")
        return Attachment(wanted=want.count, held=held.count, missing=tuple(missing), pending_change=pending)
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if phase != "Running":
        missing.append(f"virt-launcher pod {name} is {phase}")
    asked = pod_requests(pod)
    for resource in held.resources:
        n = sum(1 for d in held.sandbox if d.resource == resource)
        if asked.get(resource, 0) < n:
            missing.append(f"virt-launcher pod {name} requests {asked.get(resource, 0)} {resource}, not {n}")
    by_name = {str((c.get("metadata") or {}).get("name") or ""): c for c in claims}
    spec_claims = {c.get("name"): c for c in (pod.get("spec") or {}).get("resourceClaims") or []}
    made = {s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses")
            or []}
    for entry in dict.fromkeys(str(d.claim) for d in held.dra):
        claim = made.get(entry) or (spec_claims.get(entry) or {}).get("resourceClaimName")
        obj = by_name.get(str(claim)) if claim else None
        if not claim:
            missing.append(f"no ResourceClaim made for {entry} yet")
        elif obj is None:
            missing.append(f"ResourceClaim {claim} not found")
        elif not (obj.get("status") or {}).get("allocation"):
            missing.append(f"ResourceClaim {claim} is not allocated")
    return Attachment(wanted=want.count, held=held.count, launcher=name, missing=tuple(missing),
                      pending_change=pending)


def judge(vm: Mapping | None, vmi: Mapping | None, pods: Sequence[Mapping] = (), claims: Sequence[Mapping] = (),
          *, name: str = "") -> VmState:
    """The state of a VM from its objects (pure); `pods` are the namespace's virt-launcher pods."""
    vm_name = str(((vm or vmi or {}).get("metadata") or {}).get("name") or name)
    st = (vm or {}).get("status") or {}
    vst = (vmi or {}).get("status") or {}
    bad = tuple(f"{c.get('type')}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
                for c in vst.get("conditions") or []
                if c.get("status") == "False" and c.get("type") not in C.VMI_INFO_CONDITIONS)
    phase = _phase(vmi)
    return VmState(
        exists=vm is not None, uid=str(((vm or {}).get("metadata") or {}).get("uid") or "") or None,
        run_strategy=run_strategy(vm) if vm is not None else None,
        status_run_strategy=str(st.get("runStrategy") or "") if vm is not None else None,
        printable_status=st.get("printableStatus"), ready=bool(st.get("ready")),
        vmi_uid=str((vmi.get("metadata") or {}).get("uid") or "") or None if vmi is not None else None,
        vmi_phase=phase, node=vst.get("nodeName") or None,
        vmi_deleting=bool(((vmi or {}).get("metadata") or {}).get("deletionTimestamp")),
        vmi_ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in vst.get("conditions") or []),
        conditions=bad, requests=tuple(str(r.get("action")) for r in st.get("stateChangeRequests") or []),
        launchers=tuple(str(p["metadata"]["name"]) for p in _launchers_of(pods, vm_name)),
        manual_recovery=needs_manual_recovery(vm), volumes_change=_condition_true(vm, C.VM_VOLUMES_CHANGE),
        attachment=attachment(vm, vmi, pods, claims) if vmi is not None and not _final(phase) else None)


def replaced(ref: VmRef, while_: str) -> Replaced:
    """The error for a VM deleted and re-created under rblnctl (another metadata.uid): nothing written to the new
    one (docs/architecture.md, "Identity on every write")."""
    return Replaced(f"VM {ref} was deleted and re-created while rblnctl {while_}: the VM there now is another one "
                    "(another metadata.uid), and rblnctl wrote nothing to it")


def same_vm(ref: VmRef, state: VmState, uid: str | None, while_: str) -> None:
    """Raise replaced() when `uid` (the VM rblnctl decided on) is not the VM `state` read (None: not checked)."""
    if uid is not None and state.uid is not None and state.uid != uid:
        raise replaced(ref, while_)


def _has_dra(vm: Mapping | None, vmi: Mapping | None) -> bool:
    specs = [D.vm_spec(vm)] if vm is not None else []
    specs += [D.vmi_spec(vmi)] if vmi is not None else []
    return any(d.get("claimName") for s in specs for d in D.host_devices(s))


# -- what to ask virt-api (pure) --------------------------------------------------------------------------------


MANUAL_RECOVERY = ("its ManualRecoveryRequired condition is True (a volume migration failed): virt-api refuses "
                   "to start it until its volumes are reassigned (409 \"VM recovery required\")")


VOLUMES_CHANGE = ("its VolumesChange condition is True (a volume update or migration is under way): virt-api "
                  f"refuses to restart it until that ends (409 \"{C.VM_RECOVERY_REQUIRED_MESSAGE}\")")


def _condition_true(vm: Mapping | None, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in ((vm or {}).get("status") or {}).get("conditions") or [] if isinstance(c, Mapping))


def needs_manual_recovery(vm: Mapping | None) -> bool:
    """The VM carries ManualRecoveryRequired=True: virt-api refuses to start it (constants.VM_MANUAL_RECOVERY)."""
    return _condition_true(vm, C.VM_MANUAL_RECOVERY)


def decide(action: str, s: VmState) -> tuple[str | None, str, str | None]:
    """(the subresource to PUT, or None: nothing to ask; what happens, in words; why it cannot, or None), as
    virt-api would judge the VM (the module doc)."""
    rs = s.run_strategy or "Halted"
    pending = set(s.requests)
    if action == STOP:
        if s.live and rs == "Halted":
            return None, "already stopping (runStrategy Halted): its VMI is shutting down", None
        if "Stop" in pending and "Start" not in pending:
            return None, "a stop is already requested", None
        if not s.live and rs == "RerunOnFailure" and s.vmi_phase == "Failed":
            # virt-api answers 409 "VM is not running", yet virt-controller runs a RerunOnFailure VM whose VMI failed
            # again (kubevirt/kubevirt@v1.9.0 pkg/virt-api/rest/lifecycle.go StopVMRequestHandler; pkg/virt-controller/
            # watch/vm/vm.go syncRunStrategy): only runStrategy Halted keeps it stopped
            return None, "", ("its VMI failed and runStrategy RerunOnFailure has KubeVirt run it again, which a stop "
                              "request cannot prevent (virt-api: 409 \"VM is not running\"); set runStrategy Halted")
        if not s.live and rs in ("Halted", "Manual", "RerunOnFailure"):
            vmi = f"VMI {s.vmi_phase}" if s.vmi_phase else "no VMI"
            return None, f"already stopped (runStrategy {rs}, {vmi})", None
        if rs in ("Always", "Once"):
            return STOP, f"runStrategy {rs} -> Halted", None
        return STOP, f"runStrategy {rs}: a Stop request", None
    if action == START or (action == RESTART and (not s.running or s.stopping)):
        verb = "" if action == START else "not running, so it is started: "
        if s.manual_recovery and (s.stopping or not s.running):
            return None, "", MANUAL_RECOVERY
        if s.stopping:  # virt-api would answer 409 "already running" now, and the VM would then stay stopped
            return START, (f"{verb}it is stopping (runStrategy {rs}, VMI {s.vmi_phase or 'phase unset'}): "
                           "started once its VMI is gone"), None
        if s.running:
            return None, f"already running (VMI {s.vmi_phase})", None
        if "Start" in pending:
            return None, "a start is already requested", None
        if rs == "Halted":
            return START, f"{verb}runStrategy Halted -> Always", None
        if rs == "RerunOnFailure" and s.vmi_phase is None and s.status_run_strategy not in (None, rs):
            # virt-controller starts a RerunOnFailure VM without a VMI when it comes from another runStrategy (a new
            # VM: status.runStrategy not yet set to it), else only on a Start request (kubevirt/kubevirt@v1.9.0
            # pkg/virt-controller/watch/vm/vm.go syncRunStrategy)
            return None, f"runStrategy {rs}: KubeVirt starts it by itself (no request needed)", None
        if rs == "Manual" or (rs == "RerunOnFailure" and s.vmi_phase in (None, "Succeeded")):
            return START, f"{verb}runStrategy {rs}: a Start request", None
        if rs in ("Always", "RerunOnFailure") or (rs == "Once" and not _final(s.vmi_phase)):
            return None, f"runStrategy {rs}: KubeVirt starts it by itself (no request needed)", None
        return None, "", (f"runStrategy {rs}: the VM ran once and KubeVirt starts it no more (virt-api refuses "
                          "manual starts); set another runStrategy to run it again")
    if s.volumes_change:  # restart of a running VM; virt-api checks this before the runStrategy
        return None, "", VOLUMES_CHANGE
    if rs == "Once":  # restart of a running VM
        return None, "", "runStrategy Once: virt-api refuses manual restarts of a VM that runs once"
    return RESTART, "a Stop then a Start request: a new VMI", None


def landed(action: str, before: VmState, now: VmState | None) -> bool:
    """Whether the VM read back shows the request took effect (or another caller made the same change)."""
    if now is None or not now.exists:
        raise NotFound("the VirtualMachine was deleted meanwhile")
    if action == RESTART:  # its requests queued, or a new VMI: no VMI at all is a stop, not a restart
        return bool(now.requests) or (now.vmi_uid is not None and now.vmi_uid != before.vmi_uid)
    if action == STOP:
        return (now.run_strategy == "Halted" and before.run_strategy != "Halted") or "Stop" in now.requests or \
            not now.live
    return (now.run_strategy != "Halted" and before.run_strategy == "Halted") or "Start" in now.requests or \
        (now.running and now.vmi_uid != before.vmi_uid)


# -- plans and results ------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LifecyclePlan:
    """What `vm start|stop|restart` will do: the request (or none), and whether it waits."""

    vm: VmRef
    action: str
    before: VmState
    send: str | None  # the virt-api subresource to PUT; None: nothing to ask
    why: str  # what happens, in words
    wait: bool
    blockers: list[Blocker] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def noop(self) -> bool:
        return self.send is None and not self.blockers


@dataclass(frozen=True, kw_only=True)
class LifecycleResult:
    """What apply() did, and the VM as it was left."""

    plan: LifecyclePlan
    sent: str | None  # the subresource PUT (None: nothing was asked)
    changed: bool  # the request went through (or one lost on the way was found applied)
    state: VmState
    waited: bool = False
    server_dry_run: bool = False
    overtaken: str | None = None  # virt-api refused the start (stop) because the VM got there meanwhile: its words


# -- the one piece that talks to virt-api -----------------------------------------------------------------------


@dataclass(kw_only=True)
class VmLifecycle:
    """Start, stop and restart VMs through virt-api and wait (each wait bounded by `timeout_s`).

    `on_step(text)` hears each request; `on_state(state)` each new state seen while waiting. `asked` is the last
    request sent (or being sent), `made` the last one known to have gone through, `refused` whether it was refused
    (so it never landed): after an interruption they tell whether anything was asked of virt-api.
    """

    kube: Kube
    clock: Clock = SYSTEM_CLOCK  # paces retries after a conflict or a 5xx (waits use the client's clock)
    timeout_s: float = C.VM_READY_TIMEOUT_S
    backoff_s: float = C.VM_POLL_S / 4
    server_dry_run: bool = False  # send dryRun: [All]; nothing is waited for
    on_step: Callable[[str], None] = _noop
    on_state: Callable[[VmState], None] = _noop
    stop_event: Stop | None = None
    deadline: float | None = None  # (`clock`'s monotonic seconds) a write is not sent again after it: bounded()
    asked: str | None = field(default=None, init=False)
    made: str | None = field(default=None, init=False)
    refused: bool = field(default=False, init=False)  # the last request asked was answered with a refusal
    asked_of: VmState | None = field(default=None, init=False)  # the VM as read just before the last request

    def bounded(self, seconds: float) -> VmLifecycle:
        """A copy for a clean-up that must end within about `seconds` (an interrupted command starting again the VM
        it stopped): every request gets what is left of `seconds` (the client's deadline, real time: sockets wait in
        it), a read is not retried, and a request whose answer was a 5xx or lost is not sent again once `seconds`
        have passed (writes.settle's deadline). It knows what this one asked last (settle_asked) and shares its
        bound when bounded again."""
        end = self.clock.monotonic() + seconds
        copy = dataclasses.replace(self, kube=self.kube.bounded(seconds),
                                   deadline=end if self.deadline is None else min(end, self.deadline))
        copy.asked, copy.made, copy.refused, copy.asked_of = self.asked, self.made, self.refused, self.asked_of
        return copy

    # -- reading ----------------------------------------------------------------------------------------------

    def read(self, ref: VmRef, *, full: bool = True) -> VmState | None:
        """The VM's state now (None: no such VM): the VM and its VMI, and (`full`) the namespace's virt-launcher
        pods and, when it has DRA host devices, ResourceClaims."""
        vm = self.kube.get_optional(VMS, ref.name, namespace=ref.namespace)
        if vm is None:
            return None
        vmi = self.kube.get_optional(VMIS, ref.name, namespace=ref.namespace)
        if not full:
            return judge(vm, vmi, name=ref.name)
        pods = self.kube.list(PODS, namespace=ref.namespace, label_selector=LAUNCHER_SELECTOR)
        claims: list[dict] = []
        if _has_dra(vm, vmi):
            # resource.k8s.io/v1 not served: no claim can be allocated; refused: the wait cannot judge, an error
            claims = optional(lambda: self.kube.list(RESOURCE_CLAIMS, namespace=ref.namespace), absent=[],
                              what=f"list ResourceClaims in {ref.namespace}", on_forbidden=ERROR).value
        return judge(vm, vmi, pods, claims, name=ref.name)

    def _require(self, ref: VmRef, *, full: bool = True) -> VmState:
        state = self.read(ref, full=full)
        if state is None:
            from rblnctl.vm.where import not_found

            raise not_found(self.kube, ref.name, ref.namespace)
        return state

    def settle_asked(self, ref: VmRef) -> bool | None:
        """After a failure or an interruption while the last request (`asked`) was out: whether it went through or
        the VM read back shows it took effect (True), shows nothing yet (False: it may still be in flight), or could
        not be read or judged (None). The one judgement of `vm restart`'s interruption and of `vm attach --restart`'s
        clean-up (was its stop ours?). One read, no retries: an interrupted process must end promptly."""
        if self.made is not None:
            return True
        if self.asked is None or self.asked_of is None or self.server_dry_run:
            return None
        try:  # bounded as a clean-up is: the VM and its VMI read once each, by CLEANUP_TIMEOUT_S (or what is left
            # of the clean-up's own bound when this copy has one)
            life = self if self.kube.deadline is not None else self.bounded(C.CLEANUP_TIMEOUT_S)
            now = life.read(ref, full=False)
            return landed(self.asked, self.asked_of, now)
        except (RblnError, KeyboardInterrupt):
            return None

    # -- the commands -------------------------------------------------------------------------------------------

    def plan(self, action: str, name: str, namespace: str, *, wait: bool = False) -> LifecyclePlan:
        """Read the VM and decide what to ask virt-api (reads only). NotFound without such a VM."""
        if action not in ACTIONS:
            raise InvalidInput(f"unknown action {action!r}: use {', '.join(ACTIONS)}")
        validate_name(name, kind="VirtualMachine")
        ref = VmRef(namespace=namespace, name=name)
        state = self._require(ref)
        send, why, blocker = decide(action, state)
        warnings = []
        a = state.attachment
        if a is not None and a.pending_change and action != STOP and send != RESTART:
            warnings.append(f"VM {ref}: {a.pending_change} (`vm restart {ref.name} -n {ref.namespace}`)")
        if blocker and action == STOP:  # the one stop refusal: its remedy, to paste
            blocker += (f": kubectl patch vm {ref.name} -n {ref.namespace} --type merge -p "
                        "'{\"spec\":{\"runStrategy\":\"Halted\"}}'")
        return LifecyclePlan(vm=ref, action=action, before=state, send=send, why=why, wait=wait, warnings=warnings,
                             blockers=[Blocker(f"cannot {action} VM {ref}: {blocker}")] if blocker else [])

    def apply(self, plan: LifecyclePlan) -> LifecycleResult:
        """Ask virt-api (when the plan says to), then (plan.wait) wait until the VM is Ready with its NPUs attached,
        or stopped. Raises Refused (blockers), WaitTimeout (not there in time: the request was made), NotFound, and
        API errors as they are."""
        if plan.blockers:
            raise Refused(f"refusing to {plan.action} VM {plan.vm}", blockers=plan.blockers)
        changed = False
        send, why, before = plan.send, plan.why, plan.before
        if send == START and before.stopping:  # virt-api refuses a start until the old VMI is gone
            if self.server_dry_run:
                self.on_step(f"VM {plan.vm} is stopping: virt-api would refuse a start until it has stopped, "
                             "so the server dry run sends nothing")
                return LifecycleResult(plan=plan, sent=None, changed=False, state=before, server_dry_run=True)
            self.wait_stopped(plan.vm)
            before = self._require(plan.vm)
            send, why, blocker = decide(plan.action, before)
            if blocker:
                raise Refused(f"cannot {plan.action} VM {plan.vm}: {blocker}")
        overtaken = None
        if send is not None:
            if before.uid is not None and not self.server_dry_run:  # the VM decided on (the [y/N] came between)
                same_vm(plan.vm, self._require(plan.vm, full=False), before.uid, f"was about to {send} it")
            self.on_step(f"{_ING[send]} VM {plan.vm}: {why}")
            try:
                changed = self._put(plan.vm, send, before=before)
            except Conflict as e:
                # refused, never done; but a start (stop) refused because the VM got there meanwhile (KubeVirt ran it
                # by itself, another admin stopped it) leaves nothing to ask: said so, not as a request of ours. A
                # refused restart is an error: the VM was not restarted (another admin's stop is not a restart).
                now = None if self.server_dry_run or send == RESTART else self.read(plan.vm, full=False)
                if now is None or decide(send, now)[0] is not None or decide(send, now)[2] is not None:
                    raise
                overtaken = one_line(e.__cause__ or e)
        if self.server_dry_run or not plan.wait:
            now = self.read(plan.vm) if send is not None and not self.server_dry_run else None
            return LifecycleResult(plan=plan, sent=send, changed=changed, state=now or before,
                                   server_dry_run=self.server_dry_run, overtaken=overtaken)
        if plan.action == STOP:
            state = self.wait_stopped(plan.vm)
        else:
            old = plan.before.vmi_uid if send == RESTART or plan.before.stopping else None
            state = self.wait_ready(plan.vm, replaced=old)
        return LifecycleResult(plan=plan, sent=send, changed=changed, state=state, waited=True, overtaken=overtaken)

    # -- the pieces `vm attach --restart` uses -----------------------------------------------------------------

    def ask_stop(self, ref: VmRef, *, uid: str | None = None) -> bool:
        """Ask virt-api to stop the VM; True when this request of ours went through (or, its reply lost, is found to
        have landed), False when there was nothing to stop: the VM is stopped or stopping already, by someone else
        (also when virt-api refused the stop because of that). Returns at once; wait_stopped() waits.

        `uid`: the VM decided on. virt-api's StopOptions carry no precondition (kubevirt/kubevirt@v1.9.0
        staging/src/kubevirt.io/api/core/v1/types.go StopOptions: gracePeriod, dryRun), so the VM is read back just
        before the request and one with another uid (deleted and re-created) raises Replaced, nothing sent."""
        state = self._require(ref, full=False)
        same_vm(ref, state, uid, "was about to stop it")
        send, why, _ = decide(STOP, state)
        if send is None:
            return False
        self.on_step(f"stopping VM {ref}: {why}")
        try:
            return self._put(ref, send, before=state)
        except Conflict:  # refused: ours never landed; nothing to stop when someone else stopped it meanwhile
            now = self._require(ref, full=False)
            if decide(STOP, now)[0] is None and (now.stopping or not now.live):
                return False
            raise

    def stop(self, ref: VmRef) -> bool:
        """ask_stop(), then (unless a server dry run) wait until the VM is stopped; whether the stop was ours."""
        ours = self.ask_stop(ref)
        if not self.server_dry_run:
            self.wait_stopped(ref)
        return ours

    def start(self, ref: VmRef, *, wait_stopping: bool = True, uid: str | None = None) -> bool:
        """Ask virt-api to start the VM unless it runs (or KubeVirt starts it by itself); returns once asked. True
        when this request of ours went through (or is found applied), False when nothing was asked: the VM is running
        or starting (also when virt-api refused the start because someone else started it meanwhile).

        virt-api refuses a start while the old VMI is still going ("VM is already running", measured on KubeVirt
        v1.9.0), so a VM still stopping is waited for first (bounded by timeout_s); without `wait_stopping` (an
        interrupted run must end promptly) that raises StillStopping instead of sending a start bound to fail.

        `uid`: the VM decided on; StartOptions carry no precondition either (paused, dryRun: types.go StartOptions),
        so the VM read just before the request must have it, else Replaced, nothing sent."""
        state = self._require(ref, full=False)
        same_vm(ref, state, uid, "was about to start it")
        if state.stopping:
            if not wait_stopping:
                raise StillStopping(f"VM {ref} is still stopping ({state.describe()}): virt-api refuses a start "
                                    "until its VMI is gone")
            self.wait_stopped(ref)
            state = self._require(ref, full=False)
            same_vm(ref, state, uid, "waited for it to stop")
        send, why, blocker = decide(START, state)
        if blocker:
            raise Refused(f"cannot start VM {ref}: {blocker}")
        if send is None:
            return False
        self.on_step(f"starting VM {ref}: {why}")
        try:
            return self._put(ref, send, before=state)
        except Conflict:
            now = self._require(ref, full=False)
            if decide(START, now)[0] is None and not decide(START, now)[2]:
                return False
            raise

    # -- the request ----------------------------------------------------------------------------------------------

    def _put(self, ref: VmRef, action: str, *, before: VmState) -> bool:
        """PUT the subresource; a lost reply or a 5xx is judged by reading the VM back (landed()). True when the
        request of ours went through or is found applied. A refusal (409, 403, 422...) raises: it is never "done",
        unless an earlier try of ours, whose reply was lost, is found to have landed (virt-api then refuses the
        repeat: "VM is already running")."""
        w = writes.put(VM_SUBRESOURCES, ref.name, sub=action, namespace=ref.namespace, body={})
        lost: list[str] = []

        def read() -> VmState | None:
            return self.read(ref, full=False)

        def next_write(state: Any) -> writes.Write | None:
            if state is writes.UNREAD:
                return w
            return None if landed(action, before, state) else w

        self.asked, self.asked_of, self.made, self.refused = action, before, None, False
        try:
            writes.settle(self.kube, next_write, read=read, what=f"VM {ref}", dry_run=self.server_dry_run,
                          backoff_s=self.backoff_s, clock=self.clock, on_lost=lambda _n, why: lost.append(why),
                          deadline=self.deadline)
        except Conflict as e:  # virt-api's 409s: "not running", "already running", "RunStategy Halted ..."
            now = None if self.server_dry_run else read()
            if lost and now is not None and landed(action, before, now):
                log.debug("%s %s: %s; a request of ours whose reply was lost landed", action, ref, e)
                self.made = action
                return True
            self.refused = True
            raise Conflict(f"virt-api refused to {action} VM {ref}: {one_line(e)}"
                           + (f" (the VM now: {now.describe()})" if now is not None else ""),
                           status=e.status, reason=e.reason) from e
        except RblnError as e:
            self.refused = not writes.unknown(e)  # a 403, a 422, nothing listening: it never landed
            raise
        self.made = action
        return True

    # -- waiting ------------------------------------------------------------------------------------------------

    def wait_stopped(self, ref: VmRef) -> VmState:
        """Wait until the VM has no live VMI and no virt-launcher pod left (its NPUs are free)."""
        self.on_step(f"waiting for VM {ref} to stop")
        return self._wait(ref, lambda s: s.stopped, "stop", dra=False)

    def wait_ready(self, ref: VmRef, *, replaced: str | None = None, as_specified: bool = False) -> VmState:
        """Wait until the VM is Ready with its NPUs attached (with `replaced`: on a VMI other than that one; with
        `as_specified`: the NPUs its spec asks for, VmState.up_as_specified)."""
        self.on_step(f"waiting for VM {ref} to be Ready with its NPUs")
        vm = self.kube.get_optional(VMS, ref.name, namespace=ref.namespace)
        vmi = self.kube.get_optional(VMIS, ref.name, namespace=ref.namespace)
        return self._wait(ref, lambda s: (s.up_as_specified if as_specified else s.up)
                          and (replaced is None or s.vmi_uid != replaced), "become Ready",
                          dra=_has_dra(vm, vmi))

    def _wait(self, ref: VmRef, done: Callable[[VmState], bool], what: str, *, dra: bool) -> VmState:
        """Watch until `done` holds, then confirm it on one fresh read of everything (the streams of a watch may lag
        one another): that read is the state returned, the one the verdict and the result show; when it does not
        hold yet, watch on (bounded by timeout_s in all)."""
        clock = self.kube.clock
        deadline = clock.monotonic() + self.timeout_s
        by_name = f"metadata.name={ref.name}"
        specs = [WatchSpec(VMS, namespace=ref.namespace, field_selector=by_name),
                 WatchSpec(VMIS, namespace=ref.namespace, field_selector=by_name),
                 WatchSpec(PODS, namespace=ref.namespace, label_selector=LAUNCHER_SELECTOR)]
        if dra:
            specs.append(WatchSpec(RESOURCE_CLAIMS, namespace=ref.namespace, missing_ok=True))
        last: VmState | None = None

        def look(mirrors: Sequence[Mirror]) -> VmState:
            vms, vmis = mirrors[0].items(), mirrors[1].items()
            state = judge(vms[0] if vms else None, vmis[0] if vmis else None, mirrors[2].items(),
                          mirrors[3].items() if dra else [], name=ref.name)
            if not state.exists and what != "stop":
                raise NotFound(f"VirtualMachine {ref} was deleted while rblnctl waited for it")
            return state

        def heard(state: VmState) -> None:
            nonlocal last
            if state != last:  # (a state the final read showed is not heard twice)
                last = state
                self.on_state(state)

        while True:
            seen = watch_until(self.kube, specs, look, done, deadline=max(deadline, clock.monotonic() + 0.001),
                               clock=clock, stop=self.stop_event, on_change=heard)
            if not seen.done:
                raise WaitTimeout(f"VM {ref} did not {what} within {self.timeout_s:g}s"
                                  + (f" ({last.describe()})" if last is not None else "")).with_details(
                    _timed_out(ref, what))
            final = self.read(ref)
            if final is None:
                if what != "stop":
                    raise NotFound(f"VirtualMachine {ref} was deleted while rblnctl waited for it")
                return judge(None, None, name=ref.name)
            heard(final)
            if done(final):
                return final
            if clock.monotonic() >= deadline:
                raise WaitTimeout(f"VM {ref} did not {what} within {self.timeout_s:g}s ({final.describe()})"
                                  ).with_details(_timed_out(ref, what))


def _timed_out(ref: Any, what: str) -> list[str | Remedy]:
    """After a wait for a VM to come up that timed out (the request was made): `vm diagnose` says why it is not
    running (its scheduling, its devices, its launcher pod)."""
    if what == STOP:
        return []
    return [Remedy("see why it is not running: {command}", Command.own("vm", "diagnose", ref.name,
                                                                       namespace=ref.namespace))]


_ING = {START: "starting", STOP: "stopping", RESTART: "restarting"}
