"""rblnctl.host.system.modprobe against a stand-in `modprobe` on PATH (never the host's: the module names
used here do not exist, so even a mistake could not load anything)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rblnctl.errors import HostError, InvalidInput
from rblnctl.host import system

ABSENT = "rblnctl_test_absent_module"


@pytest.fixture
def fake_modprobe(tmp_path, monkeypatch):
    """Write `<tmp>/bin/modprobe` (a shell script) and make it the only modprobe on PATH; returns a writer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    calls = tmp_path / "calls"

    def make(body: str) -> Path:
        script = bin_dir / "modprobe"
        script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n{body}\n')
        script.chmod(0o755)
        return calls

    return make


def test_modprobe_runs_the_module_as_one_argument_after_double_dash(fake_modprobe):
    calls = fake_modprobe("exit 0")
    system.modprobe(ABSENT)
    assert calls.read_text() == f"-- {ABSENT}\n"


def test_modprobe_failure_names_the_exit_code_and_the_last_line(fake_modprobe):
    calls = fake_modprobe('echo "modprobe: WARNING: first" >&2\n'
                          f'echo "modprobe: FATAL: Module {ABSENT} not found" >&2\nexit 1')
    with pytest.raises(HostError, match=rf"modprobe {ABSENT} exited 1: modprobe: FATAL: Module {ABSENT} not found$"):
        system.modprobe(ABSENT)
    assert calls.read_text() == f"-- {ABSENT}\n"


def test_modprobe_failure_without_output_says_so(fake_modprobe):
    fake_modprobe("exit 3")
    with pytest.raises(HostError, match="exited 3: no output"):
        system.modprobe(ABSENT)


def test_modprobe_that_hangs_is_stopped_at_the_timeout(fake_modprobe):
    fake_modprobe("exec /bin/sleep 30")
    with pytest.raises(HostError, match=rf"modprobe {ABSENT} failed: .*timed out"):
        system.modprobe(ABSENT, timeout_s=0.2)


def test_no_modprobe_anywhere(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # empty
    real_access = os.access
    # /usr/sbin/modprobe and /sbin/modprobe of this machine are the fallback: hide them, nothing else.
    monkeypatch.setattr(system.os, "access", lambda p, mode: False if str(p).endswith("/modprobe")
                        else real_access(p, mode))
    with pytest.raises(HostError, match=rf"cannot load {ABSENT}: modprobe not found on PATH"):
        system.modprobe(ABSENT)


@pytest.mark.parametrize("bad", ["", "../vfio", "vfio pci", "vfio;reboot", "vfio\n", "x" * 65])
def test_bad_module_names_never_reach_modprobe(fake_modprobe, bad):
    calls = fake_modprobe("exit 0")
    with pytest.raises(InvalidInput, match="invalid kernel module name"):
        system.modprobe(bad)
    assert not calls.exists()


# --- module state: one answer for vfio and preflight --local ---------------------------------------------


def test_module_state_loaded_builtin_missing(tmp_path):
    from tests.fakes.sysfs import SimKernel

    k = SimKernel(tmp_path)
    k.set_builtin_modules(["kernel/drivers/vfio/vfio.ko", "kernel/drivers/vfio/pci/vfio-pci.ko"])
    k.mark_loaded("kvm")
    (k.sys / "module" / "vfio").mkdir()  # a built-in module with parameters has the directory, no initstate
    builtin, path = system.read_builtin_modules(k.root, k.release)
    assert path == str(k.root / "lib/modules" / k.release / "modules.builtin")
    assert system.module_state(k.sys, "kvm", builtin) is system.ModuleState.LOADED
    assert system.module_state(k.sys, "vfio") is system.ModuleState.BUILTIN  # the directory alone says so
    assert system.module_state(k.sys, "vfio-pci", builtin) is system.ModuleState.BUILTIN  # only the list says so
    assert system.module_state(k.sys, "vfio-pci") is system.ModuleState.MISSING  # without the list: not found
    assert system.module_state(k.sys, "vfio_iommu_type1", builtin) is system.ModuleState.MISSING


def test_builtin_list_under_usr_lib_and_unknown_releases(tmp_path):
    lst = tmp_path / "usr/lib/modules/6.1.0/modules.builtin"
    lst.parent.mkdir(parents=True)
    lst.write_text("kernel/drivers/vfio/vfio_iommu_type1.ko\nnot-a-module\n")
    assert system.read_builtin_modules(tmp_path, "6.1.0") == ({"vfio_iommu_type1"}, str(lst))
    assert system.read_builtin_modules(tmp_path, "6.2.0") == (None, None)
    assert system.read_builtin_modules(tmp_path, None) == (None, None)
    assert system.read_builtin_modules(tmp_path, "../../etc") == (None, None)  # a release is not a path


def test_unreadable_builtin_list_is_unknown_not_fatal(tmp_path):
    lst = tmp_path / "lib/modules/6.1.0/modules.builtin"
    lst.mkdir(parents=True)  # EISDIR when read
    assert system.read_builtin_modules(tmp_path, "6.1.0") == (None, None)


def test_module_names_are_validated_before_modprobe_or_paths(tmp_path):
    from tests.fakes.sysfs import npu_node

    k = npu_node(tmp_path, 0)
    assert system.module_state(k.sys, "vfio-pci") is system.ModuleState.LOADED
    assert system.module_state(k.sys, "kvm") is system.ModuleState.MISSING
    for bad in ("../x", "vfio;reboot", "", "a b"):
        with pytest.raises(InvalidInput):
            system.module_state(k.sys, bad)
        with pytest.raises(InvalidInput):
            system.modprobe(bad)


def test_is_root_reads_the_effective_uid(mocker):
    mocker.patch("os.geteuid", return_value=0)
    assert system.is_root()
    mocker.patch("os.geteuid", return_value=1000)
    assert not system.is_root()
