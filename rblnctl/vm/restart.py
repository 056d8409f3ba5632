"""Stop and start a VirtualMachine through virt-api, and wait for each to take effect.

`PUT /apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachines/NAME/{stop,start}` answers 202
(kubevirt/kubevirt@v1.9.0 pkg/virt-api/rest/lifecycle.go): for runStrategy Always/Halted it flips
spec.runStrategy, for Manual/RerunOnFailure it queues a state change request; 409 "VM is not running"
(stop) and "VM is already running" (start) mean there is nothing to do. Bodies are StopOptions /
StartOptions; `dryRun: ["All"]` asks virt-api to validate only. A VM is stopped when its VMI is gone
(or final) and Ready when status.ready is true (printableStatus Running).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import Conflict, NotFound, WaitTimeout
from rblnctl.kube import VM_SUBRESOURCES, VMIS, VMS, Kube, writes
from rblnctl.vm.model import VmRef

log = logging.getLogger(__name__)

_NOTHING_TO_DO = {"stop": re.compile(r"not running", re.I), "start": re.compile(r"already running", re.I)}
FINAL_PHASES = ("Succeeded", "Failed")


def _noop(*_: Any) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class VmState:
    """What the VM and its VMI say now."""

    printable_status: str | None
    ready: bool
    vmi_phase: str | None  # None: no VMI
    node: str | None
    conditions: tuple[str, ...] = ()  # VMI conditions that are False (type: reason message)

    def describe(self) -> str:
        """One phrase for progress lines and errors."""
        parts = [f"status {self.printable_status or '<none>'}",
                 f"VMI {self.vmi_phase or 'absent'}" + (f" on {self.node}" if self.node else "")]
        return ", ".join(parts + list(self.conditions[:2]))


def run_strategy(vm: dict) -> str:
    """The VM's runStrategy (`spec.running` true/false read as Always/Halted, as KubeVirt does)."""
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return str(spec["runStrategy"])
    return "Always" if spec.get("running") else "Halted"


def vm_state(kube: Kube, ref: VmRef) -> VmState:
    """Read the VM and its VMI (two GETs)."""
    vm = kube.get_optional(VMS, ref.name, namespace=ref.namespace) or {}
    vmi = kube.get_optional(VMIS, ref.name, namespace=ref.namespace)
    st = vm.get("status") or {}
    vst = (vmi or {}).get("status") or {}
    bad = tuple(f"{c.get('type')}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
                for c in vst.get("conditions") or [] if c.get("status") == "False" and c.get("type") != "Ready")
    return VmState(printable_status=st.get("printableStatus"), ready=bool(st.get("ready")),
                   vmi_phase=(vst.get("phase") or "Pending") if vmi is not None else None,
                   node=vst.get("nodeName") or None, conditions=bad)


@dataclass(kw_only=True)
class VmRestarter:
    """Stop, then later start, a VM through virt-api; each wait bounded by timeout_s, polling every poll_s."""

    kube: Kube
    clock: Clock = SYSTEM_CLOCK
    timeout_s: float = C.VM_READY_TIMEOUT_S
    poll_s: float = C.VM_POLL_S
    server_dry_run: bool = False  # send dryRun: [All]; nothing is waited for
    on_step: Callable[[str], None] = _noop

    def _put(self, ref: VmRef, action: str) -> None:
        """Ask virt-api to stop or start the VM. Both are idempotent, so a request whose outcome is unknown (a
        lost reply, a 5xx) is settled by reading the VM back and asking again unless its runStrategy already
        says it (rblnctl.kube.writes); virt-api's 409 "VM is not running" / "already running" means done."""
        w = writes.put(VM_SUBRESOURCES, ref.name, sub=action, namespace=ref.namespace, body={})

        def next_write(vm: Any) -> writes.Write | None:
            if vm is writes.UNREAD:
                return w
            if vm is None:
                raise NotFound(f'VirtualMachine "{ref.name}" not found in namespace "{ref.namespace}"')
            strategy = run_strategy(vm)
            if (action == "stop" and strategy == "Halted") or (action == "start" and strategy == "Always"):
                return None
            return w

        try:
            writes.settle(self.kube, next_write, read=lambda: self.kube.get_optional(VMS, ref.name,
                                                                                     namespace=ref.namespace),
                          what=f"VM {ref}", dry_run=self.server_dry_run, backoff_s=self.poll_s / 4, clock=self.clock)
        except Conflict as e:
            if not _NOTHING_TO_DO[action].search(str(e)):
                raise
            log.debug("%s %s: %s", action, ref, e)

    def stop(self, ref: VmRef) -> None:
        """Ask virt-api to stop the VM and wait until its VMI is gone (a server dry run only asks)."""
        self.on_step(f"stopping VM {ref}")
        self._put(ref, "stop")
        if self.server_dry_run:
            return
        self._wait(ref, lambda s: s.vmi_phase is None or s.vmi_phase in FINAL_PHASES, "stop")

    def start(self, ref: VmRef) -> None:
        """Ask virt-api to start the VM (returns at once; wait_ready() waits)."""
        self.on_step(f"starting VM {ref}")
        self._put(ref, "start")

    def wait_ready(self, ref: VmRef) -> VmState:
        """Wait until the VM is Ready; WaitTimeout (with what it shows) when it is not within timeout_s."""
        self.on_step(f"waiting for VM {ref} to be Ready")
        return self._wait(ref, lambda s: s.ready and s.printable_status == "Running", "become Ready")

    def _wait(self, ref: VmRef, done: Callable[[VmState], bool], what: str) -> VmState:
        deadline = self.clock.monotonic() + self.timeout_s
        while True:
            state = vm_state(self.kube, ref)
            if done(state):
                return state
            if self.clock.monotonic() >= deadline:
                raise WaitTimeout(f"VM {ref} did not {what} within {self.timeout_s:g}s "
                                  f"({state.describe()})")
            self.clock.sleep(self.poll_s)
