"""What `preflight --local` reads from a host tree: HostFacts, gathered once from proc/, sys/, dev/ and lib/modules/.

Nothing here writes, and nothing needs root: every file read is world-readable on a stock kernel
(the ACPI tables are only tested for existence). `root` is `/` on a live node, or a captured tree.
Every path read is listed in HOST_PATHS, which is also what a host pod mounts (rblnctl.hostpods).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from rblnctl import constants as C
from rblnctl.errors import HostError, NotFound
from rblnctl.host import pci, system
from rblnctl.host.holders import HolderFinder
from rblnctl.host.iommu_advice import AMD, ARM64, INTEL
from rblnctl.host.root import HostRoot
from rblnctl.host.vfio.state import PendingUnbind, held_functions, pending_unbinds

log = logging.getLogger(__name__)

# The host directories gather_host_facts() reads, relative to the root; a host pod mounts exactly these,
# read-only (rblnctl.hostpods). proc/: cpuinfo, cmdline, sys/kernel/{osrelease,arch} and each process's fd
# links; sys/: PCI functions, IOMMU groups and units, modules, ACPI tables, device tree, DMI; dev/: vfio/vfio, kvm
# and the NPUs' device files; lib/modules/: <release>/modules.builtin (rblnctl.host.system also
# tries usr/lib/modules/, which merged-/usr hosts reach through the /lib symlink).
HOST_PATHS = ("proc", "sys", "dev", "lib/modules")

_CPU_VENDORS = {"GenuineIntel": INTEL, "AuthenticAMD": AMD, "HygonGenuine": AMD}
# `uname -m` spellings of arm64 (/proc/sys/kernel/arch prints the kernel's utsname machine).
_ARM64_MACHINES = ("aarch64", "arm64")
# ACPI tables that announce an IOMMU: Intel VT-d (DMAR), AMD-Vi (IVRS), the Arm SMMU (IORT: the I/O remapping
# table that lists SMMUv1/v2/v3 nodes), virtio-iommu (VIOT, a VM's vIOMMU).
IOMMU_TABLES = {INTEL: ("DMAR",), AMD: ("IVRS",), ARM64: ("IORT",)}
ALL_IOMMU_TABLES = ("DMAR", "IVRS", "IORT", "VIOT")
# Tables a VM's vIOMMU may announce, whatever the CPU vendor: an x86 guest's intel-iommu, AMD or virtio-iommu;
# an arm64 guest's SMMUv3 (IORT) or virtio-iommu.
VM_IOMMU_TABLES = {ARM64: ("IORT", "VIOT")}
X86_VM_IOMMU_TABLES = ("DMAR", "IVRS", "VIOT")
# Device-tree `compatible` strings of Arm SMMUs: arm,smmu-v1/-v2/-v3, arm,mmu-400/-401/-500 and vendor variants
# such as qcom,...-smmu-500 (torvalds/linux Documentation/devicetree/bindings/iommu/arm,smmu.yaml,
# arm,smmu-v3.yaml).
_DT_SMMU_MARKERS = ("smmu", "arm,mmu-")
# DMI strings that only hypervisors report (the CPU flag is authoritative; DMI helps where
# /proc/cpuinfo has no flags line). "Amazon EC2" is absent on purpose: metal instances report it too.
_VM_DMI_MARKERS = (
    "QEMU", "KVM", "VMware", "VirtualBox", "innotek", "Xen", "Virtual Machine", "BHYVE", "Bochs",
    "OpenStack", "oVirt", "RHEV", "Parallels", "Nutanix AHV", "Google Compute Engine", "Cloud Hypervisor",
)


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    """What the host shows under `root`; None means the source could not be read."""

    root: str
    cpu_vendor: str | None  # "intel", "amd" or None (unknown, e.g. not x86)
    cpu_vendor_id: str | None  # raw vendor_id from /proc/cpuinfo
    arch: str | None  # the machine, as `uname -m` prints it (x86_64, aarch64); None: unknown
    hypervisor_flag: bool | None  # None: /proc/cpuinfo has no flags line
    dmi_vendor: str | None
    dmi_product: str | None
    acpi_dir_found: bool
    acpi_tables: list[str]  # IOMMU tables present among DMAR, IVRS, IORT, VIOT
    dt_smmus: list[str]  # device-tree nodes (under /sys/firmware/devicetree/base) that describe an SMMU
    iommu_groups: int
    iommu_units: list[str]  # entries of /sys/class/iommu
    cmdline: str | None
    kernel_release: str | None
    modules: dict[str, system.ModuleState]  # each VFIO module's state
    builtin_list: str | None  # path of modules.builtin read, None when not found
    iommufd: system.ModuleState  # iommufd (it may serve /dev/vfio/vfio instead of vfio's own container)
    dev_vfio: bool
    dev_kvm: bool
    npus: list[pci.PciFunction] = field(default_factory=list)
    pci_error: str | None = None
    group_peers: dict[str, list[str]] = field(default_factory=dict)  # bdf -> non-NPU members that block its group
    holders: dict[str, list[str]] = field(default_factory=dict)  # bdf -> processes holding its device files
    holders_note: str = ""  # non-empty when the process scan was incomplete
    pending: dict[str, PendingUnbind] = field(default_factory=dict)  # bdf -> the unbind a vfio run left waiting

    @property
    def platform(self) -> str | None:
        """Whose IOMMU this host has: "arm64" (by the machine), else "intel"/"amd" (by the CPU vendor), else None."""
        if self.arch in _ARM64_MACHINES:
            return ARM64
        return self.cpu_vendor

    @property
    def is_vm(self) -> bool:
        """True when the CPU's hypervisor flag or the DMI strings say this is a virtual machine."""
        return bool(self.hypervisor_flag) or _dmi_says_vm(self.dmi_vendor, self.dmi_product)


def _read_text(path: Path) -> str | None:
    """File content stripped; None when absent or unreadable (logged)."""
    try:
        return path.read_text(errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError as e:  # permission, EIO on a half-captured tree: the fact is unknown, not fatal
        log.debug("cannot read %s: %s", path, e)
        return None


def _listdir(path: Path) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return None
    except OSError as e:
        log.debug("cannot list %s: %s", path, e)
        return None


def read_cpuinfo(proc: Path) -> tuple[str | None, bool | None]:
    """Return (vendor_id, hypervisor flag) from the first CPU block of `<proc>/cpuinfo`."""
    vendor: str | None = None
    flags: bool | None = None
    try:
        with open(proc / "cpuinfo", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    if vendor is not None or flags is not None:
                        break  # end of the first processor block
                    continue
                key = key.strip()
                if key == "vendor_id" and vendor is None:
                    vendor = value.strip()
                elif key == "flags" and flags is None:
                    flags = "hypervisor" in value.split()
                if vendor is not None and flags is not None:
                    break
    except OSError as e:
        log.debug("cannot read %s/cpuinfo: %s", proc, e)
    return vendor, flags


def read_arch(proc: Path) -> str | None:
    """The machine (`uname -m`): `<proc>/sys/kernel/arch` (Linux >= 6.1, torvalds/linux kernel/utsname_sysctl.c);
    on older kernels from /proc/cpuinfo's shape: x86 lists `vendor_id`, arm64 `CPU implementer`."""
    arch = _read_text(proc / "sys" / "kernel" / "arch")
    if arch:
        return arch
    try:
        with open(proc / "cpuinfo", errors="replace") as f:
            for line in f:
                key = line.partition(":")[0].strip()
                if key == "vendor_id":
                    return "x86_64"
                if key == "CPU implementer":
                    return "aarch64"
    except OSError as e:
        log.debug("cannot read %s/cpuinfo: %s", proc, e)
    return None


def find_dt_smmus(sysfs: Path, *, max_depth: int = 3) -> list[str]:
    """Device-tree nodes whose `compatible` names an Arm SMMU and whose `status` is not "disabled"."""
    base = sysfs / "firmware" / "devicetree" / "base"
    out: list[str] = []

    def walk(d: Path, depth: int) -> None:
        try:
            entries = sorted((e for e in os.scandir(d) if e.is_dir(follow_symlinks=False)), key=lambda x: x.name)
        except OSError:
            return
        for e in entries:
            node = Path(e.path)
            compatible = _read_bytes(node / "compatible").decode(errors="replace").lower()
            if any(m in c for c in compatible.split("\0") for m in _DT_SMMU_MARKERS):
                if not _read_bytes(node / "status").startswith(b"disabled"):
                    out.append(str(node.relative_to(base)))
            elif depth < max_depth:
                walk(node, depth + 1)

    walk(base, 1)
    return out


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _dmi_says_vm(vendor: str | None, product: str | None) -> bool:
    text = f"{vendor or ''} {product or ''}".lower()
    return any(m.lower() in text for m in _VM_DMI_MARKERS)


def gather_host_facts(root: Path | HostRoot) -> HostFacts:
    """Read every fact the host checks need, once; nothing is written."""
    host = HostRoot.of(root)
    sysfs, proc = host.sys, host.proc
    vendor_id, hv_flag = read_cpuinfo(proc)
    tables_dir = sysfs / "firmware" / "acpi" / "tables"
    tables = _listdir(tables_dir)
    groups = pci.iommu_group_count(sysfs)
    units = _listdir(sysfs / "class" / "iommu") or []
    release = _read_text(proc / "sys" / "kernel" / "osrelease")
    builtin, builtin_path = system.read_builtin_modules(host.path, release)
    modules = {m: system.module_state(sysfs, m, builtin) for m in C.VFIO_MODULES}
    iommufd = system.module_state(sysfs, C.IOMMUFD_MODULE, builtin)

    npus: list[pci.PciFunction] = []
    pending: dict[str, PendingUnbind] = {}
    finder: HolderFinder | None = None
    pci_error = None
    peers: dict[str, list[str]] = {}
    try:
        # never the override of a function with an unbind pending (the read waits as long; rblnctl.host.vfio.state)
        pending = pending_unbinds(host)
        # nor of one a process is blocked reading or writing (HolderFinder.override_busy, from the one proc scan)
        finder = HolderFinder.scan(host)
        npus = pci.list_functions(sysfs, held=held_functions(host, finder, pending))
        for fn in npus:
            if fn.iommu_group:
                peers[fn.bdf] = _foreign_group_members(sysfs, fn)
    except HostError as e:
        pci_error = str(e)

    holders, holders_note = _holders(finder, npus) if finder is not None else ({}, "")
    return HostFacts(
        root=str(host.path),
        cpu_vendor=_CPU_VENDORS.get(vendor_id or ""),
        cpu_vendor_id=vendor_id,
        arch=read_arch(proc),
        hypervisor_flag=hv_flag,
        dmi_vendor=_read_text(sysfs / "class" / "dmi" / "id" / "sys_vendor"),
        dmi_product=_read_text(sysfs / "class" / "dmi" / "id" / "product_name"),
        acpi_dir_found=tables is not None,
        acpi_tables=[t for t in ALL_IOMMU_TABLES if t in (tables or [])],
        dt_smmus=find_dt_smmus(sysfs),
        iommu_groups=groups,
        iommu_units=units,
        cmdline=_read_text(proc / "cmdline"),
        kernel_release=release,
        modules=modules,
        builtin_list=builtin_path,
        iommufd=iommufd,
        dev_vfio=(host.dev / "vfio" / "vfio").exists(),
        dev_kvm=(host.dev / "kvm").exists(),
        npus=npus,
        pci_error=pci_error,
        group_peers=peers,
        holders=holders,
        holders_note=holders_note,
        pending=pending,
    )


def _foreign_group_members(sysfs: Path, fn: pci.PciFunction) -> list[str]:
    """Members of fn's IOMMU group that are not RBLN NPUs (those go to the VM with it) and keep the group from
    VFIO (pci.group_member_blocker: a device on a host driver, a bridge on a driver other than pcieport)."""
    out = []
    for bdf in pci.iommu_group_members(sysfs, fn.iommu_group or ""):
        if bdf == fn.bdf:
            continue
        try:
            peer = pci.read_function(sysfs, bdf)
        except (HostError, NotFound):
            continue
        why = None if peer.is_rbln_npu else pci.group_member_blocker(peer)
        if why is not None:
            out.append(f"{bdf} ({peer.ids}, {why})")
    return out


def _holders(finder: HolderFinder, npus: list[pci.PciFunction]) -> tuple[dict[str, list[str]], str]:
    """Processes holding each NPU open (its /dev nodes, `/dev/vfio/<group>` or `/dev/vfio/devices/vfioN`, its sysfs
    files), as `vfio` finds them."""
    if not npus:
        return {}, ""
    out = {fn.bdf: [h.text for h in finder.holders(fn)] for fn in npus}
    note = ""
    if finder.incomplete:
        note = (f"open files of {finder.incomplete} of {len(finder.table.processes)} processes were not readable "
                "(not root), so this list may be incomplete")
    return out, note
