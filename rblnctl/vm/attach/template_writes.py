"""The writes of rblnctl's ResourceClaimTemplates in a change of a VM's NPUs: TemplateWriter creates the one the change
names (before the VM patch) and deletes those no VM or VMI names any more (after it), each settled by reading back.
Which templates those are is rblnctl.vm.attach.templates' (pure); who names one, rblnctl.vm.attach.facts'."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import Clock
from rblnctl.errors import Conflict, NotFound
from rblnctl.kube import RESOURCE_CLAIM_TEMPLATES, Kube, writes
from rblnctl.vm import devices as D
from rblnctl.vm.attach.facts import VmReader
from rblnctl.vm.attach.layout import template_count
from rblnctl.vm.attach.model import RETRY_BACKOFF_S, VmEvents, VmNpuPlan, WriteOptions
from rblnctl.vm.model import VmRef


@dataclass(frozen=True, kw_only=True)
class TemplateWriter:
    """Creates and deletes rblnctl's ResourceClaimTemplates of one VM's namespace."""

    kube: Kube
    reader: VmReader  # who names a template, read again just before its delete
    options: WriteOptions  # server_dry_run, max_attempts
    events: VmEvents
    clock: Clock

    def create_for(self, plan: VmNpuPlan) -> str:
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
            if D.template_fits(existing, template_count(name), cls):
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
        if existing is None or not D.template_fits(existing, template_count(name), cls):
            raise different(existing)
        return name

    def delete_unused(self, ref: VmRef, names: Sequence[str]) -> tuple[list[str], list[str]]:
        """Delete each of `names` that is still rblnctl's and that no VM (`ref` itself included) or VMI names, with
        its uid and resourceVersion as preconditions. Returns (deleted, lines about those kept and why)."""
        deleted: list[str] = []
        kept: list[str] = []
        ns = ref.namespace
        for name in names:
            # The VM itself too: after rblnctl's patch its spec names the template only if someone put it back
            # meanwhile (a second rblnctl's opposite change reuses it: issue 37's explorer, second-opposite).
            users = [] if self.options.server_dry_run else self.reader.template_users(ns, name, exclude=ref.name,
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
