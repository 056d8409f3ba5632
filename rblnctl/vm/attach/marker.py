"""The stopped mark's one writer (C.VM_STOPPED_ANNOTATION on a VM rblnctl stops): MarkWriter, a guarded JSON patch
settled by reading the VM back. What a mark says and when it is stale is rblnctl.vm.attach.mark's (pure); when apply()
and its clean-up (rblnctl.vm.attach.recovery) write it is theirs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock, iso_utc
from rblnctl.errors import NotFound
from rblnctl.kube import VMS, Kube, writes
from rblnctl.kubevirt.cr import identity_test, is_conflict
from rblnctl.vm.attach.mark import MARK_STOPPING, MarkHeld, mark_holder, mark_key, mark_value, released
from rblnctl.vm.attach.model import VmNpuPlan, WriteOptions
from rblnctl.vm.lifecycle import VmLifecycle, replaced
from rblnctl.vm.model import VmBlocker


class MarkStep(Protocol):
    """How apply() and its clean-up write the mark (AttachPlanner._mark: MarkWriter.write for the run)."""

    def __call__(self, plan: VmNpuPlan, state: str | None, *, within: VmLifecycle | None = None,
                 release: bool = False) -> None: ...


@dataclass(frozen=True, kw_only=True)
class MarkWriter:
    """Writes the stopped mark of the run `identity` on the VM of a plan."""

    kube: Kube
    clock: Clock
    identity: str  # the holder the run's marks name (mark_holder)
    options: WriteOptions  # ready_timeout_s (the mark's lease), server_dry_run

    def write(self, plan: VmNpuPlan, state: str | None, *, within: VmLifecycle | None = None,
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
            key = mark_key()
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
