"""The running-VM guard: one rule for every change that could take NPUs from a running VM.

A change refuses while a running VM depends on what it changes, names each such VM with what in it depends
and the command that frees it (`virtctl stop NAME -n NS`; a VMI no VM owns: `kubectl delete vmi`), and one
override, OVERRIDE (`--evict-vms`), lets it go ahead anyway, in every command alike. What "depends" means,
per change (each from the source of what breaks):

- `node set-mode` (rblnctl.node.vms): a VM holding the node's NPUs. Relabelling the node rebinds them under the
  guest (vfio-pci <-> the rbln driver), and such a VM cannot live-migrate (KubeVirt sets LiveMigratable=False,
  HostDeviceNotLiveMigratable). With the override its virt-launcher pod is evicted first.
- `policy set-method` (rblnctl.method.plan): a VM holding NPUs through the allocator the switch turns off or
  the VMs it converts away from (sandbox: host devices naming an NPU resource; DRA: claims). Its devices stay
  passed through while the allocator that accounted for them goes, so the other one can hand them out again.
  A VM already on the target method depends on nothing the switch changes (issue 28 finding 5).
- `kubevirt disable-gates` (rblnctl.vm.gates): a VM whose NPUs need a gate the write turns off. KubeVirt
  admits a VMI with host devices only while HostDevices is on (kubevirt/kubevirt v1.9.0
  pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go), one with a host device taken
  from a DRA claim only while HostDevicesWithDRA is on too (pkg/dra/admitter/dra_admitter.go validateDRADevices:
  "contains DRA enabled HostDevices but feature gate is not enabled"), and renders such a device's claims into
  its virt-launcher pod only under that gate (pkg/virt-controller/services/template.go, renderresources.go): the
  running VMI keeps its devices, but the VM cannot start again with them (and a VM KubeVirt restarts by
  itself, runStrategy Always, does not come back); its VirtualMachine validator checks a VM's template on
  every update too (vms-admitter.go ValidateVirtualMachineSpec), so the VM's spec cannot even be patched to stop
  it while the gate is off (tests/kubevirt_real/test_gate_off_updates.py).
Not guarded, because they take nothing a running VM depends on:
- `kubevirt permit-devices` never removes or renames a permittedHostDevices entry: it appends, and `--fix` only sets
  externalResourceProvider (whether virt-handler runs its own device plugin for the resource:
  pkg/virt-handler/device-manager/device_controller.go updatePermittedHostDevicePlugins), leaving the name and
  selector a VMI is admitted and rendered with (pkg/virt-controller/services/renderresources.go).
- `kubevirt migrate-resources` renames a running VM's template with the CR, so the VM depends on the new names
  from its next start, and KubeVirt never re-validates a running VMI's host devices against permittedHostDevices
  or its template (a hostDevices change of a running VM only sets RestartRequired:
  pkg/virt-controller/watch/vm/vm.go syncRestartRequired). Its running VMs are listed, restart-needed.

A VMI in a final phase (Succeeded, Failed) holds nothing, and nor does one whose virt-launcher pod the scheduler
could not place (no node, PodScheduled False with reason Unschedulable: what the VM's printableStatus
ErrorUnschedulable is made from, kubevirt/kubevirt v1.9.0 pkg/virt-controller/watch/vm/vm.go): a pod bound to no node
was given no device by a kubelet and no claim allocation by the scheduler. What the guard judges is always the VMI
and its pod as they exist, never the VM's printableStatus. A field of a VMI's spec that cannot be read counts as
depending on everything (the guard refuses what it cannot read rather than let it break), and a VMI list the
server refuses is one refusal, with the same override.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rblnctl.kube import VMIS, Kube
from rblnctl.kube.optional import UNKNOWN, optional
from rblnctl.operator.resources import is_npu_resource
from rblnctl.plan import Blocker
from rblnctl.vm import devices as D

OVERRIDE = "evict_vms"  # the one options-field that lets a guarded change go ahead (the CLI's --evict-vms)
NAMED = 20  # VMs named one per refusal line; the rest are counted
FINAL_PHASES = ("Succeeded", "Failed")
SANDBOX, DRA = "sandbox", "dra"  # how a VMI's NPUs reach it (rblnctl.constants.METHODS)

# What in a VMI depends on a change (empty: nothing; the guard leaves the VMI alone).
Depends = Callable[[Mapping], list[str]]


@dataclass(frozen=True, kw_only=True)
class NpuVm:
    """A running VM that depends on a change, and what in it does."""

    namespace: str
    name: str
    holds: str  # rebellions.ai/RBLN-CA22_PF, claim npu-claim, or the launcher pod
    standalone: bool = False  # a VMI no VirtualMachine owns (deleted, not stopped)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.holds})"


def vmi_npus(vmi: Any) -> list[str]:
    """What in a VMI's spec holds NPUs: NPU host devices, DRA claims of host devices, its resource claims.

    The spec is read through rblnctl.vm.devices, the one module that knows its shape: entries that are not
    objects are skipped, and a field that is not a list of objects (which no admitted VMI has) counts as
    holding NPUs, named as unreadable: the guard refuses what it cannot read rather than crash on it.
    """
    sandbox, dra, bad = _npus_by_method(vmi)
    return [*sandbox, *dra, *bad]


def _npus_by_method(vmi: Any) -> tuple[list[str], list[str], list[str]]:
    """A VMI's NPUs as (sandbox host devices by resource, DRA claims, what cannot be read)."""
    spec = D.vmi_spec(vmi) if isinstance(vmi, Mapping) else {}
    devices = D.host_devices(spec)
    npus = [str(d.get("deviceName")) for d in devices if is_npu_resource(str(d.get("deviceName") or ""))]
    claims = [str(d.get("claimName")) for d in devices if d.get("claimName")]
    claims += [str(c.get("name")) for c in D.resource_claims(spec) if c.get("name")]
    bad = D.malformed(spec) if isinstance(vmi, Mapping) and isinstance(vmi.get("spec", {}), Mapping) else \
        ["the VMI or its spec is not an object"]
    return npus, [f"claim {c}" for c in dict.fromkeys(claims)], [f"unreadable: {b}" for b in bad]


def holding_npus(vmi: Mapping) -> list[str]:
    """Depends: every NPU the VMI holds (a node's mode switch takes them all)."""
    return vmi_npus(vmi)


def through(methods: Iterable[str]) -> Depends:
    """Depends: the NPUs a VMI holds through one of `methods` (sandbox, dra)."""
    wanted = set(methods)

    def depends(vmi: Mapping) -> list[str]:
        sandbox, dra, bad = _npus_by_method(vmi)
        return [*(sandbox if SANDBOX in wanted else []), *(dra if DRA in wanted else []), *(bad if wanted else [])]

    return depends


def needing_gates(host_devices_gate: bool, dra_gate: bool) -> Depends:
    """Depends: the NPUs that need HostDevices (every NPU host device, by resource or by claim) or
    HostDevicesWithDRA (a host device taken from a DRA claim) to be admitted and rendered again."""

    def depends(vmi: Mapping) -> list[str]:
        spec = D.vmi_spec(vmi)
        devices = D.host_devices(spec)
        out = []
        for d in devices:
            claim = d.get("claimName")
            if claim and (host_devices_gate or dra_gate):
                out.append(f"claim {claim}")
            elif host_devices_gate and is_npu_resource(str(d.get("deviceName") or "")):
                out.append(str(d.get("deviceName")))
        bad = D.malformed(spec) if isinstance(vmi.get("spec", {}), Mapping) else ["the VMI spec is not an object"]
        return list(dict.fromkeys(out)) + [f"unreadable: {b}" for b in bad]

    return depends


def is_running(vmi: Mapping) -> bool:
    """A VMI that is not in a final phase (it may still be starting: it will hold its NPUs)."""
    status = s if isinstance(s := vmi.get("status"), Mapping) else {}
    return str(status.get("phase") or "") not in FINAL_PHASES


def unschedulable(vmi: Mapping) -> bool:
    """A VMI on no node whose launcher pod the scheduler refused (its PodScheduled condition, copied by
    virt-controller: False, reason Unschedulable): it holds no NPU, whatever its spec asks for."""
    status = s if isinstance(s := vmi.get("status"), Mapping) else {}
    if status.get("nodeName"):
        return False
    conditions = c if isinstance(c := status.get("conditions"), list) else []
    return any(isinstance(c, Mapping) and c.get("type") == "PodScheduled" and str(c.get("status")) == "False"
               and c.get("reason") == "Unschedulable" for c in conditions)


def is_standalone(vmi: Mapping) -> bool:
    """A VMI no VirtualMachine controls: stopping means deleting it."""
    owners = (vmi.get("metadata") or {}).get("ownerReferences") or []
    return not any(isinstance(o, Mapping) and o.get("kind") == "VirtualMachine" and o.get("controller")
                   for o in owners)


def dependents(vmis: Iterable[Any], depends: Depends) -> list[NpuVm]:
    """The running VMIs `depends` finds something in, sorted by namespace and name."""
    out = []
    for v in vmis:
        if not isinstance(v, Mapping):
            continue
        if not is_running(v) or unschedulable(v):
            continue
        what = depends(v)
        if what:
            meta = v.get("metadata") or {}
            out.append(NpuVm(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                             holds=", ".join(dict.fromkeys(what)), standalone=is_standalone(v)))
    return sorted(out, key=lambda h: (h.namespace, h.name))


def stop_hint(vm: NpuVm) -> str:
    """How to free a VM's NPUs: `virtctl stop` (a VM's VMI is named after it), or delete a VMI no VM owns.

    Never "migrate": a VMI with a passed-through host device is not live-migratable (KubeVirt sets
    LiveMigratable=False, reason HostDeviceNotLiveMigratable).
    """
    if vm.standalone:
        return f"delete it first: `kubectl delete vmi {vm.name} -n {vm.namespace}`"
    return f"stop it first: `virtctl stop {vm.name} -n {vm.namespace}`"


def blocker(vm: NpuVm, why: str) -> Blocker:
    """The refusal for one VM: `VM NS/NAME (what) WHY: stop it first: ...`, lifted by OVERRIDE."""
    return Blocker(f"VM {vm} {why}: {stop_hint(vm)}", override=OVERRIDE)


def blockers(vms: Sequence[NpuVm], why: str) -> list[Blocker]:
    """One refusal per VM (NAMED of them; the rest counted on one line)."""
    out = [blocker(v, why) for v in vms[:NAMED]]
    if len(vms) > NAMED:
        out.append(Blocker(f"{len(vms) - NAMED} more running VMs {why} (`kubectl get vmi -A` lists them)",
                           override=OVERRIDE))
    return out


def unknown(reason: str) -> Blocker:
    """The refusal when the VMIs cannot be read: whether a running VM depends on the change is unknown."""
    return Blocker(f"cannot tell whether a running VM depends on this change: {reason}", override=OVERRIDE)


def overridden(vms: Sequence[NpuVm], what: str) -> str:
    """The warning when the override lets a change go ahead although VMs depend on it."""
    names = ", ".join(f"{v.namespace}/{v.name}" for v in vms[:5]) + (", ..." if len(vms) > 5 else "")
    return f"going ahead although {len(vms)} running VM(s) depend on it ({names}): {what}"


def read(kube: Kube, depends: Depends) -> tuple[list[NpuVm], str | None]:
    """The running VMIs of every namespace that depend on a change (one paged LIST), and why they could not be
    read (None: read; KubeVirt not installed counts as no VMI)."""
    read = optional(lambda: kube.list(VMIS), what="list VirtualMachineInstances", absent=[], on_forbidden=UNKNOWN)
    if not read.known:  # the caller blocks on it (unknown(): a Blocker naming the override)
        return [], f"the VirtualMachineInstances cannot be listed: {read.forbidden}"
    return dependents(read.value, depends), None


def verdict(vms: Sequence[NpuVm], unreadable: str | None, *, why: str, override: bool,
            consequence: str) -> tuple[list[Blocker], list[str]]:
    """The guard's one verdict: (blockers, warnings). Without the override each dependent VM (and VMIs that could
    not be read) is a refusal saying `why`; with it, one warning naming them and the `consequence`."""
    if override:
        warnings = [overridden(vms, consequence)] if vms else []
        if unreadable:
            warnings.append(f"going ahead although whether a running VM depends on it is unknown ({unreadable})")
        return [], warnings
    out = blockers(vms, why)
    if unreadable:
        out.append(unknown(unreadable))
    return out, []
