"""Plan a change of the VM allocation method from facts already read: the policy edit, the prerequisites, the
VMs in the way and the VMs to convert (pure: no I/O; rblnctl.method.changer reads and writes)."""

from __future__ import annotations

import copy
import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.batch import ItemOutcome
from rblnctl.errors import ClusterError, ConfigError, InvalidInput
from rblnctl.kubevirt.cr import DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_BACKOFF_S, ref, version_of
from rblnctl.kubevirt.gates import enable_step, gate_state, rbln_gates
from rblnctl.kubevirt.status import status_of
from rblnctl.node.defaults import DEFAULT_POLL_S, DEFAULT_TIMEOUT_S
from rblnctl.operator import admission
from rblnctl.operator.admission import AdmissionRules
from rblnctl.operator.cluster import OperatorView
from rblnctl.operator.dra import (dra_driver_version, dra_toolkit_rule, is_dra_daemonset, policy_dra_version,
                                  public_driver_gap)
from rblnctl.operator.nodes import labels_of, mode_of
from rblnctl.operator.policy import Policy, parse_policy
from rblnctl.operator.release import operator_version, release_of
from rblnctl.plan import Advice, Blocker
from rblnctl.remedy import Remedy
from rblnctl.versions import format_version, parse_version, strict_version
from rblnctl.vm import devices as D
from rblnctl.vm import guard
from rblnctl.vm.guard import NpuVm
from rblnctl.vm.model import VmRef

log = logging.getLogger(__name__)



def _policy_key(component: str) -> str:
    """The RBLNClusterPolicy key of a component the policy switches (every one a method change writes has one)."""
    key = C.COMPONENT_POLICY_KEYS[component]
    if key is None:
        raise KeyError(f"{component} has no RBLNClusterPolicy switch")
    return key


# The policy keys a method change writes, and the method each VM allocator stands for.
SANDBOX_KEY = _policy_key(C.COMP_SANDBOX)
DRA_KEY = _policy_key(C.COMP_DRA)
DEVICE_PLUGIN_KEY = _policy_key(C.COMP_DEVICE_PLUGIN)
VFIO_KEY = _policy_key(C.COMP_VFIO_MANAGER)
SWITCH_KEYS = (VFIO_KEY, SANDBOX_KEY, DRA_KEY, DEVICE_PLUGIN_KEY)
HOLDERS_NAMED = guard.NAMED  # VMs named one per line; the rest are counted


class MethodStep(enum.StrEnum):
    """The steps of a method change, as reported."""

    PATCH = "patch"
    WAIT = "wait"
    CONVERT = "convert"


def parse_method(value: str) -> str:
    """`sandbox` or `dra` (case-insensitive); InvalidInput otherwise."""
    text = (value or "").strip().lower()
    if text not in C.METHODS:
        raise InvalidInput(f"unknown allocation method {value!r}: use {' or '.join(C.METHODS)}")
    return text


def _noop(*_: Any) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class MethodEvents:
    """Progress of a method change; every callback defaults to doing nothing."""

    on_step: Callable[[MethodStep, str], None] = _noop
    on_waiting: Callable[[list[str]], None] = _noop  # what the operator still has to do (when it changes)
    on_retry: Callable[[int, str], None] = _noop  # the policy changed under us (attempt, server message)
    on_warning: Callable[[str], None] = _noop  # something worth saying that does not stop the run


@dataclass(frozen=True, kw_only=True)
class MethodOptions:
    """How set-method checks, writes and waits."""

    force: bool = False  # go ahead when a prerequisite cannot be read (an unknown version)
    server_dry_run: bool = False  # send the patch with dryRun=All; nothing is waited for
    wait: bool = True  # wait for the operator after the patch
    timeout_s: float = DEFAULT_TIMEOUT_S  # the whole wait
    poll_s: float = DEFAULT_POLL_S  # the pause between two LISTs where watching is refused (403/405)
    operator_namespace: str | None = None  # None: found from the policy / the operator Deployment
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # policy patches when others keep editing it
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    convert_vms: bool = False  # after the rollout, re-express each VM's NPUs with the new method
    evict_vms: bool = False  # the running-VM guard's override (rblnctl.vm.guard): go ahead although running VMs hold
    # NPUs through the allocator turned off (they keep the devices they started with; nothing is evicted here)

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.poll_s <= 0:
            raise ConfigError("timeout_s and poll_s must be positive")
        if self.max_attempts < 1:
            raise ConfigError("max_attempts must be at least 1")
        if self.convert_vms and not self.wait:
            raise ConfigError("converting VMs needs the wait: a VM is rewritten only once the new method is "
                              "offered on the vm-passthrough nodes")


@dataclass(frozen=True, kw_only=True)
class Prerequisite:
    """One thing the target method needs, and whether the cluster has it (None: cannot tell)."""

    name: str  # kubernetes, kubevirt, gates, operator, dra-api, dra-driver, policy
    ok: bool | None
    detail: str


@dataclass(frozen=True, kw_only=True)
class PolicyEdit:
    """The switches a method change writes in one policy object, and the guarded merge patch."""

    policy: str
    resource_version: str
    before: dict[str, bool]  # the switches rblnctl reasons about, as the policy has them
    after: dict[str, bool]
    patch: dict  # {} when nothing changes
    blockers: list[Blocker] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Conversion:
    """A VM whose NPUs name the old method: re-expressed with the new one after the rollout (convert_vms)."""

    vm: VmRef
    npus: int  # NPUs it has through the old method
    devices: list[str]  # those host devices' names
    uid: str | None = None  # its metadata.uid as read: the conversion changes only this VM (Replaced otherwise)
    # converted already, by a run interrupted before it deleted the old method's template, which it names
    # (C.VM_TEMPLATE_LEFT_ANNOTATION): the conversion only deletes that template
    left_template: str | None = None


@dataclass(frozen=True, kw_only=True)
class MethodPlan:
    """What set-method would do: the policy edit, what blocks it, and the nodes it then waits for."""

    target: str
    current: str | None  # the policy's method now (None: neither allocator is enabled)
    edit: PolicyEdit
    vm_nodes: list[str]  # vm-passthrough NPU nodes: where the plugin must roll
    container_nodes: list[str]
    holders: list[NpuVm]  # running VMIs holding NPUs through an allocator the change turns off or converts from
    prerequisites: list[Prerequisite]
    device_class: str | None  # the DeviceClass DRA needs (None for sandbox)
    conversions: list[Conversion] = field(default_factory=list)  # VMs to re-express (convert_vms only)
    convert: bool = False  # convert_vms was asked
    warnings: list[str | Advice] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)
    rules: AdmissionRules = admission.DEFAULT  # the policy admission rules judged, and whether they were read
    policy_uid: str = ""  # the policy's uid as read (its audit Events name it)

    @property
    def noop(self) -> bool:
        """The policy already selects the target method and no VM is to be converted (apply() still waits)."""
        return not self.edit.patch and not self.conversions

    @property
    def policy(self) -> str:
        """The name of the RBLNClusterPolicy edited."""
        return self.edit.policy


@dataclass(frozen=True, kw_only=True)
class MethodResult:
    """The outcome of set-method."""

    plan: MethodPlan
    changed: bool  # the API server accepted the patch (a server dry run: validated only)
    attempts: int
    converged: list[str]  # vm-passthrough nodes the operator has rolled (all of them, after a wait)
    waited: bool
    elapsed_s: float
    converted: list[str] = field(default_factory=list)  # VMs re-expressed with the new method (namespace/name)
    server_dry_run: bool = False
    conversions: list[ItemOutcome] = field(default_factory=list)  # every VM of plan.conversions, and its fate


@dataclass(frozen=True, kw_only=True)
class MethodFacts:
    """Everything plan() reads, each read once."""

    policy_obj: dict
    view: OperatorView
    server_version: str | None
    kubevirts: list[dict]
    operators: list[dict]
    nodes: list[dict]
    vmis: list[dict] | None  # None: the VMI list was refused (RBAC)
    vmis_error: str | None = None
    old_method_vms: list[Conversion] = field(default_factory=list)  # VMs naming the other method's NPUs
    vms_error: str | None = None  # the VM list was refused (RBAC)
    device_classes_served: bool | None = None  # DRA target only
    daemonsets: list[dict] | None = None  # DRA target only (None: not read)
    crd: dict | None = None  # the RBLNClusterPolicy CRD (None: it could not be read): its admission rules


# -- the policy edit -----------------------------------------------------------------------------


def switches_of(policy: Policy) -> dict[str, bool]:
    """The switches a method change reads and writes (`vfioManager` and the allocators)."""
    return {k: bool(policy.enabled.get(k, False)) for k in SWITCH_KEYS}


def plan_edit(policy_obj: dict, target: str, *, vm_nodes: Sequence[str], container_nodes: Sequence[str],
              rules: AdmissionRules | None = None) -> PolicyEdit:
    """The switches `target` needs in this policy object, checked against the operator's admission rules (pure).

    Both need vfioManager on (nothing else binds the NPUs to vfio-pci; the chart's default is off, and
    both releases admit it with either method). sandbox: sandboxDevicePlugin on, draKubeletPlugin off.
    dra: draKubeletPlugin on, sandboxDevicePlugin off, and devicePlugin off when no container-mode NPU
    node uses it (admission keeps it and DRA apart; with container-mode nodes that is refused instead,
    naming them: DRA would take their NPUs over).
    """
    meta = policy_obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    policy = parse_policy(policy_obj)
    before = switches_of(policy)
    want = {VFIO_KEY: True, SANDBOX_KEY: target == C.METHOD_SANDBOX, DRA_KEY: target == C.METHOD_DRA}
    blockers: list[Blocker] = []
    warnings: list[str] = []
    switching = any(before[k] != v for k, v in want.items())
    if target == C.METHOD_DRA and before[DEVICE_PLUGIN_KEY]:
        if container_nodes and switching:
            blockers.append(Blocker(
                f"RBLNClusterPolicy {name} enables devicePlugin, which serves the container-mode NPU nodes "
                f"{', '.join(container_nodes)}: the operator admits draKubeletPlugin only without devicePlugin, and "
                "DRA would then hand out those nodes' NPUs through claims; move them to DRA (or to vm mode) "
                "first, or keep the sandbox method"))
        elif not container_nodes:
            want[DEVICE_PLUGIN_KEY] = False
            warnings.append("no NPU node is in container mode, so devicePlugin is turned off too (the operator "
                            "admits draKubeletPlugin only without it)")
    changes = {k: v for k, v in want.items() if before[k] != v}
    new_obj = copy.deepcopy(policy_obj)
    spec = new_obj.setdefault("spec", {})
    for k, v in changes.items():
        sub = spec.get(k) if isinstance(spec.get(k), dict) else {}
        spec[k] = {**sub, "enabled": v}
    new = parse_policy(new_obj)
    if changes:
        old_problems = set(policy.admission_problems(rules))
        named = {DEVICE_PLUGIN_KEY} if blockers else set()  # the devicePlugin refusal above says more
        where = f" ({(rules or admission.DEFAULT).source})"
        blockers += [Blocker(f"RBLNClusterPolicy {name} would break the operator's admission rules{where}: {p}")
                     for p in new.admission_problems(rules)
                     if p not in old_problems and not any(k in p for k in named)]
        for mode, nodes in ((C.MODE_VM, vm_nodes), (C.MODE_CONTAINER, container_nodes)):
            if not nodes and not (mode == C.MODE_VM and new.workload_type == C.MODE_VM):
                continue
            old_msgs = {b.message for b in policy.switch_blockers(mode)}
            blockers += [b for b in new.switch_blockers(mode) if b.message not in old_msgs]
    rv = str(meta.get("resourceVersion") or "")
    patch: dict = {}
    if changes:
        if not rv:
            raise ClusterError(f"RBLNClusterPolicy {name} has no metadata.resourceVersion; cannot write it safely")
        patch = {"metadata": {"resourceVersion": rv}, "spec": {k: {"enabled": v} for k, v in changes.items()}}
    return PolicyEdit(policy=name, resource_version=rv, before=before, after={**before, **changes}, patch=patch,
                      blockers=blockers, warnings=warnings)


# -- prerequisites -------------------------------------------------------------------------------


def _floor(what: str, floor: tuple[int, int, int], text: str | None, found: str, *,
           force: bool) -> tuple[Prerequisite, Blocker | None, str | None]:
    """A version floor: below it refuses; unknown refuses unless forced (then a warning)."""
    v = parse_version(text)
    if v is not None and v >= floor:
        return Prerequisite(name=what, ok=True, detail=f"{found} >= {format_version(floor)}"), None, None
    if v is not None:
        msg = f"{found} < {format_version(floor)}"
        return Prerequisite(name=what, ok=False, detail=msg), Blocker(msg), None
    msg = f"{found}: version unknown (needs >= {format_version(floor)})"
    if force:
        return Prerequisite(name=what, ok=None, detail=msg), None, msg + "; going ahead anyway (forced)"
    return Prerequisite(name=what, ok=None, detail=msg), Blocker(msg, override="force"), None


def check_prerequisites(target: str, facts: MethodFacts, policy: Policy, *, force: bool = False
                        ) -> tuple[list[Prerequisite], list[Blocker], list[str]]:
    """What `target` needs of the cluster, from facts already read (pure)."""
    checks: list[Prerequisite] = []
    blockers: list[Blocker] = []
    warnings: list[str] = []

    def add(result: tuple[Prerequisite, Blocker | None, str | None]) -> None:
        checks.append(result[0])
        if result[1] is not None:
            blockers.append(result[1])
        if result[2] is not None:
            warnings.append(result[2])

    add(_floor("kubernetes", C.MIN_KUBERNETES[target], facts.server_version,
               f"Kubernetes {facts.server_version or '(version unknown)'} for the {target} method", force=force))

    deployed = [k for k in facts.kubevirts if (k.get("status") or {}).get("phase") == "Deployed"]
    kv = next(iter(deployed or facts.kubevirts), None)  # None: no KubeVirt CR
    if kv is None:
        msg = "no KubeVirt CR: KubeVirt is not installed, so no VM could use the NPUs"
        checks.append(Prerequisite(name="kubevirt", ok=False, detail=msg))
        if force:
            warnings.append(msg + "; going ahead anyway (forced)")
        else:
            blockers.append(Blocker(msg, override="force"))
    else:
        st = status_of(kv)
        floor = C.MIN_KUBEVIRT.get(target)
        if floor is not None:
            add(_floor("kubevirt", floor, version_of(kv), f"KubeVirt {ref(kv)} {st.version or ''} for the "
                       f"{target} method".replace("  ", " "), force=force))
        else:
            checks.append(Prerequisite(name="kubevirt", ok=True, detail=f"KubeVirt {ref(kv)} {st.version or ''}"))
        states = [gate_state(g, st.feature_gates, st.disabled_feature_gates, st.version)
                  for g in rbln_gates(dra=target == C.METHOD_DRA)]
        off = [s for s in states if s.effective is False]
        unknown = [s for s in states if s.effective is None]
        text = "; ".join(f"{s.name}: {s.reason}" for s in states)
        # enable-gates refuses some gates below their floor or on an unknown version: say what works.
        fix = enable_step([s.name for s in [*off, *unknown] if s.disabled or not s.listed], st.version,
                          dra=target == C.METHOD_DRA)
        if off:
            checks.append(Prerequisite(name="gates", ok=False, detail=text))
            blockers.append(Blocker(f"KubeVirt {ref(kv)} lacks feature gate {', '.join(s.name for s in off)} "
                                    f"({text})", remedy=fix))
        elif unknown:
            checks.append(Prerequisite(name="gates", ok=None, detail=text))
            msg = f"whether KubeVirt {ref(kv)} has {', '.join(s.name for s in unknown)} on is unknown ({text})"
            if force:
                warnings.append(msg + "; going ahead anyway (forced)")
            else:
                blockers.append(Blocker(msg, override="force", remedy=fix))
        else:
            checks.append(Prerequisite(name="gates", ok=True, detail=text))
        if target == C.METHOD_SANDBOX and not st.permitted_devices:
            warnings.append(f"KubeVirt {ref(kv)} permits no RBLN device (permittedHostDevices.pciHostDevices): once "
                            "the sandbox plugin advertises its resources, kubevirt permit-devices lets VMs use them")

    found = [(d, operator_version(d)) for d in facts.operators]
    version = next((v for _, v in found if v is not None), None)
    floor = C.MIN_OPERATOR[target]
    where = ref(found[0][0]) if found else "the RBLN NPU Operator"
    release = release_of(facts.operators)
    allocator = C.COMP_DRA if target == C.METHOD_DRA else C.COMP_SANDBOX
    served = release.why(allocator)  # the target's plugin hands VMs nothing on this release (operator/release.py)
    if served and (target == C.METHOD_DRA or (release.version or (0, 0, 0)) >= C.OPERATOR_SUPPORTED_FROM):
        msg = f"{served}; {release.remedy(allocator)}"
        checks.append(Prerequisite(name="operator", ok=False, detail=served))
        if force and target == C.METHOD_SANDBOX:
            warnings.append(msg + "; going ahead anyway (forced): the wait will time out")
        else:  # sandbox: the version is read from labels, so --force may go past it (as node set-mode)
            blockers.append(Blocker(msg, override="force" if target == C.METHOD_SANDBOX else None))
    elif version is not None and (parsed := strict_version(version[0])) is not None and parsed >= floor:
        checks.append(Prerequisite(name="operator", ok=True, detail=f"{where} {version[0]} >= {format_version(floor)}"))
    elif version is not None and (parsed := strict_version(version[0])) is not None:
        if target == C.METHOD_SANDBOX and parsed >= C.OPERATOR_SUPPORTED_FROM:
            msg = (f"{where} {version[0]} < {format_version(floor)}, the documented minimum for the sandbox method "
                   f"(rblnctl supports releases from {format_version(C.OPERATOR_SUPPORTED_FROM)})")
            checks.append(Prerequisite(name="operator", ok=True, detail=msg))
            warnings.append(msg)
        else:
            msg = (f"{where} {version[0]} < {format_version(floor)}: it does not support the {target} method")
            checks.append(Prerequisite(name="operator", ok=False, detail=msg))
            blockers.append(Blocker(msg + "; upgrade the operator first"))
    else:
        msg = f"the operator's version is unknown (no Deployment labelled {C.OPERATOR_DEPLOYMENT_SELECTOR} with " \
              f"a version); the {target} method needs >= {format_version(floor)}"
        checks.append(Prerequisite(name="operator", ok=None, detail=msg))
        if target == C.METHOD_DRA and not force:
            blockers.append(Blocker(msg, override="force"))
        else:
            warnings.append(msg)

    if target == C.METHOD_DRA:
        if facts.device_classes_served is False:
            msg = f"the API server does not serve {C.DRA_GROUP}/{C.DRA_VERSION} DeviceClasses (Kubernetes >= 1.34)"
            checks.append(Prerequisite(name="dra-api", ok=False, detail=msg))
            blockers.append(Blocker(msg))
        else:
            checks.append(Prerequisite(name="dra-api", ok=True, detail=f"{C.DRA_GROUP}/{C.DRA_VERSION} served"))
        running = [d for d in facts.daemonsets or [] if is_dra_daemonset(d, policy.base_name)]
        if running:
            ds = running[0]
            drv = dra_driver_version(ds)
            what = f"DRA driver DaemonSet {ref(ds)}"
        else:
            spec = (facts.policy_obj.get("spec") or {}) if isinstance(facts.policy_obj.get("spec"), Mapping) else {}
            drv = policy_dra_version(spec)
            what = f"the DRA driver RBLNClusterPolicy {policy.name} deploys"
        floor = C.MIN_DRA_DRIVER
        drv_version = strict_version(drv[0]) if drv is not None else None  # both readers find strict versions only
        if drv is None or drv_version is None:
            msg = f"{what}: version unknown (VFIO passthrough needs >= {format_version(floor)})"
            checks.append(Prerequisite(name="dra-driver", ok=None, detail=msg))
            warnings.append(msg)
        elif drv_version >= floor:
            checks.append(Prerequisite(name="dra-driver", ok=True,
                                       detail=f"{what}: {drv[0]} >= {format_version(floor)} (from {drv[1]})"))
        else:
            gap = public_driver_gap(drv_version)
            msg = (f"{what}: {drv[0]} < {format_version(floor)} (from {drv[1]}), which has no VFIO passthrough"
                   f"{': ' + gap if gap else ''}; set draKubeletPlugin.version to {format_version(floor)} or later "
                   "first")
            checks.append(Prerequisite(name="dra-driver", ok=False, detail=msg))
            blockers.append(Blocker(msg))
    return checks, blockers, warnings


def npu_holders(vmis: Sequence[dict], methods: Sequence[str] = C.METHODS) -> list[NpuVm]:
    """The running VMIs holding NPUs through one of `methods` (rblnctl.vm.guard), sorted."""
    return guard.dependents(vmis, guard.through(methods))


def methods_taken(edit: PolicyEdit, target: str, converting: bool) -> list[str]:
    """The methods whose NPUs a change takes from running VMs: the allocators the edit turns off, and with
    conversions the method the VMs are converted from (a VM already on `target` depends on neither)."""
    keys = {C.METHOD_SANDBOX: SANDBOX_KEY, C.METHOD_DRA: DRA_KEY}
    off = [m for m, k in keys.items() if edit.before.get(k) and not edit.after.get(k)]
    if converting:
        off.append(C.METHOD_DRA if target == C.METHOD_SANDBOX else C.METHOD_SANDBOX)
    return list(dict.fromkeys(off))


def plan_method(target: str, facts: MethodFacts, *, force: bool = False, convert: bool = False,
                evict_vms: bool = False) -> MethodPlan:
    """Plan a method change from facts already read (pure); `evict_vms` is the running-VM guard's override."""
    policy = parse_policy(facts.policy_obj)
    modes = {(n.get("metadata") or {}).get("name", ""): mode_of(labels_of(n), policy).effective for n in facts.nodes}
    vm_nodes = sorted(n for n, m in modes.items() if m == C.MODE_VM)
    container_nodes = sorted(n for n, m in modes.items() if m == C.MODE_CONTAINER)
    rules = admission.installed(facts.crd, release_of(facts.operators))
    edit = plan_edit(facts.policy_obj, target, vm_nodes=vm_nodes, container_nodes=container_nodes, rules=rules)
    warnings: list[str | Advice] = [*facts.view.notes, *edit.warnings]
    blockers = list(edit.blockers)
    if edit.patch and rules.unknown:
        warnings.append(f"the installed RBLNClusterPolicy CRD has admission rules rblnctl cannot judge ("
                        f"{'; '.join(rules.unknown)}): `--dry-run=server` has the API server judge the patch")
    if target == C.METHOD_DRA and not policy.is_enabled(C.COMP_TOOLKIT):
        # Decided by what the cluster runs (rblnctl.operator.dra.dra_toolkit_rule): v0.3.0's operator refuses to
        # deploy the DRA plugin without containerToolkit, later code (its dra-ready init container) does not.
        rule = dra_toolkit_rule(facts.daemonsets, release_of(facts.operators), policy.base_name)
        off = f"RBLNClusterPolicy {policy.name} does not enable containerToolkit (spec.containerToolkit.enabled)"
        fix = policy.fix_text({'containerToolkit': True})
        if rule.needed is False:
            if container_nodes:
                warnings.append(f"{off}: {rule.evidence}, but on container-mode nodes "
                                f"({', '.join(container_nodes[:3])}) that init container waits for the toolkit's "
                                f"toolkit-ready; to serve them too: {fix}")
        else:  # needed, or the cluster does not tell: refused alike (issue 41.6), --force goes ahead
            msg = (f"{off}: {rule.evidence}; the rollout would never come. Enable it first: {fix}" if rule.needed else
                   f"{off}: {rule.evidence}. Enable it first: {fix}")
            if force:
                warnings.append(msg + "; going ahead anyway (forced)")
            else:
                blockers.append(Blocker(msg, override="force"))
    holders: list[NpuVm] = []
    checks: list[Prerequisite] = []
    conversions = list(facts.old_method_vms) if convert else []
    old = C.METHOD_DRA if target == C.METHOD_SANDBOX else C.METHOD_SANDBOX
    naming_old = [c for c in facts.old_method_vms if c.left_template is None]  # not a clean-up's (converted already)
    if naming_old and not convert:
        names = ", ".join(str(c.vm) for c in naming_old[:HOLDERS_NAMED])
        more = len(naming_old) - HOLDERS_NAMED
        names += f" and {more} more" if more > 0 else ""
        warnings.append(Advice(f"{len(naming_old)} VM(s) name their NPUs through {old} ({names}): under "
                               f"{target} they get none until their devices are rewritten", option="convert_vms"))
    if convert and facts.vms_error:
        blockers.append(Blocker(f"cannot tell which VMs to convert: {facts.vms_error}"))
    if edit.patch or conversions:
        # The running-VM guard (rblnctl.vm.guard): a VM holding NPUs through what this change takes away.
        taken = methods_taken(edit, target, any(c.left_template is None for c in conversions))
        holders = npu_holders(facts.vmis or [], taken)
        unreadable = None if facts.vmis is not None else \
            f"the VirtualMachineInstances cannot be listed: {facts.vmis_error}"
        vm_blockers, vm_warnings = guard.verdict(
            holders, unreadable, override=evict_vms,
            why=(f"holds NPUs through {' and '.join(taken)}, which this change takes away (a running VM keeps the "
                 "devices of the method it started with)"),
            consequence="they keep the devices of the method they started with")
        blockers += vm_blockers
        warnings += vm_warnings
    if edit.patch:
        checks, pre_blockers, pre_warnings = check_prerequisites(target, facts, policy, force=force)
        blockers += pre_blockers
        warnings += pre_warnings
    if not vm_nodes:
        warnings.append("no NPU node is in vm-passthrough mode: there is nothing to roll, only the policy changes")
    return MethodPlan(target=target, current=policy.vm_method, edit=edit, vm_nodes=vm_nodes,
                      container_nodes=container_nodes, holders=holders, prerequisites=checks,
                      device_class=policy.dra_device_class_vm if target == C.METHOD_DRA else None,
                      conversions=conversions, convert=convert, warnings=warnings, blockers=blockers, rules=rules,
                      policy_uid=str((facts.policy_obj.get("metadata") or {}).get("uid") or ""))


def old_method_vms(vms: Sequence[dict], target: str, npu_claim: Callable[[str], D.ClaimTest]) -> list[Conversion]:
    """The VMs whose template names NPUs through the method other than `target` (pure but for `npu_claim`,
    which judges a namespace's resourceClaims entries: rblnctl.vm.cluster.ClaimIndex.test)."""
    out = []
    for vm in vms:
        spec = D.vm_spec(vm)
        if not D.host_devices(spec):
            continue
        meta = vm.get("metadata") or {}
        ns = str(meta.get("namespace") or "")
        have = D.npus_of(spec, npu_claim=npu_claim(ns))
        old = have.sandbox if target == C.METHOD_DRA else have.dra
        if old:
            out.append(Conversion(vm=VmRef(namespace=ns, name=str(meta.get("name") or "")), npus=len(old),
                                  devices=[d.name for d in old], uid=meta.get("uid") or None))
    return sorted(out, key=lambda c: c.vm)


def refusal_of(blockers: Sequence[Blocker]) -> tuple[str, Remedy | None]:
    """A vm attach refusal in words, and the remedy of its first blocker that names one (spelt by the front end)."""
    remedy = next((b.remedy for b in blockers if b.remedy is not None), None)
    return "; ".join(b.message for b in blockers), remedy
