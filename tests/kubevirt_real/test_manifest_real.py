"""`rblnctl vm manifest | kubectl apply -f -` on real KubeVirt v1.9.0: admitted by virt-api's VM webhook and run by
virt-controller (the launcher pod carries the NPUs: sandbox requests, or DRA claims the real scheduler allocates),
and refused with KubeVirt's own words, as kubectl prints them, while a gate is off.

KubeVirt v1.9.0 (pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go): a hostDevices entry
needs HostDevices ("Host Devices feature gate is not enabled in kubevirt-config"); a DRA one (claimName/requestName)
also needs HostDevicesWithDRA, Beta and on by default from v1.9.0, so only listing it in disabledFeatureGates turns
it off ("... contains DRA enabled HostDevices but feature gate is not enabled").
"""

from __future__ import annotations

from tests.kubevirt_real.helpers import DRA_NODE, SANDBOX_NODE, dra_world, kubectl, sandbox_ready
from tests.kubevirt_real.vms import SANDBOX_RESOURCE


def manifest(kv, name, *args):
    r = kv.rblnctl("vm", "manifest", name, "-n", kv.namespace, "--memory", "64Mi", *args)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def compute(pod):
    return next(c for c in pod["spec"]["containers"] if c["name"] == "compute")


def test_a_sandbox_manifest_is_admitted_and_its_launcher_requests_the_npus(kv):
    sandbox_ready(kv)
    applied = kubectl(kv, "apply", "-f", "-", input=manifest(kv, "sb", "--npus", "2"))
    assert applied.returncode == 0, applied.stderr
    vmi = kv.wait_vmi_phase("sb", "Running")
    assert vmi["status"]["nodeName"] == SANDBOX_NODE  # the only node advertising the resource
    (pod,) = kv.launcher_pods("sb")
    res = compute(pod)["resources"]
    assert res["requests"][SANDBOX_RESOURCE] == res["limits"][SANDBOX_RESOURCE] == "2"


def test_a_sandbox_manifest_is_refused_while_host_devices_is_off(kv):
    sandbox_ready(kv, gates=())
    refused = kubectl(kv, "apply", "-f", "-", input=manifest(kv, "sb", "--npus", "1",
                                                            "--resource", SANDBOX_RESOURCE))
    assert refused.returncode == 1
    assert "spec.template.spec.HostDevices: Host Devices feature gate is not enabled in kubevirt-config" in \
        refused.stderr
    assert kv.vm("sb") is None


def test_a_dra_manifest_is_admitted_with_host_devices_alone_and_the_scheduler_allocates_its_claim(kv):
    sandbox_ready(kv)  # HostDevices listed; HostDevicesWithDRA is on by default (Beta) in v1.9.0
    dra_world(kv)
    applied = kubectl(kv, "apply", "-f", "-", input=manifest(kv, "dr", "--method", "dra", "--npus", "2"))
    assert applied.returncode == 0, applied.stderr
    vmi = kv.wait_vmi_phase("dr", "Running")
    assert vmi["status"]["nodeName"] == DRA_NODE
    (pod,) = kv.launcher_pods("dr")
    (entry,) = pod["spec"]["resourceClaims"]
    assert compute(pod)["resources"]["claims"] == [{"name": entry["name"], "request": f"npu{i}"} for i in range(2)]
    (claim,) = kv.api.list("ResourceClaim", kv.namespace)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["request"] for r in results) == ["npu0", "npu1"]
    assert {r["pool"] for r in results} == {DRA_NODE} and all(r["device"].startswith("vfio-") for r in results)


def test_a_dra_manifest_is_refused_while_host_devices_with_dra_is_disabled(kv):
    sandbox_ready(kv, disabled=("HostDevicesWithDRA",))
    dra_world(kv)
    refused = kubectl(kv, "apply", "-f", "-", input=manifest(kv, "dr", "--method", "dra", "--npus", "1"))
    assert refused.returncode == 1
    assert "spec.template.spec.domain.devices.hostDevices: vmi.spec.domain.devices.hostDevices contains DRA " \
           "enabled HostDevices but feature gate is not enabled" in refused.stderr
    assert kv.vm("dr") is None
