"""The host checks of `preflight --local`: pure functions of HostFacts, in a fixed order."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from rblnctl import constants as C
from rblnctl.host import iommu_advice as advice
from rblnctl.host import pci, system
from rblnctl.host.iommu_advice import AMD, ARM64, INTEL
from rblnctl.preflight.host_facts import (
    ALL_IOMMU_TABLES,
    IOMMU_TABLES,
    VM_IOMMU_TABLES,
    X86_VM_IOMMU_TABLES,
    HostFacts,
)
from rblnctl.preflight.model import SCOPE_HOST, CheckResult, Findings, Status, worst
from rblnctl.remedy import Command, Remedy

T_FIRMWARE = "IOMMU in firmware (ACPI DMAR / IVRS / IORT, device tree)"
T_KERNEL = "IOMMU enabled by the kernel"
T_CMDLINE = "IOMMU on the kernel command line"
T_VIRT = "Bare metal, or VM with a vIOMMU"
T_MODULES = "VFIO kernel modules"
T_DEV_VFIO = "/dev/vfio/vfio present"
T_KVM = "/dev/kvm present"
T_NPUS = "RBLN NPUs present"
T_DRIVER = "NPU kernel driver"
T_GROUPS = "NPUs in usable IOMMU groups"
T_IN_USE = "NPU device files held open"

SEE_VIRT = "give this VM a vIOMMU (see host.virt)"
DMESG = "`dmesg | grep -i -e DMAR -e AMD-Vi -e SMMU -e IOMMU`"


def _guest_param(f: HostFacts) -> str:
    """The kernel parameter (formatted) a VM needs for the vIOMMU it has; the CPU vendor does not decide it."""
    return advice.guest_param(f.acpi_tables, f.platform)


def _viommu_remedy(f: HostFacts) -> str:
    return f"{advice.viommu(f.platform)}; then boot it with {_guest_param(f)}"


def _machine(f: HostFacts) -> str:
    parts = []
    if f.hypervisor_flag is not None:
        parts.append("hypervisor CPU flag set" if f.hypervisor_flag else "no hypervisor CPU flag")
    else:
        parts.append("no CPU flags in /proc/cpuinfo")
    dmi = " ".join(x for x in (f.dmi_vendor, f.dmi_product) if x)
    parts.append(f"DMI {dmi}" if dmi else "no DMI strings")
    return "; ".join(parts)


def _vendor_text(f: HostFacts) -> str:
    if f.platform == ARM64:
        return f.arch or "aarch64"
    return f.cpu_vendor_id or "unknown CPU vendor"


def check_host(f: HostFacts) -> list[CheckResult]:
    """Turn host facts into findings, in a fixed order."""
    out = Findings()
    add = out.add
    platform = f.platform

    # IOMMU in firmware
    # A VM's vIOMMU may be Intel, AMD or virtio whatever the CPU (an arm64 guest's: SMMUv3 or virtio).
    wanted: tuple[str, ...]
    if f.is_vm:
        wanted = VM_IOMMU_TABLES.get(platform or "", X86_VM_IOMMU_TABLES)
    else:
        wanted = IOMMU_TABLES.get(platform or "", ALL_IOMMU_TABLES)
    found = [t for t in f.acpi_tables if t in wanted]
    if found:
        note = ("; IORT lists the SMMUs (a table without SMMU nodes shows as no IOMMU units in host.iommu.kernel)"
                if found == ["IORT"] else "")
        add("host.iommu.firmware", T_FIRMWARE, SCOPE_HOST, Status.PASS,
            f"ACPI {', '.join(found)} table present ({_vendor_text(f)}){note}")
    elif f.dt_smmus:
        add("host.iommu.firmware", T_FIRMWARE, SCOPE_HOST, Status.PASS,
            f"the device tree describes an SMMU: {', '.join(f.dt_smmus[:4])} ({_vendor_text(f)})")
    elif not f.acpi_dir_found:
        add("host.iommu.firmware", T_FIRMWARE, SCOPE_HOST, Status.WARN,
            "no /sys/firmware/acpi/tables and no SMMU in the device tree: firmware IOMMU state unknown",
            "rely on host.iommu.kernel; if it fails, " + advice.enable_in_firmware(platform))
    elif f.is_vm:
        add("host.iommu.firmware", T_FIRMWARE, SCOPE_HOST, Status.FAIL,
            f"VM and no {'/'.join(wanted)} ACPI table: the hypervisor offers no vIOMMU", SEE_VIRT)
    else:
        add("host.iommu.firmware", T_FIRMWARE, SCOPE_HOST, Status.FAIL,
            f"no {'/'.join(wanted)} ACPI table ({_vendor_text(f)}): the firmware does not announce an IOMMU",
            advice.enable_in_firmware(platform))

    # IOMMU in the kernel
    units = ", ".join(f.iommu_units[:4]) + (f" +{len(f.iommu_units) - 4}" if len(f.iommu_units) > 4 else "")
    if f.iommu_groups and f.iommu_units:
        add("host.iommu.kernel", T_KERNEL, SCOPE_HOST, Status.PASS,
            f"{f.iommu_groups} IOMMU groups; IOMMU units {units}")
    elif f.iommu_groups:
        add("host.iommu.kernel", T_KERNEL, SCOPE_HOST, Status.WARN,
            f"{f.iommu_groups} IOMMU groups but /sys/class/iommu is empty",
            f"check {DMESG}; tools such as dpdk-devbind refuse vfio-pci when /sys/class/iommu is empty")
    elif f.iommu_units:
        # Units registered, yet no device put behind them: IOMMU set-up failed or translation is off.
        fix = SEE_VIRT if f.is_vm else advice.kernel_without_iommu(platform)
        add("host.iommu.kernel", T_KERNEL, SCOPE_HOST, Status.FAIL,
            f"IOMMU units {units} but /sys/kernel/iommu_groups has no groups: the kernel put no device behind "
            "the IOMMU", f"check {DMESG} for the reason; {fix}")
    else:
        fix = SEE_VIRT if f.is_vm else advice.kernel_without_iommu(platform)
        add("host.iommu.kernel", T_KERNEL, SCOPE_HOST, Status.FAIL,
            "/sys/kernel/iommu_groups has no groups: the kernel runs without an IOMMU", fix)

    _check_cmdline(f, add)

    # VM worker needs a vIOMMU
    if f.hypervisor_flag is None and not f.dmi_vendor and not f.dmi_product:
        add("host.virt", T_VIRT, SCOPE_HOST, Status.WARN,
            "cannot tell bare metal from a VM: no CPU flags and no DMI strings",
            "if this node is a VM, make sure it has a vIOMMU (host.iommu.kernel must pass)")
    elif not f.is_vm:
        add("host.virt", T_VIRT, SCOPE_HOST, Status.PASS, f"bare metal ({_machine(f)})")
    elif f.iommu_groups:
        add("host.virt", T_VIRT, SCOPE_HOST, Status.PASS,
            f"VM ({_machine(f)}) with a vIOMMU: {f.iommu_groups} IOMMU groups")
    else:
        add("host.virt", T_VIRT, SCOPE_HOST, Status.FAIL,
            f"VM ({_machine(f)}) without a vIOMMU: no IOMMU groups", _viommu_remedy(f))

    # VFIO modules
    missing = [m for m, s in f.modules.items() if s is system.ModuleState.MISSING]
    states = ", ".join(f"{m} {s}" for m, s in f.modules.items())
    if not missing:
        add("host.vfio.modules", T_MODULES, SCOPE_HOST, Status.PASS, states)
    elif missing == ["vfio_iommu_type1"] and f.iommufd is not system.ModuleState.MISSING and f.dev_vfio:
        # A kernel built with CONFIG_IOMMUFD_VFIO_CONTAINER (VFIO_CONTAINER=n) has no vfio_iommu_type1: iommufd
        # serves /dev/vfio/vfio with the same ioctls (torvalds/linux drivers/iommu/iommufd/Kconfig
        # IOMMUFD_VFIO_CONTAINER; drivers/vfio/Kconfig: VFIO_IOMMU_TYPE1 is built only under VFIO_CONTAINER).
        # Its help text says the emulation lacks some type1 features (peer-to-peer DMA mapping), hence WARN.
        add("host.vfio.modules", T_MODULES, SCOPE_HOST, Status.WARN,
            f"{states}, {C.IOMMUFD_MODULE} {f.iommufd}: /dev/vfio/vfio exists without vfio_iommu_type1, so iommufd "
            "provides the VFIO container (CONFIG_IOMMUFD_VFIO_CONTAINER); VMs work, but the emulation lacks "
            "some type1 features such as peer-to-peer DMA between passed-through devices",
            "nothing to do for ordinary passthrough; for P2P DMA between NPUs use a kernel built with "
            "CONFIG_VFIO_CONTAINER=y and `modprobe vfio_iommu_type1`")
    else:
        module = "vfio_iommu_type1" if missing == ["vfio_iommu_type1"] else "vfio_pci"
        load = f"`modprobe {module}`" + (" (pulls in vfio and vfio_iommu_type1)" if module == "vfio_pci" else "")
        fix = (f"{load}; make it survive reboots with `echo vfio-pci > /etc/modules-load.d/vfio-pci.conf` "
               "(the operator's vfio-manager also loads vfio-pci on vm-passthrough nodes)")
        if f.builtin_list is None:
            where = (f"/lib/modules/{f.kernel_release}/modules.builtin" if f.kernel_release
                     else "/proc/sys/kernel/osrelease")
            add("host.vfio.modules", T_MODULES, SCOPE_HOST, Status.WARN,
                f"{states}; {where} not readable, so built-in modules cannot be told apart from missing ones",
                fix, f"modprobe {module}")
        else:
            add("host.vfio.modules", T_MODULES, SCOPE_HOST, Status.FAIL, states, fix, f"modprobe {module}")

    if f.dev_vfio:
        add("host.vfio.device", T_DEV_VFIO, SCOPE_HOST, Status.PASS, "/dev/vfio/vfio exists")
    else:
        add("host.vfio.device", T_DEV_VFIO, SCOPE_HOST, Status.FAIL,
            "/dev/vfio/vfio does not exist (the vfio module creates it when loaded)",
            "`modprobe vfio_pci` creates /dev/vfio/vfio (see host.vfio.modules)", "modprobe vfio_pci")

    if f.dev_kvm:
        add("host.kvm", T_KVM, SCOPE_HOST, Status.PASS, "/dev/kvm exists")
    else:
        if f.platform == ARM64:
            fix = ("boot the kernel at EL2 (virtualization enabled in the firmware; under a hypervisor, nested "
                   "virtualization) with KVM built in (CONFIG_KVM); only vm-passthrough nodes need it")
        else:
            fix = ("enable nested virtualisation on the hypervisor that runs this VM (e.g. kvm_intel nested=1) "
                   if f.is_vm else "enable VT-x / AMD-V in the BIOS/UEFI setup and ")
            fix += "load kvm_intel or kvm_amd; only vm-passthrough nodes need it"
        add("host.kvm", T_KVM, SCOPE_HOST, Status.WARN,
            "/dev/kvm does not exist: KubeVirt cannot run VMs on this node", fix)

    _check_npus(f, add)
    return out.items


def _check_cmdline(f: HostFacts, add: Callable[..., object]) -> None:
    platform = f.platform
    on = advice.on_param(platform)
    if f.cmdline is None:
        default = advice.DEFAULT_ON.get(platform or "", "on Intel the kernel needs `intel_iommu=on`")
        add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, Status.WARN, "/proc/cmdline is not readable",
            f"make sure the kernel boots with `{on}`" if on
            else f"make sure nothing on the kernel command line turns the IOMMU off; {default}")
        return
    params: dict[str, str] = {}
    for word in f.cmdline.split():
        if word == "--":
            break  # the rest belongs to init
        key, _, value = word.partition("=")
        params[key] = value
    if platform == ARM64:
        _check_arm64_cmdline(f, params, add)
        return
    iommu = params.get("iommu")
    pt = "iommu=pt set" if iommu == "pt" else "iommu=pt not set (optional, speeds up host DMA)"
    # The parameter that applies: the CPU vendor's on bare metal; in a VM the vIOMMU model's (an
    # intel-iommu vIOMMU announces DMAR, an AMD one IVRS, virtio-iommu VIOT and takes neither), so
    # `amd_iommu=off` in a guest with an Intel vIOMMU is harmless. Unknown: both count.
    both = {"intel_iommu", "amd_iommu"}
    if f.is_vm:
        relevant = {k for t, k in (("DMAR", "intel_iommu"), ("IVRS", "amd_iommu")) if t in f.acpi_tables}
        if not relevant and "VIOT" not in f.acpi_tables:
            relevant = both
    else:
        relevant = {p for p in ({INTEL: "intel_iommu", AMD: "amd_iommu"}.get(platform or ""),) if p} or both
    values = {k: params[k].split(",") for k in ("intel_iommu", "amd_iommu") if k in params}

    off = [f"{k}=off" for k, v in values.items() if "off" in v and k in relevant]
    if iommu == "off":
        off.append("iommu=off")
    if off:
        fix = (f"{SEE_VIRT}: remove {' '.join(off)} and boot it with {_guest_param(f)}" if f.is_vm
               else advice.replace_off(" ".join(f"`{o}`" for o in off), platform))
        add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, Status.FAIL,
            f"{' '.join(off)} on the kernel command line turns the IOMMU off; {pt}", fix)
        return
    # Only intel_iommu takes `on`; amd_iommu has no such value (kernel-parameters.txt) and ignores it.
    given = [f"{k}={params[k]}" for k, v in values.items() if "on" in v and k in relevant and k == "intel_iommu"]
    if given:
        add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, Status.PASS, f"{' '.join(given)}; {pt}")
        return
    ignored = ("; amd_iommu=on is not an amd_iommu value (the kernel ignores it)"
               if "on" in values.get("amd_iommu", ()) else "")
    if f.is_vm and not relevant and f.iommu_groups:
        add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, Status.PASS,
            f"virtio-iommu (ACPI VIOT) needs no IOMMU parameter ({f.iommu_groups} groups); {pt}")
        return
    if f.iommu_groups:
        default = advice.DEFAULT_ON.get(platform or "", "the kernel turned an IOMMU on by default")
        what = f"{on} not given, but " if on else ""
        add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, Status.PASS,
            f"{what}{default} ({f.iommu_groups} groups); {pt}{ignored}")
        return
    if f.is_vm:
        add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, Status.FAIL,
            f"VM without IOMMU groups; no IOMMU parameter on the kernel command line; {pt}",
            f"{SEE_VIRT}, then boot it with {_guest_param(f)}")
        return
    if platform == AMD:
        # Nothing on the command line to blame (no amd_iommu=off / iommu=off): the firmware or the kernel build is.
        add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, Status.WARN,
            f"nothing on the kernel command line turns the AMD IOMMU off, yet there are no IOMMU groups "
            f"({_vendor_text(f)}); {pt}{ignored}", advice.cmdline_fix(AMD))
        return
    status = Status.FAIL if platform else Status.WARN
    add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, status,
        f"{on or 'intel_iommu=on'} not on the kernel command line ({_vendor_text(f)}) and no IOMMU groups; {pt}",
        advice.cmdline_fix(platform))


def _check_arm64_cmdline(f: HostFacts, params: dict[str, str], add: Callable[..., object]) -> None:
    """arm64: no parameter turns the SMMU on (x86's intel_iommu/amd_iommu/iommu= do not apply); report
    iommu.passthrough, and never blame the command line for missing groups."""
    passthrough = params.get("iommu.passthrough")
    pt = (f"iommu.passthrough={passthrough} set" if passthrough is not None
          else "iommu.passthrough not set (the kernel's default DMA mode)")
    if f.iommu_groups:
        add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, Status.PASS,
            f"{advice.DEFAULT_ON[ARM64]} ({f.iommu_groups} groups); {pt}")
        return
    fix = _viommu_remedy(f) if f.is_vm else advice.cmdline_fix(ARM64)
    add("host.iommu.cmdline", T_CMDLINE, SCOPE_HOST, Status.WARN,
        f"no IOMMU groups, and nothing on the command line explains it ({advice.DEFAULT_ON[ARM64]}): look at the "
        f"firmware and the SMMU driver (host.iommu.firmware, host.iommu.kernel); {pt}", fix)


def _npu_label(fn: pci.PciFunction) -> str:
    model = f"{fn.model} {fn.function}" if fn.model else f"device {fn.device:04x}"
    return f"{fn.bdf} {model}"


def _pending_remedy(f: HostFacts, waiting: Sequence[pci.PciFunction], rest: Remedy | None) -> Remedy:
    """For NPUs whose unbind the kernel is still finishing (a vfio run's pending record, or a device lock held past
    the bounded read): stop what holds each one, then the same command again finishes it (the one the record names,
    else an unbind; it reads the override again once the kernel lets go); `rest`, the remedy of the other NPUs,
    follows."""
    by_run: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    whos = []
    for fn in waiting:
        rec = f.pending.get(fn.bdf)
        # the command that left it (a bind's or a recover's unbind may be what waits), else an unbind
        by_run.setdefault((rec.state_file, rec.command) if rec else ("", ("unbind",)), []).append(fn.bdf)
        who = (rec.holders if rec else "") or ", ".join(f.holders.get(fn.bdf) or []) or "its VFIO user (a VM)"
        whos.append(f"{fn.bdf}: {who}")
    unbinds = [Command.own("vfio", command[0], *bdfs, on_host=True, state_file=state or None,
                           mode=_flag(command, "--mode"), driver=_flag(command, "--driver"))
               for (state, command), bdfs in by_run.items()]
    more = [*unbinds, *((rest.command,) if rest and rest.command else ()), *(rest.more if rest else ())]
    text = (f"stop what holds it ({'; '.join(whos)}), then run the same command again: "
            + ", ".join(f"{{more{i}}}" for i in range(len(unbinds))))
    if rest is not None:
        other = rest.text.replace("{command}", f"{{more{len(unbinds)}}}") if rest.command else rest.text
        if not rest.command:
            for i in reversed(range(len(rest.more))):  # highest first: a shifted name is never shifted again
                other = other.replace(f"{{more{i}}}", f"{{more{len(unbinds) + i}}}")
        text += f"; for the others: {other}"
    if rest is None and len(unbinds) == 1:
        return Remedy(text.replace("{more0}", "{command}"), unbinds[0])
    return Remedy(text, more=tuple(more))


def _flag(command: Sequence[str], name: str) -> str | None:
    """The value of a pending record's own flag (`--mode vm`, `--driver d`), None when it has none: spelt as a
    Command option, so a reader of the command (recover_bdfs, the front end) never takes a flag for a BDF."""
    words = list(command)
    return words[words.index(name) + 1] if name in words[:-1] else None


def _check_npus(f: HostFacts, add: Callable[..., object]) -> None:
    if f.pci_error:
        add("host.npu.present", T_NPUS, SCOPE_HOST, Status.WARN, f.pci_error,
            "run as a user who can read /sys/bus/pci/devices, or check the captured tree")
        for id_, title in (("host.npu.driver", T_DRIVER), ("host.npu.iommu-group", T_GROUPS),
                           ("host.npu.in-use", T_IN_USE)):
            add(id_, title, SCOPE_HOST, Status.SKIP, "NPUs could not be listed")
        return
    if not f.npus:
        add("host.npu.present", T_NPUS, SCOPE_HOST, Status.FAIL,
            "no PCI function with vendor 0x1eff and class 0x1200 under /sys/bus/pci/devices",
            "run this on an NPU worker; check `lspci -d 1eff:`, the card's seating and BIOS PCIe settings; "
            "on a VM worker, pass the NPUs through to the VM")
        for id_, title in (("host.npu.driver", T_DRIVER), ("host.npu.iommu-group", T_GROUPS),
                           ("host.npu.in-use", T_IN_USE)):
            add(id_, title, SCOPE_HOST, Status.SKIP, "no NPUs")
        return

    models: dict[str, int] = {}
    for fn in f.npus:
        key = f"{fn.model} {fn.function}" if fn.model else f"unknown device {fn.device:04x}"
        models[key] = models.get(key, 0) + 1
    add("host.npu.present", T_NPUS, SCOPE_HOST, Status.PASS,
        f"{len(f.npus)} RBLN NPU{'s' if len(f.npus) != 1 else ''}: "
        + ", ".join(f"{n}x {m}" for m, n in models.items()))

    # Driver: rebellions (container mode) and vfio-pci (passthrough) are both healthy states.
    statuses = []
    parts = []
    for fn in f.npus:
        if fn.override_unknown:
            # an unbind the kernel is still finishing: it removed the driver link first, so "bound to no driver"
            # would send the user to `vfio recover`, which refuses the device until the unbind ends
            statuses.append(Status.WARN)
            parts.append(f"{_npu_label(fn)} {fn.override_unknown}")
        elif fn.driver == C.VFIO_DRIVER:
            statuses.append(Status.PASS)
            parts.append(f"{_npu_label(fn)} on vfio-pci (ready for passthrough)")
        elif fn.driver == C.HOST_DRIVER:
            statuses.append(Status.PASS)
            parts.append(f"{_npu_label(fn)} on rebellions (host driver; container mode)")
        elif fn.driver is None:
            statuses.append(Status.WARN)
            parts.append(f"{_npu_label(fn)} bound to no driver")
        else:
            statuses.append(Status.WARN)
            parts.append(f"{_npu_label(fn)} on unexpected driver {fn.driver}")
    status = worst(statuses)
    settled = [fn for fn in f.npus if not fn.override_unknown]
    odd = [fn.bdf for fn in settled if fn.driver not in (C.VFIO_DRIVER, C.HOST_DRIVER)]
    base = ("install the RBLN driver (rebellions) for container mode, or bind to vfio-pci for VMs: label the node "
            "vm-passthrough so the operator's vfio-manager binds it, or {bind}")
    bind = Command.own("vfio", "bind", *odd, on_host=True) if odd else None
    remedy = Remedy(base.replace("{bind}", "{command}"), bind) if bind else Remedy(base.replace(
        "{bind}", "bind it with vfio bind"))
    unbound = [fn.bdf for fn in settled if fn.driver is None]
    if unbound and bind is not None:
        # what some vfio-manager releases leave after a vm -> container switch. The host alone does not know
        # its node's mode, which decides the driver: both commands here; `--hosts` knows it and puts the one
        # first (recover_command, rblnctl.preflight.hosts).
        remedy = Remedy("re-probe the NPUs left without a driver: {more0} on a container-mode node, {more1} on a "
                        "vm-passthrough node; otherwise " + base.replace("{bind}", "{more2}"),
                        more=(recover_command(unbound, C.MODE_CONTAINER), recover_command(unbound, C.MODE_VM), bind))
    waiting = [fn for fn in f.npus if fn.override_unknown]
    if waiting:
        remedy = _pending_remedy(f, waiting, remedy if odd else None)
    add("host.npu.driver", T_DRIVER, SCOPE_HOST, status, "; ".join(parts), remedy)

    no_group = [fn.bdf for fn in f.npus if not fn.iommu_group]
    shared = {bdf: peers for bdf, peers in f.group_peers.items() if peers}
    if no_group:
        add("host.npu.iommu-group", T_GROUPS, SCOPE_HOST, Status.FAIL,
            f"no IOMMU group: {', '.join(no_group)} (vfio-pci cannot take them; the DRA driver skips them)",
            "turn the IOMMU on (see host.iommu.kernel)")
    elif shared:
        text = "; ".join(f"{bdf} shares group with {', '.join(p)}" for bdf, p in shared.items())
        add("host.npu.iommu-group", T_GROUPS, SCOPE_HOST, Status.WARN, text,
            "every device of an IOMMU group must go to the VM together: bind the listed devices to vfio-pci "
            "too, or move the card to a slot behind an ACS-capable port")
    else:
        groups = ", ".join(f"{fn.bdf}:{fn.iommu_group}" for fn in f.npus)
        add("host.npu.iommu-group", T_GROUPS, SCOPE_HOST, Status.PASS, f"own IOMMU groups ({groups})")

    held = {b: p for b, p in f.holders.items() if p}
    if not held:
        if f.holders_note:
            add("host.npu.in-use", T_IN_USE, SCOPE_HOST, Status.SKIP,
                f"no holder found, but {f.holders_note}; rerun as root for a complete answer")
        else:
            add("host.npu.in-use", T_IN_USE, SCOPE_HOST, Status.PASS, "no process holds an NPU device file open")
        return
    by_driver = {fn.bdf: fn.driver for fn in f.npus}
    text = "; ".join(f"{b}: {', '.join(p)}" for b, p in held.items())
    if f.holders_note:
        text += f" ({f.holders_note})"
    if any(by_driver.get(b) != C.VFIO_DRIVER for b in held):
        # Normal on a container-mode node; noted because these must stop before a switch to VMs.
        text += ("; these must stop before the node switches to vm-passthrough "
                 "(a switch by node set-mode drains NPU pods first)")
    else:
        text = f"in use through VFIO (running VMs): {text}"
    add("host.npu.in-use", T_IN_USE, SCOPE_HOST, Status.PASS, text)


# A host pod's report (`preflight --local -o json`) carries its remedies spelt: `... vfio recover BDF... --mode ...`.
_HELD = re.compile(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])[^;]*? (?:unbind pending|unknown: the kernel holds)")
_RECOVER = re.compile(r"`[^`]*\bvfio recover ((?:[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] ?)+)--mode container`")


def recover_command(bdfs: Sequence[str], mode: str) -> Command:
    """`vfio recover BDF... --mode container|vm`: re-probe driverless NPUs for a node's mode."""
    return Command.own("vfio", "recover", *bdfs, mode="vm" if mode == C.MODE_VM else "container", on_host=True)


def recover_bdfs(result: CheckResult) -> list[str]:
    """The driverless NPUs a `host.npu.driver` finding names for `vfio recover` ([] when none): from its Remedy's
    command, or from the spelt text of another rblnctl's report."""
    if result.id != "host.npu.driver":
        return []
    # an NPU whose unbind the kernel is still finishing is finished by the command its record names, which may be a
    # recover too: never the node's re-probe (recover refuses it until the unbind ends)
    held = set(_HELD.findall(result.evidence or ""))
    if isinstance(result.remedy, Remedy):
        found = [list(c.words[2:]) for c in result.remedy.more if c.words[:2] == ("vfio", "recover")]
    else:
        found = [m.group(1).split() for m in _RECOVER.finditer(result.remedy)]
    return next((bdfs for bdfs in found if bdfs and not held & set(bdfs)), [])
