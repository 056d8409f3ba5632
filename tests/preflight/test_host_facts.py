"""Host facts: what gather_host_facts() reads from a simulated tree, and the shapes it is read from."""

from __future__ import annotations

from rblnctl.preflight.host_facts import gather_host_facts
from tests.fakes import sysfs as ht

def test_facts_of_fixture(tmp_path):
    f = gather_host_facts(ht.build_host(tmp_path / "h", ht.amd_iommu_off()).root)
    assert f.cpu_vendor == "amd" and f.hypervisor_flag is False and f.iommu_groups == 0
    assert f.kernel_release == "6.8.0-45-generic" and f.acpi_tables == ["IVRS"]
    assert [n.bdf for n in f.npus] == ["0000:c1:00.0"]


def test_in_between_shapes_are_whole_hosts_the_binder_can_use(tmp_path):
    """The same fixture that makes preflight WARN makes vfio bind refuse, naming the NIC and not the bridge."""
    from rblnctl.host.vfio import VfioBinder
    from tests.fakes.clock import FakeClock

    k = ht.build_host(tmp_path / "h", ht.group_with_bridge_and_host_device())
    plan = VfioBinder(root=k.root, state_file=k.root / "s.json", is_root=lambda: True, writer=k.writer,
                      clock=FakeClock()).plan("bind", ["0000:3b:00.0"])
    [text] = [str(b) for b in plan.blockers]
    assert "IOMMU group 42 of 0000:3b:00.0 is not viable: 0000:3b:00.1 (8086:1572) on i40e" in text
    assert "0000:3a:00.0" not in text



def test_facts_need_nothing_outside_host_paths(tmp_path):
    """A host pod mounts only HOST_PATHS: a root holding just those gives the very same facts."""
    import dataclasses
    import shutil

    from rblnctl.preflight.host_facts import HOST_PATHS

    full = ht.build_host(tmp_path / "full", ht.npu_on_rebellions()).root
    (full / "etc").mkdir()
    (full / "etc" / "hostname").write_text("npu-1\n")  # something a pod would not see
    only = tmp_path / "only"
    for rel in HOST_PATHS:
        if (full / rel).exists():
            shutil.copytree(full / rel, only / rel, symlinks=True)
    want = gather_host_facts(full)
    got = gather_host_facts(only)
    assert got.builtin_list == want.builtin_list.replace(str(full), str(only))  # paths name their root
    assert dataclasses.replace(got, root=want.root, builtin_list=want.builtin_list) == want
    assert want.builtin_list and want.npus and any(want.holders.values())  # the copy had something to lose
