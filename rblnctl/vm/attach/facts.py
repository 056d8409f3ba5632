"""The facts of a change of a VM's NPUs: every read the plan judges, once (VmReader), in one frozen value (VmFacts).

The VM and its VMI; the claim index when the VM names claims that are not rblnctl's; the cluster (rblnctl.vm.cluster,
its DRA side when the change is DRA); what fits now (rblnctl.vm.fit); the ResourceClaimTemplates the change names
and who names them; rblnctl's templates of the namespace no one names. What is read follows the plan's own questions
(rblnctl.vm.attach.layout, .templates: pure), so the requests are those the plan needs and no more. One reader reads
the cluster once for every VM it plans (policy set-method --convert-vms).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import overload

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.kube import RESOURCE_CLAIM_TEMPLATES, VMIS, VMS, Kube, validate_name
from rblnctl.vm import devices as D
from rblnctl.vm import pending as P
from rblnctl.vm.attach.layout import attach_target, changes, is_running, layout_for, ref_of, resolve
from rblnctl.vm.attach.model import AttachOptions, Target
from rblnctl.vm.attach.templates import (
    is_left,
    leaving,
    left_candidate,
    names_unused,
    template_change,
    unused_keep,
)
from rblnctl.vm.cluster import ClaimIndex, VmCluster, claim_index, read_cluster, with_dra
from rblnctl.vm.fit import FitOptions, FitReader, VmFit
from rblnctl.vm.model import VmNpus
from rblnctl.vm.placement import placement_of


@dataclass(frozen=True, kw_only=True)
class VmFacts:
    """What a plan of a VM's NPUs is decided on (rblnctl.vm.attach.plan judges it; nothing here is read again)."""

    vm: dict
    vmi: dict | None
    now: datetime  # when the facts were read: a stopped mark's lease is judged at it
    npu_claims: tuple[str, ...] = ()  # the VM's claim entries (not rblnctl's) that ask for NPUs
    cluster: VmCluster | None = None  # attach: the cluster (its DRA side when the change is DRA)
    fit: VmFit | None = None  # attach: what fits now of the VM once changed (its own NPUs counted free)
    templates: Mapping[str, dict | None] = field(default_factory=dict)  # ResourceClaimTemplates read by name
    leaving_users: tuple[str, ...] = ()  # who names the template the VM leaves (this VM aside)
    left_users: tuple[str, ...] = ()  # who names the template an interrupted run left (this VM included)
    unused: tuple[str, ...] = ()  # rblnctl's templates of the namespace no VM or VMI names (but the change's)

    def have(self) -> VmNpus:
        """The VM's NPUs as read."""
        return D.npus_of(D.vm_spec(self.vm), npu_claim=lambda e: e.get("name") in self.npu_claims)


@dataclass(kw_only=True)
class VmReader:
    """The reads of vm attach|detach; the cluster read once per reader (reuse it across VMs)."""

    kube: Kube
    clock: Clock = SYSTEM_CLOCK
    cluster: VmCluster | None = None  # facts read on first use (or handed in)
    _claims: ClaimIndex | None = None
    _fits: FitReader | None = None

    def cluster_facts(self, *, dra: bool = False) -> VmCluster:
        """The cluster facts (read once; DRA facts added when first needed)."""
        if self.cluster is None:
            self.cluster = read_cluster(self.kube)
        if dra and self.cluster.dra is None:
            self.cluster = with_dra(self.kube, self.cluster)
        return self.cluster

    def _claim_index(self) -> ClaimIndex:
        if self._claims is None:
            self._claims = claim_index(self.kube, self.cluster_facts())
        return self._claims

    @overload
    def read(self, name: str, namespace: str) -> tuple[dict, dict | None]: ...

    @overload
    def read(self, name: str, namespace: str, *, missing_ok: bool) -> tuple[dict, dict | None] | None: ...

    def read(self, name: str, namespace: str, *, missing_ok: bool = False) -> tuple[dict, dict | None] | None:
        """The VM and its VMI (two GETs, the VM first). No such VM: NotFound, with the names it may have meant, or
        with `missing_ok` None and no VMI read (a VM read back after a write whose absence is an answer)."""
        validate_name(name, kind="VirtualMachine")
        vm = self.kube.get_optional(VMS, name, namespace=namespace)
        if vm is None:
            if missing_ok:
                return None
            from rblnctl.vm.where import not_found

            raise not_found(self.kube, name, namespace)
        return vm, self.kube.get_optional(VMIS, name, namespace=namespace)

    def npu_claims(self, vm: dict) -> tuple[str, ...]:
        """The names of the VM's claim entries (not rblnctl's) that ask for NPUs."""
        ns = vm["metadata"].get("namespace", "")
        entries = [c for c in D.resource_claims(D.vm_spec(vm)) if not D.is_managed_claim(c)]
        index = self._claim_index() if entries else None
        return tuple(str(c.get("name")) for c in entries if index is not None and index.is_npu(ns, c))

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
        re-run deletes them: apply's template delete checks again just before, with the uid as a precondition). One
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

    def template(self, name: str, namespace: str) -> dict | None:
        return self.kube.get_optional(RESOURCE_CLAIM_TEMPLATES, name, namespace=namespace)

    def _fit(self, vm: dict, vmi: dict | None, method: str, resource: str | None, npus: int) -> VmFit:
        """What fits now of the VM once changed (rblnctl.vm.fit, the computation `vm fit` and `vm manifest` use): its
        own virt-launcher's NPUs count as free (a restart gives them back)."""
        if self._fits is None or self._fits.cluster is not self.cluster:
            self._fits = FitReader(kube=self.kube, cluster=self.cluster_facts(dra=method == C.METHOD_DRA))
        own = str(((vmi or {}).get("metadata") or {}).get("uid") or "") if is_running(vmi) else ""
        return self._fits.fit(FitOptions(npus=min(npus, C.MAX_VM_NPUS), method=method, resource=resource,
                                         placement=placement_of(D.vm_spec(vm)), own_vmi=own or None))

    # -- the facts of one change ---------------------------------------------------------------------------------

    def base(self, vm: dict, vmi: dict | None) -> VmFacts:
        """The VM, its VMI and which of its claims ask for NPUs."""
        return VmFacts(vm=vm, vmi=vmi, npu_claims=self.npu_claims(vm), now=self.clock.now())

    def attach(self, vm: dict, vmi: dict | None, options: AttachOptions) -> VmFacts:
        """The facts of an attach of `vm` with `options` (reads only; raises Ambiguous as resolve does)."""
        facts = self.base(vm, vmi)
        have = facts.have()
        choice = resolve(options, self.cluster_facts(), have)
        cluster = self.cluster_facts(dra=choice.method == C.METHOD_DRA)
        facts = dataclasses.replace(facts, cluster=cluster)
        if choice.missing is not None:  # refused: nothing else to read
            return dataclasses.replace(facts, now=self.clock.now())
        fit = self._fit(vm, vmi, choice.method, choice.resource, choice.npus) if choice.npus else None
        target = attach_target(ref_of(vm), choice, options, cluster, facts.npu_claims)
        return self.with_templates(dataclasses.replace(facts, fit=fit), target, next_restart=options.next_restart)

    def with_templates(self, facts: VmFacts, target: Target, *, next_restart: bool) -> VmFacts:
        """The templates `target` names, reads, and who names those it may delete; then rblnctl's templates of the
        namespace no one names (when the VM has or gets DRA NPUs)."""
        vm = facts.vm
        ref = ref_of(vm)
        have = D.npus_of(D.vm_spec(vm), npu_claim=lambda e: e.get("name") in target.npu_claims)
        layout = layout_for(vm, target)
        changed = changes(vm, layout)
        objects: dict[str, dict | None] = {}
        leaving_users: list[str] = []
        left_users: list[str] = []
        if changed:
            old = have.managed_template
            if old:
                objects[old] = self.template(old, ref.namespace)
            if layout.template is not None and layout.template not in objects:
                objects[layout.template] = self.template(layout.template, ref.namespace)
            gone = leaving(have, layout)
            gone_obj = objects.get(gone) if gone else None
            if gone and gone_obj is not None and D.is_managed(gone_obj):
                leaving_users = self.template_users(ref.namespace, gone, exclude=ref.name)
                if next_restart:  # its own VMI runs on with a claim made from it until it restarts
                    leaving_users += P.vmi_naming(self.kube.get_optional(VMIS, ref.name, namespace=ref.namespace),
                                                  gone)
        else:
            objects, left_users = self.left_facts(vm, layout.template)
        facts = dataclasses.replace(facts, templates=objects, leaving_users=tuple(leaving_users),
                                    left_users=tuple(left_users))
        change = template_change(vm, have, layout, target, changed=changed, objects=objects,
                                 leaving_users=leaving_users, left_users=left_users)
        unused: list[str] = []
        if names_unused(target, have, change):
            unused = self.unused_templates(ref.namespace, keep=unused_keep(layout, change))
        return dataclasses.replace(facts, unused=tuple(unused), now=self.clock.now())

    def left_facts(self, vm: dict, current: str | None) -> tuple[dict[str, dict | None], list[str]]:
        """The template an interrupted run moved the VM off (unless it names `current` again), read by name, and
        who names it (this VM included), read only while it is still that template and rblnctl's."""
        left = left_candidate(vm, current)
        if left is None:
            return {}, []
        (name, uid), ns = left, ref_of(vm).namespace
        obj = self.template(name, ns)
        users = self.template_users(ns, name, exclude="", vm_too=True) if is_left(obj, uid) else []
        return {name: obj}, users
