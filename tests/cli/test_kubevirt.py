"""`rblnctl kubevirt ...` against the fake API server: flags, exit codes, stdout vs stderr, zero-write guarantees."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from tests.fakes import objects as o
from tests.helpers import cli

KV_PATH = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
NVIDIA = {"pciVendorSelector": "10DE:1EB8", "resourceName": "nvidia.com/TU104GL_Tesla_T4",
          "externalResourceProvider": True}


def gates(apiserver, ns="kubevirt", name="kubevirt"):
    return apiserver.get("KubeVirt", name, ns)["spec"]["configuration"]["developerConfiguration"].get("featureGates")


def pci(apiserver):
    return apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["permittedHostDevices"][
        "pciHostDevices"]


@pytest.fixture
def no_backoff(monkeypatch):
    """Make the conflict retry loop wait 0 s: the CLI's editors sleep through the library's one clock."""
    from rblnctl.clock import SYSTEM_CLOCK

    monkeypatch.setattr(SYSTEM_CLOCK, "sleep", lambda seconds, stop=None: False)


# -- enable-gates ---------------------------------------------------------------------------------


def test_no_kubevirt_is_a_clear_error(apiserver):
    r = cli("kubevirt", "enable-gates", "--yes", server=apiserver.url)
    assert r.exit_code == 1
    assert "no KubeVirt installation found" in r.stderr and r.stdout == ""


def test_two_crs_exit_2_and_list_them(apiserver):
    apiserver.add(o.kubevirt("kubevirt", "kubevirt"), o.kubevirt("kv2", "other"))
    r = cli("kubevirt", "enable-gates", "--yes", server=apiserver.url)
    assert r.exit_code == 2
    assert "kubevirt/kubevirt" in r.stderr and "kv2/other" in r.stderr and "--namespace" in r.stderr
    r = cli("kubevirt", "enable-gates", "--yes", "--name", "other", "-n", "kv2", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert gates(apiserver, "kv2", "other") == ["HostDevices"] and gates(apiserver) == []


def test_enable_gates_json_result_and_stderr_progress(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"], disabled_gates=["HostDevicesWithDRA"]))
    r = cli("kubevirt", "enable-gates", "--dra", "--yes", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["apiVersion"] == "rblnctl.rebellions.ai/v1alpha1" and out["kind"] == "KubeVirtGateChange"
    assert out["result"] == {"changed": True, "attempts": 1, "serverDryRun": False}
    assert out["plan"]["featureGatesBefore"] == ["Snapshot"]
    assert out["plan"]["featureGatesAfter"] == ["Snapshot", "HostDevices", "HostDevicesWithDRA"]
    assert out["plan"]["disabledGatesAfter"] == []
    assert "warning:" in r.stderr and "disabledFeatureGates" in r.stderr
    assert "enabled HostDevices, HostDevicesWithDRA on KubeVirt kubevirt/kubevirt" in " ".join(r.stderr.split())
    assert gates(apiserver) == ["Snapshot", "HostDevices", "HostDevicesWithDRA"]


def test_rerun_says_already_enabled_and_writes_nothing(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices", "Snapshot"]))
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", server=apiserver.url)  # no --yes needed: nothing to confirm
    assert r.exit_code == 0, r.stderr
    assert "already enabled" in r.stderr
    assert apiserver.writes() == []
    assert "HostDevices,Snapshot" in r.stdout


def test_dry_run_prints_patch_and_before_after_and_writes_nothing(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "--dra", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == [] and gates(apiserver) == ["Snapshot"]
    assert "application/json-patch+json" in r.stdout
    assert '"op":"test"' in r.stdout and '"op":"replace"' in r.stdout
    assert "Snapshot,HostDevices,HostDevicesWithDRA" in r.stdout  # after
    assert "dry run" in r.stderr

    r = cli("kubevirt", "enable-gates", "--dry-run=client", "-o", "json", server=apiserver.url)
    out = json.loads(r.stdout)
    assert out["result"] is None
    assert out["plan"]["patch"][-1] == {"op": "replace",
                                        "path": "/spec/configuration/developerConfiguration/featureGates",
                                        "value": ["Snapshot", "HostDevices"]}
    assert apiserver.writes() == []


def test_server_dry_run_sends_dry_run_all(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    r = cli("kubevirt", "enable-gates", "--dry-run=server", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    (w,) = apiserver.writes()
    assert w.method == "PATCH" and w.path == KV_PATH and w.query.get("dryRun") == ["All"]
    assert gates(apiserver) == [] and "nothing was persisted" in r.stderr


def test_server_dry_run_with_nothing_to_do_says_so_not_that_the_server_accepted_it(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "--dry-run=server", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == []
    assert "already enabled" in r.stderr and "accepted every write" not in r.stderr


def test_the_last_dry_run_flag_wins_as_in_kubectl(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "--dry-run=server", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == [] and "dry run: nothing was sent" in r.stderr  # client: nothing sent
    r = cli("kubevirt", "enable-gates", "--dry-run", "--dry-run=server", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert [w.query.get("dryRun") for w in apiserver.writes()] == [["All"]] and gates(apiserver) == []


def test_dry_run_that_would_be_refused_exits_1_after_showing_the_plan(apiserver):
    """A CI dry run must fail when the real run would be refused (here: --dra on KubeVirt 1.8)."""
    apiserver.add(o.kubevirt(feature_gates=[], version="v1.8.2"))
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "--dra", "--dry-run", "-o", "json", server=apiserver.url)
    assert r.exit_code == 1
    assert json.loads(r.stdout)["plan"]["blockers"] and "refusing to edit KubeVirt kubevirt/kubevirt" in r.stderr
    assert "v1.8.2" in r.stderr and apiserver.writes() == []


def test_dra_on_old_kubevirt_refused_then_forced(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], version="v1.8.2"))
    r = cli("kubevirt", "enable-gates", "--dra", "--yes", server=apiserver.url)
    assert r.exit_code == 1
    assert "v1.8.2" in r.stderr and "1.9.0" in r.stderr and "--force" in r.stderr
    assert apiserver.writes() == []
    r = cli("kubevirt", "enable-gates", "--dra", "--force", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert gates(apiserver) == ["HostDevices", "HostDevicesWithDRA"]


@pytest.mark.parametrize("bad", ["Host Devices", "", "Gate-1"])
def test_malformed_gate_exits_2_without_touching_the_cluster(apiserver, bad):
    apiserver.add(o.kubevirt())
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "--yes", bad, server=apiserver.url)
    assert r.exit_code == 2 and "malformed feature gate name" in r.stderr
    r = cli("kubevirt", "disable-gates", "--yes", bad, server=apiserver.url)
    assert r.exit_code == 2
    assert apiserver.requests == []


def test_unknown_gate_is_bad_input_with_nothing_written(apiserver):
    """issue 21: `enable-gates HostDevice` wrote HostDevice beside HostDevices (exit 0, a warning)."""
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "HostDevice", "--yes", server=apiserver.url)
    assert r.exit_code == 2
    assert "unknown KubeVirt feature gate 'HostDevice' (did you mean HostDevices?)" in r.stderr
    assert "(pass --allow-unknown)" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert apiserver.writes() == [] and apiserver.requests == []
    assert gates(apiserver) == []


def test_unknown_gate_is_a_warning_with_allow_unknown(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    r = cli("kubevirt", "enable-gates", "--yes", "SomeFutureGate", "--allow-unknown", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "unknown feature gate SomeFutureGate" in r.stderr
    assert gates(apiserver) == ["HostDevices", "SomeFutureGate"]


def test_forbidden_patch_exit_4_names_verb_resource_namespace(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.forbid("patch", "kubevirts.kubevirt.io", namespace="kubevirt")
    r = cli("kubevirt", "enable-gates", "--yes", server=apiserver.url)
    assert r.exit_code == 4
    err = " ".join(r.stderr.split())
    assert "patch" in err and "kubevirts.kubevirt.io" in err and 'namespace "kubevirt"' in err


def test_cr_being_deleted_is_refused(apiserver):
    kv = o.kubevirt(feature_gates=[])
    kv["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    kv["metadata"]["finalizers"] = ["foregroundDeleteKubeVirt"]
    apiserver.add(kv)
    r = cli("kubevirt", "enable-gates", "--yes", server=apiserver.url)
    assert r.exit_code == 1 and "being deleted" in r.stderr
    r = cli("kubevirt", "permit-devices", "--resource-name", "RBLN-CA22_PF", "--yes", server=apiserver.url)
    assert r.exit_code == 1 and "being deleted" in r.stderr
    assert apiserver.writes() == []


def test_a_reversible_edit_never_prompts_so_scripts_need_no_yes(apiserver, monkeypatch):
    """kubectl and helm do not ask before an edit that can be undone; enable-gates neither (on a terminal too).
    Turning a gate off is disruptive (issue 28 finding 7: `--yes` was offered and nothing ever asked): without a
    terminal and without --yes it is exit 2, nothing written, as docs/kubevirt.md says."""
    import rblnctl.cli.console

    monkeypatch.setattr(rblnctl.cli.console, "stdin_is_tty", lambda: True)
    apiserver.add(o.kubevirt(feature_gates=[]))
    r = cli("kubevirt", "enable-gates", "-o", "json", server=apiserver.url, input="n\n")
    assert r.exit_code == 0, r.stderr
    assert "[y/N]" not in r.stderr and json.loads(r.stdout)["result"]["changed"] is True
    assert gates(apiserver) == ["HostDevices"]
    r = cli("kubevirt", "disable-gates", "HostDevices", server=apiserver.url, input="n\n")  # a terminal: asked
    assert r.exit_code == 1 and "Patch KubeVirt kubevirt/kubevirt? [y/N]" in r.stderr
    assert "not confirmed; nothing was changed" in r.stderr and gates(apiserver) == ["HostDevices"]
    monkeypatch.setattr(rblnctl.cli.console, "stdin_is_tty", lambda: False)
    apiserver.clear_requests()
    r = cli("kubevirt", "disable-gates", "HostDevices", server=apiserver.url)  # no terminal, no --yes
    assert r.exit_code == 2 and "pass --yes" in r.stderr and apiserver.writes() == []
    r = cli("kubevirt", "disable-gates", "HostDevices", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert gates(apiserver) == []


DRA_DEVICE = {"name": "npu0", "claimName": "rbln-npu-1", "requestName": "npu0"}


def test_disabling_a_gate_a_running_vm_needs_is_refused_naming_it(apiserver):
    """Issue 28 finding 7: `disable-gates HostDevices` turned the gate off while a running VM held NPUs, with no
    prompt or warning. The running-VM guard refuses it as set-mode and set-method do, naming the VM and how to stop
    it; --evict-vms (the guard's one override) goes ahead with a warning."""
    apiserver.add(o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"]),
                  o.vmi("team", "train", "n1", host_devices=["rebellions.ai/RBLN-CA22_PF"]),
                  o.vmi("team", "done", "n1", host_devices=["rebellions.ai/RBLN-CA22_PF"], phase="Succeeded"),
                  o.vmi("team", "plain", "n1"))
    apiserver.clear_requests()
    r = cli("kubevirt", "disable-gates", "HostDevices", "--yes", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    assert "refusing to edit KubeVirt kubevirt/kubevirt" in r.stderr
    assert "VM team/train (rebellions.ai/RBLN-CA22_PF) runs with NPUs that need HostDevices" in r.stderr
    assert "`virtctl stop train -n team`" in r.stderr and "(pass --evict-vms to go ahead anyway)" in r.stderr
    assert "team/done" not in r.stderr and "team/plain" not in r.stderr  # finished, or no NPU: nothing at stake
    assert apiserver.writes() == []
    r = cli("kubevirt", "disable-gates", "HostDevices", "--yes", "--evict-vms", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "going ahead although 1 running VM(s) depend on it (team/train)" in r.stderr
    assert gates(apiserver) == ["HostDevicesWithDRA"]


def test_only_a_gate_really_turned_off_is_guarded_and_only_for_the_vms_that_need_it(apiserver):
    """HostDevicesWithDRA is Beta in KubeVirt 1.9: out of featureGates it stays on, so nothing is at stake; listed
    in disabledFeatureGates it goes off, and only a VM with a DRA host device needs it."""
    apiserver.add(o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], version="v1.9.0"),
                  o.vmi("team", "sandbox", "n1", host_devices=["rebellions.ai/RBLN-CA22_PF"]),
                  o.vmi("team", "dra", "n1", host_devices=[DRA_DEVICE]))
    r = cli("kubevirt", "disable-gates", "HostDevicesWithDRA", "--dry-run", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["turnsOff"] == []
    r = cli("kubevirt", "disable-gates", "HostDevicesWithDRA", "--add-to-disabled", "--dry-run", "-o", "json",
            server=apiserver.url)
    assert r.exit_code == 1
    doc = json.loads(r.stdout)["plan"]
    assert doc["turnsOff"] == ["HostDevicesWithDRA"] and doc["vms"] == ["team/dra (claim rbln-npu-1)"]
    assert [b["override"] for b in doc["blockers"]] == ["evict_vms"]


def test_concurrent_edit_is_retried_and_reported(apiserver, no_backoff):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    fired = []

    def other_admin(req):
        if req.method == "PATCH" and not fired:
            fired.append(1)
            apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", lambda kv: kv["spec"]["configuration"][
                "developerConfiguration"]["featureGates"].append("CPUManager"))

    apiserver.on_request(other_admin)
    r = cli("kubevirt", "enable-gates", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "changed while we were writing it" in r.stderr
    assert gates(apiserver) == ["Snapshot", "CPUManager", "HostDevices"]


def test_persistent_conflict_exit_1_with_clear_message(apiserver, no_backoff):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.inject_fault(method="PATCH", path="/kubevirts/", status=409, reason="Conflict",
                           message="the object has been modified", times=10)
    r = cli("kubevirt", "enable-gates", "--yes", server=apiserver.url)
    assert r.exit_code == 1
    assert "gave up after 5 attempts" in " ".join(r.stderr.split())
    assert len([w for w in apiserver.writes() if w.method == "PATCH"]) == 5
    assert gates(apiserver) == []


@pytest.mark.parametrize("args", [
    ("disable-gates", "HostDevices"),
    ("enable-gates", "--dra"),
    ("permit-devices", "--resource-name", "RBLN-CA22_PF"),
])
def test_lost_reply_on_the_patch_is_settled_by_reading_the_cr_back(apiserver, args):
    apiserver.add(o.kubevirt(version="v1.9.0", feature_gates=["HostDevices"]))
    apiserver.inject_fault(method="PATCH", path="kubevirts", lose_reply=True)
    r = cli("kubevirt", *args, "--yes", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["result"] == {"changed": True, "attempts": 1, "serverDryRun": False}
    assert "may have been applied" not in r.stderr
    patches = [w for w in apiserver.writes() if w.method == "PATCH"]
    assert len(patches) == 1 and patches[0].reply_lost and patches[0].applied


def test_lost_reply_that_did_not_land_is_retried_and_reported(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.inject_fault(method="PATCH", path="kubevirts", drop=True)
    r = cli("kubevirt", "enable-gates", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "reply to the patch was lost" in r.stderr and "changed while we were writing" not in r.stderr
    assert gates(apiserver) == ["HostDevices"]


def test_lost_reply_and_failed_read_back_exit_3(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.inject_fault(method="PATCH", path="kubevirts", lose_reply=True)
    apiserver.forbid("get", "kubevirts")  # the plan lists; only the read-back GETs
    r = cli("kubevirt", "disable-gates", "HostDevices", "--yes", server=apiserver.url)
    assert r.exit_code == 3
    assert "may have been applied" in r.stderr and "reading KubeVirt kubevirt/kubevirt back" in r.stderr


def test_disable_gates_rolls_back(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot", "HostDevices", "HostDevicesWithDRA"]))
    r = cli("kubevirt", "disable-gates", "HostDevicesWithDRA", "--add-to-disabled", "--yes", "-o", "yaml",
            server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    out = yaml.safe_load(r.stdout)
    assert out["plan"]["featureGatesAfter"] == ["Snapshot", "HostDevices"]
    assert out["plan"]["disabledGatesAfter"] == ["HostDevicesWithDRA"]
    dev = apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["developerConfiguration"]
    assert dev == {"featureGates": ["Snapshot", "HostDevices"], "disabledFeatureGates": ["HostDevicesWithDRA"]}
    apiserver.clear_requests()
    r = cli("kubevirt", "disable-gates", "HostDevicesWithDRA", "--add-to-disabled", "--yes", server=apiserver.url)
    assert r.exit_code == 0 and "already disabled" in r.stderr and apiserver.writes() == []


def test_disable_gates_needs_a_gate(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.clear_requests()
    r = cli("kubevirt", "disable-gates", "--yes", server=apiserver.url)
    assert r.exit_code == 2 and "GATE" in r.stderr and apiserver.requests == []


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_reads_back_the_gates(apiserver, kubeconfig):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    r = cli("--kubeconfig", str(kubeconfig), "kubevirt", "enable-gates", "--dra", "--yes")
    assert r.exit_code == 0, r.stderr
    got = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "kubevirt", "-n", "kubevirt", "kubevirt", "-o",
         "jsonpath={.spec.configuration.developerConfiguration.featureGates}"],
        capture_output=True, text=True, timeout=30,
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == ["Snapshot", "HostDevices", "HostDevicesWithDRA"]


# -- permit-devices -------------------------------------------------------------------------------


def test_permit_devices_merges_with_foreign_entries(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[NVIDIA]))
    r = cli("kubevirt", "permit-devices", "--resource-name", "rebellions.ai/RBLN-CA22_PF",
            "--resource-name", "rebellions.ai/RBLN-CA25_VF", "--yes", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["plan"]["added"] == ["rebellions.ai/RBLN-CA22_PF", "rebellions.ai/RBLN-CA25_VF"]
    assert pci(apiserver) == [
        NVIDIA,
        {"pciVendorSelector": "1EFF:1220", "resourceName": "rebellions.ai/RBLN-CA22_PF",
         "externalResourceProvider": True},
        {"pciVendorSelector": "1EFF:1251", "resourceName": "rebellions.ai/RBLN-CA25_VF",
         "externalResourceProvider": True},
    ]
    apiserver.clear_requests()
    r = cli("kubevirt", "permit-devices", "--resource-name", "rebellions.ai/RBLN-CA22_PF", server=apiserver.url)
    assert r.exit_code == 0 and "already permitted" in r.stderr and apiserver.writes() == []


def test_permit_devices_dry_run_shows_patch_and_writes_nothing(apiserver):
    apiserver.add(o.kubevirt(permitted_pci=[NVIDIA]))
    apiserver.clear_requests()
    r = cli("kubevirt", "permit-devices", "--resource-name", "RBLN-CA22_PF", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "/spec/configuration/permittedHostDevices/pciHostDevices" in r.stdout and "added" in r.stdout
    assert apiserver.writes() == [] and pci(apiserver) == [NVIDIA]


def test_permit_devices_unknown_model_exit_2_lists_known(apiserver):
    apiserver.add(o.kubevirt())
    apiserver.clear_requests()
    r = cli("kubevirt", "permit-devices", "--resource-name", "rebellions.ai/RBLN-ZZ99_PF", server=apiserver.url)
    assert r.exit_code == 2
    err = " ".join(r.stderr.split())
    assert "ZZ99" in err and "CA22" in err and "=1EFF:<device>" in err
    assert apiserver.requests == []


def test_permit_devices_fix_only_with_flag(apiserver):
    entry = {"pciVendorSelector": "1EFF:1220", "resourceName": "rebellions.ai/RBLN-CA22_PF",
             "externalResourceProvider": False}
    apiserver.add(o.kubevirt(permitted_pci=[entry]))
    r = cli("kubevirt", "permit-devices", "--resource-name", "RBLN-CA22_PF", "--yes", server=apiserver.url)
    assert r.exit_code == 0 and "externalResourceProvider false" in r.stderr and "(pass --fix)" in r.stderr
    assert apiserver.writes() == []
    r = cli("kubevirt", "permit-devices", "--fix", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert pci(apiserver) == [{**entry, "externalResourceProvider": True}]
    assert "fixed rebellions.ai/RBLN-CA22_PF" in r.stderr


def test_permit_devices_from_cluster(apiserver):
    apiserver.add(o.npu_node("vm-a", mode="vm-passthrough", product="RBLN-CA25"),
                  o.npu_node("ct-a", mode="container"), o.kubevirt(permitted_pci=[]))
    r = cli("kubevirt", "permit-devices", "--from-cluster", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert [e["resourceName"] for e in pci(apiserver)] == ["rebellions.ai/RBLN-CA25_PF"]


def test_permit_devices_without_a_flag_permits_what_the_cluster_advertises(apiserver):
    apiserver.add(o.kubevirt(permitted_pci=[]))
    r = cli("kubevirt", "permit-devices", "--yes", server=apiserver.url)
    assert r.exit_code == 1 and "no NPU node is in vm-passthrough mode yet" in r.stderr
    assert "no NPU node was found; what NFD labelled: `rblnctl --server" in r.stderr  # issue 39: a command that runs
    apiserver.add(o.npu_node("vm-a", mode="vm-passthrough", product="RBLN-CR13"))
    r = cli("kubevirt", "permit-devices", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert [e["resourceName"] for e in pci(apiserver)] == ["rebellions.ai/RBLN-CR13_PF"]
    r = cli("kubevirt", "permit-devices", "-l", "a=b", "--resource-name", "RBLN-CA22_PF", server=apiserver.url)
    assert r.exit_code == 2 and "--from-cluster" in r.stderr


# -- status ---------------------------------------------------------------------------------------


def test_status_json(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0",
                             permitted_pci=[NVIDIA, ("1EFF:1250", "rebellions.ai/RBLN-CA25_PF")]))
    r = cli("kubevirt", "status", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    st = json.loads(r.stdout)
    assert (st["name"], st["namespace"], st["phase"], st["version"]) == ("kubevirt", "kubevirt", "Deployed", "v1.9.0")
    assert {g["name"]: g["effective"] for g in st["gates"]} == {"HostDevices": True, "HostDevicesWithDRA": True}
    assert st["kind"] == "KubeVirtStatus"
    assert st["permittedDevices"] == [{"resourceName": "rebellions.ai/RBLN-CA25_PF",
                                       "pciVendorSelector": "1EFF:1250", "externalResourceProvider": True,
                                       "model": "CA25 PF"}]
    assert st["otherPermittedDevices"] == 1


def test_status_table_and_yaml(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], disabled_gates=["HostDevicesWithDRA"], version="v1.9.0"))
    r = cli("kubevirt", "status", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "kubevirt/kubevirt" in r.stdout and "HostDevicesWithDRA   off" in r.stdout
    assert "HostDevicesWithDRA is in disabledFeatureGates" in " ".join(r.stdout.split())
    r = cli("kubevirt", "status", "-o", "yaml", server=apiserver.url)
    assert yaml.safe_load(r.stdout)["disabledFeatureGates"] == ["HostDevicesWithDRA"]


def test_status_without_kubevirt(apiserver):
    r = cli("kubevirt", "status", server=apiserver.url)
    assert r.exit_code == 1 and "no KubeVirt installation found" in r.stderr


def test_rerun_on_unknown_version_says_already_enabled_exit_0(apiserver):
    kv = o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], phase="Deploying")  # no version yet
    apiserver.add(kv)
    r = cli("kubevirt", "enable-gates", "--dra", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "already enabled" in r.stderr and apiserver.writes() == []


# -- a KubeVirt CR the HyperConverged Cluster Operator manages ------------------------------------


@pytest.mark.parametrize("args, field", [
    (("enable-gates", "--dra"), "kubevirt.kubevirt.io/jsonpatch"),
    (("disable-gates", "HostDevices"), "kubevirt.kubevirt.io/jsonpatch"),
    (("permit-devices", "--resource-name", "rebellions.ai/RBLN-CA22_PF"), "spec.permittedHostDevices.pciHostDevices"),
])
def test_an_hco_managed_kubevirt_is_refused_pointing_to_the_hyperconverged_cr(apiserver, args, field):
    apiserver.add(o.hco_kubevirt(feature_gates=["CPUManager", "HostDevices", "Snapshot"]))
    for dry in ((), ("--dry-run",)):
        r = cli("kubevirt", *args, "--yes", *dry, server=apiserver.url)
        assert r.exit_code == 1, r.stderr
        line, = r.stderr.strip().splitlines()
        assert line.startswith("error: KubeVirt kubevirt-hyperconverged/kubevirt-kubevirt-hyperconverged is managed "
                               "by the HyperConverged Cluster Operator")
        assert "kubectl edit hyperconverged kubevirt-hyperconverged -n kubevirt-hyperconverged" in line
        assert field in line
    assert apiserver.writes() == []


def test_an_hco_managed_kubevirt_that_needs_no_change_is_not_an_error(apiserver):
    apiserver.add(o.hco_kubevirt(feature_gates=["CPUManager", "HostDevices", "Snapshot"]))
    r = cli("kubevirt", "enable-gates", "--yes", server=apiserver.url)  # HCO always enables HostDevices
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == []


# -- the server's Warning headers (issue 27) ----------------------------------------------------------


def _warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Warning: ")]


GA_WARNING = ('Warning: feature gate {} is deprecated (feature state is "General Availability"), therefore it can '
              'be safely removed and is redundant. For more info, please look at: '
              'https://github.com/kubevirt/kubevirt/blob/main/docs/deprecation.md')


def test_the_kubevirt_webhooks_warnings_are_printed_as_kubectl_prints_them_and_stdout_stays_json(apiserver):
    """virt-operator's KubeVirt-CR webhook warns on every GA or deprecated gate of the changed list (its text, as
    the real v1.9.0 webhook answers); kubectl prints each as `Warning: <text>` on stderr; so does rblnctl."""
    apiserver.add(o.kubevirt(feature_gates=["NUMA"]))
    r = cli("kubevirt", "enable-gates", "LiveMigration", "--yes", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["featureGatesAfter"] == ["NUMA", "HostDevices", "LiveMigration"]
    assert _warning_lines(r.stderr) == [GA_WARNING.format("NUMA"), GA_WARNING.format("LiveMigration")]
    assert "Warning:" not in r.stdout


def test_a_server_dry_run_shows_the_warnings_too_and_an_unchanged_list_none(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    r = cli("kubevirt", "enable-gates", "GPU", "--yes", "--dry-run=server", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert _warning_lines(r.stderr) == [GA_WARNING.format("GPU")]
    assert gates(apiserver) == ["HostDevices"]
    r = cli("kubevirt", "disable-gates", "Snapshot", "--yes", server=apiserver.url)  # nothing to write: no reply
    assert _warning_lines(r.stderr) == []
