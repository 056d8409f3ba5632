"""`rblnctl vfio ...`: flag wiring, exit codes, -o json/yaml, stdout vs stderr, on a simulated kernel."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

import rblnctl.host.vfio.writer as vfio_writer
from rblnctl.host import pci
from tests.fakes.sysfs import SimKernel, guard_real_host, npu_node
from tests.helpers import cli

A, B = "0000:3b:00.0", "0000:3c:00.0"
RESULT_KEYS = ["bdf", "action", "fromDriver", "toDriver", "status", "message"]


def devices(stdout: str, kind: str | None = None) -> list:
    """The device rows of a VfioChange or VfioStatus document (-o json)."""
    doc = json.loads(stdout)
    assert doc["apiVersion"] == "rblnctl.rebellions.ai/v1alpha1" and doc["kind"] in ("VfioChange", "VfioStatus")
    assert kind is None or doc["kind"] == kind
    return doc["devices"]


@pytest.fixture
def k(tmp_path, monkeypatch, mocker) -> SimKernel:
    guard_real_host(monkeypatch)
    kern = npu_node(tmp_path, 2)
    monkeypatch.setattr(vfio_writer, "default_writer", lambda: kern.writer)
    mocker.patch("os.geteuid", return_value=0)
    return kern


def vfio(k: SimKernel, command: str, *args: str, input: str | None = None):
    roots = ["--root", k.root]
    if command != "status":
        roots += ["--state-file", k.root / "state.json"]
    return cli("vfio", command, *args, *roots, input=input)


def test_help_lists_the_four_commands():
    r = cli("vfio", "--help")
    assert r.exit_code == 0 and all(c in r.stdout for c in ("bind", "unbind", "status", "recover"))


def test_bind_json_has_the_stable_schema_and_progress_goes_to_stderr(k):
    r = vfio(k, "bind", A, B, "--yes", "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = devices(r.stdout)
    assert [list(row) for row in rows] == [RESULT_KEYS, RESULT_KEYS]
    assert [(x["bdf"], x["action"], x["fromDriver"], x["toDriver"], x["status"]) for x in rows] == [
        (A, "bind", "rebellions", "vfio-pci", "ok"), (B, "bind", "rebellions", "vfio-pci", "ok")]
    assert f'{k.sys}/bus/pci/devices/{A}/driver_override <- "vfio-pci"' in r.stderr
    assert k.driver_of(A) == k.driver_of(B) == "vfio-pci"


def test_bind_yaml_and_table(k):
    r = vfio(k, "bind", A, "--yes", "-o", "yaml")
    assert r.exit_code == 0 and yaml.safe_load(r.stdout)["devices"][0]["status"] == "ok"
    r = vfio(k, "bind", A, B, "--yes")
    assert r.exit_code == 0 and "skipped" in r.stdout and "already bound" in r.stdout and "ok" in r.stdout


@pytest.mark.parametrize("bad", ["../../sys/kernel", "3b:00.*", "0000:3b:00.0 ", "3b:00.0/..", "0000:3b:00.0;id"])
def test_bad_bdf_exits_2_and_writes_nothing(k, bad):
    before = k.checksum()
    r = vfio(k, "bind", bad, "--yes")
    assert r.exit_code == 2 and "invalid PCI address" in r.stderr
    assert k.checksum() == before and k.writes == []


def test_usage_errors_exit_2(k):
    before = k.checksum()
    for args in (["bind", A, "--all", "--yes"], ["bind", "--yes"], ["unbind", A, "--driver", "../x", "--yes"],
                 ["status", "*"]):
        r = vfio(k, *args)
        assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith("error: "), (args, r.stderr)
    assert k.checksum() == before and k.writes == []


def test_missing_device_exits_1(k):
    r = vfio(k, "bind", "99:00.0", "--yes")
    assert r.exit_code == 1 and "no PCI device 0000:99:00.0" in r.stderr


def test_device_in_use_is_refused_with_exit_1_and_each_blocker(k):
    k.add_process(4242, "rbln-smi", ["/dev/rbln0"])
    before = k.checksum()
    r = vfio(k, "bind", A, B, "--yes", "-o", "json")
    assert r.exit_code == 1 and r.stdout == ""
    assert "refused" in r.stderr and "pid 4242 (rbln-smi) has /dev/rbln0 open" in r.stderr
    assert k.checksum() == before
    assert "pass --force to go ahead anyway" in r.stderr  # the CLI spells the override the library names
    r = vfio(k, "bind", A, B, "--yes", "--force", "-o", "json")
    assert r.exit_code == 0 and "going ahead because it is forced" in r.stderr


def test_not_root_is_refused(k, mocker):
    mocker.patch("os.geteuid", return_value=1000)
    r = vfio(k, "bind", A, "--yes")
    assert r.exit_code == 1 and "needs root" in r.stderr and k.writes == []


def test_non_viable_group_exit_1(tmp_path, monkeypatch, mocker):
    guard_real_host(monkeypatch)
    mocker.patch("os.geteuid", return_value=0)
    k = npu_node(tmp_path, 0)
    k.load_module("vfio_pci")
    k.add_pci_function(A, iommu_group=7)
    k.add_pci_function("0000:3b:00.1", device=0x1221, iommu_group=7)
    monkeypatch.setattr(vfio_writer, "default_writer", lambda: k.writer)
    r = vfio(k, "bind", A, "--yes")
    assert r.exit_code == 1 and "IOMMU group 7" in r.stderr and "0000:3b:00.1" in r.stderr
    assert vfio(k, "bind", A, "0000:3b:00.1", "--yes").exit_code == 0


def test_without_a_terminal_bind_needs_yes(k):
    before = k.checksum()
    r = vfio(k, "bind", A)
    assert r.exit_code == 2 and "--yes" in r.stderr and k.checksum() == before


def test_on_a_terminal_bind_asks(k, monkeypatch):
    import rblnctl.cli.console

    monkeypatch.setattr(rblnctl.cli.console, "stdin_is_tty", lambda: True)
    r = vfio(k, "bind", A, input="n\n")
    assert r.exit_code == 1 and "not confirmed" in r.stderr and k.writes == []
    r = vfio(k, "bind", A, input="y\n")
    assert r.exit_code == 0 and k.driver_of(A) == "vfio-pci"


def test_dry_run_prints_every_write_in_order_and_writes_nothing(k):
    before = k.checksum()
    r = vfio(k, "bind", "--all", "--dry-run", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert k.checksum() == before and k.writes == []
    assert [x["status"] for x in devices(r.stdout)] == ["planned", "planned"]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("would write:")]
    assert [ln.split(" <- ")[0].removeprefix("would write: ") for ln in lines] == [
        f"{k.sys}/bus/pci/devices/{A}/driver_override", f"{k.sys}/bus/pci/drivers/rebellions/unbind",
        f"{k.sys}/bus/pci/drivers_probe", f"{k.sys}/bus/pci/devices/{B}/driver_override",
        f"{k.sys}/bus/pci/drivers/rebellions/unbind", f"{k.sys}/bus/pci/drivers_probe"]
    assert "nothing was written" in r.stderr


def test_dry_run_that_would_be_refused_exits_1(k):
    k.set_iommu(False)
    before = k.checksum()
    r = vfio(k, "bind", A, "--dry-run")
    assert r.exit_code == 1 and "IOMMU is off" in r.stderr and k.checksum() == before


def test_failure_mid_way_exits_1_with_results_on_stdout(k):
    k.refuse_probe("vfio-pci", B)
    r = vfio(k, "bind", A, B, "--yes", "-o", "json")
    assert r.exit_code == 1
    assert [x["status"] for x in devices(r.stdout)] == ["rolled-back", "failed"]
    assert "did not complete" in r.stderr and "rolling back" in r.stderr
    assert k.driver_of(A) == k.driver_of(B) == "rebellions"


def test_keep_going_is_wired(k):
    k.refuse_probe("vfio-pci", B)
    r = vfio(k, "bind", A, B, "--yes", "--keep-going", "-o", "json")
    assert r.exit_code == 1 and [x["status"] for x in devices(r.stdout)] == ["ok", "failed"]
    assert k.driver_of(A) == "vfio-pci"


def test_load_modules_against_a_tree_is_refused(k):
    k.unload_module("vfio_pci")
    r = vfio(k, "bind", A, "--yes", "--load-modules")
    assert r.exit_code == 1 and "changes the running kernel" in r.stderr


def test_unbind_restores_recorded_then_driver_flag(k):
    assert vfio(k, "bind", A, B, "--yes").exit_code == 0
    r = vfio(k, "unbind", A, "--yes", "-o", "json")
    assert r.exit_code == 0 and devices(r.stdout)[0]["toDriver"] == "rebellions"
    k.add_driver("rbln-alt", claims=((0x1EFF, None),))
    r = vfio(k, "unbind", B, "--driver", "rbln-alt", "--yes", "-o", "json")
    assert r.exit_code == 0 and k.driver_of(B) == "rbln-alt"
    assert json.loads((k.root / "state.json").read_text())["devices"] == {}


def test_unbind_without_record_goes_to_the_kernel_default(k):
    assert vfio(k, "bind", A, "--yes").exit_code == 0
    (k.root / "state.json").unlink()
    r = vfio(k, "unbind", "--all", "--yes", "-o", "json")
    assert r.exit_code == 0 and devices(r.stdout)[0]["toDriver"] is None
    assert k.driver_of(A) == "rebellions" and k.override_of(A) is None


def test_operator_vfio_manager_warning_goes_to_stderr(k):
    (k.run / "rbln" / "validations").mkdir(parents=True)
    (k.run / "rbln" / "validations" / "vfio-pci-ready").touch()
    r = vfio(k, "bind", A, "--dry-run", "-o", "json")
    assert r.exit_code == 0 and "warning:" in r.stderr and "VFIO Manager" in r.stderr
    devices(r.stdout)
    assert "VFIO Manager" in vfio(k, "status").stderr


def test_status_json_schema(k):
    assert vfio(k, "bind", B, "--yes").exit_code == 0
    k.add_process(3100, "qemu-kvm", ["/dev/vfio/21"])
    r = vfio(k, "status", "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = devices(r.stdout)
    assert list(rows[0]) == ["bdf", "ids", "model", "function", "driver", "driverOverride", "driverOverrideKnown",
                             "iommuGroup", "groupMembers", "numaNode", "vfioDevice", "vfioDevicePresent", "holders"]
    assert [(x["bdf"], x["driver"], x["vfioDevicePresent"]) for x in rows] == [(A, "rebellions", False),
                                                                              (B, "vfio-pci", True)]
    assert rows[1]["holders"] == [{"pid": 3100, "command": "qemu-kvm", "path": "/dev/vfio/21", "how": "open",
                                   "certain": True}]
    table = vfio(k, "status").stdout
    assert "CA22-PF" in table and "3100/qemu-kvm" in table


def test_status_all_vendors_runs_against_this_machines_real_sysfs():
    """Read-only: no roots given, so this reads the real /sys, /proc and /dev. Whatever this host has (the
    exact listing is checked on simulated trees), the command completes with well-formed rows."""
    r = cli("vfio", "status", "--all-vendors", "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = devices(r.stdout)
    assert isinstance(rows, list)
    bdfs = [x["bdf"] for x in rows]
    assert bdfs == sorted(set(bdfs)) and all(pci.is_bdf_name(b) for b in bdfs)


def test_status_all_vendors_lists_every_function_of_the_tree(k):
    k.add_pci_function("0000:00:1f.3", vendor=0x8086, device=0xA348, class_code=0x040300, driver="snd_hda_intel")
    rows = devices(vfio(k, "status", "--all-vendors", "-o", "json").stdout)
    assert [x["bdf"] for x in rows] == ["0000:00:1f.3", A, B]
    assert [x["bdf"] for x in devices(vfio(k, "status", "-o", "json").stdout)] == [A, B]


PROBE = """
import sys
from typer.testing import CliRunner
from rblnctl.cli.app import app
r = CliRunner().invoke(app, sys.argv[1:])
assert r.exit_code in (0, 1), (r.exit_code, r.stdout, r.stderr)
print(",".join(sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes."))))
"""


@pytest.mark.parametrize("args", [["vfio", "status", "--all-vendors", "-o", "json"], ["vfio", "bind", "--dry-run"]])
def test_vfio_commands_do_not_import_kubernetes(tmp_path, args):
    if "bind" in args:  # a dry run against a simulated tree: reads only
        k = npu_node(tmp_path, 1)
        args = [*args, A, "--root", str(k.root), "--state-file", str(tmp_path / "s.json")]
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


# --- one --root for every host command -------------------------------------------------------------------


@pytest.mark.parametrize("command", ["status", "bind", "unbind", "recover"])
@pytest.mark.parametrize("shape", ["missing", "file", "proc-file", "empty"])
def test_root_that_is_not_a_host_tree_is_exit_2_with_one_line(tmp_path, command, shape):
    root = tmp_path / "root"
    if shape == "file":
        root.write_text("x")
    elif shape == "proc-file":
        (root / "sys").mkdir(parents=True)
        (root / "proc").write_text("x")
    elif shape == "empty":
        root.mkdir()
    args = ["vfio", command, "--root", str(root)] + ([] if command == "status" else [A, "--yes"])
    r = cli(*args)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("error: host root") and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("flag", ["--sysfs-root", "--proc-root", "--dev-root", "--run-root"])
def test_the_four_root_flags_are_gone(flag, tmp_path):
    r = cli("vfio", "status", flag, str(tmp_path))
    assert r.exit_code == 2 and "no such option" in r.stderr


def test_help_derives_defaults_from_the_library():
    from rblnctl import constants as C

    text = " ".join(cli("vfio", "bind", "--help").stdout.split())
    assert f"[default: {C.VFIO_STATE_FILE} under --root]" in text and "--root DIR" in text
    assert f"[default: {C.HOST_ROOT}]" in text


def test_preflight_local_root_whose_proc_is_a_file_is_exit_2(tmp_path):
    (tmp_path / "sys").mkdir()
    (tmp_path / "proc").write_text("x")
    r = cli("preflight", "--local", "--root", str(tmp_path))
    assert r.exit_code == 2 and "proc is not a directory" in r.stderr and r.stdout == ""


# --- status on a host without NPUs -----------------------------------------------------------------------


def test_status_without_npus_prints_a_hint_not_an_empty_header(tmp_path):
    k = SimKernel(tmp_path)
    k.add_pci_function("0000:00:1f.3", vendor=0x8086, device=0xA348, class_code=0x040300, driver="snd_hda_intel")
    r = cli("vfio", "status", "--root", str(k.root))
    assert r.exit_code == 0 and r.stdout == ""
    assert r.stderr.strip() == (f"no RBLN NPU (vendor 1eff, class 1200xx) under {k.sys}/bus/pci/devices; "
                                "--all-vendors lists every PCI function")
    r = cli("vfio", "status", "--root", str(k.root), "-o", "json")
    assert r.exit_code == 0 and devices(r.stdout) == [] and "--all-vendors" in r.stderr
    r = cli("vfio", "status", "--root", str(k.root), "--all-vendors", "-o", "json")
    assert [x["bdf"] for x in devices(r.stdout)] == ["0000:00:1f.3"] and r.stderr == ""


def test_status_all_vendors_on_an_empty_tree_says_so(tmp_path):
    k = SimKernel(tmp_path)
    r = cli("vfio", "status", "--all-vendors", "--root", str(k.root))
    assert r.exit_code == 0 and r.stdout == "" and r.stderr.strip() == f"no PCI function under {k.sys}/bus/pci/devices"


# --- dry run: a device the run would refuse is `blocked` --------------------------------------------------


def test_dry_run_all_marks_a_refused_device_blocked_and_exits_1(k):
    k.add_process(4242, "rbln-smi", ["/dev/rbln1"])
    before = k.checksum()
    r = vfio(k, "bind", "--all", "--dry-run", "-o", "json")
    assert r.exit_code == 1 and k.checksum() == before and k.writes == []
    rows = devices(r.stdout)
    assert [(x["bdf"], x["status"]) for x in rows] == [(A, "planned"), (B, "blocked")]
    assert "pid 4242" in rows[1]["message"] and "pass --force to go ahead anyway" in r.stderr
    table = vfio(k, "bind", "--all", "--dry-run").stdout
    rows = [ln.split() for ln in table.splitlines() if ln.split()[:1] and ln.split()[0].startswith("0000:")]
    assert [row[4] for row in rows] == ["planned", "blocked"]


def test_dry_run_with_a_plan_wide_blocker_blocks_every_change(k, mocker):
    mocker.patch("os.geteuid", return_value=1000)
    r = vfio(k, "bind", "--all", "--dry-run", "-o", "json")
    assert r.exit_code == 1 and {x["status"] for x in devices(r.stdout)} == {"blocked"}
    assert "needs root" in r.stderr


# --- hostile inputs and signals ----------------------------------------------------------------------------


def test_binary_state_file_is_exit_1_naming_it_not_a_bug(k):
    (k.root / "state.json").write_bytes(b"\x00\xff\xfe binary \x80")
    before = k.checksum()
    r = vfio(k, "bind", A, "--yes")
    assert r.exit_code == 1 and f"state file {k.root / 'state.json'} is damaged (not UTF-8 text" in r.stderr
    assert "unexpected" not in r.stderr and k.checksum() == before
    r = vfio(k, "unbind", A, "--driver", "rebellions", "--yes")  # a named host driver goes ahead, with a warning
    assert r.exit_code == 0 and "is damaged" in r.stderr


def test_sigterm_mid_bind_rolls_back_and_exits_143(k, monkeypatch):
    from rblnctl.errors import Interrupted

    class Signalled:
        def write(self, path, value, bound_s=None):
            if value == B and path.name == "drivers_probe":
                raise Interrupted(15)
            k.writer.write(path, value, bound_s=bound_s)

    monkeypatch.setattr(vfio_writer, "default_writer", lambda: Signalled())
    r = vfio(k, "bind", A, B, "--yes")
    assert r.exit_code == 143 and "terminated by signal 15" in r.stderr and "interrupted: restoring" in r.stderr
    assert k.driver_of(A) == k.driver_of(B) == "rebellions" and k.override_of(B) is None
    assert json.loads((k.root / "state.json").read_text())["devices"] == {}


def test_a_device_left_without_a_driver_gets_the_command_that_recovers_it(k):
    k.refuse_probe("vfio-pci", A)
    k.refuse_probe("rebellions", A)
    r = vfio(k, "bind", A, "--yes", "-o", "json")
    assert r.exit_code == 1 and devices(r.stdout)[0]["status"] == "driverless"
    # the run's own --root and --state-file: the recovery acts on the same tree and record (issue 29)
    assert (f"run `rblnctl vfio unbind {A} --driver rebellions --root {k.root} --state-file {k.root / 'state.json'}`"
            in r.stderr)


# --- recover -------------------------------------------------------------------------------------------------


@pytest.fixture
def lk(tmp_path, monkeypatch, mocker) -> SimKernel:
    """The leftovers() host: 3b without a driver (override vfio-pci), 5e on rebellions with a stale override."""
    from tests.fakes.sysfs import build_host, leftovers

    guard_real_host(monkeypatch)
    kern = build_host(tmp_path / "host", leftovers())
    monkeypatch.setattr(vfio_writer, "default_writer", lambda: kern.writer)
    mocker.patch("os.geteuid", return_value=0)
    return kern


X, Y, Z = "0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"


def test_recover_dry_run_lists_the_writes_and_makes_none(lk):
    before = lk.checksum()
    r = vfio(lk, "recover", "--all", "--dry-run", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert [(x["bdf"], x["action"], x["toDriver"], x["status"]) for x in devices(r.stdout)] == [
        (X, "recover", "rebellions", "planned"), (Y, "recover", "rebellions", "planned"),
        (Z, "recover", "rebellions", "skipped")]
    assert [ln.split(" <- ")[0].removeprefix("would write: ") for ln in r.stderr.splitlines()
            if ln.startswith("would write:")] == [f"{lk.sys}/bus/pci/devices/{X}/driver_override",
                                                 f"{lk.sys}/bus/pci/drivers_probe",
                                                 f"{lk.sys}/bus/pci/devices/{Y}/driver_override"]
    assert lk.checksum() == before and lk.writes == []


def test_recover_container_mode_is_the_default_and_asks_first(lk, monkeypatch):
    r = vfio(lk, "recover", "--all")
    assert r.exit_code == 2 and "--yes" in r.stderr and lk.writes == []
    import rblnctl.cli.console

    monkeypatch.setattr(rblnctl.cli.console, "stdin_is_tty", lambda: True)
    r = vfio(lk, "recover", "--all", input="y\n")
    assert r.exit_code == 0, r.stderr
    assert "Recover 2 device(s)?" in r.stderr and f"{X} CA22: no driver -> rebellions" in r.stderr
    assert all(lk.driver_of(x) == "rebellions" and lk.override_of(x) is None for x in (X, Y, Z))


def test_recover_vm_mode_binds_to_vfio_pci_and_records(lk):
    r = vfio(lk, "recover", X, Y, "--mode", "vm", "--yes", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert [(x["toDriver"], x["status"]) for x in devices(r.stdout)] == [("vfio-pci", "ok"), ("vfio-pci", "ok")]
    assert lk.driver_of(X) == lk.driver_of(Y) == "vfio-pci"
    assert sorted(json.loads((lk.root / "state.json").read_text())["devices"]) == [X, Y]


def test_recover_refuses_a_device_in_use_and_offers_no_override(lk):
    lk.add_process(4242, "rbln-smi", ["/dev/rbln1"])
    before = lk.checksum()
    r = vfio(lk, "recover", "--all", "--yes")
    assert r.exit_code == 1 and "pid 4242 (rbln-smi) has /dev/rbln1 open; stop it first" in r.stderr
    assert "pass --" not in r.stderr and lk.checksum() == before


def test_recover_has_no_force_or_load_modules(lk):
    for flag in ("--force", "--load-modules", "--keep-going", "--driver"):
        r = vfio(lk, "recover", "--all", flag)
        assert r.exit_code == 2 and "no such option" in r.stderr, flag
    r = vfio(lk, "recover", "--all", "--mode", "gpu")
    assert r.exit_code == 2 and "gpu" in r.stderr


def test_recover_usage_errors(lk):
    for args in ([], [X, "--all"], ["../x"]):
        r = vfio(lk, "recover", *args, "--yes")
        assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith("error: "), (args, r.stderr)
    assert lk.writes == []


def test_a_device_an_unbind_left_without_a_driver_gets_the_command_that_recovers_it(k):
    assert vfio(k, "bind", A, "--yes").exit_code == 0
    k.refuse_probe("rebellions", A)
    k.refuse_probe("vfio-pci", A)
    r = vfio(k, "unbind", A, "--yes", "-o", "json")
    assert r.exit_code == 1 and devices(r.stdout)[0]["status"] == "driverless"
    assert f"run `rblnctl vfio recover {A} --mode vm --root {k.root} --state-file {k.root / 'state.json'}`" in r.stderr


# -- vfio status --node: the same status, from a host pod on a cluster node ----------------------------


@pytest.fixture
def node_kubelet(apiserver, tmp_path):
    from tests.fakes import objects as o
    from tests.fakes import sysfs as ht
    from tests.fakes.hostkubelet import HostKubelet

    apiserver.add(o.node("gpu-a01"))
    kubelet = HostKubelet(apiserver, default=ht.build_host(tmp_path / "node", ht.npu_on_vfio()).root).start()
    yield kubelet
    kubelet.stop()
    assert kubelet.errors == []


def test_status_of_a_cluster_node(apiserver, node_kubelet):
    r = cli("vfio", "status", "--node", "gpu-a01", "-n", "tools", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    devs = devices(r.stdout, "VfioStatus")
    assert [(d["bdf"], d["driver"], d["vfioDevice"]) for d in devs] == [
        ("0000:3b:00.0", "vfio-pci", "/dev/vfio/42"), ("0000:5e:00.0", "vfio-pci", "/dev/vfio/43")]
    assert json.loads(r.stdout)["searched"] == "/sys/bus/pci/devices"
    [post] = apiserver.requests_matching("POST", r"/namespaces/tools/pods$")
    assert post.body["spec"]["nodeName"] == "gpu-a01"
    assert apiserver.list("Pod") == []
    table = cli("vfio", "status", "--node", "gpu-a01", server=apiserver.url)
    assert table.exit_code == 0 and table.stdout.splitlines()[0].split()[:3] == ["BDF", "MODEL", "DRIVER"]


def test_status_of_a_cluster_node_says_a_retry_of_its_pods_watch(apiserver, node_kubelet):
    """The pod's LIST answers 500 past the client's own read retries: `retrying: <error>` on stderr, then the
    status as without the fault."""
    from rblnctl.kube.client import READ_RETRIES

    apiserver.inject_fault(method="GET", path=r"/namespaces/tools/pods$", watch=False, status=500,
                           message="etcdserver: leader changed", times=READ_RETRIES + 1)
    r = cli("vfio", "status", "--node", "gpu-a01", "-n", "tools", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    [retried] = [ln for ln in r.stderr.splitlines() if "retrying:" in ln]
    assert "500" in retried and "leader changed" in retried
    assert [d["bdf"] for d in devices(r.stdout, "VfioStatus")] == ["0000:3b:00.0", "0000:5e:00.0"]


def test_status_of_a_cluster_node_whose_pod_cannot_run(apiserver, node_kubelet):
    node_kubelet.unschedulable["gpu-a01"] = "0/1 nodes are available: 1 node(s) were unschedulable."
    r = cli("vfio", "status", "--node", "gpu-a01", server=apiserver.url)
    assert r.exit_code == 1 and "cannot be scheduled: 0/1 nodes are available" in r.stderr and r.stdout == ""


@pytest.mark.parametrize("args, says", [
    (["--image", "x"], "--image only applies to --node"),
    (["--node", "n1", "--root", "/tmp"], "with --node the pod reads the node's own"),
])
def test_status_node_flag_misuse(args, says):
    r = cli("vfio", "status", *args)
    assert r.exit_code == 2 and says in r.stderr


def test_dry_run_server_is_refused_naming_the_host_not_an_unknown_option(tmp_path):
    """A host command has no API server to send a dry run to: say so about the flag the user typed."""
    r = cli("vfio", "bind", "--all", "--root", str(tmp_path), "--dry-run=server")
    assert r.exit_code == 2 and "--dry-run=server needs an API server; `bind` changes this host" in r.stderr
    assert "--server-dry-run" not in r.stderr


def test_a_holders_argv_cannot_forge_a_line_or_move_the_cursor(k):
    """A holder chooses its argv: ESC is escaped and a newline or CR folded, so each refusal stays one line."""
    k.add_process(4242, "vm", ["/dev/rbln0"], cmdline=["vm\x1b[2J", "a\nwarning: all clear\rb"])
    r = vfio(k, "bind", A, "--yes")
    assert r.exit_code == 1 and "\x1b" not in r.stderr and "\r" not in r.stderr, r.stderr
    assert "pid 4242 (vm\\x1b[2J a warning: all clear b) has /dev/rbln0 open" in r.stderr, r.stderr
    assert not any(line.startswith("warning: all clear") for line in r.stderr.splitlines()), r.stderr
    r = vfio(k, "bind", A, "--yes", "--force")
    assert r.exit_code == 0 and not any(line.startswith("warning: all clear") for line in r.stderr.splitlines())


# -- what a screen must not say: a hostile tester's findings ------------------------------------------------------


def pending_unbind(k: SimKernel) -> None:
    """`vfio unbind A --force` past a VM holding /dev/vfio/20: the kernel keeps the unbind waiting (pending)."""
    assert cli("vfio", "bind", A, "--yes", "--root", k.root).exit_code == 0
    k.add_process(3100, "qemu-kvm", ["/dev/vfio/20"])
    r = cli("vfio", "unbind", A, "--yes", "--force", "--timeout", "1s", "--root", k.root)
    assert r.exit_code == 1 and "pending" in r.stdout, r.stderr


def test_status_of_a_function_whose_override_is_unknown_says_unknown_not_none(k):
    pending_unbind(k)
    try:
        r = cli("vfio", "status", "--root", k.root)
        assert r.exit_code == 0 and f"{A}: unbind pending (pid " in r.stderr, r.stderr
        rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines()[1:]}
        assert rows[A][2:4] == ["<unknown>", "<unknown>"], r.stdout  # DRIVER, OVERRIDE: not "<none>" (none set)
        assert rows[B][2:4] == ["rebellions", "<none>"], r.stdout
        doc = {d["bdf"]: d for d in devices(cli("vfio", "status", "--root", k.root, "-o", "json").stdout)}
        assert (doc[A]["driverOverride"], doc[A]["driverOverrideKnown"]) == (None, False)
        assert (doc[B]["driverOverride"], doc[B]["driverOverrideKnown"]) == (None, True)
    finally:
        k.release_readers()


@pytest.mark.parametrize("command", ["bind", "unbind", "recover"])
@pytest.mark.parametrize("value", ["0.001", "500ms", "0.9"])
def test_a_timeout_shorter_than_a_second_is_refused_before_anything_is_read(k, command, value):
    """A bound shorter than starting the child that writes reports an unheld device as pending, held by a VFIO user
    rblnctl cannot see: a usage error, one line, exit 2, nothing written."""
    before = k.checksum()
    r = vfio(k, command, A, "--yes", "--timeout", value)
    assert r.exit_code == 2 and r.stdout == "", r.stderr
    assert r.stderr == f"error: --timeout must be at least 1s, not '{value}'\n", r.stderr
    assert k.checksum() == before and k.writes == []
    assert vfio(k, "bind", A, "--dry-run", "--timeout", "1s").exit_code == 0


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_unbind_all_with_nothing_to_do_prints_no_header_only_table(k, dry_run):
    """Nothing on vfio-pci and nothing recorded: no rows, so no table (as vfio status); -o json keeps its document."""
    r = vfio(k, "unbind", "--all", "--yes", *dry_run)
    assert r.exit_code == 0 and r.stdout == "", r.stdout
    assert "nothing to do" in r.stderr, r.stderr
    r = vfio(k, "unbind", "--all", "--yes", *dry_run, "-o", "json")
    assert r.exit_code == 0 and devices(r.stdout, "VfioChange") == []


def on_driver(k: SimKernel, bdf: str, driver: str) -> None:
    """The function's `driver` link names `driver` (a name the host chose, not one the user typed)."""
    (k.sys / "bus" / "pci" / "drivers" / driver).mkdir(exist_ok=True)
    link = k.pci_root / bdf / "driver"
    link.unlink()
    link.symlink_to(k.sys / "bus" / "pci" / "drivers" / driver)


@pytest.mark.parametrize("args", [[A, "--yes"], [A, "--dry-run"], ["--all", "--dry-run"]])
def test_a_driver_name_read_from_sysfs_that_fails_the_check_is_a_host_error_not_a_usage_error(k, args):
    on_driver(k, A, "rbln:drv")
    before = k.checksum()
    r = vfio(k, "bind", *args)
    assert r.exit_code == 1, r.stderr
    assert r.stderr == (f"error: function {A} is on driver 'rbln:drv', a name rblnctl will not write to sysfs\n"), \
        r.stderr
    assert k.checksum() == before and k.writes == []
    r = vfio(k, "unbind", A, "--yes", "--driver", "rbln:drv")  # a name the user typed: still a usage error
    assert r.exit_code == 2 and "invalid driver name 'rbln:drv'" in r.stderr, r.stderr


def test_a_refused_change_of_a_pending_function_shows_where_it_was_to_go_not_the_kernel_default(k):
    pending_unbind(k)
    try:
        for args, to in ((["recover"], "rebellions"), (["recover", "--mode", "vm"], "vfio-pci"),
                         (["bind"], "vfio-pci"), (["unbind"], "rebellions"), (["unbind", "--driver", "other"], "other"),
                         (["unbind"], None)):
            if to is None:  # no record: the kernel's default, which <default> says truly
                (k.root / "var/lib/rblnctl/vfio-state.json").unlink()
            r = cli("vfio", *args[:1], A, *args[1:], "--dry-run", "--root", k.root, "-o", "json")
            assert r.exit_code == 1 and "unbind pending" in r.stderr, (args, r.stderr)
            assert [(d["status"], d["toDriver"]) for d in devices(r.stdout)] == [("blocked", to)], args
    finally:
        k.release_readers()


def test_help_says_what_each_command_does_to_the_host_tree_and_what_unbind_all_takes():
    def text(*args: str) -> str:
        return " ".join(cli("vfio", *args, "--help").stdout.split()).replace("vfio- pci", "vfio-pci")  # folded

    status = text("status")
    assert "are read under it" in status and "written" not in status, status  # status never writes
    assert "read (and sys/ written) under it" in text("bind")
    unbind = text("unbind")
    # what _plan_unbind selects: on vfio-pci, or overridden to it, or recorded (driverless or on a host driver)
    assert "Every RBLN NPU on vfio-pci or with driver_override vfio-pci, and every one the state file records (left " \
           "without a driver: it gets its recorded driver back; already on a host driver: its record is dropped)" \
           in unbind, unbind
    assert "At least 1s." in unbind and "At least 1s." in text("recover")
