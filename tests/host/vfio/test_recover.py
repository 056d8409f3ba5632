"""VfioBinder.plan("recover"): NPUs left without a driver or with a stale driver_override go back to the mode's driver.

Some operator releases' vfio-manager unbinds devices on stop without re-probing them, leaving
NPUs with no driver (and a vfio-pci driver_override) after a vm -> container switch. Each branch
of the recovery rules has a host state here that produces it.
"""

from __future__ import annotations

import json

import pytest

from rblnctl.errors import ConfigError, InvalidInput, NotFound, Refused
from rblnctl.host.vfio import Action
from tests.fakes.sysfs import (
    HostSpec,
    Npu,
    SimKernel,
    build_host,
    group_with_bridge_and_host_device,
    leftovers,
    npu_node,
)
from tests.host.vfio.common import A, B, blocker_texts, make, on_host_driver, state

X, Y, Z = "0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"  # the NPUs of the leftovers() host
LOADED = HostSpec().loaded


def recover(k: SimKernel, bdfs=(), *, mode=None, all_devices=False, **kw):
    b = make(k, **kw)
    return b, b.plan("recover", bdfs, all_devices=all_devices, mode=mode)


def leftover_host(tmp_path, **changes) -> SimKernel:
    return build_host(tmp_path / "host", leftovers(**changes))


def test_container_mode_re_probes_leftovers_to_the_host_driver(tmp_path):
    k = leftover_host(tmp_path)
    assert (k.driver_of(X), k.override_of(X)) == (None, "vfio-pci")
    b, plan = recover(k, all_devices=True)
    assert [(d.bdf, d.action) for d in plan.devices] == [(X, Action.RECOVER), (Y, Action.RECOVER), (Z, Action.SKIP)]
    assert "bound to no driver (driver_override vfio-pci)" in plan.devices[0].note
    assert "stale driver_override vfio-pci" in plan.devices[1].note
    assert plan.devices[2].note == "healthy: on rebellions"
    assert [(w.path.removeprefix(str(k.root)), w.value) for w in plan.writes] == [
        (f"/sys/bus/pci/devices/{X}/driver_override", "\n"),
        ("/sys/bus/pci/drivers_probe", X),
        (f"/sys/bus/pci/devices/{Y}/driver_override", "\n"),  # already on rebellions: clearing is all it needs
    ]
    assert not plan.blockers and plan.warnings == ()
    out = b.apply(plan)
    assert out.ok and [(r.bdf, r.action, r.status) for r in out.results] == [
        (X, "recover", "ok"), (Y, "recover", "ok"), (Z, "recover", "skipped")]
    assert all(on_host_driver(k, x) for x in (X, Y, Z)) and (k.dev / "rbln0").exists()
    assert out.results[0].message == "on rebellions; driver_override cleared"
    assert state(k) == {}  # nothing recorded: the host driver needs no record to come back to


def test_dry_run_of_recover_writes_nothing(tmp_path):
    k = leftover_host(tmp_path)
    before = k.checksum()
    _, plan = recover(k, all_devices=True, mode="vm")
    assert [r.status for r in plan.preview()] == ["planned", "planned", "skipped"]
    assert k.checksum() == before and k.writes == []


def test_vm_mode_binds_leftovers_as_bind_leaves_them_and_records_them(tmp_path):
    k = leftover_host(tmp_path)
    b, plan = recover(k, all_devices=True, mode="vm")
    assert [(d.bdf, d.action) for d in plan.devices] == [(X, Action.RECOVER), (Y, Action.RECOVER), (Z, Action.SKIP)]
    assert plan.devices[2].note == "on rebellions: not a leftover (bind or unbind moves it between drivers)"
    assert [(w.path.removeprefix(str(k.root)), w.value) for w in plan.writes] == [
        ("/sys/bus/pci/drivers_probe", X),  # the override already names vfio-pci
        ("/sys/bus/pci/drivers/rebellions/unbind", Y),  # a bind that stopped after its first write: finish it
        ("/sys/bus/pci/drivers_probe", Y),
    ]
    out = b.apply(plan)
    assert out.ok and k.driver_of(X) == k.driver_of(Y) == "vfio-pci" and on_host_driver(k, Z)
    assert k.vfio_node(42).exists() and k.vfio_node(43).exists()
    assert {bdf: (r["driver"], r["driver_override"]) for bdf, r in state(k).items()} == {
        X: (None, "vfio-pci"), Y: ("rebellions", "vfio-pci")}
    back = make(k).apply(make(k).plan("unbind", [Y]))  # the record lets unbind restore Y's host driver
    assert back.ok and on_host_driver(k, Y)


def test_vm_mode_keeps_the_older_record_of_a_half_bound_device(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    k.handle_write(k.sys / "bus/pci/drivers/vfio-pci/unbind", A)  # a vfio-manager that unbinds without re-probing
    b, plan = recover(k, [A], mode="vm")
    assert b.apply(plan).ok and k.driver_of(A) == "vfio-pci"
    assert state(k)[A]["driver"] == "rebellions"  # not overwritten with "no driver"


def test_container_mode_drops_the_record_of_a_device_it_returns(tmp_path):
    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    k.handle_write(k.sys / "bus/pci/drivers/vfio-pci/unbind", A)
    assert A in state(k)
    b, plan = recover(k, [A])
    assert b.apply(plan).ok and on_host_driver(k, A) and state(k) == {}


def test_container_mode_unbinds_a_device_bind_left_on_vfio_pci_with_a_warning(tmp_path):
    k = npu_node(tmp_path, 2)
    make(k).apply(make(k).plan("bind", [A]))
    b, plan = recover(k, all_devices=True)
    assert [d.action for d in plan.devices] == [Action.RECOVER, Action.SKIP]
    assert any(f"{A} on vfio-pci will be unbound" in w and "vm mode instead" in w for w in plan.warnings)
    assert [w.why for w in plan.writes] == ["clear driver_override", "unbind from vfio-pci", "probe (binds rebellions)"]
    assert b.apply(plan).ok and on_host_driver(k, A) and not k.vfio_node(20).exists() and state(k) == {}


def test_vm_mode_replaces_a_stale_override_on_a_bound_vfio_device(tmp_path):
    k = npu_node(tmp_path, 2)
    make(k).apply(make(k).plan("bind", [A, B]))
    (k.root / "state.json").write_text(json.dumps({"version": 1, "devices": {
        A: {"driver": "rebellions", "driver_override": None, "ids": "1eff:1220"}}}))  # B's record was lost
    for x in (A, B):
        k.set_override(x, "rebellions")  # set while bound to vfio-pci
    b, plan = recover(k, [A, B], mode="vm")
    assert "stale driver_override rebellions" in plan.devices[0].note
    assert [(w.why, w.value) for w in plan.writes] == [("set driver_override", "vfio-pci")] * 2
    assert b.apply(plan).ok and (k.driver_of(A), k.override_of(A)) == ("vfio-pci", "vfio-pci")
    # vfio-pci is never recorded as an original driver (that would make the file damaged): A keeps its record
    assert {bdf: r["driver"] for bdf, r in state(k).items()} == {A: "rebellions"}
    assert make(k).plan("unbind", [A]).devices[0].to_driver == "rebellions"


def test_an_override_naming_the_modes_driver_while_bound_elsewhere_is_stale(tmp_path):
    k = npu_node(tmp_path, 0)
    k.add_driver("rebellions")
    k.add_pci_function(A, driver="pci-stub", iommu_group=5)
    k.set_override(A, "rebellions")
    b, plan = recover(k, [A])
    assert plan.devices[0].note.startswith("stale driver_override rebellions while bound to pci-stub")
    assert [w.why for w in plan.writes] == ["clear driver_override", "unbind from pci-stub", "probe (binds rebellions)"]
    assert b.apply(plan).ok and on_host_driver(k, A)


def test_healthy_devices_are_skipped_and_need_nothing_not_even_root(tmp_path):
    k = npu_node(tmp_path, 2)
    make(k).apply(make(k).plan("bind", [B]))
    k.set_override(B, None)  # on vfio-pci without an override: not what recover repairs in either mode
    k.set_override(A, "rebellions")  # an override naming the driver it is on is harmless
    before = k.checksum()
    b, plan = recover(k, all_devices=True, is_root=lambda: False)
    assert plan.noop and not plan.blockers and [d.note for d in plan.devices] == [
        "healthy: on rebellions (driver_override rebellions)",
        "on vfio-pci: not a leftover (bind or unbind moves it between drivers)"]
    assert [r.status for r in b.apply(plan).results] == ["skipped", "skipped"]
    _, plan = recover(k, [B], mode="vm", is_root=lambda: False)
    assert plan.noop and plan.devices[0].note == "healthy: on vfio-pci"
    k.set_override(B, "vfio-pci")
    _, plan = recover(k, [B], mode="vm", is_root=lambda: False)
    assert plan.noop and plan.devices[0].note == "healthy: on vfio-pci (driver_override vfio-pci)"
    k.set_override(B, None)
    assert k.checksum() == before


def test_a_device_in_use_is_refused_and_recover_never_forces(tmp_path):
    k = leftover_host(tmp_path)
    k.add_process(4242, "rbln-smi", ["/dev/rbln1"], cmdline=["rbln-smi"])  # Y's node: Y is on rebellions
    for force in (False, True):
        b, plan = recover(k, all_devices=True, force=force)
        assert [(bl.bdfs, bl.override) for bl in plan.blockers] == [((Y,), None)]
        assert "pid 4242 (rbln-smi) has /dev/rbln1 open; stop it first" in blocker_texts(plan)[0]
        assert [r.status for r in plan.preview()] == ["planned", "blocked", "skipped"]
        with pytest.raises(Refused):
            b.apply(plan)
    assert k.writes == [] and k.driver_of(X) is None


def test_container_recovery_needs_the_host_driver_loaded(tmp_path):
    k = npu_node(tmp_path, 2)
    k.remove_driver("rebellions")  # the module was unloaded: both NPUs are left without a driver
    b, plan = recover(k, all_devices=True)
    assert blocker_texts(plan) == [f"driver rebellions is not loaded (no {k.sys}/bus/pci/drivers/rebellions): "
                                   "load its module first"]
    assert plan.blockers[0].bdfs == (A, B) and plan.blockers[0].override is None
    k.add_driver("rebellions")  # modprobe rebellions
    b, plan = recover(k, all_devices=True)
    assert b.apply(plan).ok and on_host_driver(k, A) and on_host_driver(k, B)


def test_vm_recovery_needs_the_iommu_and_vfio_pci_and_cannot_load_it(tmp_path):
    k = leftover_host(tmp_path, extra_groups=(), npus=(Npu(X, driver=None, group=None, override="vfio-pci"),))
    _, plan = recover(k, all_devices=True, mode="vm")
    assert any("IOMMU is off" in t for t in blocker_texts(plan))
    k = npu_node(tmp_path / "b", 1)
    k.unload_module("vfio_pci")
    k.set_override(A, None)
    k.handle_write(k.sys / "bus/pci/drivers/rebellions/unbind", A)
    _, plan = recover(k, [A], mode="vm", load_modules=True)  # recover never loads modules
    assert plan.load_modules == () and [bl.override for bl in plan.blockers] == [None]
    assert "vfio-pci is not loaded" in blocker_texts(plan)[0]


def test_vm_recovery_checks_the_iommu_group(tmp_path):
    npus = (Npu(X, driver=None, group="42", override="vfio-pci"),)
    k = build_host(tmp_path / "h", group_with_bridge_and_host_device(npus=npus, loaded=(*LOADED, "rebellions")))
    _, plan = recover(k, [X], mode="vm")
    [text] = blocker_texts(plan)
    assert "IOMMU group 42" in text and "0000:3b:00.1 (8086:1572) on i40e" in text and "0000:3a:00.0" not in text
    b, plan = recover(k, [X])  # container mode does not care about the group
    assert not plan.blockers and b.apply(plan).ok and on_host_driver(k, X)


def test_a_failed_recovery_is_undone_and_the_others_are_kept(tmp_path):
    k = npu_node(tmp_path, 2)
    for x in (A, B):
        k.set_override(x, "vfio-pci")
        k.handle_write(k.sys / "bus/pci/drivers/rebellions/unbind", x)
    k.refuse_probe("rebellions", A)
    b, plan = recover(k, all_devices=True)
    out = b.apply(plan)
    assert [(r.bdf, r.status) for r in out.results] == [(A, "failed"), (B, "ok")] and not out.ok
    assert "driver is none, not rebellions" in out.results[0].message
    assert "restored to no driver (as before)" in out.results[0].message
    assert (k.driver_of(A), k.override_of(A)) == (None, "vfio-pci")  # exactly as found
    assert on_host_driver(k, B)  # a repaired device is not broken again because another one failed
    assert state(k) == {}  # a recovery to the host driver records nothing, even for a device it could not fix


def test_another_driver_taking_the_device_fails_verification_and_is_undone(tmp_path):
    k = SimKernel(tmp_path)
    k.add_driver("rbln-legacy", claims=((0x1EFF, None),))  # registered first: drivers_probe picks it
    k.add_driver("rebellions")
    k.add_pci_function(A, driver=None, iommu_group=5)
    b, plan = recover(k, [A])
    out = b.apply(plan)
    assert out.results[0].status == "failed" and "driver is rbln-legacy, not rebellions" in out.results[0].message
    assert k.driver_of(A) is None and k.override_of(A) is None


def test_vm_recovery_undoes_group_mates_of_a_failed_device(tmp_path):
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    for x in (A, "0000:3b:00.1"):
        k.add_pci_function(x, device=0x1221, driver=None, iommu_group=7)
    k.add_pci_function(B, driver=None, iommu_group=8)
    k.refuse_probe("vfio-pci", "0000:3b:00.1")
    b, plan = recover(k, all_devices=True, mode="vm")
    out = b.apply(plan)
    assert [(r.bdf, r.status) for r in out.results] == [(A, "rolled-back"), ("0000:3b:00.1", "failed"), (B, "ok")]
    assert k.driver_of(A) is None and not k.vfio_node(7).exists() and k.driver_of(B) == "vfio-pci"


def test_a_signal_during_recovery_restores_what_it_touched(tmp_path):
    from rblnctl.errors import Interrupted

    k = leftover_host(tmp_path)

    class Signalled:
        signalled = False

        def write(self, path, value, bound_s=None):
            if value == Y and path.name == "drivers_probe" and not self.signalled:
                self.signalled = True
                raise Interrupted(1)
            k.writer.write(path, value, bound_s=bound_s)

    b, plan = recover(k, all_devices=True, mode="vm", writer=Signalled())
    with pytest.raises(Interrupted):
        b.apply(plan)
    assert (k.driver_of(X), k.override_of(X)) == (None, "vfio-pci")  # back to how it was found
    # Y's stale override is put back too, after rebellions is bound again (the kernel binds only what it names)
    assert (k.driver_of(Y), k.override_of(Y)) == ("rebellions", "vfio-pci")
    assert {bdf: r["driver"] for bdf, r in state(k).items()} == {X: None}  # X still has no driver: record kept


def test_a_damaged_state_file_only_blocks_recovery_to_vfio_pci(tmp_path):
    k = leftover_host(tmp_path)
    (k.root / "state.json").write_bytes(b"\xff\x00")
    _, plan = recover(k, all_devices=True, mode="vm")
    assert any("is damaged" in t for t in blocker_texts(plan))
    b, plan = recover(k, all_devices=True)
    assert not plan.blockers and any("is damaged" in w and "leaving it untouched" in w for w in plan.warnings)
    assert b.apply(plan).ok and (k.root / "state.json").read_bytes() == b"\xff\x00"


def test_a_named_function_that_is_not_an_npu_is_refused_without_an_override(tmp_path):
    k = npu_node(tmp_path, 0)
    k.add_driver("rebellions")
    k.add_pci_function("0000:01:00.0", vendor=0x10DE, device=0x2330, class_code=0x030200, driver=None,
                       iommu_group=30)
    _, plan = recover(k, ["01:00.0"], force=True)
    assert [(bl.override, bl.bdfs) for bl in plan.blockers] == [(None, ("0000:01:00.0",))]
    assert "recover handles RBLN NPUs only" in blocker_texts(plan)[0]


def test_arguments(tmp_path):
    k = leftover_host(tmp_path)
    with pytest.raises(ConfigError, match="a mode applies to recover, not bind"):
        make(k).plan("bind", [X], mode="vm")
    with pytest.raises(InvalidInput, match="unknown mode 'gpu'"):
        make(k).plan("recover", [X], mode="gpu")
    with pytest.raises(NotFound):
        make(SimKernel(tmp_path / "empty")).plan("recover", all_devices=True)
    assert make(k).plan("recover", [X]).devices[0].to_driver == "rebellions"  # container is the default
    assert json.loads(json.dumps([r.status for r in make(k).plan("recover", [X]).preview()])) == ["planned"]
