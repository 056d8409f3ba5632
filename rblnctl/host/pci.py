"""Find PCI functions (RBLN NPUs by default) under a sysfs root -> PciFunction; read-only."""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rblnctl import constants as C
from rblnctl.errors import HostError, InvalidInput, NotFound
from rblnctl.host.bounded import StillBlocked, run_bounded

_BDF = re.compile(r"(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
# Kernel driver names as they appear under /sys/bus/pci/drivers (vfio-pci, rebellions, nvme, 8250_pci, ...).
_DRIVER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")

_SYSFS_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_VFIO_CDEV = re.compile(r"(?:noiommu-)?vfio[0-9]{1,7}")


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


def normalize_bdfs(bdfs: Sequence[str]) -> list[str]:
    """normalize_bdf() for many: report every bad one at once, before any path is built. Duplicates collapse."""
    good, bad = [], []
    for text in bdfs:
        try:
            good.append(normalize_bdf(text))
        except InvalidInput:
            bad.append(repr(text))
    if bad:
        raise InvalidInput(f"invalid PCI address {', '.join(bad)}: expected DDDD:BB:DD.F or BB:DD.F in hex")
    return list(dict.fromkeys(good))


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
    header_type: int | None = None  # config space byte 0x0e, low 7 bits (None: `config` unreadable or short)
    # why driver_override was not read (then driver_override is None): an unbind of it is pending, a process is
    # blocked on it, or the kernel held the device lock past the bound (read_function)
    override_unknown: str | None = None

    @property
    def is_rbln_npu(self) -> bool:
        """Vendor 0x1eff with the NPU class code 0x120000 (processing accelerator)."""
        return is_rbln_npu(self.vendor, self.class_code)

    @property
    def is_bridge(self) -> bool:
        """A PCI-to-PCI bridge or PCIe port: header type 1 in its config space (not the class code, which also
        calls host bridges and ISA/LPC bridges "bridges"; those have header type 0 and are ordinary devices)."""
        return self.header_type == HEADER_TYPE_BRIDGE

    @property
    def ids(self) -> str:
        """`1eff:1220` as lspci prints it."""
        return f"{self.vendor:04x}:{self.device:04x}"


# PCI header types (config space offset 0x0e, bit 7 = multi-function): 0 normal device, 1 PCI-to-PCI bridge,
# 2 CardBus bridge (torvalds/linux include/uapi/linux/pci_regs.h PCI_HEADER_TYPE*).
HEADER_TYPE_OFFSET = 0x0E
HEADER_TYPE_BRIDGE = 1


def is_vfio_driver(driver: str | None) -> bool:
    """vfio-pci or one of its variant drivers (mlx5_vfio_pci, hisi_acc_vfio_pci, ...): every one registers the
    device with VFIO and sets driver_managed_dma (torvalds/linux drivers/vfio/pci/*/main.c)."""
    return driver is not None and (driver == C.VFIO_DRIVER or "vfio" in driver)


def group_member_blocker(f: PciFunction) -> str | None:
    """Why `f` keeps its IOMMU group from being usable through VFIO, or None when it does not.

    The one place of this rule. Since Linux 5.19 VFIO claims DMA ownership of the whole group and the
    kernel refuses while any member is bound to a driver that uses the kernel DMA API, i.e. one without
    driver_managed_dma (torvalds/linux drivers/vfio/group.c vfio_group_ioctl_get_status() ->
    iommu_group_dma_owner_claimed(); drivers/iommu/iommu.c iommu_group_claim_dma_owner();
    drivers/pci/pci-driver.c pci_dma_configure()). Fine are: no driver; vfio-pci and its variants;
    pci-stub; pcieport (PCIe ports and bridges). Kernels before 5.19 also let a bridge (header type != 0)
    keep any driver (drivers/vfio/vfio.c vfio_dev_driver_allowed()); rblnctl applies the newer, stricter
    rule to every kernel (docs/vfio.md, "Assumptions").
    """
    if f.driver is None or is_vfio_driver(f.driver) or f.driver in C.GROUP_SAFE_DRIVERS:
        return None
    if f.is_bridge:
        return (f"PCI bridge on {f.driver}, which uses the kernel DMA API (a bridge keeps its group usable only "
                f"on {' or '.join(C.GROUP_SAFE_DRIVERS[::-1])} or without a driver)")
    return f"on {f.driver}"


def validate_driver_name(name: str) -> str:
    """Return a kernel driver name unchanged; raise InvalidInput unless it is safe to put in a path."""
    if not _DRIVER.fullmatch(name or "") or ".." in name:
        raise InvalidInput(f"invalid driver name {name!r}: expected letters, digits, '_', '-', '.' or '+'")
    return name


def devices_dir(sysfs: Path) -> Path:
    """`<sysfs>/bus/pci/devices`."""
    return Path(sysfs) / "bus" / "pci" / "devices"


def device_dir(sysfs: Path, bdf: str) -> Path:
    """`<sysfs>/bus/pci/devices/<bdf>` for a validated BDF (the path is built only after validation)."""
    return devices_dir(sysfs) / normalize_bdf(bdf)


def drivers_dir(sysfs: Path) -> Path:
    """`<sysfs>/bus/pci/drivers`."""
    return Path(sysfs) / "bus" / "pci" / "drivers"


def driver_dir(sysfs: Path, driver: str) -> Path:
    """`<sysfs>/bus/pci/drivers/<driver>` for a validated driver name."""
    return drivers_dir(sysfs) / validate_driver_name(driver)


def driver_registered(sysfs: Path, driver: str) -> bool:
    """Whether a PCI driver is registered with the kernel (its directory exists under bus/pci/drivers)."""
    return driver_dir(sysfs, driver).is_dir()


def current_driver(sysfs: Path, bdf: str) -> str | None:
    """The driver bound to a function right now (basename of its `driver` link), None when unbound."""
    return _link_name(device_dir(sysfs, bdf) / "driver")


def device_node_names(sysfs: Path, bdf: str) -> list[str]:
    """Names of the /dev nodes (`rbln*`, `rsd*`) the bound driver created for one function.

    A class device whose parent is the PCI function sits one or two levels below the function's
    sysfs directory (`<bdf>/<class>/<name>` or `<bdf>/<name>`), and has a `dev` attribute
    (major:minor) when it has a device node; that is what the scan looks for.
    """
    d = device_dir(sysfs, bdf)
    names: set[str] = set()
    try:
        first = list(os.scandir(d))
    except FileNotFoundError:
        return []
    for entry in first:
        if not entry.is_dir(follow_symlinks=False) or entry.name in _NOT_CLASS_DIRS:
            continue
        if is_device_node_name(entry.name) and os.path.isfile(os.path.join(entry.path, "dev")):
            names.add(entry.name)
            continue
        try:
            names.update(e.name for e in os.scandir(entry.path)
                         if is_device_node_name(e.name) and os.path.isfile(os.path.join(e.path, "dev")))
        except OSError:
            continue
    return sorted(names)


def vfio_cdev_names(sysfs: Path, bdf: str) -> list[str]:
    """Names of the VFIO device cdevs of one function (`vfio0`, or `noiommu-vfio0`), from `<bdf>/vfio-dev/`.

    A device bound to a vfio driver gets a `vfio-dev/vfioN` class device under its sysfs directory (Linux
    >= 6.1); with CONFIG_VFIO_DEVICE_CDEV (iommufd, Linux >= 6.6) it is also `/dev/vfio/devices/vfioN`, which a
    VMM opens instead of `/dev/vfio/<group>` (torvalds/linux drivers/vfio/vfio_main.c `"vfio%d"`,
    drivers/vfio/device_cdev.c vfio_device_devnode() `"vfio/devices/%s"`, Documentation/driver-api/vfio.rst
    "Device cdev Example").
    """
    try:
        return sorted(e for e in os.listdir(device_dir(sysfs, bdf) / "vfio-dev") if _VFIO_CDEV.fullmatch(e))
    except OSError:
        return []


def device_numbers(sysfs: Path, bdf: str) -> set[tuple[str, int]]:
    """Every device number the function's own sysfs subtree exposes: `("b" or "c", makedev(major, minor))` from each
    `dev` attribute below it (a block device's `virtio0/block/vda/dev`, its partitions, `rbln/rbln0/dev`,
    `vfio-dev/vfio0/dev`), whatever the nodes are named in /dev. A class device is a block device when its
    `subsystem` link is `block`. Symlinks are not followed, and a function behind this one (a bridge's child, its
    own BDF-named directory) is not this function's.
    """
    out: set[tuple[str, int]] = set()
    stack: list[tuple[str | Path, int]] = [(device_dir(sysfs, bdf), 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        names = {e.name for e in entries}
        if depth and "dev" in names:
            number = _read_dev(Path(d) / "dev")
            if number is not None:
                kind = "b" if _link_name(Path(d) / "subsystem") == "block" else "c"
                out.add((kind, number))
        if depth >= _MAX_CLASS_DEPTH:
            continue
        for e in entries:
            if e.name in _NOT_DEVICE_DIRS or is_bdf_name(e.name):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append((e.path, depth + 1))
            except OSError:
                continue
    return out


def char_device_number(path: Path) -> int | None:
    """st_rdev of a character device file (`/dev/vfio/<group>`), None when it is absent or not one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_rdev if stat.S_ISCHR(st.st_mode) else None


def _read_dev(path: Path) -> int | None:
    """A sysfs `dev` attribute, `major:minor`, as a device number."""
    try:
        major, _, minor = path.read_text().strip().partition(":")
        return os.makedev(int(major), int(minor))
    except (OSError, ValueError):
        return None


# How deep class devices sit below a function (virtio0/block/vda/vda1 is 4; an AHCI disk's partition,
# ata1/host0/target0:0:0/0:0:0:0/block/sda/sda1, 7; a SAS disk's behind an expander, host0/port-0:0/expander-0:0/
# port-0:0:0/end_device-0:0:0/target0:0:0/0:0:0:0/block/sda/sda1, 10) and what never holds one. The walk costs 43 ms
# for an HBA of 64 such disks with 4 partitions each (855 directories, fake sysfs) against 5 ms at the old depth 6,
# which found none of them.
_MAX_CLASS_DEPTH = 12
_NOT_DEVICE_DIRS = frozenset({"power", "msi_irqs", "link", "driver", "subsystem", "firmware_node", "iommu",
                              "iommu_group", "physfn", "consumer", "supplier", "holders", "slaves", "queue", "mq",
                              "trace", "integrity", "bdi"})

# Subdirectories of a PCI function that never hold class devices; skipping them keeps the scan cheap.
_NOT_CLASS_DIRS = frozenset({"power", "msi_irqs", "link", "driver", "subsystem", "firmware_node", "iommu",
                             "iommu_group", "physfn", "consumer", "supplier", "vfio-dev"})


def is_device_node_name(name: str) -> bool:
    """Whether a /dev name looks like an RBLN device node (`rbln*`, `rsd*`)."""
    return any(fnmatch.fnmatchcase(name, g) for g in C.DEVICE_NODE_GLOBS)


def _read(path: Path) -> str | None:
    try:  # a byte that is not UTF-8 (a captured tree) makes a value the parsers reject as malformed, not a crash
        return path.read_text(errors="replace").strip()
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


def _header_type(path: Path) -> int | None:
    """Low 7 bits of config space byte 0x0e; unprivileged reads of `config` return the first 64 bytes."""
    try:
        with open(path, "rb") as f:
            data = f.read(HEADER_TYPE_OFFSET + 1)
    except OSError:
        return None
    return data[HEADER_TYPE_OFFSET] & 0x7F if len(data) > HEADER_TYPE_OFFSET else None


def _hex(text: str | None) -> int:
    try:
        return int(text or "0", 16)
    except ValueError:
        return 0


# How long reading one function's driver_override may take (rblnctl.host.bounded), and what a function that did not
# answer within it reports instead.
OVERRIDE_READ_BOUND_S = 3.0
OVERRIDE_UNKNOWN = "unknown: the kernel holds the device (an unbind or probe in progress?)"


def read_function(sysfs: Path, bdf: str, *, held: Mapping[str, str] | None = None) -> PciFunction:
    """Read one function; raise NotFound when sysfs has no such device.

    `held`: {bdf: why} for functions whose driver_override must not be read (an unbind of it is pending in the
    kernel, or a process is blocked on it: the read would wait as long; rblnctl.host.vfio.state.held_functions);
    they get `override_unknown` = why. Every other function's override is read
    with a bound when it is on a vfio driver (read_override)."""
    bdf = normalize_bdf(bdf)
    d = devices_dir(sysfs) / bdf
    if not d.is_dir():
        raise NotFound(f"no PCI device {bdf} under {devices_dir(sysfs)}")
    vendor = _hex(_read(d / "vendor"))
    device = _hex(_read(d / "device"))
    driver = _link_name(d / "driver")
    unknown = (held or {}).get(bdf)
    override = None
    if unknown is None:
        override, unknown = read_override(d / "driver_override", driver)
    numa = _read(d / "numa_node")
    model = function = None
    if vendor == C.PCI_VENDOR_RBLN and device in C.PCI_DEVICE_MODELS:
        model, function = C.PCI_DEVICE_MODELS[device]
    return PciFunction(
        bdf=bdf,
        vendor=vendor,
        device=device,
        class_code=_hex(_read(d / "class")),
        driver=driver,
        driver_override=None if override in (None, "", "(null)") else override,
        iommu_group=_link_name(d / "iommu_group"),
        numa_node=int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
        model=model,
        function=function,
        header_type=_header_type(d / "config"),
        override_unknown=unknown,
    )


def read_override(path: Path, driver: str | None) -> tuple[str | None, str | None]:
    """A function's driver_override (`path`) -> (text, None), or (None, OVERRIDE_UNKNOWN) when it did not answer.

    The read takes the device lock (torvalds/linux v6.1 drivers/pci/pci-sysfs.c driver_override_show()), which an
    unbind holds for as long as it waits; an unbind from a vfio driver waits until every VFIO user lets go
    (drivers/vfio/vfio_main.c vfio_unregister_group_dev()), and the kernel removes the `driver` link before the
    driver's remove runs (drivers/base/dd.c __device_release_driver(): driver_sysfs_remove() before
    device_remove()), so while it waits the function shows no driver (measured on the kernel tier); a probe in
    progress holds the lock before the link appears. So the override of a function on a vfio driver or on none is
    read in a child process with a bound (rblnctl.host.bounded, as the writes that can block are): one fork per
    such function; a function on another driver is read directly (the vendor, class, driver link, group and config
    reads take no device lock)."""
    if driver is not None and not is_vfio_driver(driver):
        return _read(path), None
    try:
        return run_bounded(lambda: path.read_bytes(), OVERRIDE_READ_BOUND_S).decode(errors="replace").strip(), None
    except StillBlocked:
        return None, OVERRIDE_UNKNOWN
    except FileNotFoundError:
        return None, None
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None, None
        raise HostError(f"cannot read {path}: {e.strerror or e}") from e


def read_functions(sysfs: Path, bdfs: Sequence[str], *, held: Mapping[str, str] | None = None) -> list[PciFunction]:
    """Read the named functions (canonical BDFs); raise NotFound naming every one that does not exist."""
    missing = [b for b in bdfs if not device_dir(sysfs, b).is_dir()]
    if missing:
        raise NotFound(f"no PCI device {', '.join(missing)} under {devices_dir(sysfs)}")
    return [read_function(sysfs, b, held=held) for b in bdfs]


def list_functions(sysfs: Path, *, all_vendors: bool = False, held: Mapping[str, str] | None = None
                   ) -> list[PciFunction]:
    """Return RBLN NPUs (or every function with all_vendors), sorted by BDF.

    Without all_vendors the NPUs are picked by vendor and class first (npu_bdfs: no device lock), so a function the
    command is not about is never read further."""
    root = devices_dir(sysfs)
    if not root.is_dir():
        return []
    wanted = sorted(e for e in os.listdir(root) if _BDF.fullmatch(e)) if all_vendors else npu_bdfs(sysfs)
    return [read_function(sysfs, b, held=held) for b in wanted]


def is_rbln_npu(vendor: int, class_code: int) -> bool:
    """Vendor 0x1eff with the NPU class code 0x120000 (processing accelerator; the prog-if byte may vary)."""
    return vendor == C.PCI_VENDOR_RBLN and class_code >> 8 == C.PCI_CLASS_NPU >> 8


def npu_bdfs(sysfs: Path) -> list[str]:
    """The BDFs of the RBLN NPUs, from their vendor and class alone, sorted. It never reads `driver_override`: that
    read blocks while the kernel holds a function's device lock, as it does all the while an
    unbind of it waits for a VFIO user (measured on the kernel tier), so a run about other functions would wait too."""
    root = devices_dir(sysfs)
    if not root.is_dir():
        return []
    out = []
    for entry in sorted(os.listdir(root)):
        d = root / entry
        if _BDF.fullmatch(entry) and is_rbln_npu(_hex(_read(d / "vendor")), _hex(_read(d / "class"))):
            out.append(entry)
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


def iommu_group_of(sysfs: Path, bdf: str) -> str | None:
    """The IOMMU group number of one function, None when it has none (IOMMU off)."""
    return _link_name(device_dir(sysfs, bdf) / "iommu_group")


def iommu_group_count(sysfs: Path) -> int:
    """How many IOMMU groups the kernel created (0: IOMMU off or absent)."""
    try:
        return sum(1 for e in os.listdir(Path(sysfs) / "kernel" / "iommu_groups") if e.isdigit())
    except FileNotFoundError:
        return 0


def is_bdf_name(text: str) -> bool:
    """Whether a directory entry is spelled like a canonical PCI address (as sysfs names functions)."""
    return bool(_SYSFS_BDF.fullmatch(text))
