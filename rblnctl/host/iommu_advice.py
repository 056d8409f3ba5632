"""How to turn the IOMMU on, per platform: the one place of the firmware, kernel-parameter and vIOMMU advice that
`preflight --local` and `vfio bind` give. Pure strings, no I/O.

Facts (torvalds/linux Documentation/admin-guide/kernel-parameters.txt):
- `intel_iommu=on` turns the Intel IOMMU on where CONFIG_INTEL_IOMMU_DEFAULT_ON is not set.
- `amd_iommu=` takes fullflush, off, force_isolation, force_enable, pgtbl_v1, pgtbl_v2, irtcachedis, ...: there
  is no `on`. The AMD IOMMU is used whenever the firmware announces it (ACPI IVRS); what turns it off is
  `amd_iommu=off`, `iommu=off`, or AMD-Vi/IOMMU disabled in the BIOS.
- `iommu=pt` and `iommu.passthrough=1` are the same thing (identity-mapped host DMA); VFIO works either way.
- arm64: the SMMU is used when the firmware describes it (ACPI IORT or the device tree) and the SMMU driver
  (arm_smmu_v3 / arm_smmu) is in the kernel; no kernel parameter turns it on. `iommu.passthrough=0` is the
  explicit "translate DMA" setting.
"""

from __future__ import annotations

INTEL = "intel"
AMD = "amd"
ARM64 = "arm64"

_FIRMWARE = {
    INTEL: "Intel VT-d (Virtualization Technology for Directed I/O)",
    AMD: "the AMD IOMMU (AMD-Vi; often listed as \"IOMMU\" next to SVM)",
    ARM64: "the SMMU (System MMU; it must appear in the ACPI IORT table or the device tree)",
}
_ANY_FIRMWARE = "VT-d (Intel), the IOMMU/AMD-Vi (AMD) or the SMMU (Arm)"

# The kernel parameter that turns the IOMMU on, where one exists.
_ON_PARAM = {INTEL: "intel_iommu=on"}
# What the command-line check and the remedies say instead on platforms where no parameter is needed.
DEFAULT_ON = {
    INTEL: "the kernel turns the Intel IOMMU on by default (CONFIG_INTEL_IOMMU_DEFAULT_ON)",
    AMD: "the AMD IOMMU is on by default when the firmware announces it",
    ARM64: "arm64 needs no IOMMU kernel parameter: the SMMU is used when the firmware describes it",
}


def firmware_setting(platform: str | None) -> str:
    """The firmware (BIOS/UEFI) setting that exposes the IOMMU."""
    return _FIRMWARE.get(platform or "", _ANY_FIRMWARE)


def enable_in_firmware(platform: str | None) -> str:
    """`enable ... in the BIOS/UEFI setup, then reboot`."""
    return f"enable {firmware_setting(platform)} in the BIOS/UEFI setup, then reboot"


def on_param(platform: str | None) -> str | None:
    """The kernel parameter that turns the IOMMU on (`intel_iommu=on`), None where the IOMMU is on by default."""
    return _ON_PARAM.get(platform or "")


def cmdline_fix(platform: str | None) -> str:
    """What to change on the kernel command line so the kernel uses the IOMMU (with the GRUB steps where a
    parameter is needed)."""
    if platform == INTEL:
        return grub("add `intel_iommu=on` (`iommu=pt` optional: identity-mapped host DMA)")
    if platform == AMD:
        return ("no parameter turns the AMD IOMMU on: remove `amd_iommu=off` and `iommu=off` if present "
                f"(`iommu=pt` is optional) and {enable_in_firmware(AMD)}")
    if platform == ARM64:
        return (f"{enable_in_firmware(ARM64)}; make sure the kernel's SMMU driver (arm_smmu_v3 or arm_smmu) is "
                "built in or loaded; no kernel parameter is needed (`iommu.passthrough=0` keeps DMA "
                "translation explicit, `iommu.passthrough=1` also works with VFIO)")
    return (grub("on Intel add `intel_iommu=on` (`iommu=pt` optional)")
            + "; on AMD no parameter is needed: remove `amd_iommu=off`/`iommu=off` and enable the IOMMU in the BIOS")


def grub(edit: str) -> str:
    """`<edit>: edit GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub ... and reboot`."""
    return (f"{edit}: edit GRUB_CMDLINE_LINUX in /etc/default/grub, run `update-grub` "
            "(or `grub2-mkconfig -o /boot/grub2/grub.cfg`) and reboot")


def replace_off(off: str, platform: str | None) -> str:
    """Remedy for a command line that turns the IOMMU off (`off`: the offending words, formatted)."""
    param = on_param(platform)
    if param:
        return grub(f"replace {off} with `{param}` (`iommu=pt` optional)")
    return grub(f"remove {off} ({DEFAULT_ON.get(platform or '', 'the IOMMU is then on by default')})")


def kernel_without_iommu(platform: str | None) -> str:
    """Remedy when the kernel runs without any IOMMU group (bare metal)."""
    if platform in (AMD, ARM64):
        return cmdline_fix(platform)  # names the firmware setting already
    return f"{cmdline_fix(platform)}; {enable_in_firmware(platform)}"


def viommu(platform: str | None) -> str:
    """How to give a VM worker a vIOMMU (the hypervisor side)."""
    if platform == ARM64:
        return ("give this VM a vIOMMU: QEMU `-machine virt,iommu=smmuv3` or `-device virtio-iommu-pci`, libvirt "
                "`<iommu model='smmuv3'>` or `<iommu model='virtio'>`, or the cloud's vIOMMU option")
    return ("give this VM a vIOMMU: libvirt `<iommu model='intel'>` (q35), QEMU `-device intel-iommu,intremap=on` or "
            "`-device virtio-iommu-pci`, or the cloud's vIOMMU option")


def guest_param(tables: list[str] | tuple[str, ...], platform: str | None) -> str:
    """The kernel parameter (formatted) a VM needs for the vIOMMU it has; the CPU vendor does not decide it."""
    if "DMAR" in tables:
        return "`intel_iommu=on`"
    if "IVRS" in tables:
        return "no extra parameter (an AMD vIOMMU is on by default)"
    if "VIOT" in tables or platform == ARM64:
        return "no extra parameter (virtio-iommu and SMMUv3 need none)"
    return "`intel_iommu=on` for an Intel vIOMMU (virtio-iommu and AMD vIOMMUs need none)"


def vfio_needs_iommu(where: str) -> str:
    """The `vfio bind` blocker text when the kernel has no IOMMU groups (the CPU is not known there)."""
    return (f"the IOMMU is off ({where} is empty) and vfio-pci needs it: {enable_in_firmware(None)}; on Intel also "
            "boot with `intel_iommu=on` (AMD and Arm need no parameter; remove any `amd_iommu=off`/`iommu=off`)")
