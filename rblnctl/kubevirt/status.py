"""Summarise the KubeVirt CR: phase, version, the RBLN gates (effective or not) and the permitted RBLN devices."""

from __future__ import annotations

from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.kube import Kube
from rblnctl.kubevirt.cr import find_kubevirt, lookup, ref, version_of
from rblnctl.kubevirt.devices import PCI_HOST_DEVICES, is_rbln_entry, model_of
from rblnctl.kubevirt.gates import DISABLED_GATES, FEATURE_GATES, GateState, gate_state
from rblnctl.remedy import Command, Remedy


@dataclass(frozen=True, kw_only=True)
class PermittedDevice:
    """One RBLN entry of permittedHostDevices.pciHostDevices."""

    resource_name: str
    pci_vendor_selector: str
    external_resource_provider: bool
    model: str | None  # "CA22 PF" from pci.ids; None when the ID is not in it


@dataclass(frozen=True, kw_only=True)
class KubeVirtStatus:
    """What `rblnctl kubevirt status` reports about the KubeVirt CR."""

    name: str
    namespace: str
    phase: str | None
    version: str | None
    deleting: bool
    feature_gates: list[str]
    disabled_feature_gates: list[str]
    gates: list[GateState]
    permitted_devices: list[PermittedDevice]  # RBLN entries only
    other_permitted_devices: int  # entries for other vendors (kept, not shown)
    notes: list[str | Remedy] = field(default_factory=list)  # a Remedy: a note that names a command


def kubevirt_status(kube: Kube, *, name: str | None = None, namespace: str | None = None) -> KubeVirtStatus:
    """Read the KubeVirt CR and report its gates and permitted RBLN devices (read-only)."""
    return status_of(find_kubevirt(kube, name=name, namespace=namespace))


def status_of(obj: dict) -> KubeVirtStatus:
    """Summarise one KubeVirt CR object (pure)."""
    meta = obj.get("metadata") or {}
    st = obj.get("status") or {}
    version = version_of(obj)
    _, fg_raw = lookup(obj, FEATURE_GATES)
    _, dis_raw = lookup(obj, DISABLED_GATES)
    _, pci_raw = lookup(obj, PCI_HOST_DEVICES)
    fg = [str(g) for g in fg_raw or []]
    dis = [str(g) for g in dis_raw or []]
    entries = [e for e in pci_raw or [] if isinstance(e, dict)]
    gates = [gate_state(g, fg, dis, version) for g in (C.GATE_HOST_DEVICES, C.GATE_HOST_DEVICES_DRA)]
    devices = [
        PermittedDevice(
            resource_name=str(e.get("resourceName") or ""),
            pci_vendor_selector=str(e.get("pciVendorSelector") or ""),
            external_resource_provider=bool(e.get("externalResourceProvider")),
            model=model_of(str(e.get("pciVendorSelector") or "").upper()),
        )
        for e in entries if is_rbln_entry(e)
    ]
    notes: list[str | Remedy] = []
    if meta.get("deletionTimestamp"):
        notes.append(f"KubeVirt {ref(obj)} is being deleted (deletionTimestamp {meta['deletionTimestamp']})")
    phase = st.get("phase")
    if phase and phase != "Deployed":
        notes.append(f"phase is {phase}, not Deployed")
    if version is None:
        notes.append("status.observedKubeVirtVersion is empty: the installed version is unknown")
    both = [g for g in fg if g in dis]
    if both:
        notes.append(Remedy(f"{', '.join(both)} in both featureGates and disabledFeatureGates: KubeVirt's update "
                            "webhook rejects every change to the gate lists until each is in only one; {command} (or "
                            "disable-gates) fixes the lists", Command.own("kubevirt", "enable-gates", *both)))
    hd, dra = gates
    if hd.effective is False:
        notes.append(Remedy(f"{C.GATE_HOST_DEVICES} is off: VMs cannot use host devices; run {{command}}",
                            Command.own("kubevirt", "enable-gates")))
    if dra.disabled and not dra.listed:
        notes.append(Remedy(f"{C.GATE_HOST_DEVICES_DRA} is in disabledFeatureGates: DRA host devices are off; "
                            "{command} moves it to featureGates", Command.own("kubevirt", "enable-gates", dra=True)))
    bad = [d.resource_name for d in devices if not d.external_resource_provider]
    if bad:
        notes.append(Remedy(f"externalResourceProvider is false for {', '.join(bad)}: KubeVirt would run its own "
                            "device plugin; run {command}", Command.own("kubevirt", "permit-devices", fix=True)))
    if not devices:
        # no command: the CR alone does not say whether a node advertises a resource yet, and `permit-devices` with
        # nothing advertised refuses (preflight's kubevirt.permitted-devices, which reads the nodes, names one)
        notes.append("no RBLN NPU in permittedHostDevices: VMs cannot request sandbox device plugin resources; "
                     "kubevirt permit-devices permits what vm-mode nodes advertise (DRA setups do not need it)")
    return KubeVirtStatus(
        name=meta.get("name", ""), namespace=meta.get("namespace", ""), phase=phase, version=version,
        deleting=bool(meta.get("deletionTimestamp")), feature_gates=fg, disabled_feature_gates=dis, gates=gates,
        permitted_devices=devices, other_permitted_devices=len(entries) - len(devices), notes=notes,
    )


def supported_kubernetes(kubevirt: tuple[int, int, int]) -> tuple[tuple[int, int], tuple[int, int], bool] | None:
    """The Kubernetes minors a KubeVirt 1.x release supports: (oldest, newest, from the matrix itself);
    False in the last item when the release is newer than the matrix and the pattern is assumed. None
    for a release outside 1.x."""
    if kubevirt[0] != 1:
        return None
    low, high = C.KUBEVIRT_K8S_MINOR_OFFSET
    listed = kubevirt[:2] <= C.KUBEVIRT_K8S_MATRIX_UP_TO
    return (1, kubevirt[1] + low), (1, kubevirt[1] + high), listed
