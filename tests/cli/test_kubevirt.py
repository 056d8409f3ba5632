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
    assert out["changed"] is True and out["attempts"] == 1 and out["server_dry_run"] is False
    assert out["plan"]["feature_gates_before"] == ["Snapshot"]
    assert out["plan"]["feature_gates_after"] == ["Snapshot", "HostDevices", "HostDevicesWithDRA"]
    assert out["plan"]["disabled_gates_after"] == []
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
    assert "HostDevices, Snapshot" in r.stdout


def test_dry_run_prints_patch_and_before_after_and_writes_nothing(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot"]))
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "--dra", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == [] and gates(apiserver) == ["Snapshot"]
    assert "application/json-patch+json" in r.stdout
    assert '"op": "test"' in r.stdout and '"op": "replace"' in r.stdout
    assert "Snapshot, HostDevices, HostDevicesWithDRA" in r.stdout  # after
    assert "dry run" in r.stderr

    r = cli("kubevirt", "enable-gates", "--dry-run=client", "-o", "json", server=apiserver.url)
    out = json.loads(r.stdout)
    assert out["attempts"] == 0 and out["changed"] is False
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


def test_dry_run_and_server_dry_run_together_is_usage_error(apiserver):
    apiserver.add(o.kubevirt())
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "--dry-run", "--server-dry-run", server=apiserver.url)
    assert r.exit_code == 2 and "--dry-run" in r.stderr and r.stdout == ""
    assert apiserver.writes() == []


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


def test_unknown_gate_is_a_warning(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    r = cli("kubevirt", "enable-gates", "--yes", "SomeFutureGate", server=apiserver.url)
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


def test_without_yes_and_without_a_terminal_nothing_is_written(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    r = cli("kubevirt", "enable-gates", server=apiserver.url, input="y\n")  # piped input is not an answer
    assert r.exit_code == 2 and "--yes" in r.stderr
    assert apiserver.writes() == []


def test_confirmation_is_asked_without_yes(apiserver, monkeypatch):
    import rblnctl.cli.console

    monkeypatch.setattr(rblnctl.cli.console, "stdin_is_tty", lambda: True)
    apiserver.add(o.kubevirt(feature_gates=[]))
    r = cli("kubevirt", "enable-gates", server=apiserver.url, input="n\n")
    assert r.exit_code == 1 and apiserver.writes() == []
    assert "Patch KubeVirt kubevirt/kubevirt?" in r.stderr
    r = cli("kubevirt", "enable-gates", "-o", "json", server=apiserver.url, input="y\n")
    assert r.exit_code == 0, r.stderr
    # The prompt went to stderr, and stdout holds the JSON alone.
    assert "[y/N]" in r.stderr
    assert json.loads(r.stdout)["changed"] is True
    assert gates(apiserver) == ["HostDevices"]


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


def test_disable_gates_rolls_back(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["Snapshot", "HostDevices", "HostDevicesWithDRA"]))
    r = cli("kubevirt", "disable-gates", "HostDevicesWithDRA", "--add-to-disabled", "--yes", "-o", "yaml",
            server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    out = yaml.safe_load(r.stdout)
    assert out["plan"]["feature_gates_after"] == ["Snapshot", "HostDevices"]
    assert out["plan"]["disabled_gates_after"] == ["HostDevicesWithDRA"]
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
    assert r.exit_code == 1 and "no NPU node advertises" in r.stderr
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
    assert st["permitted_devices"] == [{"resource_name": "rebellions.ai/RBLN-CA25_PF",
                                        "pci_vendor_selector": "1EFF:1250", "external_resource_provider": True,
                                        "model": "CA25 PF"}]
    assert st["other_permitted_devices"] == 1


def test_status_table_and_yaml(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], disabled_gates=["HostDevicesWithDRA"], version="v1.9.0"))
    r = cli("kubevirt", "status", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "KubeVirt kubevirt/kubevirt" in r.stdout and "OFF" in r.stdout
    assert "HostDevicesWithDRA is in disabledFeatureGates" in " ".join(r.stdout.split())
    r = cli("kubevirt", "status", "-o", "yaml", server=apiserver.url)
    assert yaml.safe_load(r.stdout)["disabled_feature_gates"] == ["HostDevicesWithDRA"]


def test_status_without_kubevirt(apiserver):
    r = cli("kubevirt", "status", server=apiserver.url)
    assert r.exit_code == 1 and "no KubeVirt installation found" in r.stderr


def test_rerun_on_unknown_version_says_already_enabled_exit_0(apiserver):
    kv = o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], phase="Deploying")  # no version yet
    apiserver.add(kv)
    r = cli("kubevirt", "enable-gates", "--dra", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "already enabled" in r.stderr and apiserver.writes() == []
