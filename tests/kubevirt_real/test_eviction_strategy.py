"""Issue 37 finding 8 on real KubeVirt v1.9.0: `evictionStrategy: LiveMigrate` and a VM passing an NPU through.

Suspected: virt-api answers the launcher's eviction 429 and starts a migration that cannot happen, so a drain or
set-mode waits to its timeout. What v1.9.0 does (pkg/virt-api/webhooks/validating-webhook/admitters/
pod-eviction-admitter.go admitLauncherPod): a VMI that is not live-migratable (its LiveMigratable condition not
True, staging/src/kubevirt.io/api/core/v1/types.go IsMigratable) under LiveMigrate is denied for good, "VMI NAME is
configured with an eviction strategy but is not live-migratable", with no evacuation mark and no migration. Shown
here against the real webhook, and rblnctl refusing that VM in its plan, before any write.
"""

from __future__ import annotations

import pytest

from tests.cluster.client import ApiFailure
from tests.kubevirt_real.test_guard import _permit
from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm

NODE = "npu-node-1"


def _live_migrate_by_default(kv) -> None:
    kv.api.mutate("KubeVirt", "kubevirt", "kubevirt", lambda o: o["spec"].setdefault("configuration", {})
                  .__setitem__("evictionStrategy", "LiveMigrate"))


def test_live_migrate_on_an_npu_vm_is_denied_for_good_and_refused_before_any_write(kv):
    kv.set_gates(["HostDevices"])
    _permit(kv)
    _live_migrate_by_default(kv)
    kv.api.create(vm(kv.namespace, "npu", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    vmi = kv.wait_vmi_phase("npu", "Running")
    assert vmi["status"]["nodeName"] == NODE
    assert not any(c.get("type") == "LiveMigratable" and c.get("status") == "True"
                   for c in vmi["status"].get("conditions") or [])
    (pod,) = kv.launcher_pods("npu")
    name = pod["metadata"]["name"]

    # The real webhook: denied, 429, no evacuation mark, no migration (a dry-run eviction: nothing persists).
    with pytest.raises(ApiFailure) as exc:
        kv.api.request("POST", f"/api/v1/namespaces/{kv.namespace}/pods/{name}/eviction",
                       {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name},
                        "deleteOptions": {"dryRun": ["All"]}})
    assert exc.value.status == 429
    assert "VMI npu is configured with an eviction strategy but is not live-migratable" in str(exc.value)
    assert not (kv.vmi("npu").get("status") or {}).get("evacuationNodeName")
    assert kv.api.list("VirtualMachineInstanceMigration", kv.namespace) == []

    # rblnctl: refused in the plan, naming the VM and the way out; nothing written (no cordon, no eviction).
    kv.mark()
    r = kv.rblnctl("node", "drain", NODE, "--evict-vms", "--yes", "--timeout", "600s")
    assert r.exit_code == 1, r.stderr
    said = " ".join(r.stderr.split())
    # The CR's default reached the VMI's own spec when it was created (v1.9.0 pkg/defaults/defaults.go
    # setDefaultEvictionStrategy), so that is where rblnctl finds it.
    assert vmi["spec"]["evictionStrategy"] == "LiveMigrate"
    assert f"runs KubeVirt VM {kv.namespace}/npu, whose eviction strategy is LiveMigrate (its VMI's " \
        "spec.evictionStrategy) but which is not live-migratable (LiveMigratable False, HostDeviceNotLiveMigratable)" \
        in said, r.stderr
    assert f"`virtctl stop npu -n {kv.namespace}`" in said and "--disable-eviction" in said, r.stderr
    assert kv.writes() == []
    assert not kv.api.get("Node", NODE)["spec"].get("unschedulable")
    assert [p["metadata"]["uid"] for p in kv.launcher_pods("npu")] == [pod["metadata"]["uid"]]
