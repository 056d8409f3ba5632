"""Find PCI functions (RBLN NPUs by default) under a sysfs root -> PciFunction; read-only."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rblnctl import constants as C
from rblnctl.errors import HostError, InvalidInput, NotFound

_BDF = re.compile(r"(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")


def normalize_bdf(text: str) -> str:
    """Return the canonical `dddd:bb:dd.f` (lower-case) for a PCI address; raise InvalidInput otherwise.

    Accepts the short `bb:dd.f` form (domain 0000). Anything else — path separators, `..`,
    globs, spaces — is rejected before any path is built from it.
    """
    m = _BDF.fullmatch(text or "")
    if not m:
        raise InvalidInput(f"invalid PCI address {text!r}: expected DDDD:BB:DD.F or BB:DD.F in hex")
    domain, bus, dev, fn = m.groups()
    if int(dev, 16) > 0x1F:
        raise InvalidInput(f"invalid PCI address {text!r}: device number {dev} is above 1f")
    return f"{(domain or '0000').lower()}:{bus.lower()}:{dev.lower()}.{fn}"


@dataclass(frozen=True, kw_only=True)
class PciFunction:
    """One PCI function as sysfs shows it."""

    bdf: str
    vendor: int
    device: int
    class_code: int
    driver: str | None
    driver_override: str | None
    iommu_group: str | None
    numa_node: int | None
    model: str | None  # from the RBLN device-ID table, e.g. "CA22"
    function: str | None  # "PF" or "VF" for RBLN devices

    @property
    def is_rbln_npu(self) -> bool:
        """Vendor 0x1eff with the NPU class code 0x120000 (processing accelerator)."""
        return self.vendor == C.PCI_VENDOR_RBLN and self.class_code >> 8 == C.PCI_CLASS_NPU >> 8

    @property
    def is_bridge(self) -> bool:
        """PCI class 0x06 (bridge): harmless in an IOMMU group."""
        return self.class_code >> 16 == 0x06

    @property
    def ids(self) -> str:
        """`1eff:1220` as lspci prints it."""
        return f"{self.vendor:04x}:{self.device:04x}"


def devices_dir(sysfs: Path) -> Path:
    """`<sysfs>/bus/pci/devices`."""
    return Path(sysfs) / "bus" / "pci" / "devices"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise HostError(f"cannot read {path}: {e.strerror or e}") from e


def _link_name(path: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except FileNotFoundError:
        return None
    except OSError:
        return None


def _hex(text: str | None) -> int:
    try:
        return int(text or "0", 16)
    except ValueError:
        return 0


def read_function(sysfs: Path, bdf: str) -> PciFunction:
    """Read one function; raise NotFound when sysfs has no such device."""
    bdf = normalize_bdf(bdf)
    d = devices_dir(sysfs) / bdf
    if not d.is_dir():
        raise NotFound(f"no PCI device {bdf} under {devices_dir(sysfs)}")
    vendor = _hex(_read(d / "vendor"))
    device = _hex(_read(d / "device"))
    override = _read(d / "driver_override")
    numa = _read(d / "numa_node")
    model = function = None
    if vendor == C.PCI_VENDOR_RBLN and device in C.PCI_DEVICE_MODELS:
        model, function = C.PCI_DEVICE_MODELS[device]
    return PciFunction(
        bdf=bdf,
        vendor=vendor,
        device=device,
        class_code=_hex(_read(d / "class")),
        driver=_link_name(d / "driver"),
        driver_override=None if override in (None, "", "(null)") else override,
        iommu_group=_link_name(d / "iommu_group"),
        numa_node=int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
        model=model,
        function=function,
    )


def list_functions(sysfs: Path, *, all_vendors: bool = False) -> list[PciFunction]:
    """Return RBLN NPUs (or every function with all_vendors), sorted by BDF."""
    root = devices_dir(sysfs)
    if not root.is_dir():
        return []
    out = []
    for entry in sorted(os.listdir(root)):
        if not _BDF.fullmatch(entry):
            continue
        fn = read_function(sysfs, entry)
        if all_vendors or fn.is_rbln_npu:
            out.append(fn)
    return out


def iommu_group_members(sysfs: Path, group: str) -> list[str]:
    """BDFs in one IOMMU group (`<sysfs>/kernel/iommu_groups/<g>/devices`), sorted."""
    if not group.isdigit():
        raise InvalidInput(f"invalid IOMMU group {group!r}")
    d = Path(sysfs) / "kernel" / "iommu_groups" / group / "devices"
    try:
        return sorted(e for e in os.listdir(d) if _BDF.fullmatch(e))
    except FileNotFoundError:
        return []


def iommu_group_count(sysfs: Path) -> int:
    """How many IOMMU groups the kernel created (0: IOMMU off or absent)."""
    try:
        return sum(1 for e in os.listdir(Path(sysfs) / "kernel" / "iommu_groups") if e.isdigit())
    except FileNotFoundError:
        return 0
