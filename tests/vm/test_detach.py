"""vm detach (library): the reverse of attach, with the same guarantees."""

from __future__ import annotations

import pytest

from rblnctl import constants as C
from rblnctl.errors import InvalidInput, NotFound
from tests.fakes import objects as o
from tests.vm.support import (
    CA22,
    NS,
    NVIDIA,
    V1_CLAIM,
    attacher,
    claims,
    detacher,
    dra_cluster,
    host_devices,
    sandbox_cluster,
)


def _rcts(apiserver):
    return sorted(t["metadata"]["name"] for t in apiserver.list("ResourceClaimTemplate", NS))


def test_detach_takes_every_npu_and_keeps_other_devices(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, CA22, NVIDIA]))
    planner = detacher(kube)
    plan = planner.plan("v1", NS)
    assert (plan.npus_before, plan.npus_after, plan.removed) == (2, 0, ["npu0", "npu1"])
    planner.apply(plan)
    assert host_devices(apiserver) == [NVIDIA]
    assert detacher(kube).plan("v1", NS).noop


def test_detach_of_a_vm_without_npus_is_a_noop(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[NVIDIA]))
    apiserver.clear_requests()
    plan = detacher(kube).plan("v1", NS)
    assert plan.noop
    detacher(kube).apply(plan)
    assert apiserver.writes() == []


def test_detach_one_device(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, CA22]))
    planner = detacher(kube, device="npu0")
    planner.apply(planner.plan("v1", NS))
    assert host_devices(apiserver) == [{"name": "npu1", "deviceName": CA22}]


def test_detach_a_device_that_is_not_an_npu_lists_the_npus(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, NVIDIA]))
    with pytest.raises(InvalidInput, match=r"no NPU host device 'gpu0' \(its NPU devices: npu0\)"):
        detacher(kube, device="gpu0").plan("v1", NS)


def test_detach_of_a_device_the_vm_does_not_have_is_not_found(apiserver, kube):
    """Issue 39 (9): `--device npu7` of a VM with no such device exited 0 saying it "already has 2 NPU(s) as asked";
    as `kubectl delete` of an object that is not there, it is NotFound (exit 1) and nothing is written. A name an
    earlier detach may have removed (npu1, one past the highest left) is a re-run finishing its job: nothing to do."""
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, NVIDIA]))
    apiserver.clear_requests()
    with pytest.raises(NotFound, match=r"no host device 'npu7' \(its NPU devices: npu0\); nothing was detached"):
        detacher(kube, device="npu7").plan("v1", NS)
    plan = detacher(kube, device="npu1").plan("v1", NS)
    assert plan.noop and any("no host device 'npu1' (its NPU devices: npu0): nothing to detach" in str(w)
                             for w in plan.warnings)
    detacher(kube, device="npu1").apply(plan)
    assert apiserver.writes() == []


def test_a_rerun_of_a_detach_cut_short_after_its_patch_starts_the_vm_it_stopped(apiserver, kube):
    sandbox_cluster(apiserver)
    vm = o.vm(NS, "v1", running=False, host_devices=[CA22])
    vm["metadata"]["annotations"] = {C.VM_STOPPED_ANNOTATION: "2026-12-04T10:00:00Z"}
    apiserver.add(vm)
    plan = detacher(kube, device="npu1").plan("v1", NS)
    assert plan.start and not plan.noop


def test_detach_dra_removes_the_claim_and_the_unused_template(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[NVIDIA]))
    attacher(kube, npus=2).apply(attacher(kube, npus=2).plan("v1", NS))
    planner = detacher(kube)
    plan = planner.plan("v1", NS)
    assert plan.templates_delete == ["rbln-npu-2"]
    result = planner.apply(plan)
    assert result.templates_deleted == ["rbln-npu-2"]
    assert host_devices(apiserver) == [NVIDIA] and claims(apiserver) == [] and _rcts(apiserver) == []
    delete = [r for r in apiserver.writes() if r.method == "DELETE"][-1]
    assert delete.body["preconditions"]["uid"]  # only the template that was read


def test_detach_dra_keeps_a_template_another_vm_uses(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False), o.vm(NS, "v2", running=False))
    for vm in ("v1", "v2"):
        attacher(kube, npus=1).apply(attacher(kube, npus=1).plan(vm, NS))
    result = detacher(kube).apply(detacher(kube).plan("v1", NS))
    assert result.templates_deleted == []
    assert result.templates_kept == ["ResourceClaimTemplate rbln-npu-1 kept: VirtualMachine v2 still uses it"]
    assert _rcts(apiserver) == ["rbln-npu-1"]


def test_detach_keeps_a_template_rblnctl_did_not_write(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-1", managed=False), o.vm(
        NS, "v1", running=False, resource_claims=[o.template_claim("rbln-npu", "rbln-npu-1")],
        host_devices=[o.dra_host_device("npu0")]))
    plan = detacher(kube).plan("v1", NS)
    assert plan.templates_delete == [] and plan.templates_kept == [
        "ResourceClaimTemplate rbln-npu-1 kept: rblnctl did not create it"]


def test_detach_one_dra_device_renumbers_the_requests(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    attacher(kube, npus=2).apply(attacher(kube, npus=2).plan("v1", NS))
    planner = detacher(kube, device="npu0")
    plan = planner.plan("v1", NS)
    assert plan.template == "rbln-npu-1" and plan.template_create is not None
    planner.apply(plan)
    assert host_devices(apiserver) == [{"name": "npu1", "claimName": V1_CLAIM, "requestName": "npu0"}]
    assert claims(apiserver) == [{"name": V1_CLAIM, "resourceClaimTemplateName": "rbln-npu-1"}]
    assert _rcts(apiserver) == ["rbln-npu-1"]


def test_detach_drops_a_hand_made_npu_claim_no_device_uses(apiserver, kube):
    dra_cluster(apiserver)
    mine = {"name": "my-npu", "resourceClaimTemplateName": "my-npu-template"}
    apiserver.add(o.resource_claim_template(NS, "my-npu-template", managed=False),
                  o.vm(NS, "v1", running=False, resource_claims=[mine],
                       host_devices=[o.dra_host_device("accel", claim="my-npu", request="npu0")]))
    planner = detacher(kube)
    plan = planner.plan("v1", NS)
    assert plan.removed == ["accel"]
    planner.apply(plan)
    assert host_devices(apiserver) == [] and claims(apiserver) == []
    assert _rcts(apiserver) == ["my-npu-template"]  # not rblnctl's: left alone


def test_detach_a_running_vm_is_refused_without_restart(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22]), o.vmi(NS, "v1", "n1", [CA22]))
    (b,) = detacher(kube).plan("v1", NS).blockers
    assert b.override == "restart"


def test_detach_with_restart(apiserver, kube):
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22], node="n1"), o.vmi(NS, "v1", "n1", [CA22]))
    planner = detacher(kube, restart=True)
    result = planner.apply(planner.plan("v1", NS))
    assert result.ready and host_devices(apiserver) == []
    vmi = apiserver.get("VirtualMachineInstance", "v1", NS)
    assert "hostDevices" not in vmi["spec"]["domain"]["devices"]
