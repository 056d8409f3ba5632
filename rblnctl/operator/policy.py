"""RBLNClusterPolicy: the only place rblnctl parses one, picks the active one, and judges what it enables.

Rules, with their sources (RBLN-SW/rbln-npu-operator):
- `enabled`: a component is enabled when its spec's `enabled` is true. A missing `enabled` is false,
  as the operator reads it (v0.3.0 api/v1beta1/rblnclusterpolicy_types.go: `IsEnabled()` returns
  the field); the API server has already applied the CRD's defaults to what rblnctl reads, so a
  missing field means no default applied. `validator` has no switch and always runs; the driver is
  switched by `driver.enabled` or, in chart v0.3.0, `driver.useRBLNDriverCRD`.
- `spec.name` (default `rbln`) prefixes the component DaemonSets; `spec.namespace` (else the
  operator's own namespace) holds them.
- `spec.workloadType` (`container` or `vm-passthrough`; anything else: `container`) is the mode of
  nodes without a valid `rebellions.ai/npu.workload.config` label.
- Several policies: the operator acts on the first it reconciles and marks the others
  `status.state: ignored` (later releases also a Ready condition with reason PolicyIgnored).
- Admission: the CRD's CEL rules differ by release (rblnctl.operator.admission, which reads them from
  the installed CRD); by default the later releases' set: vm-passthrough needs vfioManager and one of
  sandboxDevicePlugin / draKubeletPlugin; those two are mutually exclusive, and so are devicePlugin
  and draKubeletPlugin. Chart v0.3.0 has no validation at all, so rblnctl checks the rules itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rblnctl import constants as C
from rblnctl.operator import admission
from rblnctl.operator import components as K
from rblnctl.operator import resources as R
from rblnctl.operator.admission import AdmissionRules
from rblnctl.operator.install import HelmRelease, change_policy, helm_release_of
from rblnctl.plan import Blocker
from rblnctl.remedy import Command, Remedy

if TYPE_CHECKING:
    from rblnctl.operator.release import OperatorRelease


@dataclass(frozen=True, kw_only=True)
class Condition:
    """One status condition of a policy."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class ComponentState:
    """One entry of a policy's status.components (the operator's view of a component DaemonSet).

    Its `state` is no verdict: the operator v0.3.0 writes `ready` for every component, whatever its pods do
    (seen on the real operator, tests/envtest/test_operator_v030.py). What follows the DaemonSet is the entry's
    `DaemonSetReady` condition (reasons DaemonSetAllPodsReady / DaemonSetAllPodsNotReady:
    RBLN-SW/rbln-npu-operator@v0.3.0 internal/scope/patch; the CRD names the list `condition`).
    """

    name: str  # the DaemonSet's name
    state: str  # as written
    ready: bool | None = None  # the DaemonSetReady condition; None when the entry has none
    reason: str = ""
    message: str = ""

    @property
    def verdict(self) -> str:
        """`ready` / `notReady` as the DaemonSetReady condition says; the written state when there is none."""
        if self.ready is None:
            return self.state
        return C.POLICY_STATE_READY if self.ready else C.POLICY_STATE_NOT_READY

    @property
    def is_ready(self) -> bool:
        return self.verdict == C.POLICY_STATE_READY

    def describe(self) -> str:
        """`rbln-vfio-manager notReady (DaemonSet ... is progressing: 0 of 1 pods are Ready ...)`."""
        why = self.message or self.reason
        return f"{self.name} {self.verdict or 'unknown'}" + (f" ({why})" if why and not self.is_ready else "")


@dataclass(frozen=True, kw_only=True)
class Policy:
    """An RBLNClusterPolicy as the operator reads it."""

    name: str
    workload_type: str  # the mode of unlabelled nodes: container or vm-passthrough
    workload_type_raw: str | None  # as written (None: absent)
    base_name: str  # DaemonSet prefix
    namespace: str | None  # spec.namespace (None: the operator's own namespace)
    enabled: Mapping[str, bool]  # policy spec key -> enabled
    dra_driver: str
    container_resources: R.ResourceNames
    vm_resources: R.ResourceNames
    ignored: bool
    state: str | None
    conditions: tuple[Condition, ...] = ()
    components: tuple[ComponentState, ...] = ()
    created: str = ""
    helm: HelmRelease | None = None  # the Helm release that rendered this policy (its labels/annotations)

    def is_enabled(self, component: str) -> bool:
        """Whether the policy switches `component` (a deploy-label name) on."""
        key = C.COMPONENT_POLICY_KEYS.get(component)
        return True if key is None else bool(self.enabled.get(key, False))

    @property
    def shared_resources(self) -> tuple[str, ...]:
        """Resource names both the device plugin and the sandbox plugin advertise under this policy (sorted).

        The chart v0.3.0 CRD defaults both resourceLists to `rebellions.ai/ATOM` (RBLN-CA12/CA22/CA25:
        RBLN-SW/rbln-npu-operator@v0.3.0 api/v1beta1/rblnclusterpolicy_types.go, the `+kubebuilder:default` of
        RBLNSandboxDevicePluginSpec.ResourceList and RBLNDevicePluginSpec.ResourceList), and the chart renders
        `sandboxDevicePlugin.resourceList` only when its values set one (deployments/rbln-npu-operator/templates/
        rblnclusterpolicy.yaml): a policy without it has vm-passthrough nodes advertise the container nodes' name.
        Such a name says nothing about a node's mode."""
        vm = {e.name for e in self.vm_resources.entries}
        return tuple(sorted(e.name for e in self.container_resources.entries if e.name in vm))

    def own_names_remedy(self) -> Remedy:
        """How to end shared_resources: give the sandbox plugin resource names of its own, as the chart's values do
        (RBLN-SW/rbln-npu-operator@v0.3.0 deployments/rbln-npu-operator/values.yaml sandboxDevicePlugin.resourceList:
        ATOM_PT, ATOM_MAX_PT, REBEL_PT), by editing this policy. One remedy for every command that meets such a name
        (preflight's operator.policy, vm fit and the views built on it, kubevirt permit-devices --from-cluster)."""
        return Remedy(text="give sandboxDevicePlugin.resourceList names of its own, as the chart's values do (ATOM_PT "
                           "for RBLN-CA12, ATOM_MAX_PT for RBLN-CA25, REBEL_PT for RBLN-CR03)",
                      command=Command.external("kubectl", "edit", "rblnclusterpolicy", self.name))

    def shared_warning(self, name: str, why: str) -> Remedy:
        """The warning for `name`, one of shared_resources, met where `why` says (what it means there), with
        own_names_remedy's command: one text for vm fit and the views built on it and for permit-devices."""
        fix = self.own_names_remedy()
        return Remedy(text=f"{name} is advertised by both the device plugin and the sandbox device plugin (the v0.3.0 "
                           f"CRD's default when sandboxDevicePlugin.resourceList is left out): {why}; {fix.text}",
                      command=fix.command)

    @property
    def dra_device_class_vm(self) -> str:
        """The passthrough DeviceClass of this policy's DRA driver (`vfio-` + driverName)."""
        return C.DRA_VFIO_DEVICE_PREFIX + self.dra_driver

    def allocators(self, mode: str, *, release: OperatorRelease | None = None) -> list[str]:
        """The enabled components that hand this mode's NPUs to workloads (device plugins, DRA).

        With `release`, a VM allocator that release does not make serve vm-passthrough nodes is not
        counted (rblnctl.operator.release: chart v0.3.0's DRA plugin is container-only, its sandbox
        plugin never leaves Init there).
        """
        wanted = (C.COMP_SANDBOX, C.COMP_DRA) if mode == C.MODE_VM else (C.COMP_DEVICE_PLUGIN, C.COMP_DRA)
        enabled = [c for c in wanted if self.is_enabled(c)]
        return release.vm_allocators(enabled) if release is not None and mode == C.MODE_VM else enabled

    def vm_method_on(self, release: OperatorRelease | None) -> str | None:
        """vm_method, counting only the allocators `release` makes serve VMs (None: VMs get no NPUs)."""
        served = self.allocators(C.MODE_VM, release=release)
        return C.METHOD_DRA if C.COMP_DRA in served else C.METHOD_SANDBOX if C.COMP_SANDBOX in served else None

    @property
    def vm_method(self) -> str | None:
        """`dra` or `sandbox`: how VMs get NPUs under this policy (None: neither allocator is enabled)."""
        if self.is_enabled(C.COMP_DRA):
            return C.METHOD_DRA
        if self.is_enabled(C.COMP_SANDBOX):
            return C.METHOD_SANDBOX
        return None

    def method_changes(self, method: str) -> dict[str, bool]:
        """The `<key>.enabled` changes that make this policy hand NPUs to VMs by `method`, and only those.

        Both methods need vfioManager. DRA needs draKubeletPlugin, and sandboxDevicePlugin off (the
        later releases' admission rule: both advertise the same vfio-pci NPUs). devicePlugin is turned
        off only when it is on: later releases reject it beside draKubeletPlugin ("both advertise the same
        NPUs as rebellions.ai/npu on container nodes", RBLN-SW/rbln-npu-operator api/v1beta1/
        rblnclusterpolicy_types.go at op@02a4d9a7), and in chart v0.3.0, which has no such rule, the DRA
        plugin runs on the same container nodes as the device plugin with a DeviceClass whose
        extendedResourceName is rebellions.ai/npu, the device plugin's resource (v0.3.0
        internal/scope/cluster_policy.go rblnComponentLabels, internal/scope/patch/dra_kubelet_plugin.go).
        A switch already as wanted is left out, so a remedy never touches what is right.
        """
        want = {"vfioManager": True}
        if method == C.METHOD_DRA:
            want |= {"draKubeletPlugin": True, "sandboxDevicePlugin": False, "devicePlugin": False}
        else:
            want |= {"sandboxDevicePlugin": True, "draKubeletPlugin": False}
        return {k: v for k, v in want.items() if bool(self.enabled.get(k)) != v}

    def fix_text(self, values: Mapping[str, bool]) -> str:
        """How to set these `<key>.enabled` values on this policy (rblnctl.operator.install.change_policy)."""
        return change_policy(self.name, values, self.helm).text

    def switch_blockers(self, target: str, *, product: str | None = None,
                        release: OperatorRelease | None = None) -> list[Blocker]:
        """Why the operator would never converge a node switched to `target` under this policy ([] when it would).

        `product` (the node's `RBLN-CA22`, when known) is checked against a chart v0.3.0
        resourceList, which advertises only the products it lists. With `release`, enabled VM allocators
        that release does not make serve VMs block too; those blockers name `skip_release_check` as their override
        (the version is read from labels, so an operator may go past them knowingly).
        """
        out = []
        if target == C.MODE_VM and release is not None and self.allocators(C.MODE_VM) and \
                not self.allocators(C.MODE_VM, release=release):
            for comp in self.allocators(C.MODE_VM):
                out.append(Blocker(f"RBLNClusterPolicy {self.name} hands NPUs to VMs through "
                                   f"{C.COMPONENT_POLICY_KEYS[comp]}, but {release.problem(comp)}",
                                   override="skip_release_check"))
        if target == C.MODE_VM:
            if not self.is_enabled(C.COMP_VFIO_MANAGER):
                out.append(Blocker(
                    f"RBLNClusterPolicy {self.name} does not enable vfioManager (spec.vfioManager.enabled): nothing "
                    f"would bind the node's NPUs to vfio-pci, so the switch would never finish; enable it with "
                    f"{self.fix_text({'vfioManager': True})}"))
            if not self.allocators(C.MODE_VM):
                out.append(Blocker(
                    f"RBLNClusterPolicy {self.name} enables neither sandboxDevicePlugin nor draKubeletPlugin "
                    f"(spec.<plugin>.enabled): nothing would offer the node's NPUs to VMs; enable one with "
                    f"{self.fix_text({'sandboxDevicePlugin': True})} (or draKubeletPlugin for DRA)"))
            elif product and self.allocators(C.MODE_VM) == [C.COMP_SANDBOX] and \
                    self.vm_resources.covers(product) is False:
                out.append(Blocker(
                    f"the sandbox device plugin of RBLNClusterPolicy {self.name} advertises "
                    f"{self.vm_resources.describe()}, none of them for {product} (spec.sandboxDevicePlugin."
                    f"resourceList[].productCardNames): the node's NPUs would never be offered to VMs; add an entry "
                    f"for {product} to the policy's sandboxDevicePlugin.resourceList"))
        else:
            if not self.allocators(C.MODE_CONTAINER):
                out.append(Blocker(
                    f"RBLNClusterPolicy {self.name} enables neither devicePlugin nor draKubeletPlugin "
                    f"(spec.<plugin>.enabled): nothing would offer the node's NPUs to pods; enable one with "
                    f"{self.fix_text({'devicePlugin': True})}"))
            elif product and self.allocators(C.MODE_CONTAINER) == [C.COMP_DEVICE_PLUGIN] and \
                    self.container_resources.covers(product) is False:
                out.append(Blocker(
                    f"the device plugin of RBLNClusterPolicy {self.name} advertises "
                    f"{self.container_resources.describe()}, none of them for {product} "
                    f"(spec.devicePlugin.resourceList[].productCardNames): add an entry for {product}"))
        return out

    def admission_problems(self, rules: AdmissionRules | None = None) -> list[str]:
        """The admission rules this policy breaks: `rules` (rblnctl.operator.admission: the installed CRD's, or
        the release's), by default the later releases' (chart v0.3.0 has none); and a workloadType the CRD's
        enum refuses."""
        out = []
        if self.workload_type_raw not in (None, *C.WORKLOAD_MODES):
            out.append(f"workloadType {self.workload_type_raw!r} is not container or vm-passthrough")
        return out + (rules or admission.DEFAULT).problems(self)

    def switches(self) -> str:
        """`workloadType=... vfioManager=true ...`: the switches that decide how NPUs reach VMs, for one line."""
        keys = ("vfioManager", "sandboxDevicePlugin", "draKubeletPlugin", "devicePlugin")
        flags = " ".join(f"{k}={'true' if self.enabled.get(k) else 'false'}" for k in keys)
        return f"workloadType={self.workload_type} {flags}"

    def not_ready(self, modes: Iterable[str] | None = None) -> list[str]:
        """What the policy's status says is not ready (state, conditions, the component DaemonSets of `modes`:
        components_not_ready), for progress lines."""
        out = []
        if self.state and self.state != C.POLICY_STATE_READY:
            out.append(f"policy {self.name} is {self.state}")
        for c in self.conditions:
            if c.type in ("Ready", "ComponentsReady") and c.status == "False" and (c.reason or c.message):
                out.append(f"{c.type}: {c.reason}{' - ' + c.message if c.message else ''}")
        out.extend(s.describe() for s in self.components_not_ready(modes))
        return out

    def components_not_ready(self, modes: Iterable[str] | None = None) -> list[ComponentState]:
        """The entries of status.components whose DaemonSet is not ready (by its condition, not its `state`).

        With `modes` (the modes NPU nodes are in, or a switch's target), only the DaemonSets of components those
        modes deploy, and entries rblnctl cannot place: the operator counts a DaemonSet no node selects (desired
        0, e.g. rbln-vfio-manager while every node is in container mode) as not ready, which is nothing wrong.
        """
        out = [s for s in self.components if s.verdict and not s.is_ready]
        if modes is None:
            return out
        wanted = {K.canonical(c) for m in modes for c in K.mode_components(m)}
        bases = tuple(dict.fromkeys((self.base_name, C.OPERATOR_BASE_NAME)))

        def relevant(s: ComponentState) -> bool:
            comp = K.component_of_daemonset({"metadata": {"name": s.name}}, base_names=bases)
            return comp is None or comp in wanted

        return [s for s in out if relevant(s)]

    def status_summary(self, modes: Iterable[str] | None = None) -> str:
        """The policy's own state, and what status.components (of `modes`) contradicts it with: `ready`, or
        `ready, but status.components: rbln-sandbox-device-plugin notReady`. The v0.3.0 operator's top-level
        state and Ready condition say ready before any component pod exists; the per-DaemonSet conditions
        follow the pods."""
        text = self.state or "no state"
        bad = self.components_not_ready(modes)
        if bad:
            sep = ", but" if self.state == C.POLICY_STATE_READY else ";"
            text += f"{sep} status.components: {', '.join(f'{s.name} {s.verdict}' for s in bad)}"
        return text


def _enabled_flag(spec: Mapping, key: str) -> bool:
    sub = spec.get(key)
    if not isinstance(sub, Mapping):
        return False
    if key == "driver" and "enabled" not in sub:
        return sub.get("useRBLNDriverCRD") is True
    return sub.get("enabled") is True


def _component_state(entry: Mapping) -> ComponentState:
    """One status.components entry; its DaemonSetReady condition from `condition` (the v0.3.0 CRD's name for the
    list) or `conditions`."""
    conds = entry.get("condition") or entry.get("conditions") or []
    ds = next((c for c in conds if isinstance(c, Mapping) and c.get("type") == C.POLICY_COMPONENT_CONDITION), None)
    ready = None if ds is None else str(ds.get("status")) == "True"
    return ComponentState(name=str(entry.get("name") or ""), state=str(entry.get("state") or ""), ready=ready,
                          reason=str((ds or {}).get("reason") or ""), message=str((ds or {}).get("message") or ""))


def parse_policy(obj: Mapping) -> Policy:
    """Read one RBLNClusterPolicy object (pure)."""
    meta = obj.get("metadata") or {}
    spec: Mapping = s if isinstance(s := obj.get("spec"), Mapping) else {}
    status: Mapping = st if isinstance(st := obj.get("status"), Mapping) else {}
    raw_type = spec.get("workloadType")
    keys = {k for k in C.COMPONENT_POLICY_KEYS.values() if k is not None}
    if C.COMPONENT_POLICY_KEYS[C.COMP_PARTITION_MANAGER] not in spec:  # the partition line's key only
        keys.discard(C.COMPONENT_POLICY_KEYS[C.COMP_PARTITION_MANAGER])
    dra: Mapping = d if isinstance(d := spec.get("draKubeletPlugin"), Mapping) else {}
    conditions = tuple(
        Condition(type=str(c.get("type") or ""), status=str(c.get("status") or ""), reason=str(c.get("reason") or ""),
                  message=str(c.get("message") or ""))
        for c in status.get("conditions") or [] if isinstance(c, Mapping))
    components = tuple(_component_state(c) for c in status.get("components") or [] if isinstance(c, Mapping))
    state = status.get("state")
    ignored = str(state or "").lower() == C.POLICY_STATE_IGNORED or any(
        c.reason == C.POLICY_REASON_IGNORED for c in conditions)
    return Policy(
        name=str(meta.get("name") or ""),
        workload_type=raw_type if raw_type in C.WORKLOAD_MODES else C.DEFAULT_MODE,
        workload_type_raw=raw_type if raw_type is None else str(raw_type),
        base_name=str(spec.get("name") or C.OPERATOR_BASE_NAME),
        namespace=str(spec.get("namespace") or status.get("namespace") or "") or None,
        enabled={k: _enabled_flag(spec, k) for k in sorted(keys)},
        dra_driver=str(dra.get("driverName") or C.DRA_DRIVER),
        container_resources=R.ResourceNames(mode=C.MODE_CONTAINER,
                                            entries=R.resource_list(spec.get("devicePlugin"))),
        vm_resources=R.ResourceNames(mode=C.MODE_VM, entries=R.resource_list(spec.get("sandboxDevicePlugin"))),
        ignored=ignored,
        state=str(state) if state else None,
        conditions=conditions,
        components=components,
        created=str(meta.get("creationTimestamp") or ""),
        helm=helm_release_of([obj]),
    )


@dataclass(frozen=True, kw_only=True)
class PolicyChoice:
    """Which of the cluster's RBLNClusterPolicies the operator acts on, and why."""

    active: Policy | None
    all: tuple[Policy, ...] = ()
    notes: tuple[str, ...] = field(default=())


def choose_active(items: Sequence[Mapping]) -> PolicyChoice:
    """Pick the policy the operator acts on: the one not marked ignored; among several, the oldest.

    The operator claims the first policy it reconciles; when none is marked, the oldest is the one
    it met first on a fresh start, which is the best rblnctl can know (and it says so).
    """
    policies = tuple(parse_policy(o) for o in items)
    if not policies:
        return PolicyChoice(active=None)
    candidates = [p for p in policies if not p.ignored] or list(policies)
    candidates.sort(key=lambda p: (p.created or "~", p.name))
    active = candidates[0]
    notes = []
    if len(policies) > 1:
        others = ", ".join(p.name for p in policies if p is not active)
        how = ("the others are marked ignored" if all(p.ignored for p in policies if p is not active)
               else "none is marked ignored, so rblnctl assumes the oldest")
        notes.append(f"{len(policies)} RBLNClusterPolicies; the operator acts on one: {active.name} ({how}; "
                     f"also found: {others})")
    return PolicyChoice(active=active, all=policies, notes=tuple(notes))
