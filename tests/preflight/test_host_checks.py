"""Host checks on simulated host trees: every PASS/WARN/FAIL branch produced by a host shape that a test pins."""

from __future__ import annotations

import pytest

from rblnctl.preflight.model import Status
from tests.fakes import sysfs as ht
from tests.fakes.sysfs import Npu, PciDev
from tests.preflight.host_support import by_id, check, run

def test_amd_iommu_off_in_kernel(tmp_path):
    c = by_id(run(tmp_path, ht.amd_iommu_off()))
    assert c["host.iommu.firmware"].status == Status.PASS and "IVRS" in c["host.iommu.firmware"].evidence
    assert c["host.iommu.kernel"].status == Status.FAIL
    cmd = c["host.iommu.cmdline"]
    assert cmd.status == Status.FAIL
    assert "amd_iommu=off" in cmd.evidence
    # amd_iommu has no `on` value (kernel-parameters.txt): removing `off` is the fix, and Intel's is not named
    assert "remove `amd_iommu=off`" in cmd.remedy and "intel_iommu" not in cmd.remedy
    assert "amd_iommu=on" not in cmd.remedy and "amd_iommu=on" not in c["host.iommu.kernel"].remedy
    assert "no parameter turns the AMD IOMMU on" in c["host.iommu.kernel"].remedy
    assert c["host.npu.iommu-group"].status == Status.FAIL and "0000:c1:00.0" in c["host.npu.iommu-group"].evidence
    assert c["host.virt"].status == Status.PASS


def test_amd_without_parameter_but_iommu_on_by_default(tmp_path):
    spec = ht.amd_iommu_off(cmdline="root=/dev/sda1 ro", iommu_units=("ivhd0",), extra_groups=("0", "1", "2"),
                            npus=(Npu("0000:c1:00.0", group="9"),))
    c = by_id(run(tmp_path, spec))
    assert c["host.iommu.cmdline"].status == Status.PASS
    evidence = c["host.iommu.cmdline"].evidence
    assert "on by default" in evidence and "iommu=pt not set" in evidence
    assert c["host.iommu.kernel"].status == Status.PASS


def test_intel_parameter_off_fails_with_exact_parameter(tmp_path):
    c = by_id(run(tmp_path, ht.intel_bare_metal(cmdline="root=/dev/sda1 intel_iommu=off", extra_groups=(),
                                                 iommu_units=(), npus=())))
    assert c["host.iommu.cmdline"].status == Status.FAIL
    assert "`intel_iommu=on`" in c["host.iommu.cmdline"].remedy and "update-grub" in c["host.iommu.cmdline"].remedy
    assert c["host.iommu.kernel"].status == Status.FAIL


def test_bare_metal_without_dmar_fails_firmware(tmp_path):
    c = by_id(run(tmp_path, ht.intel_bare_metal(acpi_tables=("APIC", "FACP"))))
    assert c["host.iommu.firmware"].status == Status.FAIL
    assert "VT-d" in c["host.iommu.firmware"].remedy and "BIOS" in c["host.iommu.firmware"].remedy


def test_vm_without_viommu(tmp_path):
    report = run(tmp_path, ht.vm_without_viommu())
    c = by_id(report)
    virt = c["host.virt"]
    assert virt.status == Status.FAIL
    assert "hypervisor CPU flag set" in virt.evidence and "QEMU" in virt.evidence
    assert "vIOMMU" in virt.remedy and "intel-iommu" in virt.remedy
    assert c["host.iommu.firmware"].status == Status.FAIL and "see host.virt" in c["host.iommu.firmware"].remedy
    assert c["host.iommu.kernel"].status == Status.FAIL
    assert c["host.npu.iommu-group"].status == Status.FAIL
    assert not report.summary.ok


def test_vm_with_viommu_passes(tmp_path):
    c = by_id(run(tmp_path, ht.vm_with_viommu()))
    assert c["host.virt"].status == Status.PASS and "with a vIOMMU" in c["host.virt"].evidence
    assert c["host.iommu.firmware"].status == Status.PASS
    assert c["host.iommu.cmdline"].status == Status.PASS


def test_vm_detected_from_dmi_without_cpu_flag(tmp_path):
    c = by_id(run(tmp_path, ht.vm_without_viommu(hypervisor=False)))
    assert c["host.virt"].status == Status.FAIL and "no hypervisor CPU flag" in c["host.virt"].evidence


def test_modules_missing(tmp_path):
    c = by_id(run(tmp_path, ht.modules_missing()))
    mods = c["host.vfio.modules"]
    assert mods.status == Status.FAIL
    assert "vfio missing" in mods.evidence and "vfio_pci missing" in mods.evidence
    assert "vfio_iommu_type1 missing" in mods.evidence
    assert "modprobe vfio_pci" in mods.remedy
    assert c["host.vfio.device"].status == Status.FAIL
    assert mods.remedy_command == c["host.vfio.device"].remedy_command == "modprobe vfio_pci"


def test_builtin_modules_count_as_present(tmp_path):
    builtin = ("kernel/drivers/vfio/vfio.ko", "kernel/drivers/vfio/pci/vfio-pci.ko",
               "kernel/drivers/vfio/vfio_iommu_type1.ko")
    c = by_id(run(tmp_path, ht.intel_bare_metal(loaded=("kvm",), builtin=builtin)))
    assert c["host.vfio.modules"].status == Status.PASS
    assert c["host.vfio.modules"].evidence == "vfio built-in, vfio_pci built-in, vfio_iommu_type1 built-in"


def test_missing_module_without_builtin_list_is_only_a_warning(tmp_path):
    c = by_id(run(tmp_path, ht.intel_bare_metal(loaded=("vfio", "vfio_pci"), write_builtin=False)))
    mods = c["host.vfio.modules"]
    assert mods.status == Status.WARN  # may be built in: never guessed as missing
    assert "modules.builtin not readable" in mods.evidence and "modprobe vfio_iommu_type1" in mods.remedy


def test_no_npus(tmp_path):
    c = by_id(run(tmp_path, ht.no_npus()))
    assert c["host.npu.present"].status == Status.FAIL and "lspci -d 1eff:" in c["host.npu.present"].remedy
    assert [c[i].status for i in ("host.npu.driver", "host.npu.iommu-group", "host.npu.in-use")] == [Status.SKIP] * 3


def test_npu_on_rebellions_held_open(tmp_path):
    c = by_id(run(tmp_path, ht.npu_on_rebellions()))
    drv = c["host.npu.driver"]
    assert drv.status == Status.PASS
    assert "0000:3b:00.0 CA22 PF on rebellions" in drv.evidence and "vfio-pci" not in drv.evidence.split(";")[0]
    used = c["host.npu.in-use"]
    assert used.status == Status.PASS
    assert "pid 4242 (python3 serve.py --npu 0) has /dev/rbln0 open" in used.evidence
    assert "must stop before the node switches to vm-passthrough" in used.evidence
    assert "0000:5e:00.0" not in used.evidence  # rbln1 is not open


def test_npu_on_vfio_in_use_by_vm(tmp_path):
    c = by_id(run(tmp_path, ht.npu_on_vfio()))
    assert "0000:3b:00.0 CA22 PF on vfio-pci (ready for passthrough)" in c["host.npu.driver"].evidence
    used = c["host.npu.in-use"]
    assert used.status == Status.PASS
    assert used.evidence.startswith("in use through VFIO") and "pid 5151" in used.evidence
    assert "/dev/vfio/42" in used.evidence


def test_unbound_and_foreign_driver_warn(tmp_path):
    npus = (Npu("0000:3b:00.0", driver=None, group="42"), Npu("0000:5e:00.0", driver="pci-stub", group="43"))
    c = by_id(run(tmp_path, ht.intel_bare_metal(npus=npus)))
    drv = c["host.npu.driver"]
    assert drv.status == Status.WARN
    assert "bound to no driver" in drv.evidence and "unexpected driver pci-stub" in drv.evidence
    assert "`rblnctl vfio bind 0000:3b:00.0 0000:5e:00.0`" in drv.remedy  # issue 39: the NPUs, no BDF placeholder
    # the host alone cannot tell its node's mode, which decides the driver: both commands, none to run as given
    assert "`rblnctl vfio recover 0000:3b:00.0 --mode container` on a container-mode node" in drv.remedy
    assert "`rblnctl vfio recover 0000:3b:00.0 --mode vm` on a vm-passthrough node" in drv.remedy
    assert drv.remedy_command == ""
    # `preflight --hosts` knows the node's mode and completes it
    from rblnctl.preflight.hosts import with_node_mode

    from tests.preflight.spelt import spelt_check

    vm = spelt_check(with_node_mode(drv, "vm-passthrough"))
    assert vm.remedy_command == "rblnctl vfio recover 0000:3b:00.0 --mode vm"
    assert spelt_check(with_node_mode(drv, "container")).remedy_command == \
        "rblnctl vfio recover 0000:3b:00.0 --mode container"
    assert with_node_mode(drv, None) == drv


def test_npus_on_another_driver_are_not_sent_to_recover(tmp_path):
    npus = (Npu("0000:3b:00.0", driver="pci-stub", group="42"),)
    drv = by_id(run(tmp_path, ht.intel_bare_metal(npus=npus)))["host.npu.driver"]
    assert drv.status == Status.WARN and "recover" not in drv.remedy


def test_shared_iommu_group_warns(tmp_path):
    other = PciDev("0000:3b:00.1", 0x8086, 0x1572, 0x020000, "42", driver="i40e")
    c = by_id(run(tmp_path, ht.intel_bare_metal(others=(other,))))
    g = c["host.npu.iommu-group"]
    assert g.status == Status.WARN
    assert "0000:3b:00.0 shares group with 0000:3b:00.1 (8086:1572, on i40e)" in g.evidence


def test_missing_dev_kvm_warns(tmp_path):
    c = by_id(run(tmp_path, ht.intel_bare_metal(dev_kvm=False)))
    assert c["host.kvm"].status == Status.WARN and "VT-x" in c["host.kvm"].remedy


def test_vm_with_intel_viommu_ignores_amd_iommu_off(tmp_path):
    """amd_iommu=off cannot affect a QEMU intel-iommu (DMAR) vIOMMU: the working guest must not FAIL."""
    c = by_id(run(tmp_path, ht.vm_with_viommu(cmdline="root=/dev/vda1 ro amd_iommu=off intel_iommu=on")))
    assert c["host.iommu.cmdline"].status == Status.PASS, c["host.iommu.cmdline"]
    assert "intel_iommu=on" in c["host.iommu.cmdline"].evidence


def test_vm_with_virtio_iommu_ignores_intel_iommu_off(tmp_path):
    spec = ht.vm_with_viommu(acpi_tables=("APIC", "VIOT"), iommu_units=("virtio-iommu0",),
                             cmdline="root=/dev/vda1 ro intel_iommu=off")
    c = by_id(run(tmp_path, spec))
    assert c["host.iommu.cmdline"].status == Status.PASS, c["host.iommu.cmdline"]


def test_vm_with_intel_viommu_and_intel_iommu_off_still_fails(tmp_path):
    c = by_id(run(tmp_path, ht.vm_with_viommu(cmdline="root=/dev/vda1 ro intel_iommu=off")))
    assert c["host.iommu.cmdline"].status == Status.FAIL and "`intel_iommu=on`" in c["host.iommu.cmdline"].remedy


def test_unknown_cpu_vendor_remedy_names_whole_parameters(tmp_path):
    spec = ht.intel_bare_metal(cpu_vendor="CentaurHauls", cmdline="ro", extra_groups=(), iommu_units=(), npus=())
    c = by_id(run(tmp_path, spec))
    r = c["host.iommu.kernel"].remedy
    assert "on Intel add `intel_iommu=on`" in r and "on AMD no parameter is needed" in r, r
    assert "amd_iommu=on" not in r, r


# --- every branch of the host IOMMU checks, each produced by a host shape (issue 15) ------------------------
# Each test pins one branch (status and the words only that branch says); removing the branch fails it.


@pytest.mark.parametrize(("spec", "status", "says"), [
    (ht.intel_bare_metal(), Status.PASS, "ACPI DMAR table present (GenuineIntel)"),
    (ht.intel_bare_metal(acpi_tables=()), Status.WARN, "no /sys/firmware/acpi/tables"),
    (ht.vm_without_viommu(), Status.FAIL, "VM and no DMAR/IVRS/VIOT ACPI table"),
    (ht.intel_bare_metal(acpi_tables=("APIC", "IVRS")), Status.FAIL, "no DMAR ACPI table (GenuineIntel)"),
    (ht.vm_with_viommu(acpi_tables=("APIC", "VIOT")), Status.PASS, "ACPI VIOT table present"),  # any table in a VM
    (ht.intel_bare_metal(cpu_vendor="CentaurHauls", acpi_tables=("IVRS",)), Status.PASS, "ACPI IVRS table"),
])
def test_iommu_firmware_branches(tmp_path, spec, status, says):
    c = check(tmp_path, spec, "host.iommu.firmware")
    assert (c.status, says in c.evidence) == (status, True), c


@pytest.mark.parametrize(("spec", "status", "says", "remedy"), [
    (ht.intel_bare_metal(), Status.PASS, "5 IOMMU groups; IOMMU units dmar0, dmar1", ""),
    (ht.groups_without_units(), Status.WARN, "5 IOMMU groups but /sys/class/iommu is empty", "dpdk-devbind"),
    (ht.units_without_groups(), Status.FAIL, "IOMMU units dmar0, dmar1 but /sys/kernel/iommu_groups has no groups",
     "dmesg"),
    (ht.amd_iommu_off(), Status.FAIL, "has no groups: the kernel runs without an IOMMU",
     "no parameter turns the AMD IOMMU on"),
    (ht.vm_without_viommu(), Status.FAIL, "the kernel runs without an IOMMU", "see host.virt"),
    (ht.vm_without_viommu(iommu_units=("dmar0",)), Status.FAIL, "IOMMU units dmar0 but", "see host.virt"),
])
def test_iommu_kernel_branches(tmp_path, spec, status, says, remedy):
    c = check(tmp_path, spec, "host.iommu.kernel")
    assert c.status == status and says in c.evidence and remedy in c.remedy, c


def test_many_iommu_units_are_summarised(tmp_path):
    c = check(tmp_path, ht.intel_bare_metal(iommu_units=tuple(f"dmar{i}" for i in range(6))), "host.iommu.kernel")
    assert c.evidence.endswith("IOMMU units dmar0, dmar1, dmar2, dmar3 +2")


@pytest.mark.parametrize(("spec", "status", "says"), [
    (ht.intel_bare_metal(cmdline=None), Status.WARN, "/proc/cmdline is not readable"),
    (ht.intel_bare_metal(cmdline="ro intel_iommu=off"), Status.FAIL, "intel_iommu=off on the kernel command line"),
    (ht.intel_bare_metal(cmdline="ro intel_iommu=on iommu=off"), Status.FAIL, "iommu=off on the kernel command line"),
    (ht.intel_bare_metal(cmdline="ro intel_iommu=on,sm_on"), Status.PASS, "intel_iommu=on,sm_on; iommu=pt not set"),
    (ht.intel_bare_metal(cmdline="ro amd_iommu=off"), Status.PASS, "not given, but the kernel turns the Intel IOMMU"),
    (ht.intel_bare_metal(cmdline="ro -- intel_iommu=off"), Status.PASS, "not given"),  # after --: init's, not ours
    (ht.vm_with_viommu(acpi_tables=("VIOT",), cmdline="ro"), Status.PASS, "virtio-iommu (ACPI VIOT) needs no"),
    (ht.vm_without_viommu(), Status.FAIL, "VM without IOMMU groups; no IOMMU parameter"),
    (ht.intel_bare_metal(cmdline="ro", extra_groups=(), npus=()), Status.FAIL, "intel_iommu=on not on the kernel"),
    (ht.intel_bare_metal(cpu_vendor="CentaurHauls", cmdline="ro", extra_groups=(), npus=()), Status.WARN,
     "not on the kernel command line (CentaurHauls)"),
    (ht.vm_without_viommu(cmdline="ro amd_iommu=off"), Status.FAIL, "amd_iommu=off"),  # no vIOMMU model: both count
])
def test_iommu_cmdline_branches(tmp_path, spec, status, says):
    c = check(tmp_path, spec, "host.iommu.cmdline")
    assert c.status == status and says in c.evidence, c


@pytest.mark.parametrize(("spec", "status", "says"), [
    (ht.intel_bare_metal(cpu_flags=False, dmi=None), Status.WARN, "cannot tell bare metal from a VM"),
    (ht.intel_bare_metal(cpu_flags=False), Status.PASS, "bare metal (no CPU flags in /proc/cpuinfo; DMI Dell Inc."),
    (ht.vm_with_viommu(), Status.PASS, "with a vIOMMU: 4 IOMMU groups"),
    (ht.vm_without_viommu(), Status.FAIL, "without a vIOMMU: no IOMMU groups"),
    (ht.intel_bare_metal(cpu_flags=False, dmi=("QEMU", "Standard PC (Q35 + ICH9, 2009)")), Status.PASS,
     "VM (no CPU flags in /proc/cpuinfo; DMI QEMU"),  # DMI alone says VM where cpuinfo has no flags
])
def test_virt_branches(tmp_path, spec, status, says):
    c = check(tmp_path, spec, "host.virt")
    assert c.status == status and says in c.evidence, c


@pytest.mark.parametrize(("spec", "status", "says"), [
    (ht.units_without_groups(), Status.FAIL, "no IOMMU group: 0000:3b:00.0, 0000:5e:00.0"),
    (ht.group_with_bridge_and_host_device(), Status.WARN,
     "0000:3b:00.0 shares group with 0000:3b:00.1 (8086:1572, on i40e)"),
    (ht.group_with_bridge_only(), Status.PASS, "own IOMMU groups (0000:3b:00.0:42, 0000:5e:00.0:43)"),
    # class 0x06 is not "harmless": an ISA/LPC bridge (header type 0) on its host driver blocks the group
    (ht.intel_bare_metal(npus=ht.TWO_NPUS_HOST, others=(ht.PciDev("0000:3b:00.3", 0x8086, 0xA1C1, 0x060100, "42",
                                                                driver="lpc_ich"),)),
     Status.WARN, "0000:3b:00.0 shares group with 0000:3b:00.3 (8086:a1c1, on lpc_ich)"),
    (ht.intel_bare_metal(npus=(ht.Npu("0000:3b:00.0", group="42"), ht.Npu("0000:3b:00.1", 0x1221, group="42"))),
     Status.PASS, "own IOMMU groups"),  # two functions of one card share a group: they go to a VM together
])
def test_npu_iommu_group_branches(tmp_path, spec, status, says):
    c = check(tmp_path, spec, "host.npu.iommu-group")
    assert c.status == status and says in c.evidence, c
    assert "0000:3a:00.0" not in c.evidence  # the bridge is never named



# --- arm64 hosts: IORT / device-tree SMMU, no x86 parameters (host audit) -----------------------------------


def test_arm64_server_passes_without_any_x86_parameter(tmp_path):
    report = run(tmp_path, ht.arm64_server())
    c = by_id(report)
    assert report.summary.ok and all(x.status == Status.PASS for x in report.checks), report.checks
    assert "ACPI IORT table present (aarch64)" in c["host.iommu.firmware"].evidence
    assert "arm64 needs no IOMMU kernel parameter" in c["host.iommu.cmdline"].evidence
    assert not any("intel_iommu" in x.evidence + x.remedy or "amd_iommu" in x.evidence + x.remedy
                   for x in report.checks)


def test_arm64_with_the_smmu_off_blames_firmware_not_the_command_line(tmp_path):
    c = by_id(run(tmp_path, ht.arm64_smmu_off()))
    kernel, cmd = c["host.iommu.kernel"], c["host.iommu.cmdline"]
    assert kernel.status == Status.FAIL and "SMMU" in kernel.remedy and "arm_smmu_v3" in kernel.remedy
    assert "iommu.passthrough=0" in kernel.remedy and "intel_iommu" not in kernel.remedy
    assert cmd.status == Status.WARN and "nothing on the command line explains it" in cmd.evidence
    assert "GRUB" not in cmd.remedy and "SMMU" in cmd.remedy


@pytest.mark.parametrize(("spec", "status", "says", "remedy"), [
    (ht.arm64_server(), Status.PASS, "ACPI IORT table present (aarch64)", ""),
    (ht.arm64_device_tree(), Status.PASS, "the device tree describes an SMMU: iommu@2b400000 (aarch64)", ""),
    (ht.arm64_device_tree(dt_nodes=(("soc/iommu@5000000", "arm,mmu-500", "disabled"),)), Status.WARN,
     "no /sys/firmware/acpi/tables and no SMMU in the device tree", "SMMU"),  # a disabled node is no evidence
    (ht.arm64_server(acpi_tables=("APIC", "DSDT", "FACP", "DMAR")), Status.FAIL, "no IORT ACPI table (aarch64)",
     "enable the SMMU"),  # an x86 table is no evidence on arm64
    (ht.arm64_server(hypervisor=True, dmi=("QEMU", "KVM Virtual Machine"), acpi_tables=("APIC", "VIOT")),
     Status.PASS, "ACPI VIOT table present", ""),
    (ht.arm64_server(dmi=("QEMU", "KVM Virtual Machine"), acpi_tables=("APIC", "DSDT")), Status.FAIL,
     "VM and no IORT/VIOT ACPI table", "see host.virt"),
])
def test_arm64_firmware_branches(tmp_path, spec, status, says, remedy):
    c = check(tmp_path, spec, "host.iommu.firmware")
    assert c.status == status and says in c.evidence and remedy in c.remedy, c


def test_arm64_machine_is_read_from_cpuinfo_on_kernels_without_proc_sys_kernel_arch(tmp_path):
    from rblnctl.preflight.host_facts import gather_host_facts

    k = ht.build_host(tmp_path / "h", ht.arm64_server(arch=None))
    f = gather_host_facts(k.root)
    assert (f.arch, f.platform, f.cpu_vendor) == ("aarch64", "arm64", None)
    k.set_arch("x86_64")  # /proc/sys/kernel/arch wins when present
    assert gather_host_facts(k.root).platform is None


def test_arm64_vm_and_kvm_remedies_are_arm_ones(tmp_path):
    c = by_id(run(tmp_path, ht.arm64_server(dmi=("QEMU", "KVM Virtual Machine"), acpi_tables=("APIC", "DSDT"),
                                            iommu_units=(), extra_groups=(), dev_kvm=False,
                                            npus=(Npu("0000:06:00.0", group=None),))))
    assert c["host.virt"].status == Status.FAIL and "iommu=smmuv3" in c["host.virt"].remedy
    assert "intel-iommu" not in c["host.virt"].remedy
    assert "EL2" in c["host.kvm"].remedy and "kvm_intel" not in c["host.kvm"].remedy
    assert c["host.iommu.cmdline"].status == Status.WARN and "iommu=smmuv3" in c["host.iommu.cmdline"].remedy
    assert "no extra parameter" in c["host.iommu.cmdline"].remedy  # an SMMUv3 / virtio vIOMMU needs none


# --- vfio_iommu_type1 absent where iommufd provides the container (host audit) ------------------------------


@pytest.mark.parametrize(("spec", "status", "says"), [
    (ht.iommufd_container(), Status.WARN, "iommufd loaded: /dev/vfio/vfio exists without vfio_iommu_type1"),
    (ht.iommufd_container(dev_vfio=False), Status.FAIL, "vfio_iommu_type1 missing"),  # no container at all
    (ht.iommufd_container(loaded=("vfio", "vfio_pci", "vfio_pci_core")), Status.FAIL, "vfio_iommu_type1 missing"),
    (ht.iommufd_container(loaded=("vfio", "vfio_pci", "vfio_pci_core"),
                          builtin=("kernel/drivers/iommu/iommufd/iommufd.ko",)),
     Status.WARN, "iommufd built-in: /dev/vfio/vfio exists"),
])
def test_vfio_modules_with_iommufd(tmp_path, spec, status, says):
    c = check(tmp_path, spec, "host.vfio.modules")
    assert c.status == status and says in c.evidence, c


# --- AMD: there is no amd_iommu=on (kernel-parameters.txt) -------------------------------------------------


@pytest.mark.parametrize(("cmdline", "groups", "status", "says", "remedy"), [
    ("ro amd_iommu=on", ("0", "1"), Status.PASS, "amd_iommu=on is not an amd_iommu value", ""),
    ("ro", (), Status.WARN, "nothing on the kernel command line turns the AMD IOMMU off",
     "no parameter turns the AMD IOMMU on"),
    ("ro amd_iommu=on", (), Status.WARN, "amd_iommu=on is not an amd_iommu value", "enable the AMD IOMMU"),
])
def test_amd_cmdline_never_asks_for_amd_iommu_on(tmp_path, cmdline, groups, status, says, remedy):
    spec = ht.amd_iommu_off(cmdline=cmdline, extra_groups=groups, iommu_units=("ivhd0",) if groups else (),
                            npus=())
    c = check(tmp_path, spec, "host.iommu.cmdline")
    assert c.status == status and says in c.evidence and remedy in c.remedy, c
    assert "amd_iommu=on" not in c.remedy


def test_an_npu_the_kernel_still_holds_is_sent_to_the_same_unbind_not_to_recover(tmp_path):
    """A blocked unbind removes the driver link first: `bound to no driver` sent the user to `vfio recover`, which
    refuses the device until the unbind ends. A device lock held past the bounded read (no rblnctl record: another
    tool's unbind) says so, and names the unbind that finishes it once its holder stops; the other NPUs keep theirs."""
    import dataclasses

    from rblnctl.host.pci import OVERRIDE_UNKNOWN
    from rblnctl.preflight.host_checks import check_host, recover_bdfs
    from rblnctl.preflight.host_facts import gather_host_facts
    from tests.preflight.spelt import spelt_check

    npus = (Npu("0000:3b:00.0", driver="vfio-pci", group="42"), Npu("0000:5e:00.0", driver=None, group="43"))
    k = ht.build_host(tmp_path / "host", ht.intel_bare_metal(npus=npus))
    facts = gather_host_facts(k.root)
    held = [dataclasses.replace(fn, driver=None, override_unknown=OVERRIDE_UNKNOWN) if fn.bdf == "0000:3b:00.0"
            else fn for fn in facts.npus]
    facts = dataclasses.replace(facts, npus=held, holders={"0000:3b:00.0": ["pid 5151 (qemu-kvm)"]})
    drv = by_id_list(check_host(facts))["host.npu.driver"]
    assert drv.status == Status.WARN and recover_bdfs(drv) == ["0000:5e:00.0"]
    said = spelt_check(drv)
    assert f"0000:3b:00.0 CA22 PF {OVERRIDE_UNKNOWN}" in said.evidence and "0000:5e:00.0 CA22 PF bound to no driver" \
        in said.evidence
    assert "stop what holds it (0000:3b:00.0: pid 5151 (qemu-kvm)), then run the same command again: " \
        "`rblnctl vfio unbind 0000:3b:00.0`" in said.remedy, said.remedy
    assert "`rblnctl vfio recover 0000:5e:00.0 --mode container`" in said.remedy, said.remedy
    assert "recover 0000:3b:00.0" not in said.remedy and "vfio bind 0000:3b:00.0" not in said.remedy


def by_id_list(checks) -> dict:
    return {c.id: c for c in checks}


def test_a_pending_unbind_a_recover_left_is_finished_by_that_recover_not_an_unbind(tmp_path):
    """The unbind that waits in the kernel may be a recover's (or a bind's): its record keeps the command, and the
    remedy names that command again (an unbind would send the NPU back to its host driver instead)."""
    import dataclasses

    from rblnctl.host.vfio.state import PendingUnbind
    from rblnctl.preflight.host_checks import check_host
    from rblnctl.preflight.host_facts import gather_host_facts
    from tests.preflight.spelt import spelt_check

    npus = (Npu("0000:3b:00.0", driver=None, group="42"),)
    k = ht.build_host(tmp_path / "host", ht.intel_bare_metal(npus=npus))
    facts = gather_host_facts(k.root)
    rec = PendingUnbind(bdf="0000:3b:00.0", pid=4242, start=1, since="2026-12-07T04:00:00Z", holders="pid 5151 (qemu)",
                        command=("recover", "--mode", "vm"))
    held = [dataclasses.replace(fn, override_unknown=rec.text) for fn in facts.npus]
    facts = dataclasses.replace(facts, npus=held, pending={"0000:3b:00.0": rec})
    said = spelt_check(by_id_list(check_host(facts))["host.npu.driver"])
    assert "then run the same command again: `rblnctl vfio recover 0000:3b:00.0 --mode vm`" in said.remedy, said.remedy
    assert "vfio unbind" not in said.remedy


def test_hosts_never_picks_a_pending_npus_recover_as_the_nodes_re_probe(tmp_path):
    """A pending unbind a `recover --mode container` left beside a driverless NPU: the record's command is spelt with
    its flag as an option, and `--hosts` (recover_bdfs, with_node_mode) re-probes the driverless NPU only, never the
    pending one (recover refuses it until its unbind ends), from the Remedy and from another rblnctl's spelt text."""
    import dataclasses

    from rblnctl.host.vfio.state import PendingUnbind
    from rblnctl.preflight.host_checks import check_host, recover_bdfs
    from rblnctl.preflight.host_facts import gather_host_facts
    from rblnctl.preflight.hosts import with_node_mode
    from tests.preflight.spelt import spelt_check

    npus = (Npu("0000:3b:00.0", driver=None, group="42"), Npu("0000:5e:00.0", driver=None, group="43"))
    k = ht.build_host(tmp_path / "host", ht.intel_bare_metal(npus=npus))
    facts = gather_host_facts(k.root)
    rec = PendingUnbind(bdf="0000:3b:00.0", pid=4242, start=1, since="2026-12-07T04:00:00Z", holders="pid 5151 (qemu)",
                        command=("recover", "--mode", "container"))
    held = [dataclasses.replace(fn, override_unknown=rec.text) if fn.bdf == "0000:3b:00.0" else fn for fn in facts.npus]
    facts = dataclasses.replace(facts, npus=held, pending={"0000:3b:00.0": rec})
    drv = by_id_list(check_host(facts))["host.npu.driver"]
    assert recover_bdfs(drv) == ["0000:5e:00.0"]
    said = spelt_check(drv)
    assert "`rblnctl vfio recover 0000:3b:00.0 --mode container`" in said.remedy, said.remedy
    assert recover_bdfs(said) == ["0000:5e:00.0"]
    node = with_node_mode(drv, "vm-passthrough")
    assert node.remedy.command.words == ("vfio", "recover", "0000:5e:00.0")
    assert node.remedy.command.option_map["mode"] == "vm"
