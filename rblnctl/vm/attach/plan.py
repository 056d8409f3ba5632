"""Plan a change of a VM's NPUs from its facts (pure: no I/O; rblnctl.vm.attach.facts reads, .apply writes).

plan_attach() and detach_target() + vm_plan() turn VmFacts into a VmNpuPlan: the spec lists the VM gets
(rblnctl.vm.attach.layout), the templates to create and delete (.templates), the guarded JSON patch, and what stops
the change (blockers: a running VM without --restart, a failing cluster check, another run holding the VM...).
apply's conflict re-plan calls vm_plan() again on the VM read anew, with the templates decided first.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rblnctl import constants as C
from rblnctl.errors import InvalidInput, NotFound
from rblnctl.kubevirt.cr import value_tests
from rblnctl.plan import Advice, Blocker
from rblnctl.remedy import Command, Remedy
from rblnctl.vm import devices as D
from rblnctl.vm import pending as P
from rblnctl.vm.attach.facts import VmFacts
from rblnctl.vm.attach.layout import (
    attach_target,
    changes,
    is_running,
    layout_for,
    node_of,
    phase_of,
    ref_of,
    resolve,
)
from rblnctl.vm.attach.mark import left_ops, mark_holder, stale_mark
from rblnctl.vm.attach.model import (
    ATTACH,
    DETACH,
    RUN_STATE,
    AttachOptions,
    DetachOptions,
    Target,
    VmNpuPlan,
    virtctl_start,
)
from rblnctl.vm.attach.templates import TemplateChange, names_unused, template_change, unused_keep, unused_notes
from rblnctl.vm.cluster import (
    Check,
    VmCluster,
    check_advertised,
    check_device_class,
    check_gates,
    check_permitted,
    check_slices,
)
from rblnctl.vm.fit import VmFit
from rblnctl.vm.lifecycle import MANUAL_RECOVERY, needs_manual_recovery, run_strategy
from rblnctl.vm.model import VmBlocker, VmNpus


def plan_attach(facts: VmFacts, options: AttachOptions, *, identity: str) -> VmNpuPlan:
    """The plan of giving the VM `options.npus` NPUs of the method resolved (rblnctl.vm.attach.layout.resolve), on
    the facts read for it (VmReader.attach). `identity`: the run planning it (whose stopped mark is its own)."""
    vm, vmi = facts.vm, facts.vmi
    cluster = facts.cluster
    if cluster is None:
        raise ValueError("the facts of an attach hold the cluster (VmReader.attach)")
    have = facts.have()
    choice = resolve(options, cluster, have)
    warnings: list[str | Remedy] = list(choice.warnings)
    if choice.missing is not None:
        return refusal(vm, vmi, have, choice.method, choice.npus, [choice.missing], warnings)
    target = attach_target(ref_of(vm), choice, options, cluster, facts.npu_claims)
    found = checks(cluster, choice.method, choice.resource) if choice.npus else []
    never: VmFit | None = None
    if choice.npus and facts.fit is not None:
        fit_warnings, never = fit_verdict(facts.fit)
        warnings += fit_warnings
    plan = vm_plan(facts, target, options=options, identity=identity, checks=found,
                   warnings=warnings + list(cluster.notes))
    return never_runs(plan, never, force=options.force)


def never_runs(plan: VmNpuPlan, never: VmFit | None, *, force: bool) -> VmNpuPlan:
    """A restart onto more NPUs than any node the VM may run on has at all (free or not) stops a running VM that
    can never start again: refused unless forced (the verdict the question would hide), with the count that fits."""
    most = never.most if never is not None else None
    if not plan.restart or never is None or most is None:
        return plan
    warning = never.warning()
    if force:
        return dataclasses.replace(plan, warnings=[*plan.warnings, f"restarting VM {plan.vm} anyway (forced): "
                                                   "it will not start again until a node offers that many"])
    ref = plan.vm
    blocker = VmBlocker(
        f"{warning}: restarting stops VM {ref}, which runs now, and it could not start again", override="force",
        remedy=Remedy(f"ask for at most {most[0]} NPU(s)", Command.own(
            "vm", "attach", ref.name, namespace=ref.namespace, npus=str(most[0]), restart=True)))
    return dataclasses.replace(plan, warnings=[w for w in plan.warnings if str(w) != warning],
                               blockers=[*plan.blockers, blocker])


def fit_verdict(fit: VmFit) -> tuple[list[str | Remedy], VmFit | None]:
    """The warning when the VM, once changed, would not be scheduled now (rblnctl.vm.fit), and for a resource
    container-mode nodes advertise too (VmFit.shared_with), that the scheduler may put it there. Second: the fit
    when no node the VM may run on has that many NPUs at all (VmFit.never), else None."""
    warning = fit.warning()
    return [w for w in (fit.shared, warning) if w], fit if fit.never else None


def checks(cluster: VmCluster, method: str, resource: str | None) -> list[Check]:
    """The cluster checks a change to `method` (and `resource`) refuses on."""
    found = [check_gates(cluster, method)]
    if method == C.METHOD_SANDBOX and resource:
        advertised = check_advertised(cluster, resource)
        # a name no node advertises (a typo: ATOM_MAXPT) gets no remedy that would permit it in KubeVirt
        found += [advertised] + ([check_permitted(cluster, resource)] if advertised.ok else [])
    elif method == C.METHOD_DRA:
        found += [check_device_class(cluster), check_slices(cluster)]
    return found


def refusal(vm: dict, vmi: dict | None, have: VmNpus, method: str, npus: int, failed: list[Check],
            warnings: Sequence[str | Remedy]) -> VmNpuPlan:
    """A plan that cannot be made (no resource to name): nothing to write, the failing checks as blockers."""
    target = Target(action=ATTACH, method=method, npus=npus)
    spec = D.vm_spec(vm)
    return VmNpuPlan(
        vm=ref_of(vm), target=target, method=method, resource=None, device_class=None, npus_before=have.count,
        npus_after=have.count, devices_before=list(have.devices), devices_after=list(have.devices),
        host_devices_before=D.host_devices(spec), host_devices_after=D.host_devices(spec),
        resource_claims_before=D.resource_claims(spec), resource_claims_after=D.resource_claims(spec), added=[],
        removed=[], template=have.managed_template, template_create=None, templates_delete=[], templates_kept=[],
        running=is_running(vmi), node=node_of(vmi), restart=False, patch=None, noop=False, warnings=list(warnings),
        blockers=[blocker(c) for c in failed if not c.ok])


def detach_target(facts: VmFacts, options: DetachOptions) -> tuple[Target, list[str | Advice]]:
    """The Target of taking NPUs from the VM: all of them, or the host device `options.device`, and the warnings
    that go with it. InvalidInput: `device` is a host device that is no NPU; NotFound: a name no earlier detach can
    have removed."""
    vm = facts.vm
    ref = ref_of(vm)
    have = facts.have()
    device = options.device
    warnings: list[str | Advice] = []
    if device is not None:
        names = [d.name for d in have.devices]
        listed = ", ".join(names) or "none"
        if device in names:
            remove_names: tuple[str, ...] = (device,)
        elif any(d.get("name") == device for d in D.host_devices(D.vm_spec(vm))):
            raise InvalidInput(f"VM {ref} has no NPU host device {device!r} (its NPU devices: {listed})")
        elif not _maybe_detached(vm, device, names):
            # a name no earlier detach can have removed: as `kubectl delete` of an object that is not there,
            # NotFound (a typo, `npu7` of a VM with npu0 and npu1, is never "nothing to do" with exit 0)
            raise NotFound(f"VM {ref} has no host device {device!r} (its NPU devices: {listed}); "
                           "nothing was detached")
        else:  # gone already, and the VM still carries the stop mark of the run that removed it: a re-run of
            # a detach that landed finishes the job (starts what the earlier run stopped) instead of failing
            warnings.append(f"VM {ref} has no host device {device!r} (its NPU devices: {listed}): "
                            "nothing to detach")
            remove_names = ()
    else:
        remove_names = tuple(d.name for d in have.devices)
    left = [d for d in have.devices if d.name not in remove_names]
    method = left[0].method if left else None
    return Target(action=DETACH, method=method, npus=len(left), remove=remove_names, npu_claims=facts.npu_claims,
                  claim=D.claim_name(ref.namespace, ref.name)), warnings


def vm_plan(facts: VmFacts, target: Target, *, options: AttachOptions, identity: str, checks: Sequence[Check] = (),
            warnings: Sequence[str | Advice | Remedy] = (), templates: TemplateChange | None = None) -> VmNpuPlan:
    """Plan `target` against the VM of `facts`; `templates` reuses an earlier plan's (a conflict's re-plan: the
    facts then hold only the VM and its VMI read anew)."""
    vm, vmi = facts.vm, facts.vmi
    ref = ref_of(vm)
    spec = D.vm_spec(vm)
    have = D.npus_of(spec, npu_claim=lambda e: e.get("name") in target.npu_claims)
    layout = layout_for(vm, target)
    claims_before = D.resource_claims(spec)
    devices_before = D.host_devices(spec)
    changed = changes(vm, layout)
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
                blockers.append(blocker(c))
            else:
                warns.append(f"{c.message} (the VM already has what was asked; nothing to change)")
    if templates is None:
        templates = template_change(vm, have, layout, target, changed=changed, objects=facts.templates,
                                    leaving_users=facts.leaving_users, left_users=facts.left_users)
        blockers += templates.blockers
        if names_unused(target, have, templates):
            keep = unused_keep(layout, templates)
            warns += unused_notes(ref.namespace, [n for n in facts.unused if n not in keep])
    create, delete, kept, left = templates.create, templates.delete, templates.kept, templates.left
    if delete and not changed:
        warns.append(f"ResourceClaimTemplate {ref.namespace}/{delete[0]}: an interrupted rblnctl run moved VM "
                     f"{ref} off it and did not delete it; no VM or VMI names it: deleting it")
    running = running_now(vm, vmi)
    meta = vm.get("metadata") or {}
    blockers += refusals(vm, vmi, changed=changed, running=running, options=options)
    spec_after = {"domain": {"devices": {"hostDevices": layout.host_devices}}, "resourceClaims": layout.claims}
    after = D.npus_of(spec_after, npu_claim=lambda e: e.get("name") in target.npu_claims)
    patch = None
    if changed:
        patch = D.guarded_patch(vm, layout.host_devices, layout.claims)
        if not running:  # changed as a stopped VM: only while it stays stopped (started meanwhile: 422, refused)
            patch[1:1] = value_tests(vm, RUN_STATE)
        patch += left_ops(vm, left)
    mark = mark_verdict(vm, changed=changed, running=running, now=facts.now, identity=identity)
    stale, stopped_by_us = mark.stale, mark.stopped_by_us
    blockers += mark.blockers
    warns += mark.warnings
    if options.next_restart:  # the change waits for the VM's next restart: running is no refusal
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
        node=node_of(vmi), restart=bool(changed and running and options.restart), patch=patch,
        noop=not changed and not stopped_by_us and not delete, template_left=left,
        warnings=warns, blockers=blockers, start=stopped_by_us,
        generation=meta.get("generation"), stale_mark=bool(stale), uid=meta.get("uid") or None,
        run_strategy=run_strategy(vm),
        next_restart=bool(changed and options.next_restart and held is not None
                          and P.differ(held.devices, after.devices)),
        running_npus=held.count if held is not None else None)


def running_now(vm: dict, vmi: dict | None) -> bool:
    """Whether a VMI runs (or is starting), to a plan: one that rblnctl's own stop is still deleting (an interrupted
    run's, its mark still rblnctl's to act on) counts as stopped."""
    running = is_running(vmi)
    annotated = bool(((vm.get("metadata") or {}).get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION))
    if running and annotated and ((vmi or {}).get("metadata") or {}).get("deletionTimestamp") \
            and not stale_mark(vm):
        running = False  # rblnctl's own stop, still being carried out (an interrupted run): stopped, to this plan
    return running


def refusals(vm: dict, vmi: dict | None, *, changed: bool, running: bool, options: AttachOptions) -> list[Blocker]:
    """What stops a change of this VM as it is: being deleted, running without --restart (the override), running
    with --restart but not startable again by rblnctl."""
    ref = ref_of(vm)
    meta = vm.get("metadata") or {}
    blockers: list[Blocker] = []
    if changed and meta.get("deletionTimestamp"):
        blockers.append(VmBlocker(f"VM {ref} is being deleted"))
    if changed and running and options.restart and needs_manual_recovery(vm):
        # stopped, it could not be started again: refuse before stopping it
        blockers.append(VmBlocker(f"VM {ref} cannot be restarted by rblnctl: {MANUAL_RECOVERY}"))
    if changed and running and not options.restart:
        blockers.append(VmBlocker(f"VM {ref} is running (VMI {phase_of(vmi)}"
                                  + (f" on {node_of(vmi)}" if node_of(vmi) else "")
                                  + "): a change to its NPUs takes effect only when it restarts",
                                  override="restart"))  # the CLI names the flag next (--restart's help says
                                                        # what a restart does): the way on comes first
    return blockers


@dataclass(frozen=True, kw_only=True)
class MarkVerdict:
    """What the VM's stopped mark says to a plan (docs/architecture.md, "VMs rblnctl stops")."""

    stale: str | None  # why the mark is not rblnctl's to act on (stale_mark), or None
    stopped_by_us: bool  # an earlier run stopped the VM and could not start it: this plan starts it
    warnings: list[str | Advice | Remedy]
    blockers: list[Blocker]


def mark_verdict(vm: dict, *, changed: bool, running: bool, now: datetime, identity: str) -> MarkVerdict:
    """Judge the VM's stopped mark at `now` for the run `identity`: held live by another run (a blocker, or a
    warning when nothing changes), expired (taken over), stale (left, named), or this run's to finish (start)."""
    ref = ref_of(vm)
    annotated = bool(((vm.get("metadata") or {}).get("annotations") or {}).get(C.VM_STOPPED_ANNOTATION))
    warns: list[str | Advice | Remedy] = []
    blockers: list[Blocker] = []
    holder = mark_holder(vm, now) if annotated else None
    other = holder if holder is not None and holder.holder != identity else None
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
    return MarkVerdict(stale=stale, stopped_by_us=stopped_by_us, warnings=warns, blockers=blockers)


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


def blocker(check: Check) -> VmBlocker:
    return VmBlocker(check.message, remedy=check.remedy)
