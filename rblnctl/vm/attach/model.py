"""What a change of a VM's NPUs is made of: its options, its target, its plan and its result (values only)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import InvalidInput
from rblnctl.plan import Advice, Blocker
from rblnctl.remedy import Remedy
from rblnctl.vm.model import NpuDevice, VmRef, npu_choice

ATTACH = "attach"
DETACH = "detach"
# What a stopped VM's NPU patch tests besides its lists (rblnctl/kubevirt/cr.py value_tests): how it runs, and what a
# start changes first. virt-api's start sets spec.runStrategy Always (Halted VMs) or, for Manual and RerunOnFailure,
# appends a Start request to status.stateChangeRequests; virt-controller then sets status.created once the VMI exists
# (kubevirt/kubevirt@v1.9.0 pkg/virt-api/rest/lifecycle.go StartVMRequestHandler, pkg/virt-controller/watch/vm/
# vm.go). A JSON patch's tests see the whole object, status included (kube-apiserver applies it to the stored one).
RUNS = ("Always", "RerunOnFailure", "Once")  # run strategies virt-controller starts a stopped VM for
# What an owner's start changes on a stopped VM: its runStrategy (Halted -> Always), `running`, or a Start request
# (Manual). Not status.created: virt-controller's own observation, which lags a stop just made (a 422 and a retry on
# every attach right after `vm stop --wait`, seen on real KubeVirt v1.9.0) and follows the three above anyway.
# The one list of them: spec members are what an owner's start (or another run) writes; the status member is
# virt-controller's too, which a VM rblnctl holds stopped does not test (rblnctl.vm.attach.mark.held_guards).
RUN_STATE_SPEC = (("spec", "runStrategy"), ("spec", "running"))
RUN_STATE = (*RUN_STATE_SPEC, ("status", "stateChangeRequests"))
_RUN_STATE_PATHS = frozenset("/" + "/".join(p) for p in RUN_STATE)


def of_run_state(path: str) -> bool:
    """Whether a `test` at `path` is one of value_tests(vm, RUN_STATE)'s (a member, or its first missing parent)."""
    return any(p == path or p.startswith(path + "/") for p in _RUN_STATE_PATHS)


def _noop(*_: Any) -> None:
    return None


def virtctl_start(ref: VmRef) -> str:
    """The command that starts a VM rblnctl left stopped, as every message and the document's startCommand spell it."""
    return f"virtctl start {ref.name} -n {ref.namespace}"


# -- options ----------------------------------------------------------------------------------------------

RETRY_BACKOFF_S = 0.2  # a write's first wait after a conflict (the VM patch, a template delete); doubles


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

