"""Rename NPU resources everywhere KubeVirt names them, after the sandbox device plugin renamed them.

Chart v0.1.0-v0.3.0 of the RBLN NPU Operator advertise VM resources by the policy's resourceList
(`rebellions.ai/ATOM_PT`, `ATOM_MAX_PT`, `REBEL_PT`); later releases advertise one resource per product
and function (`rebellions.ai/RBLN-CA25_PF`). After the upgrade every place that names an old resource
must name the new one, or VMs stop getting NPUs. Those places (kubevirt/kubevirt@v1.9.0,
staging/src/kubevirt.io/api/core/v1):
- the KubeVirt CR: `spec.configuration.permittedHostDevices.pciHostDevices[].resourceName` (types.go);
- a VirtualMachine's template, `spec.template.spec.domain`: `devices.hostDevices[].deviceName` (schema.go
  HostDevice), `devices.gpus[].deviceName` (schema.go GPU: virt-controller checks GPUs against
  pciHostDevices too, pkg/virt-controller/services/renderresources.go validatePermittedHostDevices) and
  `resources.requests` / `resources.limits` (schema.go ResourceRequirements; the operator chart README's VM
  example requests `rebellions.ai/ATOM_MAX_PT: 8` there);
- a VMI holds the same fields, but a running instance keeps the devices it started with: VMIs are
  reported, never edited, and their VM takes the new names at its next start.

Without a mapping given, each old name is mapped through the PCI device it stood for: the KubeVirt CR's
pciVendorSelector for it, else the policy's resourceList product, else a model in the name
(`ATOM_CA25_PT`), else the chart's default resourceList - the last only when a vm-passthrough node
advertises the resource it leads to. The device names the new resource (pci.ids:
rblnctl.operator.resources.sandbox_resource).

Requests are bounded: one paged LIST each of nodes, VMs, VMIs, policies and KubeVirt CRs, then one
guarded JSON Patch per object that changes (`test` of every list and map it rewrites); a concurrent
edit fails the test, and only that object is read again and re-planned.
"""

from __future__ import annotations

import copy
import enum
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rblnctl import batch
from rblnctl import constants as C
from rblnctl.batch import ItemOutcome, State
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import ClusterError, ConfigError, Conflict, InvalidInput, NotFound, RblnError, Refused
from rblnctl.kube import DEFAULT_PAGE_SIZE, VMIS, VMS, Kube, writes
from rblnctl.kube.optional import ERROR, optional
from rblnctl.kubevirt.cr import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETRY_BACKOFF_S,
    CrWriteOptions,
    CrWriter,
    deletion_blockers,
    find_kubevirt,
    refuse_hco_managed,
    guarded_patch,
    identity_test,
    is_conflict,
    lookup,
    pointer,
    version_of,
)
from rblnctl.kubevirt.devices import PCI_HOST_DEVICES, model_of
from rblnctl.operator import resources as R
from rblnctl.operator.policy import Policy
from rblnctl.plan import Advice, Blocker
from rblnctl.vm import devices as D
from rblnctl.vm.lifecycle import replaced
from rblnctl.vm.model import VmRef

log = logging.getLogger(__name__)

# Paths from the VM spec shape rblnctl.vm.devices knows (a VM's template spec is a VMI spec), plus the
# two places only a rename touches: GPUs and resource requests.
HOST_DEVICES = (*D.VM_SPEC, *D.HOST_DEVICES)
CLAIMS = (*D.VM_SPEC, *D.RESOURCE_CLAIMS)
GPUS = (*D.VM_SPEC, "domain", "devices", "gpus")
REQUESTS = (*D.VM_SPEC, "domain", "resources", "requests")
LIMITS = (*D.VM_SPEC, "domain", "resources", "limits")
_DEVICE_LISTS = ((HOST_DEVICES, "hostDevices"), (GPUS, "gpus"))
_RESOURCE_MAPS = ((REQUESTS, "resources.requests"), (LIMITS, "resources.limits"))
_VMI_DEVICE_LISTS = tuple((D.VMI_SPEC + p[len(D.VM_SPEC):], "") for p, _ in _DEVICE_LISTS)
_VMI_RESOURCE_MAPS = tuple((D.VMI_SPEC + p[len(D.VM_SPEC):], "") for p, _ in _RESOURCE_MAPS)
USERS_SHOWN = 10  # objects named in one refusal before "and N more"


class Source(enum.StrEnum):
    """How the new name of an old resource was found."""

    GIVEN = "given"  # the caller's mapping
    PERMITTED = "permitted"  # the KubeVirt CR permits the old name with a Rebellions PCI selector
    POLICY = "policy"  # the RBLNClusterPolicy's resourceList gives the old name one product
    NAME = "name"  # the model is in the old name (ATOM_CA25_PT)
    CHART_DEFAULT = "chart-default"  # the chart's default resourceList, and a node advertises the result


@dataclass(frozen=True, kw_only=True)
class Rename:
    """One old resource name and the name that replaces it."""

    old: str
    new: str
    source: Source
    evidence: str  # what the mapping rests on, for people ("" when given)
    still_advertised: tuple[str, ...] = ()  # vm-passthrough nodes that still advertise the old name


@dataclass(frozen=True, kw_only=True)
class FieldChange:
    """One name rewritten in one object."""

    field: str  # hostDevices[npu0].deviceName, resources.limits, pciHostDevices[1EFF:1250]
    old: str
    new: str
    detail: str = ""  # the quantity of a request/limit; selector=1EFF:1250 when the selector changes too
    kept: bool = False  # the new name was already there: the old one is only dropped


@dataclass(frozen=True, kw_only=True)
class KubeVirtChange:
    """What the migration changes in the KubeVirt CR's permittedHostDevices, and the exact patch."""

    name: str
    namespace: str
    version: str | None
    changes: list[FieldChange]
    pci_host_devices_before: list[dict]
    pci_host_devices_after: list[dict]
    patch: list[dict]
    warnings: list[str] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)

    @property
    def noop(self) -> bool:
        """Nothing to write."""
        return not self.patch


@dataclass(frozen=True, kw_only=True)
class VmChange:
    """What the migration changes in one VirtualMachine, and the exact patch."""

    namespace: str
    name: str
    changes: list[FieldChange]
    patch: list[dict]
    running: bool  # an instance runs: it keeps its devices, the new names take effect at the next start
    blockers: list[Blocker] = field(default_factory=list)
    uid: str | None = None  # the VM's metadata.uid as read: its patch tests it (identity_test)

    @property
    def noop(self) -> bool:
        """Nothing to write."""
        return not self.patch

    @property
    def ref(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class InstanceUse:
    """A VirtualMachineInstance whose spec names an old resource (reported only: a running spec is never edited)."""

    namespace: str
    name: str
    node: str | None
    names: list[str]  # the old names it uses
    vm: str | None  # the VirtualMachine that owns it (None: a standalone VMI)


@dataclass(frozen=True, kw_only=True)
class Unmapped:
    """An old resource name in use that rblnctl cannot map to a current one."""

    name: str
    reason: str
    users: list[str]  # "VirtualMachine ns/name", "KubeVirt ns/name"


@dataclass(frozen=True, kw_only=True)
class MigrationPlan:
    """Every rename, per object, with its patch; what stays as it is and why; what refuses the run."""

    renames: list[Rename]
    kubevirt: KubeVirtChange
    vms: list[VmChange]  # the VMs that change
    instances: list[InstanceUse]
    unmapped: list[Unmapped]
    advertised: dict[str, list[str]]  # resources vm-passthrough nodes advertise now -> those nodes
    scanned_vms: int
    scanned_instances: int
    given: bool  # the mapping was given, not derived
    warnings: list[str | Advice] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)

    @property
    def noop(self) -> bool:
        """Nothing to write anywhere."""
        return self.kubevirt.noop and all(v.noop for v in self.vms)

    @property
    def mapping(self) -> dict[str, str]:
        """old -> new."""
        return {r.old: r.new for r in self.renames}

    @property
    def restart_needed(self) -> list[str]:
        """VMs (`namespace/name`) that change while an instance of them runs."""
        return [v.ref for v in self.vms if v.running and not v.noop]


@dataclass(frozen=True, kw_only=True)
class MigrationResult:
    """What apply() wrote."""

    plan: MigrationPlan
    kubevirt_changed: bool
    changed: list[str]  # VMs patched (`namespace/name`)
    gone: list[str]  # VMs deleted between plan and apply (nothing to rename)
    restart_needed: list[str]  # patched VMs whose running instance keeps the old names until restarted
    retries: int  # patches sent again after a concurrent edit
    server_dry_run: bool = False
    outcomes: list[ItemOutcome] = field(default_factory=list)  # every object of the plan that changes, and its fate


# -- input ---------------------------------------------------------------------------------------


def parse_mapping(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """`OLD=NEW` pairs (the domain `rebellions.ai/` optional) -> qualified pairs; InvalidInput for bad ones.

    Each name must be a valid extended resource name in the Rebellions domain (rblnctl.operator.resources
    .parse_resource: the API server's rules).

    A name may be renamed once, and a new name cannot be renamed in the same run (no chains).
    """
    out: dict[str, str] = {}
    for text in items:
        old, sep, new = str(text).partition("=")
        old, new = old.strip(), new.strip()
        if not sep or not old or not new or any(c.isspace() for c in old + new) or "=" in new:
            raise InvalidInput(f"malformed mapping {text!r}: expected OLD=NEW, e.g. "
                               "rebellions.ai/ATOM_MAX_PT=rebellions.ai/RBLN-CA25_PF")
        # Both names as the API server would judge them (an extended resource name): a bad one would
        # otherwise be written into the KubeVirt CR and every VM, and refused only when a VM starts.
        old, new = (R.parse_resource(n, what=f"resource name in --map {text!r}") for n in (old, new))
        if old == new:
            raise InvalidInput(f"mapping {text!r} renames {old} to itself")
        if out.get(old, new) != new:
            raise InvalidInput(f"{old} is mapped twice: to {out[old]} and to {new}")
        out[old] = new
    chained = sorted(set(out) & set(out.values()))
    if chained:
        raise InvalidInput(f"{', '.join(chained)} is both renamed and a new name; give each old name its final name")
    return tuple(out.items())


def _noop(*_: Any) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class MigrateOptions:
    """How migrate-resources maps names and writes."""

    mapping: tuple[tuple[str, str], ...] = ()  # (old, new); empty: derive from the cluster
    force: bool = False  # rename a name some vm-passthrough node still advertises (its entry stays permitted)
    kubevirt_name: str | None = None  # None: the only KubeVirt CR
    kubevirt_namespace: str | None = None
    server_dry_run: bool = False
    page_size: int = DEFAULT_PAGE_SIZE  # objects per LIST page
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # patches per object when others keep editing it
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S  # first wait after a conflict; doubles

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ConfigError("page_size must be at least 1")
        if self.max_attempts < 1:
            raise ConfigError("max_attempts must be at least 1")


# -- reading names -------------------------------------------------------------------------------


def _named_in_vm(obj: Mapping, lists: Sequence[tuple[tuple[str, ...], str]],
                 maps: Sequence[tuple[tuple[str, ...], str]]) -> list[str]:
    """Every NPU resource name an object's spec uses (device lists' deviceName, resource map keys)."""
    found: list[str] = []
    for path, _ in lists:
        _, items = lookup(obj, path)
        for d in items if isinstance(items, list) else []:
            name = d.get("deviceName") if isinstance(d, dict) else None
            if isinstance(name, str) and R.is_npu_resource(name):
                found.append(name)
    for path, _ in maps:
        _, res = lookup(obj, path)
        found += [k for k in (res if isinstance(res, dict) else {}) if R.is_npu_resource(str(k))]
    return list(dict.fromkeys(found))


def vm_names(vm: Mapping) -> list[str]:
    """The NPU resource names a VirtualMachine's template uses."""
    return _named_in_vm(vm, _DEVICE_LISTS, _RESOURCE_MAPS)


def vmi_names(vmi: Mapping) -> list[str]:
    """The NPU resource names a VirtualMachineInstance's spec uses."""
    return _named_in_vm(vmi, _VMI_DEVICE_LISTS, _VMI_RESOURCE_MAPS)


def _entries(kv: Mapping) -> list[dict]:
    _, raw = lookup(kv, PCI_HOST_DEVICES)
    return [copy.deepcopy(e) for e in raw or [] if isinstance(e, dict)]


def _device_of(selector: object) -> int | None:
    """The device ID of an RBLN `1EFF:DDDD` selector that pci.ids names; None otherwise."""
    text = str(selector or "")
    return int(text.split(":")[1], 16) if model_of(text) is not None else None


def vm_advertised(vm_nodes: Iterable[dict], policy: Policy | None) -> dict[str, list[str]]:
    """VM resources the given (vm-passthrough) nodes advertise now, by the policy's names and the generic scheme."""
    nodes = list(vm_nodes)
    out = R.advertised(nodes, R.ResourceNames(mode=C.MODE_VM))
    if policy is not None and policy.vm_resources.entries:
        for k, where in R.advertised(nodes, policy.vm_resources).items():
            out.setdefault(k, where)
    return dict(sorted(out.items()))


def _is_old(name: str, advertised: Mapping[str, list[str]], policy: Policy | None, permitted: set[str]) -> bool:
    """An old VM resource name: not the per-product scheme, advertised by no vm-passthrough node, and a VM
    resource by the naming rules, the policy's resourceList or the KubeVirt CR."""
    if name in advertised or R.is_per_product(name) or not R.is_npu_resource(name):
        return False
    kind = R.classify_generic(name)
    if kind == C.MODE_VM or (policy is not None and policy.vm_resources.matches(name)):
        return True
    return name in permitted and kind != C.MODE_CONTAINER


def derive_rename(name: str, *, entries: Sequence[Mapping], policy: Policy | None,
                  advertised: Mapping[str, list[str]]) -> Rename | str:
    """The Rename of one old name, or the reason it cannot be mapped (pure)."""
    sources: list[tuple[str, Source, str]] = []  # (new, source, evidence)
    for e in entries:
        if e.get("resourceName") != name:
            continue
        dev = _device_of(e.get("pciVendorSelector"))
        new = R.sandbox_resource(dev) if dev is not None else None
        if dev is not None and new:
            sources.append((new, Source.PERMITTED, f"KubeVirt permits {R.selector_of(dev)} as {name}"))
    if not sources and policy is not None:
        products = policy.vm_resources.products_of(name)
        if len(products) > 1:
            return (f"RBLNClusterPolicy {policy.name} advertises it for {len(products)} products "
                    f"({', '.join(products)}): which one each VM meant is unknown")
        ids = R.product_device_ids(products[0]) if products else []
        if ids:
            sources.append((R.sandbox_resource(ids[0]) or "", Source.POLICY,
                            f"RBLNClusterPolicy {policy.name} advertises it for {products[0]}"))
    if not sources:
        legacy = R.legacy_vm_product(name)
        ids = R.product_device_ids(legacy[0]) if legacy else []
        if legacy and ids:
            new = R.sandbox_resource(ids[0]) or ""
            if legacy[1] == "name":
                sources.append((new, Source.NAME, f"the name says {legacy[0]}"))
            elif new in advertised:
                sources.append((new, Source.CHART_DEFAULT,
                                f"the operator chart's default resourceList gives it {legacy[0]}, and "
                                f"{new} is advertised"))
            else:
                return (f"the operator chart's default resourceList gives it {legacy[0]}, but no vm-passthrough node "
                        f"advertises {new}, and sites often pointed it at another product")
    if not sources:
        return ("neither the KubeVirt CR, the RBLNClusterPolicy nor the name says which PCI device it stood for")
    news = sorted({s[0] for s in sources})
    if len(news) > 1:
        live = [n for n in news if n in advertised]
        if len(live) != 1:
            return f"it stands for several devices ({', '.join(news)}): which one each VM meant is unknown"
        news = live
    chosen = next(s for s in sources if s[0] == news[0])
    return Rename(old=name, new=chosen[0], source=chosen[1], evidence=chosen[2])


# -- planning ------------------------------------------------------------------------------------


def plan_kubevirt(obj: dict, renames: Sequence[Rename]) -> KubeVirtChange:
    """Rename the permitted entries of old names (pure).

    An entry keeps its place; its selector follows the new name when that name is a per-product one
    (its device is known), else it is kept. An entry of a name some node still advertises (forced)
    stays, and the new one is added beside it. When an entry for the new name exists already, the old
    one is dropped (a warning when their selectors differ).
    """
    meta = obj.get("metadata") or {}
    by_old = {r.old: r for r in renames}
    before = _entries(obj)
    after: list[dict] = []
    changes: list[FieldChange] = []
    warnings: list[str] = []
    existing = {str(e.get("resourceName")): e for e in before}
    for e in before:
        r = by_old.get(str(e.get("resourceName")))
        if r is None:
            after.append(e)
            continue
        old_sel = str(e.get("pciVendorSelector") or "")
        dev = _device_of(old_sel)
        new_name = r.new
        if r.source != Source.GIVEN and dev is not None:
            new_name = R.sandbox_resource(dev) or r.new  # each entry by its own device
        selector = R.selector_of(R.device_id_for(new_name)) if R.is_per_product(new_name) and \
            _known_model(new_name) else old_sel
        if r.still_advertised:
            after.append(e)
        label = f"pciHostDevices[{old_sel}]"
        if new_name in existing or any(x.get("resourceName") == new_name for x in after):
            other = existing.get(new_name) or next(x for x in after if x.get("resourceName") == new_name)
            if str(other.get("pciVendorSelector") or "").upper() != selector.upper():
                warnings.append(f"KubeVirt already permits {new_name} with selector {other.get('pciVendorSelector')}, "
                                f"not {selector}; dropping the entry of {r.old} and keeping that one")
            if not r.still_advertised:
                changes.append(FieldChange(field=label, old=r.old, new=new_name, kept=True))
            continue
        renamed = dict(e, resourceName=new_name, pciVendorSelector=selector)
        after.append(renamed)
        changes.append(FieldChange(field=label, old=r.old, new=new_name,
                                   detail="" if selector == old_sel else f"selector={selector}"))
    blockers = deletion_blockers(obj) if after != before else []
    patch = guarded_patch(obj, [(PCI_HOST_DEVICES, after)], [PCI_HOST_DEVICES]) \
        if after != before and not blockers else []
    return KubeVirtChange(name=meta.get("name", ""), namespace=meta.get("namespace", ""), version=version_of(obj),
                          changes=changes, pci_host_devices_before=before, pci_host_devices_after=after, patch=patch,
                          warnings=warnings, blockers=blockers)


def _known_model(name: str) -> bool:
    try:
        R.device_id_for(name)
    except InvalidInput:
        return False
    return True


def plan_vm(vm: Mapping, mapping: Mapping[str, str], *, running: bool) -> VmChange:
    """Rename one VM's NPU resources (pure). The patch tests the VM's uid (identity_test: never a VM deleted and
    re-created under the name since) and every list and map it rewrites."""
    meta = vm.get("metadata") or {}
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    tests: list[dict] = []
    ops: list[dict] = []
    changes: list[FieldChange] = []
    blockers: list[Blocker] = []
    for path, label in _DEVICE_LISTS:
        _, items = lookup(vm, path)
        if not isinstance(items, list):
            continue
        here = []
        for i, d in enumerate(items):
            old = d.get("deviceName") if isinstance(d, dict) else None
            if isinstance(old, str) and old in mapping:
                here.append({"op": "replace", "path": pointer((*path, str(i), "deviceName")), "value": mapping[old]})
                changes.append(FieldChange(field=f"{label}[{d.get('name') or i}].deviceName", old=old,
                                           new=mapping[old]))
        if here:
            tests.append({"op": "test", "path": pointer(path), "value": items})
            ops += here
    for path, label in _RESOURCE_MAPS:
        _, res = lookup(vm, path)
        if not isinstance(res, dict):
            continue
        here = []
        for old in [k for k in res if k in mapping]:
            new = mapping[old]
            here.append({"op": "remove", "path": pointer((*path, old))})
            if new in res:
                if str(res[new]) != str(res[old]):
                    blockers.append(Blocker(
                        f"VirtualMachine {ns}/{name} has both {old}: {res[old]} and {new}: {res[new]} in {label}; "
                        "say which quantity it needs by hand"))
                changes.append(FieldChange(field=label, old=old, new=new, detail=str(res[new]), kept=True))
                continue
            here.append({"op": "add", "path": pointer((*path, new)), "value": res[old]})
            changes.append(FieldChange(field=label, old=old, new=new, detail=str(res[old])))
        if here:
            tests.append({"op": "test", "path": pointer(path), "value": res})
            ops += here
    claim_tests, claim_ops, claim_changes = _claim_renames(vm, ns, name)
    tested = {t["path"] for t in tests}
    tests += [t for t in claim_tests if t["path"] not in tested]
    ops += claim_ops
    changes += claim_changes
    patch = identity_test(vm) + tests + ops if ops and not blockers else []
    return VmChange(namespace=ns, name=name, changes=changes, patch=patch, running=running, blockers=blockers,
                    uid=meta.get("uid") or None)


def _claim_renames(vm: Mapping, ns: str, name: str) -> tuple[list[dict], list[dict], list[FieldChange]]:
    """Rename rblnctl's pod-level claim to the VM's own (rblnctl.vm.devices.claim_name), with its host devices:
    the old fixed rbln-npu, shared by every VM, keeps a second DRA VM on a node from starting (docs/vm.md)."""
    want = D.claim_name(ns, name)
    _, claims = lookup(vm, CLAIMS)
    if not isinstance(claims, list) or any(isinstance(c, dict) and c.get("name") == want for c in claims):
        return [], [], []
    renamed = {i: str(c["name"]) for i, c in enumerate(claims) if isinstance(c, dict) and D.is_managed_claim(c)}
    if len(renamed) != 1:
        return [], [], []  # none, or several of rblnctl's (hand-edited): vm attach sorts those out
    (index, old), = renamed.items()
    tests = [{"op": "test", "path": pointer(CLAIMS), "value": claims}]
    ops = [{"op": "replace", "path": pointer((*CLAIMS, str(index), "name")), "value": want}]
    changes = [FieldChange(field=f"resourceClaims[{old}].name", old=old, new=want)]
    _, devices = lookup(vm, HOST_DEVICES)
    if isinstance(devices, list):
        moved = [(i, d) for i, d in enumerate(devices) if isinstance(d, dict) and d.get("claimName") == old]
        if moved:
            tests.append({"op": "test", "path": pointer(HOST_DEVICES), "value": devices})
            ops += [{"op": "replace", "path": pointer((*HOST_DEVICES, str(i), "claimName")), "value": want}
                    for i, _ in moved]
            changes += [FieldChange(field=f"hostDevices[{d.get('name') or i}].claimName", old=old, new=want)
                        for i, d in moved]
    return tests, ops, changes


def _ref(obj: Mapping) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _owner_vm(vmi: Mapping) -> str | None:
    for o in (vmi.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(o, dict) and o.get("kind") == "VirtualMachine":
            return str(o.get("name") or "") or None
    return None


def _listed(users: Sequence[str]) -> str:
    shown = ", ".join(users[:USERS_SHOWN])
    return shown + (f" and {len(users) - USERS_SHOWN} more" if len(users) > USERS_SHOWN else "")


def plan_migration(kv: dict, vms: Sequence[dict], vmis: Sequence[dict], *, advertised: Mapping[str, list[str]],
                   policy: Policy | None, mapping: Sequence[tuple[str, str]] = (), force: bool = False
                   ) -> MigrationPlan:
    """Plan every rename from what was read (pure: no I/O)."""
    entries = _entries(kv)
    kv_ns, kv_name = _ref(kv)
    users: dict[str, list[str]] = {}
    for e in entries:
        n = str(e.get("resourceName") or "")
        if R.is_npu_resource(n):
            users.setdefault(n, []).append(f"KubeVirt {kv_ns}/{kv_name}")
    vm_uses = []
    for vm in vms:
        names = vm_names(vm)
        vm_uses.append((vm, names))
        for n in names:
            users.setdefault(n, []).append("VirtualMachine {}/{}".format(*_ref(vm)))
    permitted = {str(e.get("resourceName") or "") for e in entries}
    old_names = sorted(n for n in users if _is_old(n, advertised, policy, permitted))
    warnings: list[str | Advice] = []
    renames: list[Rename] = []
    unmapped: list[Unmapped] = []
    if mapping:
        for old, new in mapping:
            renames.append(Rename(old=old, new=new, source=Source.GIVEN, evidence="",
                                  still_advertised=tuple(advertised.get(old, ()))))
        left = [n for n in old_names if n not in dict(mapping)]
        if left:
            warnings.append(f"{', '.join(left)} {'is' if len(left) == 1 else 'are'} advertised by no vm-passthrough "
                            "node and not in the mapping given; left as is")
    else:
        for n in old_names:
            found = derive_rename(n, entries=entries, policy=policy, advertised=advertised)
            if isinstance(found, Rename):
                renames.append(found)
            else:
                unmapped.append(Unmapped(name=n, reason=found, users=users[n]))
    for r in renames:
        if r.new not in advertised and r.old in users:
            warnings.append(f"no vm-passthrough node advertises {r.new} yet ({r.old} -> {r.new}): VMs that need it "
                            "stay unschedulable until one does")
    for n in sorted(users):
        if R.is_per_product(n) and n not in advertised and n not in {r.new for r in renames}:
            warnings.append(f"{n} is used ({_listed(users[n])}) but no vm-passthrough node advertises it")
    blockers: list[Blocker] = []
    for u in unmapped:
        blockers.append(Blocker(f"cannot map {u.name} to a resource the sandbox device plugin advertises now: "
                                f"{u.reason}; used by {_listed(u.users)}; name its new resource explicitly",
                                override="mapping"))
    for r in renames:
        if r.still_advertised and r.old in users:
            msg = (f"{r.old} is still advertised by {', '.join(r.still_advertised)}: their sandbox device plugin "
                   "has not been upgraded, and VMs renamed now could not use those nodes")
            if force:
                warnings.append(msg + "; renaming anyway (forced), KubeVirt keeps permitting the old name too")
            else:
                blockers.append(Blocker(msg + "; finish the operator upgrade first", override="force"))
    new_names = {r.old: r.new for r in renames}
    running = {_ref(v) for v in vmis}
    vm_changes = []
    for vm, used in vm_uses:
        if not set(used) & set(new_names) and not _claim_renames(vm, *_ref(vm))[1]:
            continue
        change = plan_vm(vm, new_names, running=_ref(vm) in running)
        vm_changes.append(change)
        blockers += change.blockers
    kv_change = plan_kubevirt(kv, renames)
    warnings += kv_change.warnings
    blockers += kv_change.blockers
    # Instances are reported for every old name they run with, renamed in this run or in an earlier one.
    watched = set(new_names) | {u.name for u in unmapped}
    instances = []
    for v in vmis:
        used = [n for n in vmi_names(v) if n in watched or _is_old(n, advertised, policy, permitted)]
        if used:
            ns, name = _ref(v)
            instances.append(InstanceUse(namespace=ns, name=name, node=(v.get("status") or {}).get("nodeName"),
                                         names=used, vm=_owner_vm(v)))
    return MigrationPlan(renames=renames, kubevirt=kv_change, vms=vm_changes, instances=instances, unmapped=unmapped,
                         advertised=dict(advertised), scanned_vms=len(vms), scanned_instances=len(vmis),
                         given=bool(mapping), warnings=warnings, blockers=blockers)


# -- the migrator --------------------------------------------------------------------------------


@dataclass(kw_only=True)
class ResourceMigrator:
    """Rename NPU resources in the KubeVirt CR and every VirtualMachine; plan() reads, apply() writes."""

    kube: Kube
    options: MigrateOptions = MigrateOptions()
    clock: Clock = SYSTEM_CLOCK
    on_retry: Callable[[str, int, str], None] = _noop  # (object, attempt that conflicted, server message)

    def _cr_options(self) -> CrWriteOptions:
        o = self.options
        return CrWriteOptions(name=o.kubevirt_name, namespace=o.kubevirt_namespace, server_dry_run=o.server_dry_run,
                              max_attempts=o.max_attempts, retry_backoff_s=o.retry_backoff_s)

    def plan(self) -> MigrationPlan:
        """Read the cluster (a fixed number of paged lists) and plan every rename."""
        from rblnctl.operator.nodes import list_npu_node_objects
        from rblnctl.operator.cluster import read_operator
        from rblnctl.operator.nodes import labels_of, mode_of

        kv = find_kubevirt(self.kube, name=self.options.kubevirt_name, namespace=self.options.kubevirt_namespace)
        policy = read_operator(self.kube).policy
        vm_nodes = [n for n in list_npu_node_objects(self.kube)
                    if mode_of(labels_of(n), policy).effective == C.MODE_VM]
        page = self.options.page_size
        vms = list(self.kube.iter_list(VMS, page_size=page))
        vmis = optional(lambda: list(self.kube.iter_list(VMIS, page_size=page)), what="list VirtualMachineInstances",
                        absent=[], on_forbidden=ERROR).value
        plan = plan_migration(kv, vms, vmis, advertised=vm_advertised(vm_nodes, policy), policy=policy,
                              mapping=self.options.mapping, force=self.options.force)
        if not plan.kubevirt.noop:  # the VMs alone may still be renamed once HCO carries the new names
            refuse_hco_managed(kv, "devices")
        return plan

    def apply(self, plan: MigrationPlan) -> MigrationResult:
        """Write the plan: the KubeVirt CR first, then each VM; idempotent.

        The CR goes first: once the operator advertises only the new names, a VM still naming an old one
        cannot start anyway, and each VM works again as soon as its own patch lands. A concurrent edit of
        an object (its `test` ops fail) re-reads that object only and re-plans it; a reply lost in
        transit is settled the same way. Every VM is tried (rblnctl.batch): one that fails (RBAC refuses
        its namespace, it kept changing, a 5xx that would not pass) does not stop the others. A CR that
        could not be renamed does: VMs renamed to names KubeVirt does not permit could not start, so they
        are not attempted. Raises Refused when the plan has blockers, Partial (the result attached, one
        outcome per object) when an object was not renamed.
        """
        if plan.blockers:
            raise Refused("refusing to rename NPU resources", blockers=plan.blockers)
        renames = plan.renames
        kv_changed = False
        retries = 0
        outcomes: list[ItemOutcome] = []
        stopped: str | None = None
        kv_ref = f"{plan.kubevirt.namespace}/{plan.kubevirt.name}"
        if not plan.kubevirt.noop:
            writer: CrWriter[KubeVirtChange] = CrWriter(
                kube=self.kube, options=self._cr_options(), clock=self.clock,
                on_retry=lambda attempt, msg: self.on_retry(f"KubeVirt {kv_ref}", attempt, msg))
            try:
                _, kv_changed, attempts = writer.write(plan.kubevirt, lambda obj: plan_kubevirt(obj, renames))
                retries += max(0, attempts - 1)
                outcomes.append(ItemOutcome(kind="KubeVirt", name=kv_ref,
                                            state=State.DONE if kv_changed else State.UNCHANGED))
            except RblnError as e:
                outcomes.append(ItemOutcome(kind="KubeVirt", name=kv_ref, state=State.FAILED,
                                            reason=batch.one_line(e)))
                stopped = batch.stops_the_rest(e) or (
                    "the KubeVirt CR was not renamed: VMs renamed now could not start (KubeVirt would not permit "
                    "their new names)")
        changed, gone, restart = [], [], []
        for vm in plan.vms:
            if vm.noop:
                continue
            if stopped is not None:
                outcomes.append(ItemOutcome(kind="VirtualMachine", name=vm.ref, state=State.NOT_ATTEMPTED,
                                            reason=stopped))
                continue
            try:
                outcome, attempts, final = self._write_vm(vm, plan.mapping)
            except RblnError as e:
                outcomes.append(ItemOutcome(kind="VirtualMachine", name=vm.ref, state=State.FAILED,
                                            reason=batch.one_line(e)))
                stopped = batch.stops_the_rest(e)
                continue
            retries += max(0, attempts - 1)
            if outcome == "gone":
                gone.append(vm.ref)
                outcomes.append(ItemOutcome(kind="VirtualMachine", name=vm.ref, state=State.UNCHANGED,
                                            reason="deleted meanwhile"))
            elif outcome == "changed":
                changed.append(vm.ref)
                if final.running:
                    restart.append(vm.ref)
                outcomes.append(ItemOutcome(kind="VirtualMachine", name=vm.ref, state=State.DONE))
            else:
                outcomes.append(ItemOutcome(kind="VirtualMachine", name=vm.ref, state=State.UNCHANGED,
                                            reason="already renamed"))
        result = MigrationResult(plan=plan, kubevirt_changed=kv_changed, changed=changed, gone=gone,
                                 restart_needed=restart, retries=retries, server_dry_run=self.options.server_dry_run,
                                 outcomes=outcomes)
        if not batch.complete(outcomes):
            raise batch.partial("not every object was renamed", outcomes, result)
        return result

    def _write_vm(self, vm: VmChange, mapping: Mapping[str, str]) -> tuple[str, int, VmChange]:
        """Patch one VM until its names are the new ones: ("changed" | "unchanged" | "gone", patches sent, plan).

        A concurrent edit (its `test` ops fail) re-reads the VM and re-plans it; a patch whose outcome is
        unknown is settled by reading the VM back (rblnctl.kube.writes): a re-plan with nothing left to do
        means it landed. A VM read back with another uid was deleted and re-created since (its patch tests the uid:
        nothing landed on it): Replaced, never re-planned onto the new VM.
        """
        current = [vm]
        gone: list[bool] = []

        def next_write(obj: Any) -> writes.Write | None:
            if obj is not writes.UNREAD:
                if obj is None:
                    gone.append(True)
                    return None
                if vm.uid is not None and (obj.get("metadata") or {}).get("uid") != vm.uid:
                    raise replaced(VmRef(namespace=vm.namespace, name=vm.name), "renamed its NPU resources")
                current[0] = plan_vm(obj, mapping, running=current[0].running)
            c = current[0]
            if c.blockers:
                raise Refused(f"refusing to rename NPU resources in VirtualMachine {c.ref}", blockers=c.blockers)
            if c.noop:
                return None
            return writes.patch(VMS, c.name, c.patch, patch_type="json", namespace=c.namespace)

        def gave_up(last: ClusterError, sent: int) -> RblnError:
            return Conflict(f"VirtualMachine {current[0].ref} kept changing while we renamed its NPU resources: "
                            f"gave up after {sent} attempts; rerun once the other writer is done",
                            status=409, reason="Conflict")

        try:
            done = writes.settle(self.kube, next_write, what=f"VirtualMachine {vm.ref}", retry=is_conflict,
                                 read=lambda: self.kube.get_optional(VMS, vm.name, namespace=vm.namespace),
                                 attempts=self.options.max_attempts, backoff_s=self.options.retry_backoff_s,
                                 clock=self.clock, dry_run=self.options.server_dry_run, exhausted=gave_up,
                                 on_retry=lambda attempt, why: self.on_retry(f"VirtualMachine {vm.ref}", attempt, why))
        except NotFound:
            return "gone", 1, current[0]
        if gone:
            return "gone", done.sent, current[0]
        return ("changed" if done.changed else "unchanged"), done.sent, current[0]
