"""rblnctl's ResourceClaimTemplates in a change of a VM's NPUs (pure): the one to create, those to delete, those kept.

A template is judged on what was read of it (rblnctl.vm.attach.facts: the objects by name, who names them); the
reads follow the same questions (`leaving`, `left_candidate`, `is_left`), so the facts hold what these judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.plan import Blocker
from rblnctl.vm import devices as D
from rblnctl.vm.attach.layout import Layout, ref_of, template_count
from rblnctl.vm.attach.mark import template_left
from rblnctl.vm.attach.model import Target
from rblnctl.vm.model import VmBlocker, VmNpus


@dataclass(frozen=True, kw_only=True)
class TemplateChange:
    """What a change does to rblnctl's templates of the VM's namespace."""

    create: dict | None = None  # the template to create first
    delete: list[str] = field(default_factory=list)  # rblnctl's templates to delete after (no VM or VMI names them)
    kept: list[str] = field(default_factory=list)  # lines about templates kept, and why
    left: str | None = None  # the record of the template the VM leaves, for its patch (VM_TEMPLATE_LEFT_ANNOTATION)
    blockers: list[Blocker] = field(default_factory=list)


def leaving(have: VmNpus, layout: Layout) -> str | None:
    """The template rblnctl's claim names now and no longer after the change (it may be left unused), or None."""
    old = have.managed_template
    return old if old and old != layout.template else None


def left_candidate(vm: dict, current: str | None) -> tuple[str, str] | None:
    """(name, uid) of the template the VM's last NPU patch moved it off (template_left), unless it names it now."""
    left = template_left(vm)
    return None if left is None or left[0] == current else left


def is_left(obj: dict | None, uid: str) -> bool:
    """The template read is still the one the VM left (its uid) and rblnctl's."""
    return not (obj is None or (obj.get("metadata") or {}).get("uid") != uid or not D.is_managed(obj))


def left_behind(vm: dict, current: str | None, objects: Mapping[str, dict | None], users: Sequence[str]
                ) -> list[str]:
    """The template an interrupted run moved this VM off and did not delete (C.VM_TEMPLATE_LEFT_ANNOTATION), when
    it is still that object (its uid), rblnctl's, and named by no VM (this one included) or VMI (`users`): [name],
    else []."""
    left = left_candidate(vm, current)
    if left is None or not is_left(objects.get(left[0]), left[1]) or users:
        return []
    return [left[0]]


def template_change(vm: dict, have: VmNpus, layout: Layout, target: Target, *, changed: bool,
                    objects: Mapping[str, dict | None], leaving_users: Sequence[str],
                    left_users: Sequence[str]) -> TemplateChange:
    """The templates of this change: `objects` the templates read by name, `leaving_users` who names the one the VM
    leaves (this VM aside; its own VMI too with --next-restart), `left_users` who names the one an interrupted run
    left (this VM included). A VM that does not change only gets the template an interrupted run left deleted."""
    if not changed:
        return TemplateChange(delete=left_behind(vm, layout.template, objects, left_users))
    ref = ref_of(vm)
    create = None
    left = None
    blockers: list[Blocker] = []
    old = have.managed_template
    old_obj = objects.get(old) if old else None
    if layout.template is not None:
        # Attach names the class; a detach that keeps some DRA NPUs keeps the class they had.
        cls = target.device_class or next((c for _, c, _ in D.claim_requests(old_obj or {}) if c),
                                          C.DRA_DEVICECLASS_VM)
        count = template_count(layout.template)
        existing = objects.get(layout.template)
        if existing is None:
            create = D.claim_template(count, cls, namespace=ref.namespace)
        elif not D.template_fits(existing, count, cls):
            asks = ", ".join(f"{n}: {c} x{k}" for n, c, k in D.claim_requests(existing)) or "nothing"
            blockers.append(VmBlocker(
                f"ResourceClaimTemplate {ref.namespace}/{layout.template} exists but asks for something else "
                f"({asks}); rblnctl does not change templates it did not write: delete or rename it"))
    delete: list[str] = []
    kept: list[str] = []
    gone = leaving(have, layout)
    gone_obj = objects.get(gone) if gone else None
    if gone and gone_obj is not None:
        if not D.is_managed(gone_obj):
            kept.append(f"ResourceClaimTemplate {gone} kept: rblnctl did not create it")
        elif leaving_users:
            kept.append(f"ResourceClaimTemplate {gone} kept: {', '.join(leaving_users)} still "
                        f"{'uses' if len(leaving_users) == 1 else 'use'} it")
        else:
            delete.append(gone)
            left = f"{gone} uid={(gone_obj.get('metadata') or {}).get('uid')}"
    return TemplateChange(create=create, delete=delete, kept=kept, left=left, blockers=blockers)


def names_unused(target: Target, have: VmNpus, change: TemplateChange) -> bool:
    """Whether the plan names rblnctl's templates no VM or VMI uses (the VM has, or gets, DRA NPUs)."""
    return bool(target.method == C.METHOD_DRA or have.dra or have.managed_template or change.delete)


def unused_keep(layout: Layout, change: TemplateChange) -> set[str | None]:
    """The templates this change uses, creates or deletes: not named as unused."""
    return {layout.template, *change.delete} | ({change.create["metadata"]["name"]} if change.create else set())


def unused_notes(namespace: str, unused: Sequence[str]) -> list[str]:
    """A note per rblnctl template of the namespace no VM or VMI names (facts: unused_templates), with the command
    that deletes it. Not deleted here: a template another rblnctl run has just created for a VM it is about to patch
    looks the same until that patch lands (the explorer's vm-attach-dra second-opposite at after-01), and rblnctl
    holds no lock that would tell the two apart."""
    return [f"ResourceClaimTemplate {namespace}/{n} is rblnctl's and no VM or VMI of the namespace names it (an "
            f"interrupted rblnctl run left it): unless an rblnctl run is changing a VM of {namespace} now, "
            f"`kubectl delete resourceclaimtemplate {n} -n {namespace}` deletes it"
            for n in unused]
