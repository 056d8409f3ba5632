"""Fixture host trees for `preflight --local`: write proc/, sys/, dev/ and lib/modules/ of a described host under tmp_path.

Each scenario function returns a HostSpec; `build(root, spec)` writes it. The layout follows the
kernel's: PCI functions under sys/bus/pci/devices/<bdf> with `driver` and `iommu_group` links,
groups under sys/kernel/iommu_groups/<g>/devices, loadable modules as sys/module/<m>/initstate,
class devices of the rebellions driver under <bdf>/rbln/<name>, and /proc/<pid>/fd links.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

INTEL_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht " \
              "syscall nx pdpe1gb rdtscp lm constant_tsc vmx smx est tm2 ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic"
AMD_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht " \
            "syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good svm extapic cr8_legacy abm sse4a"


@dataclass(frozen=True)
class Npu:
    """One RBLN PCI function."""

    bdf: str
    device: int = 0x1220  # CA22 PF
    driver: str | None = "rebellions"
    group: str | None = "42"
    node_name: str | None = None  # /dev node the rebellions driver creates (rbln0)


@dataclass(frozen=True)
class PciDev:
    """Any other PCI function (for shared IOMMU groups)."""

    bdf: str
    vendor: int
    device: int
    class_code: int
    group: str | None
    driver: str | None = None


@dataclass(frozen=True)
class Proc:
    """A process and the paths its fds point at."""

    pid: int
    comm: str
    cmdline: str
    paths: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class HostSpec:
    """A host as preflight --local sees it."""

    cpu_vendor: str = "GenuineIntel"
    hypervisor: bool = False
    dmi: tuple[str, str] | None = ("Dell Inc.", "PowerEdge R760xa")
    acpi_tables: tuple[str, ...] = ("APIC", "DMAR", "DSDT", "FACP", "MCFG")
    iommu_units: tuple[str, ...] = ("dmar0", "dmar1")
    extra_groups: tuple[str, ...] = ("0", "1", "2")  # IOMMU groups of other devices
    cmdline: str = "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=1b2c ro quiet intel_iommu=on iommu=pt"
    release: str = "6.8.0-45-generic"
    loaded: tuple[str, ...] = ("vfio", "vfio_pci", "vfio_pci_core", "vfio_iommu_type1", "kvm", "kvm_intel")
    builtin: tuple[str, ...] = ("kernel/drivers/usb/host/xhci-hcd.ko",)  # lines of modules.builtin
    write_builtin: bool = True
    dev_vfio: bool = True
    dev_kvm: bool = True
    npus: tuple[Npu, ...] = ()
    others: tuple[PciDev, ...] = ()
    procs: tuple[Proc, ...] = (Proc(1, "systemd", "/sbin/init", ("/dev/null",)),)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _symlink(link: Path, target: Path | str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)


def _pci_function(sysfs: Path, bdf: str, vendor: int, device: int, class_code: int, driver: str | None,
                  group: str | None) -> Path:
    real = sysfs / "devices" / "pci0000:00" / bdf
    for name, value in (("vendor", f"0x{vendor:04x}"), ("device", f"0x{device:04x}"),
                        ("class", f"0x{class_code:06x}"), ("numa_node", "0"), ("driver_override", "(null)")):
        _write(real / name, value + "\n")
    _symlink(sysfs / "bus" / "pci" / "devices" / bdf, real)
    if driver:
        drv = sysfs / "bus" / "pci" / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        _symlink(real / "driver", drv)
        _symlink(drv / bdf, real)
    if group is not None:
        g = sysfs / "kernel" / "iommu_groups" / group
        (g / "devices").mkdir(parents=True, exist_ok=True)
        _symlink(real / "iommu_group", g)
        _symlink(g / "devices" / bdf, real)
    return real


def build(root: Path, spec: HostSpec) -> Path:
    """Write the host described by spec under root; return root."""
    root = Path(root)
    sysfs, proc, dev = root / "sys", root / "proc", root / "dev"
    flags = INTEL_FLAGS if spec.cpu_vendor == "GenuineIntel" else AMD_FLAGS
    if spec.hypervisor:
        flags += " hypervisor"
    block = "processor\t: {n}\nvendor_id\t: {v}\ncpu family\t: 6\nmodel name\t: test CPU\nflags\t\t: {f}\n\n"
    _write(proc / "cpuinfo", "".join(block.format(n=n, v=spec.cpu_vendor, f=flags) for n in range(2)))
    _write(proc / "cmdline", spec.cmdline + "\n")
    _write(proc / "sys" / "kernel" / "osrelease", spec.release + "\n")
    for pid in spec.procs:
        _write(proc / str(pid.pid) / "comm", pid.comm + "\n")
        _write(proc / str(pid.pid) / "cmdline", "\0".join(pid.cmdline.split()) + "\0")
        (proc / str(pid.pid) / "fd").mkdir(parents=True, exist_ok=True)
        for i, path in enumerate(pid.paths):
            _symlink(proc / str(pid.pid) / "fd" / str(i + 3), path)

    if spec.dmi:
        _write(sysfs / "class" / "dmi" / "id" / "sys_vendor", spec.dmi[0] + "\n")
        _write(sysfs / "class" / "dmi" / "id" / "product_name", spec.dmi[1] + "\n")
    for t in spec.acpi_tables:
        _write(sysfs / "firmware" / "acpi" / "tables" / t, "table")
    (sysfs / "class" / "iommu").mkdir(parents=True, exist_ok=True)
    for u in spec.iommu_units:
        (sysfs / "class" / "iommu" / u).mkdir(parents=True, exist_ok=True)
    (sysfs / "kernel" / "iommu_groups").mkdir(parents=True, exist_ok=True)
    for g in spec.extra_groups:
        (sysfs / "kernel" / "iommu_groups" / g / "devices").mkdir(parents=True, exist_ok=True)
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    # A host bridge and a NIC, so the NPU scan has other vendors to skip.
    _pci_function(sysfs, "0000:00:00.0", 0x8086, 0x09A2, 0x060000, None, spec.extra_groups[0] if spec.extra_groups
                  else None)
    _pci_function(sysfs, "0000:17:00.0", 0x15B3, 0x101D, 0x020000, "mlx5_core",
                  spec.extra_groups[1] if len(spec.extra_groups) > 1 else None)
    for o in spec.others:
        _pci_function(sysfs, o.bdf, o.vendor, o.device, o.class_code, o.driver, o.group)
    for n in spec.npus:
        real = _pci_function(sysfs, n.bdf, 0x1EFF, n.device, 0x120000, n.driver, n.group)
        if n.node_name and n.driver == "rebellions":
            _write(real / "rbln" / n.node_name / "dev", "510:0\n")
            _write(dev / n.node_name, "")
        if n.driver == "vfio-pci" and n.group:
            _write(dev / "vfio" / n.group, "")

    (sysfs / "module").mkdir(parents=True, exist_ok=True)
    for m in spec.loaded:
        _write(sysfs / "module" / m / "initstate", "live\n")
    if spec.write_builtin:
        _write(root / "lib" / "modules" / spec.release / "modules.builtin", "\n".join(spec.builtin) + "\n")
    if spec.dev_vfio:
        _write(dev / "vfio" / "vfio", "")
    if spec.dev_kvm:
        _write(dev / "kvm", "")
    return root


# -- scenarios ------------------------------------------------------------------------------------

TWO_NPUS_VFIO = (Npu("0000:3b:00.0", driver="vfio-pci", group="42"), Npu("0000:5e:00.0", driver="vfio-pci", group="43"))
TWO_NPUS_HOST = (Npu("0000:3b:00.0", driver="rebellions", group="42", node_name="rbln0"),
                 Npu("0000:5e:00.0", driver="rebellions", group="43", node_name="rbln1"))


def intel_bare_metal(**changes) -> HostSpec:
    """Intel server, VT-d on, intel_iommu=on iommu=pt, VFIO loaded, two CA22 NPUs on vfio-pci: all PASS."""
    return replace(HostSpec(npus=TWO_NPUS_VFIO), **changes)


def amd_iommu_off(**changes) -> HostSpec:
    """AMD server whose firmware has IVRS but whose kernel runs with amd_iommu=off: no groups anywhere."""
    spec = HostSpec(
        cpu_vendor="AuthenticAMD", dmi=("Supermicro", "AS-4125GS-TNRT"),
        acpi_tables=("APIC", "DSDT", "FACP", "IVRS", "MCFG"), iommu_units=(), extra_groups=(),
        cmdline="BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=1b2c ro amd_iommu=off",
        loaded=("vfio", "vfio_pci", "vfio_iommu_type1", "kvm", "kvm_amd"),
        npus=(Npu("0000:c1:00.0", driver="rebellions", group=None, node_name="rbln0"),),
    )
    return replace(spec, **changes)


def vm_without_viommu(**changes) -> HostSpec:
    """A KVM guest used as a worker, NPU passed through to it, but the VM has no vIOMMU."""
    spec = HostSpec(
        hypervisor=True, dmi=("QEMU", "Standard PC (Q35 + ICH9, 2009)"),
        acpi_tables=("APIC", "DSDT", "FACP", "MCFG"), iommu_units=(), extra_groups=(),
        cmdline="BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=/dev/vda1 ro console=ttyS0",
        npus=(Npu("0000:06:00.0", driver="rebellions", group=None, node_name="rbln0"),),
    )
    return replace(spec, **changes)


def vm_with_viommu(**changes) -> HostSpec:
    """The same guest with a QEMU intel-iommu vIOMMU and intel_iommu=on."""
    spec = vm_without_viommu(
        acpi_tables=("APIC", "DMAR", "DSDT", "FACP", "MCFG"), iommu_units=("dmar0",), extra_groups=("0", "1", "2"),
        cmdline="BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=/dev/vda1 ro console=ttyS0 intel_iommu=on",
        npus=(Npu("0000:06:00.0", driver="vfio-pci", group="7"),),
    )
    return replace(spec, **changes)


def modules_missing(**changes) -> HostSpec:
    """Intel bare metal with IOMMU on, but no VFIO module loaded or built in (and so no /dev/vfio/vfio)."""
    return intel_bare_metal(loaded=("kvm", "kvm_intel", "rebellions"), dev_vfio=False, npus=TWO_NPUS_HOST, **changes)


def no_npus(**changes) -> HostSpec:
    """Intel bare metal, everything ready, but no Rebellions device."""
    return intel_bare_metal(npus=(), **changes)


def npu_on_rebellions(**changes) -> HostSpec:
    """NPUs on the host driver; a process (a container workload) holds /dev/rbln0 open."""
    procs = (Proc(1, "systemd", "/sbin/init", ("/dev/null",)),
             Proc(4242, "python3", "python3 serve.py --npu 0", ("/dev/rbln0", "/dev/null")))
    return intel_bare_metal(npus=TWO_NPUS_HOST, procs=procs, **changes)


def npu_on_vfio(**changes) -> HostSpec:
    """NPUs on vfio-pci; QEMU (a KubeVirt VM) holds /dev/vfio/42 open."""
    procs = (Proc(1, "systemd", "/sbin/init", ("/dev/null",)),
             Proc(5151, "qemu-kvm", "/usr/libexec/qemu-kvm -name guest=default_vm1", ("/dev/vfio/vfio", "/dev/vfio/42")))
    return intel_bare_metal(procs=procs, **changes)


__all__ = [
    "HostSpec", "Npu", "PciDev", "Proc", "build", "intel_bare_metal", "amd_iommu_off", "vm_without_viommu",
    "vm_with_viommu", "modules_missing", "no_npus", "npu_on_rebellions", "npu_on_vfio",
]
