"""vm attach (library): both methods against the fake API server; outcomes read back from the server."""

from __future__ import annotations

import pytest

from rblnctl.errors import Ambiguous, InvalidInput, NotFound, Refused
from rblnctl.remedy import Command
from tests.fakes import objects as o
from tests.vm.support import (
    CA22,
    CA25,
    NS,
    NOT_YET_RUNNING,
    NVIDIA,
    V1_CLAIM,
    VFIO_CLASS,
    attacher,
    claims,
    dra_cluster,
    host_devices,
    sandbox_cluster,
    vm_writes,
)

JSON_PATCH = "application/json-patch+json"


def _rcts(apiserver, ns=NS):
    return {t["metadata"]["name"]: t for t in apiserver.list("ResourceClaimTemplate", ns)}


# -- sandbox ------------------------------------------------------------------------------------------------


def test_sandbox_picks_the_only_advertised_resource_and_keeps_other_devices(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[NVIDIA]))
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    assert (plan.method, plan.resource, plan.npus_before, plan.npus_after) == ("sandbox", CA22, 0, 2)
    assert plan.added == ["npu0", "npu1"] and not plan.blockers
    apiserver.clear_requests()
    result = planner.apply(plan)
    assert result.changed and result.attempts == 1
    assert host_devices(apiserver) == [NVIDIA, {"name": "npu0", "deviceName": CA22},
                                       {"name": "npu1", "deviceName": CA22}]
    (write,) = apiserver.writes()
    assert write.method == "PATCH" and write.content_type == JSON_PATCH
    tests = [op for op in write.body if op["op"] == "test"]  # the guard: the VM and the lists decided on
    base = "/spec/template/spec"
    assert tests[0] == {"op": "test", "path": "/metadata/uid", "value": apiserver.get(
        "VirtualMachine", "v1", NS)["metadata"]["uid"]}  # the VM read, not one re-created since (issue 37.2)
    # ...and, the VM being stopped, how it runs: a start meanwhile fails the patch (issue 37, RUN_STATE)
    assert {op["path"] for op in tests[1:]} == {f"{base}/domain/devices/hostDevices", f"{base}/resourceClaims",
                                                f"{base}/domain/devices/gpus", "/spec/runStrategy", "/spec/running",
                                                "/status/stateChangeRequests"}
    assert not any("resourceVersion" in op["path"] for op in write.body)


def test_a_rerun_is_a_noop_and_writes_nothing(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.noop and plan.patch is None
    apiserver.clear_requests()
    assert attacher(kube, npus=1).apply(plan).changed is False
    assert apiserver.writes() == []


def test_without_npus_the_vm_keeps_its_count(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, CA22, CA22]))
    assert attacher(kube).plan("v1", NS).noop


def test_another_count_adds_or_removes_the_difference(apiserver, kube):
    sandbox_cluster(apiserver, npus=4)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, CA22, CA22, NVIDIA]))
    planner = attacher(kube, npus=1)
    plan = planner.plan("v1", NS)
    assert plan.removed == ["npu1", "npu2"] and plan.added == []
    planner.apply(plan)
    assert host_devices(apiserver) == [{"name": "npu0", "deviceName": CA22}, NVIDIA]
    planner = attacher(kube, npus=3)
    planner.apply(planner.plan("v1", NS))
    assert [d["name"] for d in host_devices(apiserver)] == ["npu0", "gpu0", "npu1", "npu2"]


def test_new_devices_take_free_names(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[{"name": "npu0", "deviceName": "nvidia.com/X"}]))
    planner = attacher(kube, npus=1)
    planner.apply(planner.plan("v1", NS))
    assert host_devices(apiserver)[1] == {"name": "npu1", "deviceName": CA22}


def test_several_resources_are_refused_with_the_choices(apiserver, kube):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA25"})
    apiserver.add(o.vm(NS, "v1", running=False))
    apiserver.clear_requests()
    with pytest.raises(Ambiguous) as e:
        attacher(kube, npus=1).plan("v1", NS)
    # issue 39 (4): one product per resource, so the products are the choices (`--product` picks one)
    assert e.value.choices == ["RBLN-CA22", "RBLN-CA25"] and CA22 in str(e.value) and "n2" in str(e.value)
    assert e.value.options == ("product",)
    assert isinstance(e.value, InvalidInput) and apiserver.writes() == []


@pytest.mark.parametrize(("options", "expected"), [({"product": "RBLN-CA25"}, CA25), ({"product": "ca22"}, CA22),
                                                   ({"resource": "RBLN-CA25_PF"}, CA25)])
def test_a_product_or_resource_picks_one(apiserver, kube, options, expected):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA25"})
    apiserver.add(o.vm(NS, "v1", running=False))
    plan = attacher(kube, npus=1, **options).plan("v1", NS)
    assert plan.resource == expected and not plan.blockers


def test_the_vms_own_resource_is_kept_when_several_are_offered(apiserver, kube):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA25"})
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA25]))
    assert attacher(kube, npus=1).plan("v1", NS).noop


def test_an_old_resource_name_is_replaced_with_a_warning(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=["rebellions.ai/ATOM_CA22_PT"]))
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.removed == ["npu0"] and plan.added == ["npu0"]  # replaced in place
    assert any("replacing 1 NPU(s) of rebellions.ai/ATOM_CA22_PT" in str(w) for w in plan.warnings)


def test_plan_makes_no_write(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    apiserver.clear_requests()
    plan = attacher(kube, npus=2).plan("v1", NS)
    assert not plan.noop and apiserver.writes() == []


def test_server_dry_run_sends_dry_run_all_and_changes_nothing(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    planner = attacher(kube, npus=2, server_dry_run=True)
    plan = planner.plan("v1", NS)
    apiserver.clear_requests()
    result = planner.apply(plan)
    assert result.server_dry_run and result.changed
    writes = apiserver.writes()
    assert [w.method for w in writes] == ["POST", "PATCH"]
    assert all(w.query.get("dryRun") == ["All"] for w in writes)
    assert host_devices(apiserver) == [] and _rcts(apiserver) == {}


def test_unknown_vm(apiserver, kube):
    sandbox_cluster(apiserver)
    with pytest.raises(NotFound, match='VirtualMachine "nope" not found in namespace "vms"'):
        attacher(kube, npus=1).plan("nope", NS)


def test_options_are_checked_before_any_request():
    with pytest.raises(InvalidInput):
        attacher(None, resource="x", product="y")
    with pytest.raises(InvalidInput):
        attacher(None, method="dra", resource="x")
    with pytest.raises(InvalidInput):
        attacher(None, method="vfio")


# -- preconditions ----------------------------------------------------------------------------------------------


def _blocker(plan):
    assert plan.patch is not None or plan.blockers
    (b,) = plan.blockers
    return b


def test_gate_off_is_refused_naming_enable_gates(apiserver, kube):
    sandbox_cluster(apiserver, gates=())
    apiserver.add(o.vm(NS, "v1", running=False))
    plan = attacher(kube, npus=1).plan("v1", NS)
    b = _blocker(plan)
    assert "HostDevices: off" in b.message and b.remedy.command == own("kubevirt", "enable-gates")
    with pytest.raises(Refused):
        attacher(kube, npus=1).apply(plan)
    assert vm_writes(apiserver) == []


def test_dra_gate_disabled_is_refused_naming_enable_gates_dra(apiserver, kube):
    dra_cluster(apiserver, gates=("HostDevices",), disabled=("HostDevicesWithDRA",))
    apiserver.add(o.vm(NS, "v1", running=False))
    b = _blocker(attacher(kube, npus=1).plan("v1", NS))
    assert "HostDevicesWithDRA: off" in b.message and b.remedy.command == own("kubevirt", "enable-gates", dra=True)


def test_resource_not_permitted_is_refused_naming_permit_devices(apiserver, kube):
    sandbox_cluster(apiserver, permitted=False)
    apiserver.add(o.vm(NS, "v1", running=False))
    b = _blocker(attacher(kube, npus=1).plan("v1", NS))
    assert "not in KubeVirt kubevirt/kubevirt permittedHostDevices" in b.message
    assert b.remedy.command == own("kubevirt", "permit-devices", resource_name=CA22)


def test_external_resource_provider_false_is_refused(apiserver, kube):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[
        {"pciVendorSelector": "1EFF:1220", "resourceName": CA22, "externalResourceProvider": False}]),
        o.cluster_policy(), o.npu_node("n1", mode="vm-passthrough"), o.vm(NS, "v1", running=False))
    b = _blocker(attacher(kube, npus=1).plan("v1", NS))
    assert "externalResourceProvider false" in b.message
    assert b.remedy.command == own("kubevirt", "permit-devices", fix=True)


def test_no_vm_mode_node_is_refused_naming_set_mode(apiserver, kube):
    sandbox_cluster(apiserver, vm_nodes={}, container_nodes=("n1", "n2"))
    apiserver.add(o.vm(NS, "v1", running=False))
    plan = attacher(kube, npus=1).plan("v1", NS)
    b = _blocker(plan)
    assert "no NPU node is in vm-passthrough mode" in b.message
    assert b.remedy.command == own("node", "set-mode", "vm", "n1")
    assert plan.patch is None


def test_a_resource_no_vm_node_offers_is_refused(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    plan = attacher(kube, npus=1, resource=CA25).plan("v1", NS)
    assert any(f"no vm-passthrough node advertises {CA25}" in b.message for b in plan.blockers)


def test_a_failing_check_only_warns_when_nothing_changes(apiserver, kube):
    sandbox_cluster(apiserver, gates=())
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.noop and not plan.blockers
    assert any("HostDevices: off" in str(w) for w in plan.warnings)


# -- running VMs ----------------------------------------------------------------------------------------------


def test_a_running_vm_is_refused_without_restart(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1"), o.vmi(NS, "v1", "n1"))
    plan = attacher(kube, npus=1).plan("v1", NS)
    (b,) = plan.blockers
    assert b.override == "restart" and "is running" in b.message and "n1" in b.message
    assert plan.running and not plan.restart


@pytest.mark.parametrize(("phase", "node"), list(NOT_YET_RUNNING.items()))
def test_a_vmi_on_its_way_up_is_running_too(apiserver, kube, phase, node):
    """A VMI not yet Running (or whose node went quiet) has its spec already: a template change would not reach it,
    so it is refused as a running one, and --restart restarts it."""
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1"), o.vmi(NS, "v1", node, phase=phase))
    plan = attacher(kube, npus=1).plan("v1", NS)
    (b,) = plan.blockers
    assert b.override == "restart" and f"is running (VMI {phase}" in b.message
    assert plan.running and not plan.restart and plan.node == node
    with pytest.raises(Refused):
        attacher(kube, npus=1).apply(plan)
    assert vm_writes(apiserver) == []
    restart = attacher(kube, npus=1, restart=True).plan("v1", NS)
    assert restart.restart and not restart.blockers


def test_restart_stops_patches_starts_and_waits_until_ready(kube, apiserver):
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver)
    vm = o.vm(NS, "v1", node="n1")
    apiserver.add(vm, o.vmi(NS, "v1", "n1"))
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    assert plan.restart and not plan.blockers
    apiserver.clear_requests()
    result = planner.apply(plan)
    assert result.restarted and result.ready
    subresources = [r.path.rsplit("/", 1)[1] for r in apiserver.requests
                    if r.method == "PUT" and "subresources.kubevirt.io" in r.path]
    assert subresources == ["stop", "start"]
    kinds = [("PUT" if r.method == "PUT" else "PATCH") for r in apiserver.writes()
             if r.method in ("PUT", "PATCH") and "virtualmachines/v1" in r.path]
    # mark it stopped-by-rblnctl, stop, patch (a 409 re-plans: the stop changed the VM), start, clear the mark
    assert kinds[:2] == ["PATCH", "PUT"] and kinds[-2:] == ["PUT", "PATCH"] and set(kinds[2:-2]) == {"PATCH"}
    vm_now = apiserver.get("VirtualMachine", "v1", NS)
    assert "rebellions.ai/rblnctl.stopped" not in (vm_now["metadata"].get("annotations") or {})
    assert vm_now["status"]["ready"] is True and vm_now["spec"]["runStrategy"] == "Always"
    vmi = apiserver.get("VirtualMachineInstance", "v1", NS)
    assert [d["deviceName"] for d in vmi["spec"]["domain"]["devices"]["hostDevices"]] == [CA22, CA22]


def test_restart_that_never_gets_ready_says_why(kube, apiserver):
    from rblnctl.errors import WaitTimeout

    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1"), o.vmi(NS, "v1", "n1"))  # no node annotation: the new VMI stays Scheduling
    planner = attacher(kube, npus=1, restart=True, ready_timeout_s=1, poll_s=1)
    with pytest.raises(WaitTimeout) as e:
        planner.apply(planner.plan("v1", NS))
    assert "were changed and it was started" in str(e.value) and "did not become Ready within 1s" in str(e.value)
    assert e.value.details  # the first broken link of a diagnosis
    assert host_devices(apiserver) == [{"name": "npu0", "deviceName": CA22}]


# -- concurrency --------------------------------------------------------------------------------------------------


def test_a_concurrent_edit_is_kept_and_the_change_replanned(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    planner = attacher(kube, npus=1)
    plan = planner.plan("v1", NS)

    def someone_else(vm):
        vm["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"] = [NVIDIA]

    apiserver.mutate("VirtualMachine", "v1", NS, someone_else)  # after our read: the hostDevices tested changed
    result = planner.apply(plan)
    assert result.attempts == 2
    assert host_devices(apiserver) == [NVIDIA, {"name": "npu0", "deviceName": CA22}]
    statuses = [r.status for r in vm_writes(apiserver)]
    assert statuses == [422, 200]


def test_an_edit_of_fields_the_change_did_not_read_does_not_conflict(apiserver, kube):
    """What virt-controller does right after a stop (its status) and any edit outside the NPU lists: the guarded
    JSON patch goes through on the first try. Before: the resourceVersion guard conflicted with virt-controller on
    every `vm attach --restart` of a real cluster. A stopped VM's patch also tests how it runs (issue 37: RUN_STATE):
    a runStrategy that does not start it (Manual) costs one re-read, then the change goes through."""
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    planner = attacher(kube, npus=1)
    plan = planner.plan("v1", NS)

    def someone_else(vm):
        vm.setdefault("status", {})["printableStatus"] = "Stopped"
        vm["metadata"].setdefault("labels", {})["team"] = "a"

    apiserver.mutate("VirtualMachine", "v1", NS, someone_else)
    assert planner.apply(plan).attempts == 1
    assert [r.status for r in vm_writes(apiserver)] == [200]
    assert host_devices(apiserver) == [{"name": "npu0", "deviceName": CA22}]
    apiserver.clear_requests()
    plan = attacher(kube, npus=2).plan("v1", NS)
    apiserver.mutate("VirtualMachine", "v1", NS, lambda vm: vm["spec"].update(runStrategy="Manual"))
    assert attacher(kube, npus=2).apply(plan).attempts == 2
    assert [r.status for r in vm_writes(apiserver)] == [422, 200]
    assert len(host_devices(apiserver)) == 2


def test_a_lost_reply_is_settled_by_reading_back(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    planner = attacher(kube, npus=1)
    plan = planner.plan("v1", NS)
    apiserver.inject_fault(method="PATCH", path="/virtualmachines/v1$", lose_reply=True, times=1)
    result = planner.apply(plan)
    assert result.attempts == 1 and len(vm_writes(apiserver)) == 1
    assert host_devices(apiserver) == [{"name": "npu0", "deviceName": CA22}]


# -- DRA -------------------------------------------------------------------------------------------------------------


def test_dra_creates_the_template_and_points_devices_at_its_requests(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[NVIDIA]))
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    assert (plan.method, plan.template, plan.device_class) == ("dra", "rbln-npu-2", VFIO_CLASS)
    assert not plan.blockers, plan.blockers
    apiserver.clear_requests()
    result = planner.apply(plan)
    assert result.template_created == "rbln-npu-2"
    assert [w.method for w in apiserver.writes()] == ["POST", "PATCH"]  # the template exists before the VM names it
    assert host_devices(apiserver) == [NVIDIA, {"name": "npu0", "claimName": V1_CLAIM, "requestName": "npu0"},
                                       {"name": "npu1", "claimName": V1_CLAIM, "requestName": "npu1"}]
    assert claims(apiserver) == [{"name": V1_CLAIM, "resourceClaimTemplateName": "rbln-npu-2"}]
    tpl = _rcts(apiserver)["rbln-npu-2"]
    assert tpl["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rblnctl"}
    assert tpl["spec"]["spec"]["devices"]["requests"] == [
        {"name": f"npu{i}", "exactly": {"deviceClassName": VFIO_CLASS, "allocationMode": "ExactCount", "count": 1}}
        for i in range(2)]
    again = attacher(kube, npus=2).plan("v1", NS)
    assert again.noop and again.template_create is None


def test_dra_reuses_an_existing_template_and_keeps_foreign_claims(apiserver, kube):
    dra_cluster(apiserver)
    gpu = {"name": "gpu-claim", "resourceClaimTemplateName": "gpu-template"}
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-1"),
                  o.vm(NS, "v1", running=False, resource_claims=[gpu],
                       host_devices=[{"name": "gpu0", "claimName": "gpu-claim", "requestName": "gpu"}]))
    planner = attacher(kube, npus=1)
    plan = planner.plan("v1", NS)
    assert plan.template_create is None
    apiserver.clear_requests()
    planner.apply(plan)
    assert [w.method for w in apiserver.writes()] == ["PATCH"]
    assert claims(apiserver) == [gpu, {"name": V1_CLAIM, "resourceClaimTemplateName": "rbln-npu-1"}]
    assert host_devices(apiserver)[0]["claimName"] == "gpu-claim"


def test_dra_new_count_switches_template_and_deletes_the_unused_one(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    attacher(kube, npus=2).apply(attacher(kube, npus=2).plan("v1", NS))
    planner = attacher(kube, npus=1)
    plan = planner.plan("v1", NS)
    assert plan.templates_delete == ["rbln-npu-2"] and plan.removed == ["npu1"]
    result = planner.apply(plan)
    assert result.templates_deleted == ["rbln-npu-2"]
    assert sorted(_rcts(apiserver)) == ["rbln-npu-1"]
    assert claims(apiserver) == [{"name": V1_CLAIM, "resourceClaimTemplateName": "rbln-npu-1"}]


def test_dra_template_another_vm_uses_is_kept_and_said(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False), o.vm(NS, "v2", running=False))
    for vm in ("v1", "v2"):
        attacher(kube, npus=2).apply(attacher(kube, npus=2).plan(vm, NS))
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.templates_delete == []
    assert plan.templates_kept == ["ResourceClaimTemplate rbln-npu-2 kept: VirtualMachine v2 still uses it"]
    attacher(kube, npus=1).apply(plan)
    assert sorted(_rcts(apiserver)) == ["rbln-npu-1", "rbln-npu-2"]


def test_dra_template_not_written_by_rblnctl_is_refused(apiserver, kube):
    dra_cluster(apiserver)
    odd = o.resource_claim_template(NS, "rbln-npu-1", device_class="gpu.example.com", managed=False)
    apiserver.add(odd, o.vm(NS, "v1", running=False))
    b = _blocker(attacher(kube, npus=1).plan("v1", NS))
    assert "rbln-npu-1 exists but asks for something else (npu0: gpu.example.com x1)" in b.message


def test_dra_without_the_device_class_or_slices_is_refused(apiserver, kube):
    dra_cluster(apiserver, device_class=False, slices=False)
    apiserver.add(o.vm(NS, "v1", running=False))
    plan = attacher(kube, npus=1).plan("v1", NS)
    messages = [b.message for b in plan.blockers]
    assert "DeviceClass vfio-npu.rebellions.ai not found" in messages
    assert any("no ResourceSlice of npu.rebellions.ai on a vm-passthrough node offers vfio-* devices" in m
               for m in messages)


# -- switching methods -------------------------------------------------------------------------------------------


def test_the_other_method_is_refused_unless_converting(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, CA22, NVIDIA]))
    (b,) = attacher(kube).plan("v1", NS).blockers
    assert b.override == "convert" and "2 NPU(s) through sandbox (npu0, npu1)" in b.message
    planner = attacher(kube, convert=True)
    plan = planner.plan("v1", NS)
    assert plan.npus_after == 2 and plan.method == "dra" and not plan.blockers
    planner.apply(plan)
    assert host_devices(apiserver) == [NVIDIA, {"name": "npu0", "claimName": V1_CLAIM, "requestName": "npu0"},
                                       {"name": "npu1", "claimName": V1_CLAIM, "requestName": "npu1"}]
    assert claims(apiserver) == [{"name": V1_CLAIM, "resourceClaimTemplateName": "rbln-npu-2"}]


def test_converting_back_to_sandbox_removes_the_claim_and_its_template(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    attacher(kube, npus=2).apply(attacher(kube, npus=2).plan("v1", NS))
    # The cluster moves to the sandbox device plugin.
    apiserver.add(o.npu_node("n2", mode="vm-passthrough"))
    kv = apiserver.get("KubeVirt", "kubevirt", "kubevirt")
    kv["spec"]["configuration"]["permittedHostDevices"] = {"pciHostDevices": [
        {"pciVendorSelector": "1EFF:1220", "resourceName": CA22, "externalResourceProvider": True}]}
    apiserver.update(kv)
    planner = attacher(kube, method="sandbox", convert=True)
    plan = planner.plan("v1", NS)
    assert not plan.blockers, plan.blockers
    assert plan.templates_delete == ["rbln-npu-2"]
    planner.apply(plan)
    assert [d.get("deviceName") for d in host_devices(apiserver)] == [CA22, CA22]
    assert claims(apiserver) == [] and _rcts(apiserver) == {}


def test_a_release_whose_sandbox_plugin_serves_no_vm_is_refused_naming_the_upgrade(apiserver, kube):
    """Chart v0.3.0's sandbox plugin waits in Init on vm nodes: no node will ever advertise, so waiting or
    switching another node is no way out; the refusal names the release and the upgrade."""
    from tests.preflight.cluster_support import operator_deployment

    sandbox_cluster(apiserver)
    node = apiserver.get("Node", "n1")
    node["status"]["allocatable"].pop(CA22)
    apiserver.update(node)
    apiserver.add(operator_deployment("0.3.0"), o.vm(NS, "v1", running=False))
    b = _blocker(attacher(kube, npus=1, resource=CA22).plan("v1", NS))
    assert "0.3.0 < 0.4.4" in b.message and ".driver-ctr-ready" in b.message
    assert b.remedy.text.startswith("upgrade the operator to >= 0.4.4") and not b.remedy.command
    assert vm_writes(apiserver) == []


def test_more_npus_than_any_node_offers_is_a_warning_and_an_absurd_count_bad_input(apiserver, kube):
    sandbox_cluster(apiserver, npus=2)
    apiserver.add(o.vm(NS, "v1", running=False))
    plan = attacher(kube, npus=3).plan("v1", NS)
    assert any("3 NPUs: no vm-passthrough node offers that many (the most is 2, on n1)" in w for w in plan.warnings)
    assert not any("offers that many" in w for w in attacher(kube, npus=2).plan("v1", NS).warnings)
    with pytest.raises(InvalidInput, match="0 to 64"):
        attacher(kube, npus=99999999999999999999)


own = Command.own
