"""permittedHostDevices: permit the RBLN NPUs the sandbox device plugin advertises, conflict-safely.

Each entry is `{pciVendorSelector: "1EFF:<device>", resourceName, externalResourceProvider: true}`
(the sandbox device plugin advertises the resource; KubeVirt must not start its own plugin). Which
resource names exist, and which PCI device each stands for, is the operator model's
(rblnctl.operator.resources).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import InvalidInput, NotFound
from rblnctl.kube import Kube
from rblnctl.kubevirt.cr import (
    CrWriteOptions,
    CrWriter,
    deletion_blockers,
    guarded_patch,
    lookup,
    refuse_hco_managed,
    version_of,
)
from rblnctl.operator import resources as R
from rblnctl.operator.nodes import node_product
from rblnctl.plan import Advice, Blocker
from rblnctl.remedy import Command, Remedy

PERMITTED_HOST_DEVICES = ("spec", "configuration", "permittedHostDevices")
PCI_HOST_DEVICES = (*PERMITTED_HOST_DEVICES, "pciHostDevices")
_SELECTOR = re.compile(r"([0-9A-Fa-f]{4}):([0-9A-Fa-f]{4})")


@dataclass(frozen=True, kw_only=True)
class PciHostDevice:
    """One permittedHostDevices.pciHostDevices entry rblnctl wants."""

    resource_name: str  # rebellions.ai/RBLN-CA22_PF
    pci_vendor_selector: str  # 1EFF:1220
    external_resource_provider: bool = True  # the RBLN sandbox device plugin advertises it, not KubeVirt

    def entry(self) -> dict:
        """The entry as KubeVirt spells it."""
        return {"pciVendorSelector": self.pci_vendor_selector, "resourceName": self.resource_name,
                "externalResourceProvider": self.external_resource_provider}


def device_for_resource(spec: str, *, vm_resources: R.ResourceNames | None = None) -> PciHostDevice:
    """Parse `rebellions.ai/RBLN-<MODEL>_<PF|VF>` (prefix optional), a resourceList name of the policy
    (`vm_resources`), or `NAME=VVVV:DDDD` into an entry. Raises InvalidInput naming the known models."""
    text = spec.strip()
    name, sep, selector = text.partition("=")
    name = name.strip()
    if not name or any(c.isspace() for c in name):
        raise InvalidInput(f"malformed resource name {spec!r}")
    name = R.qualify(name)
    if not R.is_npu_resource(name):
        raise InvalidInput(f"{name} is not a Rebellions resource (expected the {C.RESOURCE_PREFIX} prefix)")
    if sep:
        m = _SELECTOR.fullmatch(selector.strip())
        if not m:
            raise InvalidInput(
                f"malformed PCI selector {selector!r} in {spec!r}: expected VENDOR:DEVICE in hex, e.g. 1EFF:1220")
        return PciHostDevice(resource_name=name, pci_vendor_selector=f"{m.group(1)}:{m.group(2)}".upper())
    dev = R.device_id_for(name, vm_resources=vm_resources)
    return PciHostDevice(resource_name=name, pci_vendor_selector=f"{C.PCI_VENDOR_RBLN:04X}:{dev:04X}")


def devices_from_cluster(nodes: Sequence[dict], vm_resources: R.ResourceNames, *, policy: Any = None
                         ) -> tuple[list[PciHostDevice], list[str | Remedy]]:
    """The entries for every VM resource NPU nodes advertise, and a warning for each one rblnctl cannot map.

    A name the device plugin advertises too (`policy.shared_resources`: chart v0.3.0's CRD default when
    sandboxDevicePlugin.resourceList is left out) says nothing about a node's mode: it counts only where a
    vm-passthrough node advertises it, and a warning says so, with the policy's remedy (Policy.own_names_remedy)."""
    from rblnctl.operator.nodes import labels_of, mode_of

    devices: list[PciHostDevice] = []
    warnings: list[str | Remedy] = []
    advertised = R.advertised(nodes, vm_resources)
    shared = set(policy.shared_resources) if policy is not None else set()
    if shared & set(advertised):
        vm_nodes = {str((n.get("metadata") or {}).get("name") or "") for n in nodes
                    if mode_of(labels_of(n), policy).effective == C.MODE_VM}
        for key in sorted(shared & set(advertised)):
            where = advertised[key]
            on_vm = [n for n in where if n in vm_nodes]
            others = [n for n in where if n not in vm_nodes]
            if not others:
                continue
            shown = ", ".join(others[:3]) + (" ..." if len(others) > 3 else "")
            if on_vm:
                advertised[key] = on_vm
                why = (f"permitted for the vm-passthrough node(s) that advertise it ({', '.join(on_vm[:3])}), but "
                       f"kube-scheduler may also place a VM asking for it on the container-mode node(s) offering it "
                       f"({shown}), whose NPUs are not bound to vfio-pci")
            else:
                del advertised[key]
                why = (f"not permitted: only container-mode nodes advertise it ({shown}), no vm-passthrough node "
                       "does")
            warnings.append(policy.shared_warning(key, why))
    for key, where in advertised.items():
        if key == C.SANDBOX_ALIAS_RESOURCE:  # one name for every product: the nodes' products say which devices
            found, unknown = _alias_devices(key, [n for n in nodes if (n.get("metadata") or {}).get("name") in where])
            devices.extend(found)
            if unknown:
                warnings.append(f"{key} (on {', '.join(unknown)}) stands for every NPU product and those nodes carry "
                                f"no known {C.NPU_PRODUCT_LABEL}; permit it explicitly as {key}=1EFF:<device>")
            continue
        try:
            devices.append(device_for_resource(key, vm_resources=vm_resources))
        except InvalidInput:
            warnings.append(f"{key} (on {', '.join(where)}) has no known PCI device ID; permit it explicitly as "
                            f"{key}=1EFF:<device>")
    return devices, warnings


def _alias_devices(name: str, nodes: Sequence[dict]) -> tuple[list[PciHostDevice], list[str]]:
    """Entries for the single-alias resource (rebellions.ai/npu_pt): one per PF device ID of the advertising
    nodes' products (rebellions.ai/npu.product), and the nodes whose product is unknown."""
    ids: set[int] = set()
    unknown: list[str] = []
    for n in nodes:
        product = node_product(n)
        found = R.product_device_ids(product) if product else []
        if found:
            ids.add(found[0])
        else:
            unknown.append(str((n.get("metadata") or {}).get("name") or ""))
    return [PciHostDevice(resource_name=name, pci_vendor_selector=R.selector_of(d)) for d in sorted(ids)], unknown


def names_checked(kubevirt: Any) -> bool:
    """Whether KubeVirt refuses a host device name its permittedHostDevices does not list: only when the CR has a
    permittedHostDevices at all, even an empty one (kubevirt/kubevirt v1.9.0 pkg/virt-controller/services/
    renderresources.go validatePermittedHostDevices runs only `if hostDevs := config.GetPermittedHostDevices();
    hostDevs != nil`; virt-launcher takes a PCI device from the device plugin's environment, never from the list:
    pkg/virt-launcher/virtwrap/device/hostdevice/generic). Measured: tests/kubevirt_real/test_unlisted_devices_real.py.
    """
    present, value = lookup(kubevirt, PERMITTED_HOST_DEVICES)
    return present and value is not None


def is_rbln_entry(e: dict) -> bool:
    """An entry for a Rebellions device: by its resource name or by its vendor."""
    return R.is_npu_resource(str(e.get("resourceName") or "")) or str(
        e.get("pciVendorSelector") or "").upper().startswith(f"{C.PCI_VENDOR_RBLN:04X}:")


def model_of(selector: str) -> str | None:
    """`CA22 PF` for `1EFF:1220` (pci.ids); None for another vendor or an unknown device."""
    m = _SELECTOR.fullmatch(selector or "")
    if not m or int(m.group(1), 16) != C.PCI_VENDOR_RBLN:
        return None
    found = C.PCI_DEVICE_MODELS.get(int(m.group(2), 16))
    return f"{found[0]} {found[1]}" if found else None


@dataclass(frozen=True, kw_only=True)
class DevicePlan:
    """What permit-devices would change in permittedHostDevices.pciHostDevices, and the exact patch."""

    name: str
    namespace: str
    version: str | None
    fix: bool
    requested: list[PciHostDevice]
    pci_host_devices_before: list[dict]
    pci_host_devices_after: list[dict]
    added: list[str]  # resource names appended
    already_permitted: list[str]  # requested and already there with the same selector
    fixed: list[str]  # RBLN entries whose externalResourceProvider is set to true (fix)
    needs_fix: list[str]  # RBLN entries with externalResourceProvider false, left alone (no fix)
    skipped: list[str]  # requested but clashing with an existing entry (see warnings)
    patch: list[dict]
    noop: bool
    warnings: list[str | Advice | Remedy] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)


def precheck_resource_name(spec: str) -> None:
    """Refuse, before any request, what no policy could make valid: a malformed name or selector, another
    vendor's resource, or an RBLN-<MODEL> pci.ids does not know. resourceList names wait for the policy."""
    name, sep, _ = spec.strip().partition("=")
    name = name.strip()
    if not sep and name:
        R.parse_resource(name, what="--resource-name")  # the API server's rules for an extended resource name
    full = R.qualify(name)
    if sep or not name or any(c.isspace() for c in name) or not R.is_npu_resource(full) or \
            R.classify_generic(full) == C.MODE_VM and not full.endswith(C.LEGACY_VM_RESOURCE_SUFFIX):
        device_for_resource(spec)


def plan_devices(obj: dict, requested: Sequence[PciHostDevice], *, fix: bool = False,
                 notes: Sequence[str | Remedy] = ()) -> DevicePlan:
    """Plan adding entries to one KubeVirt CR's pciHostDevices (pure: no I/O).

    Every existing entry (any vendor) is kept in place. A requested entry is not added when an
    entry with the same resourceName or the same pciVendorSelector exists; a clash (same name,
    other selector, or the reverse) is a warning. RBLN entries with externalResourceProvider
    false or unset make KubeVirt start its own device plugin for that resource: reported, and set
    to true only with fix.
    """
    meta = obj.get("metadata") or {}
    _, raw = lookup(obj, PCI_HOST_DEVICES)
    before = [copy.deepcopy(e) for e in raw or [] if isinstance(e, dict)]
    after = copy.deepcopy(before)
    warnings: list[str | Advice | Remedy] = list(notes)
    added: list[str] = []
    already: list[str] = []
    fixed: list[str] = []
    needs_fix: list[str] = []
    skipped: list[str] = []

    for e in after:
        if is_rbln_entry(e) and not e.get("externalResourceProvider"):
            label = f"{e.get('resourceName')} ({e.get('pciVendorSelector')})"
            if fix:
                e["externalResourceProvider"] = True
                fixed.append(str(e.get("resourceName")))
            else:
                needs_fix.append(str(e.get("resourceName")))
                warnings.append(Advice(f"{label} is permitted with externalResourceProvider false: KubeVirt would "
                                       "run its own device plugin for it next to the RBLN sandbox device plugin; "
                                       "fixing it sets it to true", option="fix"))

    for d in requested:
        sel = d.pci_vendor_selector.upper()
        same_name = [e for e in after if e.get("resourceName") == d.resource_name]
        same_sel = [e for e in after if str(e.get("pciVendorSelector") or "").upper() == sel]
        if any(str(e.get("pciVendorSelector") or "").upper() == sel for e in same_name):
            if d.resource_name not in added:
                already.append(d.resource_name)
        elif same_name:
            skipped.append(d.resource_name)
            warnings.append(f"{d.resource_name} is already permitted with selector "
                            f"{same_name[0].get('pciVendorSelector')}, not {sel}; left as is (edit "
                            "permittedHostDevices by hand if the device ID is wrong)")
        elif same_sel:
            skipped.append(d.resource_name)
            warnings.append(f"{sel} is already permitted as {same_sel[0].get('resourceName')}; not adding "
                            f"{d.resource_name} (an old resource name? kubevirt migrate-resources renames it "
                            "everywhere)")
        else:
            after.append(d.entry())
            added.append(d.resource_name)

    writes = [(PCI_HOST_DEVICES, after)] if after != before else []
    blockers = deletion_blockers(obj)
    patch = guarded_patch(obj, writes, [PCI_HOST_DEVICES]) if writes and not blockers else []
    return DevicePlan(
        name=meta.get("name", ""), namespace=meta.get("namespace", ""), version=version_of(obj), fix=fix,
        requested=list(requested), pci_host_devices_before=before, pci_host_devices_after=after, added=added,
        already_permitted=already, fixed=fixed, needs_fix=needs_fix, skipped=skipped, patch=patch,
        noop=not writes, warnings=warnings, blockers=blockers,
    )


@dataclass(frozen=True, kw_only=True)
class DeviceResult:
    """The outcome of permit-devices: the plan last computed and whether a write went through."""

    plan: DevicePlan
    changed: bool
    attempts: int
    server_dry_run: bool = False


def _unique(devices: Sequence[PciHostDevice]) -> list[PciHostDevice]:
    out: dict[str, PciHostDevice] = {}
    for d in devices:
        prev = out.get(d.resource_name)
        if prev and prev.pci_vendor_selector != d.pci_vendor_selector:
            raise InvalidInput(f"{d.resource_name} given with two PCI selectors: "
                               f"{prev.pci_vendor_selector} and {d.pci_vendor_selector}")
        out.setdefault(d.resource_name, d)
    return list(out.values())


def _nothing_advertised(nodes: Sequence[dict], policy: Any, vm_resources: R.ResourceNames, release: Any = None
                        ) -> tuple[str, list[Remedy]]:
    """Why `--from-cluster` found nothing to permit, and the commands that fix it (Remedy data: the CLI spells them).

    Before any node is in vm-passthrough mode nothing can advertise a VM resource: the fix is to switch one
    (the order docs/vm.md gives: set-mode, then permit-devices; a node `node set-mode vm` accepts, by the policy's
    switch rules under the operator's `release`, as set-mode judges), or to name the resource outright.
    """
    from rblnctl.operator.nodes import labels_of, mode_of, node_product

    names = [str((n.get("metadata") or {}).get("name")) for n in nodes]
    vm_nodes = [name for name, n in zip(names, nodes) if mode_of(labels_of(n), policy).effective == C.MODE_VM]
    products = [p for n in nodes if (p := node_product(n))]
    example = vm_resources.example(products)
    dra = "DRA setups need no permittedHostDevices"
    if not vm_nodes:
        head = (f"no NPU node is in vm-passthrough mode yet, so none advertises a VM resource "
                f"({vm_resources.describe()})")
        switchable = [name for name, n in sorted(zip(names, nodes)) if policy is None
                      or not policy.switch_blockers(C.MODE_VM, product=node_product(n), release=release)]
        switch = Remedy("switch one first, then run permit-devices again", Command.own(
            "node", "set-mode", "vm", switchable[0])) if switchable else Remedy(
            "no NPU node can switch to vm mode under the policy now (node set-mode says why)") if names else Remedy(
            "no NPU node was found; what NFD labelled", Command.own("node", "list"))
        # name a resource only when it is the one this cluster's cards get: with a resourceList, the entry that
        # covers their product (entries[0] for a product no entry covers named a resource no node would use)
        if not vm_resources.entries or any(vm_resources.covers(p) for p in products):
            return f"{head} ({dra})", [switch, Remedy("or name the resource", Command.own(
                "kubevirt", "permit-devices", resource_name=(example,)))]
        cards = ", ".join(sorted(set(products))) or "its cards (no node says their product)"
        return f"{head}: which of those names the plugin gives {cards} shows only then ({dra})", [switch]
    return (f"no NPU node advertises a VM resource ({vm_resources.describe()}) though {', '.join(vm_nodes[:3])} "
            f"{'is' if len(vm_nodes) == 1 else 'are'} in vm-passthrough mode: the sandbox device plugin does not run "
            f"there yet; {dra}", [
                Remedy("its components, and a plugin pod stuck in an init container", Command.own(
                    "node", "list", *vm_nodes[:3], output="wide")),
                Remedy("why", Command.own("preflight"))])


def _words(note: str | Remedy) -> str:
    """A note as one line of an error message: a Remedy's external command (kubectl) written out after its words."""
    return note.inline() if isinstance(note, Remedy) else note


def _noop(*_: Any) -> None:
    return None


@dataclass(kw_only=True)
class DevicePermitter:
    """Permit RBLN NPUs as KubeVirt host devices without losing anyone else's entries."""

    kube: Kube
    options: CrWriteOptions = CrWriteOptions()
    fix: bool = False  # set externalResourceProvider: true on RBLN entries that have it false
    clock: Clock = SYSTEM_CLOCK
    on_retry: Callable[[int, str], None] = _noop

    def _writer(self) -> CrWriter[DevicePlan]:
        return CrWriter(kube=self.kube, options=self.options, clock=self.clock, on_retry=self.on_retry)

    def plan(self, resource_names: Sequence[str] = (), *, from_cluster: bool | None = None,
             node_selector: str | None = None) -> DevicePlan:
        """Resolve the wanted entries and plan them (reads only).

        `from_cluster` (default: when no names are given and nothing is to be fixed) adds every VM
        resource NPU nodes advertise, named by the active RBLNClusterPolicy's rules. Raises
        InvalidInput for a bad or unknown name, and NotFound when the cluster is the only source
        and no NPU node advertises a VM resource.
        """
        from rblnctl.operator.nodes import list_npu_node_objects
        from rblnctl.operator.cluster import read_operator

        # The KubeVirt CR first: without it no name helps, and the nothing-advertised remedies would name another
        # permit-devices that fails the same way.
        obj = self._writer().find()
        view = read_operator(self.kube)
        vm_resources = view.policy.vm_resources if view.policy else R.ResourceNames(mode=C.MODE_VM)
        requested = [device_for_resource(n, vm_resources=vm_resources) for n in resource_names]
        if from_cluster is None:
            from_cluster = not requested and not self.fix
        notes: list[str | Remedy] = []
        if from_cluster:
            nodes = list_npu_node_objects(self.kube, selector=node_selector)
            found, notes = devices_from_cluster(nodes, vm_resources, policy=view.policy)
            if not found:
                from rblnctl.operator.release import read_release

                msg, fixes = _nothing_advertised(nodes, view.policy, vm_resources,
                                                 read_release(self.kube, view.deployments))
                if not requested and not self.fix:
                    raise NotFound(msg + ("; " + "; ".join(_words(n) for n in notes) if notes else "")
                                   ).with_details(fixes)
                notes += [msg, *fixes]
            requested += found
        requested = _unique(requested)
        plan = plan_devices(obj, requested, fix=self.fix, notes=notes)
        if not plan.noop:
            refuse_hco_managed(obj, "devices")
        return plan

    def apply(self, plan: DevicePlan) -> DeviceResult:
        """Send the plan's patch; idempotent. Same conflict handling and errors as GateEditor.apply()."""

        def replan(obj: dict) -> DevicePlan:
            return plan_devices(obj, plan.requested, fix=self.fix)

        final, changed, attempts = self._writer().write(plan, replan)
        return DeviceResult(plan=final, changed=changed, attempts=attempts, server_dry_run=self.options.server_dry_run)
