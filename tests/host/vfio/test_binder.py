"""rblnctl.host.vfio.binder: VfioBinder on a simulated kernel; assertions are on the resulting tree, not only writes."""

from __future__ import annotations

import errno
import json
import os

import pytest

from rblnctl.errors import ConfigError, HostError, InvalidInput, NotFound, Refused
from rblnctl.host.vfio import VfioBinder, vfio_status
from rblnctl.host.vfio.writer import WriteStillBlocked
from tests.fakes.clock import FakeClock
from tests.fakes.sysfs import SimKernel, npu_node
from tests.host.vfio.common import A, B, C3, D, blocker_texts, make, on_host_driver, refused, state


def test_bind_one_device_writes_in_order_and_verifies(tmp_path):
    k = npu_node(tmp_path, 1)
    b = make(k)
    out = b.apply(b.plan("bind", [A]))
    assert out.ok and [(r.status, r.from_driver, r.to_driver) for r in out.results] == [("ok", "rebellions",
                                                                                          "vfio-pci")]
    assert [w for w in k.writes] == [
        (f"sys/bus/pci/devices/{A}/driver_override", "vfio-pci"),
        ("sys/bus/pci/drivers/rebellions/unbind", A),
        ("sys/bus/pci/drivers_probe", A),
    ]
    assert k.driver_of(A) == "vfio-pci" and k.override_of(A) == "vfio-pci"
    assert k.vfio_node(20).exists() and not (k.dev / "rbln0").exists()
    assert state(k)[A]["driver"] == "rebellions" and state(k)[A]["driver_override"] is None
    assert state(k)[A]["recorded_at"] == "2026-12-02T12:00:00Z"  # the injected clock's wall time

def test_bind_several_devices_short_bdfs_and_duplicates(tmp_path):
    k = npu_node(tmp_path, 4)
    b = make(k)
    plan = b.plan("bind", ["3b:00.0", A, "0000:3C:00.0", C3, D])
    assert [d.bdf for d in plan.devices] == [A, B, C3, D]
    out = b.apply(plan)
    assert out.ok and all(k.driver_of(x) == "vfio-pci" for x in (A, B, C3, D))
    assert sorted(state(k)) == [A, B, C3, D]

def test_bind_all_takes_only_rbln_npus(tmp_path):
    k = npu_node(tmp_path, 2)
    k.add_pci_function("0000:00:1f.3", vendor=0x8086, device=0xA348, class_code=0x040300, driver="snd_hda_intel")
    b = make(k)
    assert [d.bdf for d in b.plan("bind", all_devices=True).devices] == [A, B]

def test_already_bound_is_skipped_with_a_note_and_no_write(tmp_path):
    k = npu_node(tmp_path, 2)
    b = make(k)
    b.apply(b.plan("bind", [A]))
    k.writes.clear()
    before = state(k)
    out = make(k).apply(make(k).plan("bind", [A, B]))
    assert [(r.bdf, r.status) for r in out.results] == [(A, "skipped"), (B, "ok")]
    assert "already bound to vfio-pci" in out.results[0].message
    assert all(bdf == B or B in path for path, bdf in k.writes)
    assert state(k)[A] == before[A]

def test_nothing_to_do_writes_nothing_and_needs_no_root(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    sum_before = k.checksum()
    b = make(k, is_root=lambda: False)
    plan = b.plan("bind", [A])
    assert not plan.blockers
    assert [r.status for r in b.apply(plan).results] == ["skipped"] and k.checksum() == sum_before

def test_half_bound_device_is_finished_and_keeps_the_earlier_record(tmp_path):
    k = npu_node(tmp_path, 1)
    b = make(k)
    b.apply(b.plan("bind", [A]))
    # what a crashed run leaves: override set, no driver
    k.handle_write(k.sys / "bus/pci/drivers/vfio-pci/unbind", A)
    plan = make(k).plan("bind", [A])
    assert plan.devices[0].note.startswith("half-bound")
    assert make(k).apply(plan).ok and k.driver_of(A) == "vfio-pci"
    assert state(k)[A]["driver"] == "rebellions"

@pytest.mark.parametrize("bad", ["../../../etc/passwd", f"{A}/../../..", "3b:00.*", "*", f"{A} ", "3b:00.0\n",
                                 "0000:3b:00.8", "3b:00", ""])
def test_bad_bdfs_are_rejected_before_any_path_is_built(tmp_path, bad):
    k = npu_node(tmp_path, 1)
    before = k.checksum()
    with pytest.raises(InvalidInput, match="invalid PCI address"):
        make(k).plan("bind", [A, bad])
    assert k.checksum() == before

def test_missing_device_is_not_found_and_arguments_are_required(tmp_path):
    k = npu_node(tmp_path, 1)
    with pytest.raises(NotFound, match="0000:99:00.0"):
        make(k).plan("bind", ["99:00.0"])
    with pytest.raises(InvalidInput):
        make(k).plan("bind", [])
    with pytest.raises(ConfigError):
        make(k).plan("bind", [A], all_devices=True)
    with pytest.raises(NotFound):
        make(SimKernel(tmp_path / "empty")).plan("bind", all_devices=True)

def test_non_rbln_function_needs_force(tmp_path):
    k = npu_node(tmp_path, 0)
    k.add_pci_function("0000:01:00.0", vendor=0x10DE, device=0x2330, class_code=0x030200, driver="nvidia",
                       iommu_group=30)
    plan = make(k).plan("bind", ["01:00.0"])
    assert [(b.message.split(" (")[0], b.override, b.bdfs) for b in plan.blockers] == [
        ("0000:01:00.0", "force", ("0000:01:00.0",))]
    assert "is not an RBLN NPU" in str(plan.blockers[0]) and "--" not in str(plan.blockers[0])
    forced = make(k, force=True)
    plan = forced.plan("bind", ["01:00.0"])
    assert not plan.blockers and any("not an RBLN NPU" in w for w in plan.warnings)
    assert forced.apply(plan).ok and k.driver_of("0000:01:00.0") == "vfio-pci"

def test_not_root_is_refused(tmp_path):
    k = npu_node(tmp_path, 1)
    refused(make(k, is_root=lambda: False), k, [A], "needs root")

def test_not_root_through_the_real_geteuid_seam(tmp_path, mocker):
    mocker.patch("os.geteuid", return_value=1000)
    k = npu_node(tmp_path, 1)
    b = VfioBinder(root=k.root, state_file=k.root / "s.json", writer=k.writer)
    refused(b, k, [A], "needs root")

def test_no_iommu_is_refused(tmp_path):
    k = npu_node(tmp_path, 2)
    k.set_iommu(False)
    err = refused(make(k), k, [A, B], "IOMMU is off")
    text = " ".join(blocker_texts(err))
    assert "`intel_iommu=on`" in text and "SMMU" in text and "amd_iommu=on" not in text  # no such AMD value

def test_device_without_a_group_is_refused(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_pci_function(B, iommu_group=None)
    refused(make(k), k, [A, B], f"{B} has no IOMMU group")

def test_vfio_pci_missing_is_refused_without_load_modules(tmp_path):
    k = npu_node(tmp_path, 1)
    k.unload_module("vfio_pci")
    err = refused(make(k), k, [A], "vfio-pci is not loaded")
    assert [b.override for b in err.blockers] == ["load_modules"]

def test_load_modules_runs_the_loader_then_binds(tmp_path):
    k = npu_node(tmp_path, 1)
    k.unload_module("vfio_pci")
    loaded = []
    b = make(k, load_modules=True, load_module=lambda m: (loaded.append(m), k.modprobe(m)))
    plan = b.plan("bind", [A])
    assert plan.load_modules == ("vfio-pci",) and not plan.blockers
    assert b.apply(plan).ok and loaded == ["vfio-pci"] and k.driver_of(A) == "vfio-pci"

def test_missing_module_fails_before_any_sysfs_write(tmp_path):
    k = npu_node(tmp_path, 1)
    k.unload_module("vfio_pci")
    k.missing_modules.add("vfio-pci")
    b = make(k, load_modules=True, load_module=k.modprobe)
    with pytest.raises(HostError, match="not found"):
        b.apply(b.plan("bind", [A]))
    assert k.writes == [] and on_host_driver(k, A) and not (k.root / "state.json").exists()

def test_load_modules_against_a_tree_never_runs_the_hosts_modprobe(tmp_path):
    k = npu_node(tmp_path, 1)
    k.unload_module("vfio_pci")
    refused(make(k, load_modules=True), k, [A], "changes the running kernel")

def test_device_held_open_is_refused_naming_pid_and_command(tmp_path):
    k = npu_node(tmp_path, 2)
    k.add_process(4242, "rbln-smi", ["/dev/rbln1"], cmdline=["rbln-smi", "-w"])
    err = refused(make(k), k, [A, B], "pid 4242 (rbln-smi -w) has /dev/rbln1 open")
    assert all(B in x for x in blocker_texts(err))  # A is free; only B is named
    assert [(b.bdfs, b.override) for b in err.blockers] == [((B,), "force")]

def test_open_sysfs_file_of_the_device_counts_as_held(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_process(99, "dpdk-app", [f"/sys/devices/pci0000:00/{A}/resource0"])
    refused(make(k), k, [A], "pid 99 (dpdk-app)")

def test_open_rbln_node_nobody_claims_is_refused(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_process(7, "mystery", ["/dev/rbln9"])
    refused(make(k), k, [A], "cannot tell which PCI function")

def test_force_binds_a_held_device_with_a_warning(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_process(4242, "rbln-smi", ["/dev/rbln0"])
    b = make(k, force=True)
    plan = b.plan("bind", [A])
    assert not plan.blockers and any("pid 4242" in w and "forced" in w for w in plan.warnings)
    assert b.apply(plan).ok

def test_non_viable_group_is_refused_listing_members(tmp_path):
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_pci_function(A, iommu_group=7)
    k.add_pci_function("0000:3b:00.1", device=0x1221, iommu_group=7)
    err = refused(make(k), k, [A], "IOMMU group 7")
    text = " ".join(blocker_texts(err))
    assert "0000:3b:00.1 (1eff:1221) on rebellions" in text
    assert f"bind the whole group together ({A} 0000:3b:00.1)" in text
    assert [(b.bdfs, b.override) for b in err.blockers] == [((A,), None)]  # only naming the members helps

def test_naming_the_whole_group_binds_it(tmp_path):
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_pci_function(A, iommu_group=7)
    k.add_pci_function("0000:3b:00.1", device=0x1221, iommu_group=7)
    b = make(k)
    assert b.apply(b.plan("bind", [A, "0000:3b:00.1"])).ok
    assert k.driver_of("0000:3b:00.1") == "vfio-pci" and k.vfio_node(7).exists()

def test_bridges_driverless_and_vfio_members_keep_a_group_viable(tmp_path):
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_pci_function("0000:3a:00.0", vendor=0x10B5, device=0x8747, class_code=0x060400, driver="pcieport",
                       iommu_group=7)
    k.add_pci_function(A, iommu_group=7)
    k.add_pci_function("0000:3b:00.1", vendor=0x1EFF, device=0x1221, driver=None, iommu_group=7)
    k.add_pci_function("0000:3b:00.2", vendor=0x1EFF, device=0x1221, driver="vfio-pci", iommu_group=7)
    b = make(k)
    plan = b.plan("bind", [A])
    assert not plan.blockers
    assert b.apply(plan).ok

def test_group_viability_follows_the_kernel_rule_not_the_class_code(tmp_path):
    """pci-stub and vfio variant drivers keep a group viable; an ISA/LPC bridge (class 0x0601, header type 0) on
    its host driver does not, and neither does a PCI-to-PCI bridge (header type 1) on a driver other than
    pcieport (drivers/vfio/group.c + drivers/iommu/iommu.c: DMA ownership, Linux >= 5.19)."""
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_pci_function(A, iommu_group=7)
    k.add_pci_function("0000:3b:00.1", vendor=0x8086, device=0x1572, class_code=0x020000, driver="pci-stub",
                       iommu_group=7)
    k.add_pci_function("0000:3b:00.2", vendor=0x15B3, device=0x101E, class_code=0x020000, driver="mlx5_vfio_pci",
                       iommu_group=7)
    assert not make(k).plan("bind", [A]).blockers
    k.add_pci_function("0000:3b:00.3", vendor=0x8086, device=0xA1C1, class_code=0x060100, driver="lpc_ich",
                       iommu_group=7)
    k.add_pci_function("0000:3a:00.0", vendor=0x10B5, device=0x8747, class_code=0x060400, driver="shpchp",
                       iommu_group=7)
    err = refused(make(k), k, [A], "IOMMU group 7")
    text = " ".join(blocker_texts(err))
    assert "0000:3b:00.3 (8086:a1c1) on lpc_ich" in text
    assert "0000:3a:00.0 (10b5:8747) PCI bridge on shpchp, which uses the kernel DMA API" in text
    assert "0000:3b:00.1" not in text and "0000:3b:00.2" not in text

def test_failure_mid_way_rolls_everything_back(tmp_path):
    k = npu_node(tmp_path, 4)
    k.refuse_probe("vfio-pci", C3)  # vfio-pci's probe of the third device fails
    b = make(k)
    out = b.apply(b.plan("bind", all_devices=True))
    assert not out.ok
    assert [r.status for r in out.results] == ["rolled-back", "rolled-back", "failed", "not-attempted"]
    assert "driver is none after the probe" in out.results[2].message
    assert "restored to rebellions" in out.results[2].message
    for x in (A, B, C3, D):
        assert on_host_driver(k, x), x
    assert not any((k.dev / "vfio" / g).exists() for g in ("20", "21", "22", "23"))
    assert all((k.dev / f"rbln{i}").exists() for i in range(4))
    assert state(k) == {}
    assert not any(D in v for _, v in k.writes)  # never touched

def test_ebusy_on_unbind_rolls_back_the_override(tmp_path):
    k = npu_node(tmp_path, 2)
    k.inject("unbind", B, errno.EBUSY)
    b = make(k)
    out = b.apply(b.plan("bind", [A, B]))
    assert [r.status for r in out.results] == ["rolled-back", "failed"]
    assert "Device or resource busy" in out.results[1].message
    assert on_host_driver(k, A) and on_host_driver(k, B)

def test_keep_going_keeps_what_bound(tmp_path):
    k = npu_node(tmp_path, 4)
    k.refuse_probe("vfio-pci", C3)
    b = make(k, keep_going=True)
    out = b.apply(b.plan("bind", all_devices=True))
    assert [r.status for r in out.results] == ["ok", "ok", "failed", "ok"] and not out.ok
    assert [k.driver_of(x) for x in (A, B, C3, D)] == ["vfio-pci", "vfio-pci", "rebellions", "vfio-pci"]
    assert sorted(state(k)) == [A, B, D]

def test_keep_going_rolls_back_the_failed_devices_group_mates(tmp_path):
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_pci_function(A, iommu_group=7)
    k.add_pci_function("0000:3b:00.1", device=0x1221, iommu_group=7)
    k.add_pci_function("0000:3b:00.2", device=0x1221, iommu_group=7)
    k.add_pci_function(B, iommu_group=8)
    k.refuse_probe("vfio-pci", "0000:3b:00.1")
    b = make(k, keep_going=True)
    out = b.apply(b.plan("bind", [A, "0000:3b:00.1", "0000:3b:00.2", B]))
    assert [r.status for r in out.results] == ["rolled-back", "failed", "not-attempted", "ok"]
    assert on_host_driver(k, A) and on_host_driver(k, "0000:3b:00.2") and not k.vfio_node(7).exists()
    assert k.driver_of(B) == "vfio-pci" and sorted(state(k)) == [B]

def test_failed_rollback_says_driverless_and_keeps_the_record(tmp_path):
    k = npu_node(tmp_path, 1)
    k.refuse_probe("vfio-pci", A)
    k.refuse_probe("rebellions", A)  # ... and the host driver will not take it back either
    b = make(k)
    out = b.apply(b.plan("bind", [A]))
    r = out.results[0]
    assert r.status == "driverless" and "NO driver" in r.message
    assert "unbind it naming rebellions as the host driver" in r.message and "--" not in r.message
    assert k.driver_of(A) is None and state(k)[A]["driver"] == "rebellions"
    # once the host driver works again, unbind restores the recorded driver
    k.allow_probe("rebellions", A)
    b2 = make(k)
    out = b2.apply(b2.plan("unbind", all_devices=True))  # --all finds it through its record
    assert out.ok and on_host_driver(k, A) and state(k) == {}

def test_half_bound_device_that_fails_again_keeps_its_record(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    k.handle_write(k.sys / "bus/pci/drivers/vfio-pci/unbind", A)  # left half-bound
    k.refuse_probe("vfio-pci", A)
    out = make(k).apply(make(k).plan("bind", [A]))
    assert out.results[0].status == "failed" and k.driver_of(A) is None
    assert state(k)[A]["driver"] == "rebellions"

def test_missing_vfio_node_fails_verification_and_rolls_back(tmp_path):
    k = npu_node(tmp_path, 1)
    k.vfio_nodes = False
    clock = FakeClock()
    b = make(k, clock=clock)
    out = b.apply(b.plan("bind", [A]))
    assert out.results[0].status == "failed" and "did not appear within 5 s" in out.results[0].message
    assert on_host_driver(k, A)
    assert sum(clock.sleeps) == pytest.approx(5.0, abs=0.05) and set(clock.sleeps) == {0.02}  # waited on the clock

def test_bind_waits_for_udev_to_create_the_vfio_node(tmp_path):
    k = npu_node(tmp_path, 1)
    k.vfio_nodes = False  # the bind creates no node; "udev" does, a few polls later

    class Udev(FakeClock):
        def sleep(self, seconds, stop=None):
            if len(self.sleeps) == 3:
                k.vfio_node(20).touch()
            return super().sleep(seconds, stop)

    clock = Udev()
    b = make(k, clock=clock)
    out = b.apply(b.plan("bind", [A]))
    assert out.ok and k.driver_of(A) == "vfio-pci" and len(clock.sleeps) == 4

def test_driver_changed_since_the_plan_is_not_touched(tmp_path):
    k = npu_node(tmp_path, 1)
    b = make(k)
    plan = b.plan("bind", [A])
    k.handle_write(k.sys / "bus/pci/drivers/rebellions/unbind", A)  # someone else acts in between
    k.writes.clear()
    out = b.apply(plan)
    assert out.results[0].status == "failed" and "changed since the plan" in out.results[0].message
    assert k.writes == [] and k.driver_of(A) is None

def test_ctrl_c_between_unbind_and_probe_restores_before_it_propagates(tmp_path):
    k = npu_node(tmp_path, 3)

    class InterruptedWriter:  # the user presses Ctrl-C while B has no driver
        def write(self, path, value, bound_s=None):
            if value == B and path.name == "drivers_probe":
                raise KeyboardInterrupt
            k.writer.write(path, value, bound_s=bound_s)

    events = []
    b = make(k, writer=InterruptedWriter(), on_event=events.append)
    with pytest.raises(KeyboardInterrupt):
        b.apply(b.plan("bind", [A, B, C3]))
    assert all(on_host_driver(k, x) for x in (A, B, C3))
    assert state(k) == {} and any("interrupted" in e for e in events)

def test_events_report_rollbacks(tmp_path):
    k = npu_node(tmp_path, 2)
    k.refuse_probe("vfio-pci", B)
    events, writes = [], []
    b = make(k, on_event=events.append, on_write=writes.append)
    b.apply(b.plan("bind", [A, B]))
    assert any("rolling back" in e for e in events)
    assert any(w.why.startswith("rollback:") for w in writes)

def test_plan_writes_nothing_and_lists_exactly_what_run_writes(tmp_path):
    k = npu_node(tmp_path, 3)
    (k.root / "state.json").write_text(json.dumps({"version": 1, "devices": {}}))
    b = make(k)
    before = k.checksum()
    plan = b.plan("bind", all_devices=True)
    assert k.checksum() == before and k.writes == []
    planned = [(os.path.relpath(w.path, k.root), w.value) for w in plan.writes]
    assert len(planned) == 9
    assert b.apply(plan).ok
    assert k.writes == planned
    assert [r.status for r in plan.preview()] == ["planned"] * 3

def test_unbind_plan_writes_nothing(tmp_path):
    k = npu_node(tmp_path, 2)
    make(k).apply(make(k).plan("bind", all_devices=True))
    before = k.checksum()
    plan = make(k).plan("unbind", all_devices=True)
    assert len(plan.changes) == 2 and k.checksum() == before

def test_unbind_restores_the_recorded_driver_not_the_probe_default(tmp_path):
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_driver("rebellions")  # registered first: drivers_probe would pick it
    k.add_driver("rbln-legacy", claims=((0x1EFF, None),))
    k.add_pci_function(A, driver="rbln-legacy", iommu_group=5)
    make(k).apply(make(k).plan("bind", [A]))
    assert state(k)[A]["driver"] == "rbln-legacy"
    k.writes.clear()
    out = make(k).apply(make(k).plan("unbind", [A]))
    assert out.ok and out.results[0].to_driver == "rbln-legacy"
    assert k.driver_of(A) == "rbln-legacy" and k.override_of(A) is None
    assert k.writes == [(f"sys/bus/pci/devices/{A}/driver_override", "\n"),
                        ("sys/bus/pci/drivers/vfio-pci/unbind", A),
                        ("sys/bus/pci/drivers/rbln-legacy/bind", A)]
    assert not k.vfio_node(5).exists() and state(k) == {}

def test_unbind_with_driver_overrides_the_record(tmp_path):
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_driver("rebellions")
    k.add_driver("rbln-legacy", claims=((0x1EFF, None),))
    k.add_pci_function(A, driver="rbln-legacy", iommu_group=5)
    make(k).apply(make(k).plan("bind", [A]))
    out = make(k).apply(make(k).plan("unbind", [A], driver="rebellions"))
    assert out.ok and k.driver_of(A) == "rebellions"

def test_unbind_ignores_a_record_made_for_another_device(tmp_path):
    """A card swapped at the same address (or a state file from another host) must not choose the driver."""
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_driver("rebellions")
    k.add_driver("rbln-legacy", claims=((0x1EFF, None),))
    k.add_pci_function(A, driver="rbln-legacy", iommu_group=5)
    make(k).apply(make(k).plan("bind", [A]))
    doc = json.loads((k.root / "state.json").read_text())
    doc["devices"][A]["ids"] = "1eff:2030"  # recorded for a CR03, but a CA22 sits at A now
    (k.root / "state.json").write_text(json.dumps(doc))
    plan = make(k).plan("unbind", [A])
    assert plan.devices[0].to_driver is None and "kernel default" in plan.devices[0].note
    assert any("recorded device 1eff:2030" in w and "1eff:1220" in w for w in plan.warnings)
    assert make(k).apply(plan).ok and k.driver_of(A) == "rebellions"  # the kernel's pick, not the stale record's

def test_unbind_without_a_record_uses_the_kernel_default(tmp_path):
    k = npu_node(tmp_path, 0)
    k.add_driver("rebellions")
    k.add_pci_function(A, driver="vfio-pci", iommu_group=5)  # bound by someone else: no record
    k.handle_write(k.sys / f"bus/pci/devices/{A}/driver_override", "vfio-pci")
    k.writes.clear()
    b = make(k)
    plan = b.plan("unbind", [A])
    assert plan.devices[0].to_driver is None and "kernel default" in plan.devices[0].note
    assert b.apply(plan).ok
    assert k.writes == [(f"sys/bus/pci/devices/{A}/driver_override", "\n"),
                        ("sys/bus/pci/drivers/vfio-pci/unbind", A),
                        ("sys/bus/pci/drivers_probe", A)]
    assert on_host_driver(k, A)

def test_unbind_kernel_default_with_no_taker_says_so(tmp_path):
    k = npu_node(tmp_path, 0)
    k.add_pci_function(A, driver="vfio-pci", iommu_group=5)
    events = []
    out = make(k, on_event=events.append).apply(make(k).plan("unbind", [A]))
    assert out.results[0].status == "ok" and "no driver" in out.results[0].message
    assert any("no driver" in e for e in events) and k.driver_of(A) is None

def test_unbind_skips_devices_not_on_vfio(tmp_path):
    k = npu_node(tmp_path, 1)
    out = make(k).apply(make(k).plan("unbind", [A]))
    assert out.results[0].status == "skipped" and k.writes == []
    assert make(k).plan("unbind", all_devices=True).devices == ()

def test_unbind_refuses_when_target_driver_is_not_loaded(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    plan = make(k).plan("unbind", [A], driver="nvme")
    assert any("driver nvme is not loaded" in x for x in blocker_texts(plan))
    with pytest.raises(InvalidInput):
        make(k).plan("unbind", [A], driver="../vfio-pci")
    with pytest.raises(InvalidInput):
        make(k).plan("unbind", [A], driver="vfio-pci")

def test_unbind_refuses_a_group_in_use_by_a_vm(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    k.add_process(3100, "qemu-kvm", ["/dev/vfio/20"])
    plan = make(k).plan("unbind", [A])
    assert any("pid 3100 (qemu-kvm) has /dev/vfio/20 open" in x for x in blocker_texts(plan))
    plan = make(k, force=True).plan("unbind", [A])
    assert not plan.blockers and any("may block" in w for w in plan.warnings)

def test_unbind_failure_rolls_back_to_vfio(tmp_path):
    k = npu_node(tmp_path, 2)
    make(k).apply(make(k).plan("bind", [A, B]))
    k.refuse_probe("rebellions", B)
    out = make(k).apply(make(k).plan("unbind", [A, B]))
    assert [r.status for r in out.results] == ["rolled-back", "failed"]
    assert k.driver_of(A) == k.driver_of(B) == "vfio-pci"
    assert k.override_of(A) == "vfio-pci" and sorted(state(k)) == [A, B]

def test_warns_when_the_operators_vfio_manager_manages_the_node(tmp_path):
    k = npu_node(tmp_path, 1)
    assert make(k).plan("bind", [A]).warnings == ()
    (k.run / "rbln" / "validations").mkdir(parents=True)
    (k.run / "rbln" / "validations" / "vfio-pci-ready").touch()
    assert any("VFIO Manager" in w and "vfio-pci-ready" in w for w in make(k).plan("bind", [A]).warnings)

def test_warns_on_a_running_vfio_manage_process(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_process(812, "vfio-manage.sh", cmdline=["/bin/bash", "/usr/bin/vfio-manage.sh", "bind", "--all"])
    w = make(k).plan("unbind", [A]).warnings
    assert any("VFIO Manager" in x and "process 812" in x for x in w)

def test_damaged_state_file_blocks_bind(tmp_path):
    k = npu_node(tmp_path, 1)
    (k.root / "state.json").write_text("{not json")
    refused(make(k), k, [A], "damaged")

def test_unbind_bind_refused_with_einval_falls_back_to_probe_on_rollback(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    k.inject("bind", A, errno.EINVAL)  # every drivers/*/bind write for A fails
    out = make(k).apply(make(k).plan("unbind", [A]))
    r = out.results[0]
    assert r.status == "failed" and "Invalid argument" in r.message and "restored to vfio-pci" in r.message
    assert k.driver_of(A) == "vfio-pci" and k.override_of(A) == "vfio-pci"
    assert k.writes[-1] == ("sys/bus/pci/drivers_probe", A)  # the rollback's fallback

def test_device_removed_between_plan_and_run_fails_and_rolls_back_the_others(tmp_path):
    k = npu_node(tmp_path, 3)
    b = make(k)
    plan = b.plan("bind", [A, B, C3])
    k.remove_pci_function(B)  # hot-unplugged (or `echo 1 > remove`) after the plan
    out = b.apply(plan)
    assert [(r.bdf, r.status) for r in out.results] == [(A, "rolled-back"), (B, "failed"), (C3, "not-attempted")]
    assert "no longer exists" in out.results[1].message
    assert on_host_driver(k, A) and on_host_driver(k, C3)
    assert B not in state(k)

def test_device_removed_between_plan_and_run_with_keep_going(tmp_path):
    k = npu_node(tmp_path, 3)
    b = make(k, keep_going=True)
    plan = b.plan("bind", [A, B, C3])
    k.remove_pci_function(B)
    out = b.apply(plan)
    assert [(r.bdf, r.status) for r in out.results] == [(A, "ok"), (B, "failed"), (C3, "ok")]
    assert k.driver_of(A) == k.driver_of(C3) == "vfio-pci" and sorted(state(k)) == [A, C3]

def test_device_removed_mid_write_is_reported_not_raised(tmp_path):
    k = npu_node(tmp_path, 2)

    class UnplugOnProbe:  # the device goes away right after its unbind
        def write(self, path, value, bound_s=None):
            if value == B and path.name == "drivers_probe":
                k.remove_pci_function(B)
            k.writer.write(path, value, bound_s=bound_s)

    b = make(k, writer=UnplugOnProbe())
    out = b.apply(b.plan("bind", [A, B]))
    assert [(r.bdf, r.status) for r in out.results] == [(A, "rolled-back"), (B, "failed")]
    assert "no longer exists" in out.results[1].message and on_host_driver(k, A)

def test_unbind_with_driver_and_a_damaged_state_file_runs_and_keeps_the_file(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    (k.root / "state.json").write_text("{not json")
    b = make(k)
    plan = b.plan("unbind", [A], driver="rebellions")
    assert not plan.blockers and any("damaged" in w for w in plan.warnings)
    assert b.apply(plan).ok and on_host_driver(k, A)
    assert (k.root / "state.json").read_text() == "{not json"  # never overwritten: a person should look at it

def test_unusable_state_dir_refuses_the_run_before_any_sysfs_write(tmp_path):
    k = npu_node(tmp_path, 1)
    (k.root / "var").write_text("not a directory")
    b = VfioBinder(root=k.root, state_file=k.root / "var" / "s.json", writer=k.writer, is_root=lambda: True,
                   clock=FakeClock())
    plan = b.plan("bind", [A])
    with pytest.raises(Refused) as exc:
        b.apply(plan)
    assert any("state file" in x and "Not a directory" in x for x in blocker_texts(exc.value)), exc.value.blockers
    assert k.writes == [] and on_host_driver(k, A)

def test_vfio_pci_still_missing_after_loading_the_module_changes_nothing(tmp_path):
    k = npu_node(tmp_path, 1)
    k.unload_module("vfio_pci")
    loaded = []
    b = make(k, load_modules=True, load_module=loaded.append)  # "loads", but the driver never registers
    plan = b.plan("bind", [A])
    assert not plan.blockers
    with pytest.raises(HostError, match="vfio-pci is not registered .*nothing was changed"):
        b.apply(plan)
    assert loaded == ["vfio-pci"] and k.writes == [] and on_host_driver(k, A)
    assert not (k.root / "state.json").exists()

def test_binary_state_file_blocks_bind_with_one_blocker(tmp_path):
    k = npu_node(tmp_path, 1)
    (k.root / "state.json").write_bytes(os.urandom(64) + b"\xff")
    err = refused(make(k), k, [A], "is damaged (not UTF-8 text")
    assert len(err.blockers) == 1

@pytest.mark.parametrize("make_root", ["missing", "file", "proc-file", "empty"])
def test_root_that_is_not_a_host_tree_is_bad_input(tmp_path, make_root):
    root = tmp_path / "root"
    if make_root == "file":
        root.write_text("x")
    elif make_root == "proc-file":
        (root / "sys").mkdir(parents=True)
        (root / "proc").write_text("x")
    elif make_root == "empty":
        root.mkdir()
    with pytest.raises(InvalidInput, match="host root"):
        VfioBinder(root=root).plan("bind", [A])
    with pytest.raises(InvalidInput, match="host root"):
        vfio_status(root=root)

def test_unknown_operation_and_misplaced_arguments(tmp_path):
    k = npu_node(tmp_path, 1)
    with pytest.raises(InvalidInput, match="unknown vfio operation 'rebind'"):
        make(k).plan("rebind", [A])
    with pytest.raises(ConfigError, match="target driver applies to unbind"):
        make(k).plan("bind", [A], driver="rebellions")

@pytest.mark.parametrize("signum", [15, 1])  # SIGTERM (timeout, systemd), SIGHUP (a dropped ssh session)
def test_signal_between_unbind_and_probe_restores_the_device_and_the_records(tmp_path, signum):
    from rblnctl.errors import Interrupted

    k = npu_node(tmp_path, 3)
    (k.root / "state.json").write_text(json.dumps({"version": 1, "devices": {}}))

    class SignalledWriter:  # the signal arrives while B has been unbound and not yet probed
        def write(self, path, value, bound_s=None):
            if value == B and path.name == "drivers_probe":
                raise Interrupted(signum)
            k.writer.write(path, value, bound_s=bound_s)

    events = []
    b = make(k, writer=SignalledWriter(), on_event=events.append)
    with pytest.raises(Interrupted) as exc:
        b.apply(b.plan("bind", [A, B, C3]))
    assert exc.value.signum == signum  # the same exception goes on to the CLI (exit 128 + signum)
    assert all(on_host_driver(k, x) for x in (A, B, C3))  # A was bound and is back; B never left for long
    assert not any(k.vfio_node(g).exists() for g in (20, 21, 22))
    assert state(k) == {}  # the records written before the first write are settled: nothing left to restore
    assert any("interrupted: restoring the 2 device(s)" in e for e in events)
    assert not any(C3 in v for _, v in k.writes)  # never reached

def test_preview_marks_the_held_device_blocked_and_the_free_one_planned(tmp_path):
    k = npu_node(tmp_path, 2)
    k.add_process(4242, "rbln-smi", ["/dev/rbln1"])
    rows = make(k).plan("bind", all_devices=True).preview()
    assert [(r.bdf, r.status) for r in rows] == [(A, "planned"), (B, "blocked")]
    assert "pid 4242 (rbln-smi) has /dev/rbln1 open" in rows[1].message

def test_a_plan_wide_blocker_marks_every_change_blocked_but_not_skipped_devices(tmp_path):
    k = npu_node(tmp_path, 2)
    make(k).apply(make(k).plan("bind", [A]))
    rows = make(k, is_root=lambda: False).plan("bind", all_devices=True).preview()
    assert [(r.bdf, r.status) for r in rows] == [(A, "skipped"), (B, "blocked")]
    assert "needs root" in rows[1].message


def test_a_second_signal_during_the_rollback_does_not_abandon_the_other_devices(tmp_path):
    from rblnctl.errors import Interrupted

    k = npu_node(tmp_path, 3)

    class Signalled:  # SIGTERM between C's unbind and probe, then SIGTERM again while B is being restored
        def write(self, path, value, bound_s=None):
            if value == "0000:3d:00.0" and path.name == "drivers_probe":
                raise Interrupted(15)
            if value == B and path.name == "bind":
                raise Interrupted(15)
            k.writer.write(path, value, bound_s=bound_s)

    b = make(k, writer=Signalled())
    with pytest.raises(Interrupted):
        b.apply(b.plan("bind", all_devices=True))
    assert on_host_driver(k, A) and on_host_driver(k, "0000:3d:00.0")  # restored despite the second signal
    assert k.driver_of(B) is None and state(k)[B]["driver"] == "rebellions"  # and B's record says where it belongs


def test_a_failed_bind_puts_back_a_stale_override_after_the_driver(tmp_path):
    k = npu_node(tmp_path, 1)
    k.add_driver("pci-stub", claims=((0x1EFF, 0x1220),))
    k.set_override(A, "pci-stub")  # left by some other tool while A stayed on rebellions
    k.refuse_probe("vfio-pci", A)
    b = make(k)
    out = b.apply(b.plan("bind", [A]))
    assert out.results[0].status == "failed" and "restored to rebellions" in out.results[0].message
    # the kernel binds only the driver an override names: rebellions first, then the override as it was
    assert (k.driver_of(A), k.override_of(A)) == ("rebellions", "pci-stub")
    assert k.writes[3:] == [(f"sys/bus/pci/devices/{A}/driver_override", "\n"),
                            ("sys/bus/pci/drivers/rebellions/bind", A),
                            (f"sys/bus/pci/devices/{A}/driver_override", "pci-stub")]


def test_failed_unbind_whose_rollback_fails_too_says_driverless(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    k.refuse_probe("rebellions", A)
    k.refuse_probe("vfio-pci", A)  # vfio-pci will not take it back either
    out = make(k).apply(make(k).plan("unbind", [A]))
    r = out.results[0]
    assert r.status == "driverless" and k.driver_of(A) is None
    assert "the device has NO driver now; bind it again once vfio-pci works" in r.message
    assert state(k)[A]["driver"] == "rebellions"  # unbind did not complete: the record stays


class _HeldByNobodyVisible:
    """A writer whose unbind from vfio-pci stays blocked with no holder rblnctl can see (another user's VM as
    non-root, a holder in another pid namespace): the bounded write gives up at its bound."""

    def __init__(self, k: SimKernel) -> None:
        self.k = k

    def write(self, path, value, *, bound_s=None):
        if bound_s is not None:
            raise WriteStillBlocked("still blocked", pid=0)
        return self.k.writer.write(path, value)


def test_a_blocked_unbind_with_no_holder_in_sight_names_no_kill_placeholder(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    b = make(k, writer=_HeldByNobodyVisible(k))
    (result,) = b.apply(b.plan("unbind", [A])).results
    assert result.status == "pending", result
    assert "a VFIO user rblnctl cannot see holds it" in result.message, result.message
    assert "kill" not in result.message and "PID" not in result.message, result.message
    assert f"find what holds it (`lsof {k.dev / 'vfio' / '20'}`, or stop the VM using it)" in result.message


def test_a_blocked_unbinds_kill_advice_names_each_holder_pid_once(tmp_path):
    from rblnctl.host.procfs import Holder
    from rblnctl.host.vfio.binder import _kill_hint

    holders = [Holder(pid=3100, command="qemu-kvm", path="/dev/vfio/20"),
               Holder(pid=3100, command="qemu-kvm", path="anon_inode:[vfio-device]"),
               Holder(pid=3200, command="helper", path="/dev/vfio/20")]
    assert _kill_hint(holders) == "kill 3100 3200"
    assert _kill_hint([]) is None
    # a VFIO device fd of a process holding no group node may be another device's: never named to kill
    maybe = Holder(pid=3300, command="qemu-kvm -name guest=other", path="anon_inode:[vfio-device]", how="vfio-device",
                   certain=False)
    assert _kill_hint([*holders, maybe]) == "kill 3100 3200"
    assert _kill_hint([maybe]) is None


def test_an_interrupted_blocked_unbind_with_no_holder_found_names_no_kill_placeholder(tmp_path):
    """Ctrl-C/SIGTERM while an unbind waits, no holder found when the run planned: the message said `kill PID`."""
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))

    class Interrupted:
        def write(self, path, value, *, bound_s=None):
            if bound_s is None:
                return k.writer.write(path, value)
            raise KeyboardInterrupt

    events: list[str] = []
    b = make(k, writer=Interrupted(), on_event=events.append)
    with pytest.raises(KeyboardInterrupt):
        b.apply(b.plan("unbind", [A]))
    said = " ".join(events)
    assert "interrupted while unbind from vfio-pci" in said and "a VFIO user rblnctl cannot see holds it" in said, said
    assert "kill" not in said and "PID" not in said, said
    assert f"find what holds it (`lsof {k.dev / 'vfio' / '20'}`, or stop the VM using it)" in said, said


def test_an_unbind_begun_between_plan_and_apply_is_left_alone_not_waited_for(tmp_path):
    """A long [y/N] between plan and apply, and meanwhile another tool's unbind holds the device lock: apply's read
    back of the function answers `unknown` at its bound, and nothing is written (the next write, driver_override,
    would wait as long as the unbind, uninterruptibly)."""
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    b = make(k)
    plan = b.plan("unbind", [A])
    k._block_override(k.devices[A])  # what the kernel's blocked unbind does to a read of it
    try:
        (result,) = b.apply(plan).results
    finally:
        k.release_readers()
        k._unblock_override(k.devices[A])
    assert result.status == "failed", result
    assert "unknown: the kernel holds the device" in result.message and "nothing was changed" in result.message
    assert k.driver_of(A) == "vfio-pci"
