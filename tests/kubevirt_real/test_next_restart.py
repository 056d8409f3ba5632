"""vm attach|detach --next-restart on real KubeVirt v1.9.0: the running VM's spec changed and the VM left running,
virt-controller's RestartRequired condition (the one the fake's virt-controller copies), `vm list` and `vm diagnose`
showing the staged change, and the next `vm restart --wait` applying it (a new VMI, its virt-launcher pod asking for
the new count, the condition gone)."""

from __future__ import annotations

import json

from tests.cluster.client import ApiFailure
from tests.fakes.apiserver.kubevirt import RESTART_REQUIRED, RESTART_REQUIRED_MESSAGE
from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm

PERMITTED = {"pciHostDevices": [{"pciVendorSelector": "1EFF:1220", "resourceName": SANDBOX_RESOURCE,
                                 "externalResourceProvider": True}]}


def _running_vm(kv, name: str, npus: int) -> dict:
    """HostDevices on and the stack's sandbox resource permitted (as an administrator sets them), then a running VM
    with `npus` NPUs; its VMI once Running."""
    def configure(o: dict) -> None:
        conf = o["spec"].setdefault("configuration", {})
        conf.setdefault("developerConfiguration", {})["featureGates"] = ["HostDevices"]
        conf["permittedHostDevices"] = PERMITTED
    kv.api.mutate("KubeVirt", "kubevirt", "kubevirt", configure)

    def created() -> bool:  # virt-api's webhook sees the gate once its informer has the CR
        try:
            kv.api.create(vm(kv.namespace, name, run_strategy="Always", host_devices=[SANDBOX_RESOURCE] * npus))
            return True
        except ApiFailure as e:
            if "feature gate is not enabled" not in str(e.body):
                raise
            return False
    kv.api.wait_for(created, timeout_s=30, interval_s=0.2, message="the VM admitted with HostDevices on")
    return kv.wait_vmi_phase(name, "Running")


def _restart_required(kv, name: str) -> dict | None:
    found = [c for c in kv.vm(name).get("status", {}).get("conditions") or [] if c["type"] == RESTART_REQUIRED]
    return found[0] if found else None


def _launcher_npus(kv, name: str, vmi_uid: str) -> str | None:
    pods = [p for p in kv.launcher_pods(name) if p["metadata"]["labels"].get("kubevirt.io/created-by") == vmi_uid]
    limits = [c["resources"].get("limits", {}) for p in pods for c in p["spec"]["containers"] if c["name"] == "compute"]
    return limits[0].get(SANDBOX_RESOURCE) if limits else None


def test_next_restart_stages_the_change_and_vm_restart_applies_it(kv):
    vmi = _running_vm(kv, "staged", 2)
    kv.mark()
    r = kv.rblnctl("vm", "attach", "staged", "-n", kv.namespace, "--npus", "4", "--next-restart", "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["plan"]["nextRestart"] is True and doc["plan"]["runningNpus"] == 2 and doc["result"]["changed"]
    assert f"VM {kv.namespace}/staged: 2 -> 4 NPU(s) at its next restart; it runs with 2 until then" in r.stderr
    # one write, the VM patch: no stop, no start, the same VMI with its 2 NPUs
    assert [(w.verb, w.path.rsplit("/", 2)[-2:]) for w in kv.writes()] == [("patch", ["virtualmachines", "staged"])]
    assert kv.vmi("staged")["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert _launcher_npus(kv, "staged", vmi["metadata"]["uid"]) == "2"

    # virt-controller marks it, as the fake's virt-controller does
    condition = kv.api.wait_for(lambda: _restart_required(kv, "staged"), timeout_s=30, interval_s=0.2,
                                message="RestartRequired on the VM")
    assert {k: v for k, v in condition.items() if k != "lastTransitionTime"} == {
        "type": RESTART_REQUIRED, "status": "True", "lastProbeTime": None, "message": RESTART_REQUIRED_MESSAGE}

    r = kv.rblnctl("vm", "list", "-n", kv.namespace)
    assert r.exit_code == 0, r.stderr
    row = r.stdout.splitlines()[1].split()
    assert row[:5] == ["staged", "Running,RestartPending", vmi["status"]["nodeName"], "2->4", "sandbox"]
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    (item,) = json.loads(kv.rblnctl("vm", "list", "-n", kv.namespace, "-o", "json").stdout)["items"]
    assert (item["npus"], item["runningNpus"], item["restartPending"]) == (4, 2, True)
    assert item["restartRequired"]["message"] == RESTART_REQUIRED_MESSAGE

    d = json.loads(kv.rblnctl("vm", "diagnose", "staged", "-n", kv.namespace, "-o", "json").stdout)
    request = next(link for link in d["links"] if link["name"] == "NpuRequest")
    assert request["status"] == "PASS"
    assert any("its running VMI passes 2 (2x rebellions.ai/RBLN-CA22_PF) until it restarts" in e
               for e in request["evidence"])
    assert f"KubeVirt: RestartRequired: {RESTART_REQUIRED_MESSAGE}" in request["evidence"]
    assert any("its spec asks for 4 NPU(s), its running VMI passes 2 until it restarts" in w for w in d["warnings"])

    r = kv.rblnctl("vm", "restart", "staged", "-n", kv.namespace, "--yes", "--wait", "--timeout", "90s")
    assert r.exit_code == 0, r.stderr
    assert "with 4 NPU(s) attached" in r.stderr
    new = kv.vmi("staged")
    assert new["metadata"]["uid"] != vmi["metadata"]["uid"]
    assert len(new["spec"]["domain"]["devices"]["hostDevices"]) == 4
    assert _launcher_npus(kv, "staged", new["metadata"]["uid"]) == "4"
    assert _restart_required(kv, "staged") is None


def test_dry_runs_stage_nothing(kv):
    _running_vm(kv, "dry", 1)
    before = kv.vm("dry")
    kv.mark()
    r = kv.rblnctl("vm", "attach", "dry", "-n", kv.namespace, "--npus", "2", "--next-restart", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert kv.writes() == [] and "next restart: the VM keeps running with 1 NPU(s)" in r.stdout
    r = kv.rblnctl("vm", "attach", "dry", "-n", kv.namespace, "--npus", "2", "--next-restart", "--dry-run=server")
    assert r.exit_code == 0, r.stderr  # virt-api's VM webhook admitted the change of a running VM's hostDevices
    writes = kv.writes()
    assert [w.verb for w in writes] == ["patch"] and all(w.dry_run for w in writes)
    after = kv.vm("dry")
    assert after["metadata"]["generation"] == before["metadata"]["generation"] and after["spec"] == before["spec"]
    assert _restart_required(kv, "dry") is None


def test_detach_next_restart_then_putting_it_back_clears_the_condition(kv):
    _running_vm(kv, "back", 1)
    r = kv.rblnctl("vm", "detach", "back", "-n", kv.namespace, "--next-restart")
    assert r.exit_code == 0, r.stderr
    kv.api.wait_for(lambda: _restart_required(kv, "back"), timeout_s=30, interval_s=0.2,
                    message="RestartRequired on the VM")
    r = kv.rblnctl("vm", "attach", "back", "-n", kv.namespace, "--npus", "1", "--next-restart", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["nextRestart"] is False  # the spec asks again for what runs
    kv.api.wait_for(lambda: _restart_required(kv, "back") is None, timeout_s=30, interval_s=0.2,
                    message="RestartRequired gone")
