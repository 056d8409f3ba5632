"""MethodChanger: read the cluster, plan, patch the RBLNClusterPolicy, wait for the operator, convert the VMs."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any
from dataclasses import dataclass, field

from rblnctl import batch
from rblnctl import constants as C
from rblnctl.audit import DONE, Auditor, Regarding, one_line, outcome_of
from rblnctl.batch import ItemOutcome, State
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import (
    ClusterError,
    Conflict,
    NotFound,
    Partial,
    RblnError,
    Refused,
    WaitTimeout,
)
from rblnctl.kube import (
    CLUSTER_POLICIES,
    CRDS,
    DAEMONSETS,
    DEVICE_CLASSES,
    KUBEVIRTS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    VMIS,
    VMS,
    Kube,
    Mirror,
    WatchSpec,
    watch_until,
    writes,
)
from rblnctl.kube.optional import OnForbidden, optional
from rblnctl.vm.model import VmRef
from rblnctl.method.plan import (
    Conversion,
    MethodEvents,
    MethodFacts,
    MethodOptions,
    MethodPlan,
    MethodResult,
    MethodStep,
    refusal_of,
    old_method_vms,
    parse_method,
    plan_edit,
    plan_method,
)
from rblnctl.operator import convergence
from rblnctl.operator.cluster import OperatorView, read_operator
from rblnctl.operator.release import operator_deployments
from rblnctl.operator.components import component_of_pod
from rblnctl.operator.nodes import labels_of, list_npu_node_objects, mode_of, npu_node_selectors
from rblnctl.operator.policy import choose_active, parse_policy
from rblnctl.remedy import Command, Remedy
from rblnctl.vm import devices as D

log = logging.getLogger(__name__)


# -- the changer ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MethodState:
    """One look at the cluster while waiting: what each vm-passthrough node still misses."""

    method: str | None  # the active policy's method now
    nodes: dict[str, list[str]]  # vm-passthrough node -> what is still missing ([] when rolled)
    cluster: list[str]  # cluster-wide things missing (the DeviceClass)

    @property
    def missing(self) -> list[str]:
        """Everything still missing, one line each, nodes first by name."""
        return [f"{n}: {m}" for n, ms in sorted(self.nodes.items()) for m in ms] + self.cluster


@dataclass(kw_only=True)
class MethodChanger:
    """Switch the allocation method of the cluster's VMs; options.timeout_s bounds the wait."""

    kube: Kube
    options: MethodOptions = field(default_factory=MethodOptions)
    events: MethodEvents = field(default_factory=MethodEvents)
    clock: Clock = SYSTEM_CLOCK
    audit: Auditor | None = None  # writes the change's Events on the policy (None: none; never in a server dry run)

    def _view(self) -> OperatorView:
        view = read_operator(self.kube, namespace=self.options.operator_namespace)
        if view.policy is None:
            why = "no RBLNClusterPolicy exists" if view.crd_installed else "the RBLNClusterPolicy CRD is not installed"
            raise Refused(f"{why}: there is no allocation method to change; install the RBLN NPU Operator with its "
                          "RBLNClusterPolicy first")
        return view

    def facts(self, target: str) -> MethodFacts:
        """Read what plan() needs: a fixed set of requests whatever the cluster size."""
        view = self._view()
        assert view.policy is not None
        policy_obj = self.kube.get(CLUSTER_POLICIES, view.policy.name)
        kubevirts = optional(lambda: self.kube.list(KUBEVIRTS), what="list KubeVirts", absent=[],
                             on_forbidden=OnForbidden.ERROR).value
        read = optional(lambda: self.kube.list(VMIS), what="list VirtualMachineInstances", absent=[],
                        on_forbidden=OnForbidden.UNKNOWN)  # refused: vmis None, vmis_error says why (the plan blocks)
        vmis, vmis_error = read.value, read.forbidden
        read = optional(lambda: self.kube.list(VMS), what="list VirtualMachines", absent=[],
                        on_forbidden=OnForbidden.UNKNOWN)  # refused: vms_error says why
        vms, vms_error = read.value or [], read.forbidden
        old_vms = old_method_vms(vms, target, self._claim_test(view)) if vms else []
        old_vms += self._left_templates(vms, old_vms, vmis or [])
        served = daemonsets = None
        if target == C.METHOD_DRA:
            served = not optional(lambda: self.kube.list(DEVICE_CLASSES), what="list DeviceClasses",
                                  on_forbidden=OnForbidden.ERROR).absent
            daemonsets = optional(lambda: self.kube.list(DAEMONSETS), what="list DaemonSets",  # refused: unknown
                                  on_forbidden=OnForbidden.UNKNOWN).value
        # its admission rules are what this cluster enforces (rblnctl.operator.admission); refused: unknown (None)
        crd = optional(lambda: self.kube.get(CRDS, f"{C.CLUSTER_POLICY_PLURAL}.{C.CLUSTER_POLICY_GROUP}"),
                       what="get the RBLNClusterPolicy CRD", on_forbidden=OnForbidden.UNKNOWN).value
        return MethodFacts(policy_obj=policy_obj, view=view, crd=crd,
                           server_version=str(self.kube.server_version().get("gitVersion") or "") or None,
                           kubevirts=kubevirts, operators=operator_deployments(self.kube),
                           nodes=list_npu_node_objects(self.kube), vmis=vmis, vmis_error=vmis_error,
                           old_method_vms=old_vms, vms_error=vms_error, device_classes_served=served,
                           daemonsets=daemonsets)

    def _left_templates(self, vms: Sequence[dict], converting: Sequence[Conversion], vmis: Sequence[dict]
                        ) -> list[Conversion]:
        """VMs converted by a run interrupted before it deleted the old method's template (the VM names it:
        rblnctl.vm.attach.template_left), while that template is still there (one LIST, only when a VM names one):
        the conversion deletes it (AttachPlanner: only while it is rblnctl's and no VM or VMI names it)."""
        from rblnctl.vm.attach import template_left

        skip = {(c.vm.namespace, c.vm.name) for c in converting}
        named = [(vm, left) for vm in vms if (left := template_left(vm)) is not None
                 and (str(vm["metadata"].get("namespace") or ""), str(vm["metadata"].get("name") or "")) not in skip]
        if not named:
            return []
        templates = optional(lambda: self.kube.list(RESOURCE_CLAIM_TEMPLATES), what="list ResourceClaimTemplates",
                             absent=[], on_forbidden=OnForbidden.UNKNOWN).value or []
        there = {(str(t["metadata"].get("namespace") or ""), t["metadata"].get("name"), t["metadata"].get("uid"))
                 for t in templates}
        specs = [*((v, D.vm_spec(v)) for v in vms), *((i, D.vmi_spec(i)) for i in vmis)]
        used = {(str(o["metadata"].get("namespace") or ""), t) for o, spec in specs for t in D.templates_used(spec)}
        out = []
        for vm, (name, uid) in named:
            meta = vm["metadata"]
            ns = str(meta.get("namespace") or "")
            if (ns, name, uid) in there and (ns, name) not in used:  # one a VM or VMI names is no leftover
                out.append(Conversion(vm=VmRef(namespace=ns, name=str(meta.get("name") or "")),
                                      npus=max(1, D.npus_of(D.vm_spec(vm)).count), devices=[],
                                      uid=meta.get("uid") or None, left_template=name))
        return sorted(out, key=lambda c: c.vm)

    def _claim_test(self, view: OperatorView) -> Callable[[str], D.ClaimTest]:
        """Which resourceClaims entries ask for NPUs, per namespace: rblnctl's own, and (with convert_vms, which
        rewrites them) hand-made ones whose template or claim requests the passthrough class."""
        if not self.options.convert_vms:
            return lambda _ns: D.is_managed_claim
        from rblnctl.vm.cluster import ClaimIndex

        assert view.policy is not None
        index = ClaimIndex(kube=self.kube, classes=frozenset({view.policy.dra_device_class_vm, C.DRA_DEVICECLASS_VM}))
        return index.test

    def plan(self, target: str) -> MethodPlan:
        """Read the cluster and plan the change to `target` (reads only)."""
        target = parse_method(target)
        return plan_method(target, self.facts(target), force=self.options.force, convert=self.options.convert_vms,
                           evict_vms=self.options.evict_vms)

    def apply(self, plan: MethodPlan) -> MethodResult:
        """Patch the policy (a no-op plan patches nothing), wait for the operator (unless a server dry run), then
        convert the VMs (convert_vms).

        Raises Refused on blockers or when the policy is switched back while waiting, Conflict when the
        policy kept changing under us, WaitTimeout (with what is still missing) when the operator did
        not roll the plugins within options.timeout_s: then the VMs to convert are named as not converted.
        Raises Partial (the result attached) when a VM could not be converted (rblnctl.batch).
        """
        if plan.blockers:
            raise Refused(f"refusing to switch the allocation method to {plan.target}", blockers=plan.blockers)
        run = None
        if self.audit is not None and plan.edit.patch and not self.options.server_dry_run:
            # Only a run that changes the policy is recorded on it (a re-run that waits or converts VMs changes
            # no policy).
            run = self.audit.run(Regarding.policy(plan.policy, plan.policy_uid), C.AUDIT_SET_METHOD,
                                 from_=plan.current, to=plan.target, on_failed=self.events.on_warning)
            run.start(f"switching the VM allocation method of RBLNClusterPolicy {plan.policy} from "
                      f"{plan.current or 'none'} to {plan.target}")
        try:
            result = self._apply(plan)
        except BaseException as err:
            if run is not None:
                outcome = outcome_of(err)
                if isinstance(err, Partial):
                    note = (f"RBLNClusterPolicy {plan.policy} switched to {plan.target} and rolled, but not every "
                            f"VM was converted: {one_line(err)}")
                else:
                    note = f"switch of RBLNClusterPolicy {plan.policy} to {plan.target} {outcome}: {one_line(err)}"
                run.finish(outcome, note)
            raise
        if run is not None:
            rolled = f"the operator rolled it on {len(result.converged)} node(s)" if result.waited else \
                "not waited for"
            run.finish(DONE, f"switched RBLNClusterPolicy {plan.policy} from {plan.current or 'none'} to "
                       f"{plan.target}: {rolled}, {len(result.converted)} VM(s) converted")
        return result

    def _apply(self, plan: MethodPlan) -> MethodResult:
        started = self.clock.monotonic()
        changed, attempts = False, 0
        waited = self.options.wait and not self.options.server_dry_run
        converged: list[str] = []
        try:
            if plan.edit.patch:
                self.events.on_step(MethodStep.PATCH, f"RBLNClusterPolicy {plan.policy}: " + ", ".join(
                    f"{k}.enabled={'true' if v['enabled'] else 'false'}" for k, v in plan.edit.patch["spec"].items()))
                changed, attempts, plan = self._patch(plan)
            if waited:
                self.events.on_step(MethodStep.WAIT, f"waiting for the operator to roll the {plan.target} plugin on "
                                    f"{len(plan.vm_nodes)} vm-passthrough node(s)")
                converged = self._wait(plan, started + self.options.timeout_s)
        except RblnError as err:
            if plan.conversions and waited:
                names = ", ".join(str(c.vm) for c in plan.conversions)
                raise err.with_details([*err.details, f"not converted (the method change did not finish): {names}"])
            raise
        outcomes = self._convert(plan) if plan.conversions and waited else []
        result = MethodResult(plan=plan, changed=changed, attempts=attempts, converged=converged, waited=waited,
                              elapsed_s=round(self.clock.monotonic() - started, 3),
                              converted=[o.name for o in outcomes if o.state == State.DONE],
                              server_dry_run=self.options.server_dry_run, conversions=outcomes)
        if not batch.complete(outcomes):
            raise batch.partial(f"RBLNClusterPolicy {plan.policy} selects {plan.target} and the operator rolled it, "
                                "but not every VM was converted", outcomes, result)
        return result

    def _convert(self, plan: MethodPlan) -> list[ItemOutcome]:
        """Re-express each VM's NPUs with the new method through the vm attach library (its count kept).

        Every VM is tried (rblnctl.batch): one that cannot be converted (it started meanwhile, several resources
        could be meant, RBAC refuses its namespace, it kept changing) does not stop the others; only a failure
        that makes the rest pointless (the API server gone) leaves them not attempted. One outcome per VM.
        """
        from rblnctl.vm.attach import AttachOptions, AttachPlanner

        old = C.METHOD_DRA if plan.target == C.METHOD_SANDBOX else C.METHOD_SANDBOX
        switched: list[str] = []  # the policy no longer selects plan.target: why (the rest are not attempted)

        def still_selected() -> None:
            """Before each VM write: a second set-method may have switched the policy back since the wait."""
            obj = self.kube.get_optional(CLUSTER_POLICIES, plan.policy)
            now = parse_policy(obj).vm_method if obj is not None else None
            if now != plan.target:
                switched.append(f"RBLNClusterPolicy {plan.policy} was changed by someone else while rblnctl converted "
                                f"the VMs: it now selects {now or 'no VM allocator'}, not {plan.target}")
                raise Refused(f"{switched[-1]}; this VM was not converted")

        planner = AttachPlanner(kube=self.kube, clock=self.clock, guard=still_selected,
                                options=AttachOptions(method=plan.target, convert=True,
                                                      max_attempts=self.options.max_attempts))
        outcomes: list[ItemOutcome] = []
        stopped: str | None = None
        for c in plan.conversions:
            name = str(c.vm)
            if stopped is not None:
                outcomes.append(ItemOutcome(kind="VirtualMachine", name=name, state=State.NOT_ATTEMPTED,
                                            reason=stopped))
                continue
            if c.left_template is not None:  # converted already: only the template an interrupted run left
                self.events.on_step(MethodStep.CONVERT, f"VM {c.vm}: ResourceClaimTemplate {c.left_template}, which "
                                    "an interrupted conversion left, to delete")
                try:
                    gone = planner.clean_up_left(c.vm.name, c.vm.namespace, uid=c.uid)
                except NotFound:
                    gone = []
                except RblnError as e:
                    stopped = batch.stops_the_rest(e)
                    outcomes.append(ItemOutcome(kind="VirtualMachine", name=name, state=State.FAILED,
                                                reason=batch.one_line(e)))
                    continue
                outcomes.append(ItemOutcome(
                    kind="VirtualMachine", name=name, state=State.DONE if gone else State.UNCHANGED,
                    reason=f"ResourceClaimTemplate {c.left_template} deleted" if gone else "nothing left to clean up"))
                continue
            self.events.on_step(MethodStep.CONVERT, f"VM {c.vm}: {c.npus} NPU(s) from {old} to {plan.target}")
            hint = Remedy("convert it with {command}", Command.own("vm", "attach", c.vm.name, namespace=c.vm.namespace,
                                                                  method=plan.target, convert=True))
            try:
                # the VM this plan read: one deleted and re-created since is another one (Replaced: reported, failed)
                vm_plan = planner.plan(c.vm.name, c.vm.namespace, uid=c.uid,
                                       while_="switched the allocation method")
                if vm_plan.blockers:
                    reason, remedy = refusal_of(vm_plan.blockers)
                    outcomes.append(ItemOutcome(kind="VirtualMachine", name=name, state=State.FAILED, reason=reason,
                                                remedy=remedy))
                    continue
                if vm_plan.noop:
                    outcomes.append(ItemOutcome(kind="VirtualMachine", name=name, state=State.UNCHANGED,
                                                reason=f"it already gets its NPUs through {plan.target}"))
                    continue
                result = planner.apply(vm_plan)
            except NotFound:
                outcomes.append(ItemOutcome(kind="VirtualMachine", name=name, state=State.UNCHANGED,
                                            reason="deleted meanwhile"))
                continue
            except RblnError as e:
                stopped = switched[0] if switched else batch.stops_the_rest(e)
                outcomes.append(ItemOutcome(kind="VirtualMachine", name=name, state=State.FAILED,
                                            reason=batch.one_line(e), remedy=None if switched else hint))
                continue
            # the vm attach library starts only a VM rblnctl stopped (its mark): say so, it is no silent start
            outcomes.append(ItemOutcome(kind="VirtualMachine", name=name, state=State.DONE, reason=(
                "started again: an earlier rblnctl run had stopped it and could not start it" if result.restarted
                else "")))
        return outcomes

    def _patch(self, plan: MethodPlan) -> tuple[bool, int, MethodPlan]:
        """Patch the policy (a merge patch guarded by its resourceVersion) until it selects plan.target.

        A 409 (the operator writes the policy's status too) re-reads the policy and re-plans its edit with a
        backoff; a patch whose outcome is unknown is settled by reading the policy back (rblnctl.kube.writes).
        Only the edit is re-planned: the plan is carried on with dataclasses.replace, so what it says beyond
        the policy (the VMs to convert, the prerequisites, the nodes) survives every retry.
        """
        current = [plan]

        def next_write(policy_obj: Any) -> writes.Write | None:
            if policy_obj is not writes.UNREAD:
                if policy_obj is None:
                    raise NotFound(f"RBLNClusterPolicy {plan.policy} was deleted while rblnctl wrote it")
                edit = plan_edit(policy_obj, plan.target, vm_nodes=plan.vm_nodes, container_nodes=plan.container_nodes,
                                 rules=plan.rules)
                current[0] = dataclasses.replace(current[0], current=parse_policy(policy_obj).vm_method, edit=edit)
            p = current[0]
            if p.edit.blockers:
                raise Refused(f"refusing to switch the allocation method to {p.target}", blockers=p.edit.blockers)
            if not p.edit.patch:
                return None
            return writes.patch(CLUSTER_POLICIES, p.policy, p.edit.patch, patch_type="merge")

        def gave_up(last: ClusterError, sent: int) -> RblnError:
            return Conflict(f"RBLNClusterPolicy {plan.policy} kept changing while we wrote it: gave up after {sent} "
                            "attempts; rerun once the other writer is done", status=409, reason="Conflict")

        done = writes.settle(self.kube, next_write, what=f"RBLNClusterPolicy {plan.policy}", retry=writes.is_409,
                             read=lambda: self.kube.get(CLUSTER_POLICIES, plan.policy),
                             attempts=self.options.max_attempts, backoff_s=self.options.retry_backoff_s,
                             clock=self.clock, on_retry=self.events.on_retry, dry_run=self.options.server_dry_run,
                             exhausted=gave_up)
        return done.changed, done.sent, current[0]

    def _wait(self, plan: MethodPlan, deadline: float) -> list[str]:
        """Watch the rollout (the policies, the operator's pods, the driver's ResourceSlices, the NPU nodes and, for
        DRA, the DeviceClass: a LIST and a stream each) until no vm-passthrough node misses anything."""
        view = self._view()
        policy = view.policy
        assert policy is not None
        specs = [WatchSpec(CLUSTER_POLICIES), WatchSpec(PODS, namespace=view.namespace),
                 WatchSpec(RESOURCE_SLICES, field_selector=f"spec.driver={policy.dra_driver}", missing_ok=True),
                 *(WatchSpec(NODES, label_selector=s) for s in npu_node_selectors())]
        if plan.target == C.METHOD_DRA:
            specs.append(WatchSpec(DEVICE_CLASSES, field_selector=f"metadata.name={policy.dra_device_class_vm}",
                                   missing_ok=True))
        nodes_at = slice(3, 3 + len(npu_node_selectors()))

        def look(mirrors: Sequence[Mirror]) -> MethodState:
            now = dataclasses.replace(view, choice=choose_active(mirrors[0].items()))
            if now.policy is None:
                raise Refused(f"RBLNClusterPolicy {plan.policy} was deleted while rblnctl waited for the operator to "
                              f"roll the {plan.target} method")
            st = method_state(now, plan.target, pods=mirrors[1].items(), slices=mirrors[2].items(),
                              nodes=[n for m in mirrors[nodes_at] for n in m.items()],
                              device_class=plan.target != C.METHOD_DRA or bool(mirrors[-1].objects))
            if st.method != plan.target:
                raise Refused(f"RBLNClusterPolicy {plan.policy} was changed by someone else while rblnctl waited: "
                              f"it now selects {st.method or 'no VM allocator'}, not {plan.target}")
            return st

        def progress(st: MethodState) -> None:
            if st.missing:
                self.events.on_waiting(st.missing)

        seen = watch_until(self.kube, specs, look, lambda st: not st.missing, deadline=deadline, clock=self.clock,
                           on_change=progress, poll_s=self.options.poll_s,
                           on_retry=lambda err: self.events.on_waiting(
                               [f"the API server did not answer ({err}); trying again"]))
        if seen.done and seen.state is not None:
            return sorted(seen.state.nodes)
        err = WaitTimeout(f"the operator did not switch every vm-passthrough node to the {plan.target} method "
                          f"within {self.options.timeout_s:g}s; RBLNClusterPolicy {plan.policy} stays "
                          f"set to {plan.target}")
        missing = seen.state.missing if seen.state is not None else ["nothing read yet"]
        raise err.with_details([f"still missing: {m}" for m in missing])


def method_state(view: OperatorView, target: str, *, pods: Sequence[dict], slices: Sequence[dict],
                 nodes: Sequence[dict], device_class: bool) -> MethodState:
    """What each vm-passthrough node still misses for `target` (pure): the operator's pods and the driver's
    ResourceSlices by node, the NPU nodes, and whether the DRA DeviceClass exists."""
    policy = view.policy
    assert policy is not None
    by_node: dict[str, list[tuple[str, dict]]] = {}
    for p in pods:
        comp = component_of_pod(p, base_names=view.base_names)
        if comp is not None:
            by_node.setdefault(str((p.get("spec") or {}).get("nodeName") or ""), []).append((comp, p))
    slices_of: dict[str, list[dict]] = {}
    for s in slices:
        slices_of.setdefault(str((s.get("spec") or {}).get("nodeName") or ""), []).append(s)
    missing: dict[str, list[str]] = {}
    for n in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        if mode_of(labels_of(n), policy).effective != C.MODE_VM:
            continue
        name = n["metadata"]["name"]
        missing[name] = [str(p) for p in convergence.method_pending(n, target, policy, by_node.get(name, []),
                                                                     slices_of.get(name, []))]
    cluster = [] if device_class else [f"DeviceClass {policy.dra_device_class_vm} does not exist yet"]
    return MethodState(method=policy.vm_method, nodes=missing, cluster=cluster)
