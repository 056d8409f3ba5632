"""The VM read again around apply()'s writes: is it still the VM changed (still_the_vm), may rblnctl still start the
VM it stopped (not_ours_now)? Reads and judgements only; the writes are apply's, patcher's and marker's."""

from __future__ import annotations

from collections.abc import Sequence

from rblnctl import constants as C
from rblnctl.errors import NotFound
from rblnctl.kube import VMS
from rblnctl.remedy import Command, Remedy
from rblnctl.vm import devices as D
from rblnctl.vm import pending as P
from rblnctl.vm.attach.facts import VmReader
from rblnctl.vm.attach.layout import is_running
from rblnctl.vm.attach.mark import StartedMeanwhile, marked_stopping, stale_mark
from rblnctl.vm.attach.model import VmNpuPlan, virtctl_start
from rblnctl.vm.lifecycle import VmLifecycle, replaced, run_strategy
from rblnctl.vm.model import VmBlocker


def still_the_vm(reader: VmReader, plan: VmNpuPlan) -> None:
    """After a change that starts nothing: the VM read back is the one changed (its uid), or Replaced. A VM
    deleted and re-created after the patch landed is another one, which holds none of the change: not done (the
    templates it names are kept: the template delete read its users just before)."""
    read = reader.read(plan.vm.name, plan.vm.namespace, missing_ok=True)
    if read is None:
        return
    vm, vmi = read
    uid = (vm.get("metadata") or {}).get("uid")
    if plan.uid is not None and uid != plan.uid:
        raise replaced(plan.vm, "changed its NPUs").with_details([
            f"the change was made to the VM rblnctl read (uid {plan.uid}), deleted since; the one there now (uid "
            f"{uid}) has the NPUs its own manifest gives it: re-run the command to change it"])
    if plan.running:
        return
    # Planned as stopped: its patch tested the run state as read, but a Manual VM's start is only a Start request
    # in its status, which virt-controller turns into a VMI and clears, all before the patch can see it (seen on
    # real KubeVirt v1.9.0 under load: the patch landed, "1 -> 2 NPU(s)", exit 0, and the VM ran with 1). A VMI
    # now that runs without the change: say so, not done.
    if vmi is None or not is_running(vmi) or runs_with(vmi, plan):
        return
    ref = plan.vm
    # who started it: with runStrategy Always (or RerunOnFailure) and no VMI when rblnctl read it, virt-controller
    # makes one by itself, from the spec as it was then (the VM between two runs: its last VMI just gone)
    strategy = str((vm.get("spec") or {}).get("runStrategy") or "")
    who = f"by KubeVirt (runStrategy {strategy})" if strategy in ("Always", "RerunOnFailure") else "by someone else"
    raise StartedMeanwhile(
        f"VM {ref} was started {who} while rblnctl changed its NPUs: the change is in its spec, but it "
        "runs with the NPUs it had", blockers=[VmBlocker(
            "the change takes effect when it restarts", remedy=Remedy("restart it onto the change with {command}",
                                                                      Command.own("vm", "restart", ref.name,
                                                                                  namespace=ref.namespace)))])


def runs_with(vmi: dict, plan: VmNpuPlan) -> bool:
    """Whether the VMI was made from the changed spec: its NPU host devices and claims are the plan's (by name and
    device, as virt-controller copies them from the template)."""
    spec = vmi.get("spec") or {}

    def names(entries: Sequence[dict], key: str) -> list[tuple[object, object]]:
        return sorted((e.get("name"), e.get(key)) for e in entries)

    return (names(D.host_devices(spec), "deviceName") == names(plan.host_devices_after, "deviceName")
            and names(D.resource_claims(spec), "resourceClaimTemplateName")
            == names(plan.resource_claims_after, "resourceClaimTemplateName"))


def not_ours_now(life: VmLifecycle, plan: VmNpuPlan, *, stop_seen: bool = True, changed: bool = True) -> str | None:
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
    if stop_seen and marked_stopping(value):
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
