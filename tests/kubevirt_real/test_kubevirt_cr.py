"""`kubevirt enable-gates|disable-gates|permit-devices|status` judged by real KubeVirt v1.9.0: virt-operator's
KubeVirt-CR update webhook (pkg/virt-operator/webhooks/kubevirt-update-admitter.go at v1.9.0) and the real
apiserver's audit log say what was written, refused or only dry-run.

What the update webhook does at v1.9.0, as these tests rely on it:
- when featureGates or disabledFeatureGates changed (featureGatesChanged), a gate in both lists is refused
  (validateFeatureGates: 422, `feature gate "X" exists on both "FeatureGates" and "DisabledFeatureGates"`);
  the create webhook (kubevirt-create-admitter.go) does not check it, so a CR can be created that way;
- an unregistered gate is not refused (nothing checks the names; featuregate.IsEnabled ignores it);
- a deprecated or GA gate is admitted with a `Warning` header (warnDeprecatedFeatureGates).
"""

from __future__ import annotations

import json


from tests.kubevirt_real.vms import SANDBOX_RESOURCE

KV_PATH = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"


def dev_config(kv) -> dict:
    return kv.kubevirt_cr()["spec"]["configuration"].get("developerConfiguration") or {}


def kv_writes(kv):
    return [w for w in kv.writes() if w.path == KV_PATH]


def recreate_kubevirt_cr(kv, *, feature_gates, disabled):
    """The KubeVirt CR deleted and created again with these gate lists, its status as virt-operator wrote it: the
    only way to a CR with a gate in both lists (the create webhook does not check what the update webhook does)."""
    old = kv.kubevirt_cr()
    kv.api.delete("KubeVirt", "kubevirt", "kubevirt")
    kv.api.wait_for(lambda: kv.kubevirt_cr() is None, timeout_s=30, message="the KubeVirt CR gone")
    spec = json.loads(json.dumps(old["spec"]))
    spec.setdefault("configuration", {})["developerConfiguration"] = {"featureGates": list(feature_gates),
                                                                      "disabledFeatureGates": list(disabled)}
    new = kv.api.create({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                         "metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": spec})
    new["status"] = old["status"]
    kv.api.update(new, sub="status")
    kv.mark()


def test_enable_gates_is_written_once_and_a_rerun_sends_nothing(kv):
    r = kv.rblnctl("kubevirt", "enable-gates", "--dra", "-y")
    assert r.exit_code == 0, r.stderr
    assert dev_config(kv)["featureGates"] == ["HostDevices", "HostDevicesWithDRA"]
    assert [(w.verb, w.dry_run, w.code) for w in kv_writes(kv)] == [("patch", False, 200)]

    kv.mark()
    again = kv.rblnctl("kubevirt", "enable-gates", "--dra", "-y")
    assert again.exit_code == 0, again.stderr
    assert "already enabled" in again.stderr and kv.writes() == []

    doc = json.loads(kv.rblnctl("kubevirt", "status", "-o", "json").stdout)
    assert {g["name"]: (g["effective"], g["reason"]) for g in doc["gates"]} == {
        "HostDevices": (True, "in featureGates"), "HostDevicesWithDRA": (True, "in featureGates")}


def test_enable_gates_dry_run_server_goes_through_the_webhook_and_stores_nothing(kv):
    before = kv.kubevirt_cr()["metadata"]["resourceVersion"]
    r = kv.rblnctl("kubevirt", "enable-gates", "--dry-run=server", "-y")
    assert r.exit_code == 0, r.stderr
    assert "the API server accepted every write; nothing was persisted" in r.stderr
    assert [(w.verb, w.dry_run, w.code) for w in kv_writes(kv)] == [("patch", True, 200)]
    cr = kv.kubevirt_cr()
    assert cr["metadata"]["resourceVersion"] == before and dev_config(kv)["featureGates"] == []


def test_a_gate_in_both_lists_is_refused_by_the_update_webhook_then_enabling_it_fixes_the_lists(kv):
    recreate_kubevirt_cr(kv, feature_gates=["Snapshot"], disabled=["Snapshot"])

    status = kv.rblnctl("kubevirt", "status")
    assert status.exit_code == 0, status.stderr
    assert "Snapshot in both featureGates and disabledFeatureGates" in status.stdout

    for dry in ([], ["--dry-run=server"]):
        kv.mark()
        r = kv.rblnctl("kubevirt", "enable-gates", *dry, "-y")
        assert r.exit_code == 1, (r.stdout, r.stderr)
        assert "Snapshot is in both featureGates and disabledFeatureGates: KubeVirt's update webhook will reject " \
               "this patch" in r.stderr  # rblnctl said so before it sent it
        assert 'admission webhook "kubevirt-update-validator.kubevirt.io" denied the request: feature gate ' \
               '"Snapshot" exists on both "FeatureGates" and "DisabledFeatureGates"' in r.stderr
        assert "Traceback" not in r.stderr and r.stderr.count("error:") == 1
        assert [(w.verb, w.dry_run, w.code) for w in kv_writes(kv)] == [("patch", bool(dry), 422)]
        assert dev_config(kv) == {"featureGates": ["Snapshot"], "disabledFeatureGates": ["Snapshot"]}

    # The remedy rblnctl names: enable (or disable) the gate explicitly, which takes it out of the other list.
    kv.mark()
    fixed = kv.rblnctl("kubevirt", "enable-gates", "Snapshot", "-y")
    assert fixed.exit_code == 0, fixed.stderr
    assert dev_config(kv) == {"featureGates": ["Snapshot", "HostDevices"], "disabledFeatureGates": []}
    assert [(w.verb, w.code) for w in kv_writes(kv)] == [("patch", 200)]


def test_disable_gates_add_to_disabled_turns_a_beta_gate_off_and_enable_gates_brings_it_back(kv):
    kv.set_gates(["HostDevices", "HostDevicesWithDRA"])
    r = kv.rblnctl("kubevirt", "disable-gates", "HostDevicesWithDRA", "--add-to-disabled", "-y")
    assert r.exit_code == 0, r.stderr
    assert dev_config(kv) == {"featureGates": ["HostDevices"], "disabledFeatureGates": ["HostDevicesWithDRA"]}
    doc = json.loads(kv.rblnctl("kubevirt", "status", "-o", "json").stdout)
    dra = next(g for g in doc["gates"] if g["name"] == "HostDevicesWithDRA")
    assert (dra["effective"], dra["disabled"]) == (False, True)
    kv.mark()
    again = kv.rblnctl("kubevirt", "disable-gates", "HostDevicesWithDRA", "--add-to-disabled", "-y")
    assert again.exit_code == 0, again.stderr
    assert kv.writes() == []  # both lists already say so

    # Enabling it again moves it out of disabledFeatureGates in the same patch: the webhook admits it.
    kv.mark()
    back = kv.rblnctl("kubevirt", "enable-gates", "--dra", "-y")
    assert back.exit_code == 0, back.stderr
    assert "removing it from there in the same patch" in back.stderr
    assert dev_config(kv) == {"featureGates": ["HostDevices", "HostDevicesWithDRA"], "disabledFeatureGates": []}
    assert [(w.verb, w.code) for w in kv_writes(kv)] == [("patch", 200)]


def test_an_unregistered_gate_is_refused_by_rblnctl_though_kubevirt_would_admit_it(kv):
    r = kv.rblnctl("kubevirt", "enable-gates", "HostDevice", "-y")
    assert r.exit_code == 2, r.stderr
    assert "did you mean HostDevices?" in r.stderr and kv.writes() == []

    # KubeVirt's validator does not check gate names: with --allow-unknown the write is admitted as it is.
    ok = kv.rblnctl("kubevirt", "enable-gates", "NoSuchGate", "--allow-unknown", "-y")
    assert ok.exit_code == 0, ok.stderr
    assert "unknown feature gate NoSuchGate" in ok.stderr
    assert dev_config(kv)["featureGates"] == ["HostDevices", "NoSuchGate"]
    assert [(w.verb, w.code) for w in kv_writes(kv)] == [("patch", 200)]


LIVE_MIGRATION_WARNING = "feature gate LiveMigration is deprecated"


def test_a_ga_gate_is_admitted_with_the_webhooks_warning(kv):
    r = kv.rblnctl("kubevirt", "enable-gates", "LiveMigration", "-y")
    assert r.exit_code == 0, r.stderr
    assert dev_config(kv)["featureGates"] == ["HostDevices", "LiveMigration"]
    assert [(w.verb, w.code) for w in kv_writes(kv)] == [("patch", 200)]


def test_the_webhooks_warning_for_a_ga_gate_is_printed(kv):
    r = kv.rblnctl("kubevirt", "enable-gates", "LiveMigration", "-y")
    assert r.exit_code == 0, r.stderr
    assert LIVE_MIGRATION_WARNING in r.stderr


def test_permit_devices_from_the_cluster_is_admitted_once_and_dry_run_server_stores_nothing(kv):
    dry = kv.rblnctl("kubevirt", "permit-devices", "--dry-run=server", "-y")
    assert dry.exit_code == 0, dry.stderr
    assert [(w.verb, w.dry_run, w.code) for w in kv_writes(kv)] == [("patch", True, 200)]
    assert "permittedHostDevices" not in kv.kubevirt_cr()["spec"]["configuration"]

    kv.mark()
    r = kv.rblnctl("kubevirt", "permit-devices", "-y")  # what npu-node-1 advertises: RBLN-CA22_PF
    assert r.exit_code == 0, r.stderr
    assert kv.kubevirt_cr()["spec"]["configuration"]["permittedHostDevices"] == {"pciHostDevices": [
        {"pciVendorSelector": "1EFF:1220", "resourceName": SANDBOX_RESOURCE, "externalResourceProvider": True}]}
    assert [(w.verb, w.dry_run, w.code) for w in kv_writes(kv)] == [("patch", False, 200)]

    kv.mark()
    again = kv.rblnctl("kubevirt", "permit-devices", "--resource-name", "RBLN-CA22_PF", "-y")
    assert again.exit_code == 0, again.stderr
    assert kv.writes() == []
    doc = json.loads(kv.rblnctl("kubevirt", "status", "-o", "json").stdout)
    assert [d["resourceName"] for d in doc["permittedDevices"]] == [SANDBOX_RESOURCE]
