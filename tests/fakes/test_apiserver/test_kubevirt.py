"""KubeVirt's subresources.kubevirt.io (start, stop, restart) and the optional VM simulation."""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.fakes.apiserver import VM_NODE_ANNOTATION, FakeApiServer
from tests.fakes.test_apiserver.helpers import raw

SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"


def vm_on(node: str | None = None, *, running: bool = True, **kw) -> dict:
    vm = o.vm("default", "vm1", running=running, **kw)
    if node:
        vm["metadata"]["annotations"] = {VM_NODE_ANNOTATION: node}
    return vm


def put(fake, action: str, name: str = "vm1", body=None):
    return raw(fake, "PUT", f"{SUB}/{name}/{action}", body)


def test_the_group_is_discovered_while_virtual_machines_are_served(apiserver):
    _, groups, _ = raw(apiserver, "GET", "/apis")
    assert "subresources.kubevirt.io" in {g["name"] for g in groups["groups"]}
    _, listing, _ = raw(apiserver, "GET", "/apis/subresources.kubevirt.io/v1")
    assert listing["resources"] == [  # as virt-api lists them: name and namespaced only
        {"name": f"virtualmachines/{a}", "singularName": "", "namespaced": True, "kind": "", "verbs": None}
        for a in ("start", "stop", "restart")]
    apiserver.remove_resource("virtualmachines.kubevirt.io")  # KubeVirt not installed
    assert raw(apiserver, "GET", "/apis/subresources.kubevirt.io/v1")[0] == 404
    assert put(apiserver, "stop")[0] == 404


def test_stop_and_start_flip_the_run_strategy_and_answer_202_empty(apiserver):
    apiserver.add(vm_on("n1"), o.vmi("default", "vm1", "n1"))
    status, body, headers = put(apiserver, "stop")
    assert (status, body, headers["Content-Length"]) == (202, "", "0")
    assert apiserver.get("VirtualMachine", "vm1", "default")["spec"]["runStrategy"] == "Halted"
    # Nothing else reacts unless asked to: the VMI runs on and the VM status is as it was.
    assert apiserver.get("VirtualMachineInstance", "vm1", "default")["status"]["phase"] == "Running"
    assert apiserver.get("VirtualMachine", "vm1", "default")["status"]["printableStatus"] == "Running"
    apiserver.delete_now("VirtualMachineInstance", "vm1", "default")  # the test plays virt-controller
    assert put(apiserver, "start", body={"dryRun": ["All"]})[0] == 202
    assert apiserver.get("VirtualMachine", "vm1", "default")["spec"]["runStrategy"] == "Halted"  # a dry run
    assert put(apiserver, "start")[:2] == (202, "")
    assert apiserver.get("VirtualMachine", "vm1", "default")["spec"]["runStrategy"] == "Always"
    assert [(r.path, r.status) for r in apiserver.requests_matching("PUT")] == [
        (f"{SUB}/vm1/stop", 202), (f"{SUB}/vm1/start", 202), (f"{SUB}/vm1/start", 202)]
    assert apiserver.get("VirtualMachineInstance", "vm1", "default") is None


def test_stop_respects_spec_running_when_the_vm_uses_it(apiserver):
    vm = vm_on()
    vm["spec"].pop("runStrategy")
    vm["spec"]["running"] = True
    apiserver.add(vm)
    assert put(apiserver, "stop")[0] == 202
    spec = apiserver.get("VirtualMachine", "vm1", "default")["spec"]
    assert spec["running"] is False and "runStrategy" not in spec


def test_virt_api_refusals(apiserver):
    apiserver.add(vm_on("n1"), o.vmi("default", "vm1", "n1"), o.vm("default", "off", running=False))
    status, body, _ = put(apiserver, "stop", "ghost")
    assert (status, body["message"], body["details"]) == (
        404, 'virtualmachine.kubevirt.io "ghost" not found',
        {"name": "ghost", "group": "kubevirt.io", "kind": "virtualmachine"})
    for action, name, why in (("start", "vm1", "VM is already running"),
                              ("stop", "off", "VM is not running"),
                              ("restart", "off", "RunStategy Halted does not support manual restart requests")):
        status, body, _ = put(apiserver, action, name)
        assert (status, body["reason"], body["message"]) == (
            409, "Conflict", f'Operation cannot be fulfilled on virtualmachine.kubevirt.io "{name}": {why}')
    apiserver.delete_now("VirtualMachineInstance", "vm1", "default")
    status, body, _ = put(apiserver, "start")
    assert status == 409 and body["message"].endswith("Always does not support manual start requests")
    assert raw(apiserver, "GET", f"{SUB}/vm1/stop")[0] == 405
    assert raw(apiserver, "PUT", f"{SUB}/vm1/migrate", {})[0] == 404  # not modelled


def test_restart_asks_the_controller_through_state_change_requests(apiserver):
    apiserver.add(vm_on("n1"), o.vmi("default", "vm1", "n1"))
    uid = apiserver.get("VirtualMachineInstance", "vm1", "default")["metadata"]["uid"]
    assert put(apiserver, "restart")[0] == 202
    assert apiserver.get("VirtualMachine", "vm1", "default")["status"]["stateChangeRequests"] == [
        {"action": "Stop", "uid": uid}, {"action": "Start"}]
    status, body, _ = put(apiserver, "restart")  # nobody acted on the first one
    assert status == 500 and body["message"].endswith("unable to complete request: stop/start already underway")


def test_subresources_are_authorized_as_update_on_virtualmachines_slash_action(apiserver):
    apiserver.add(vm_on("n1", running=False))
    apiserver.enforce_rbac([o.cluster_role("vm-stopper", o.policy_rule(
        ["update"], ["virtualmachines/stop"], groups=["subresources.kubevirt.io"]))])
    status, body, _ = put(apiserver, "start")
    assert status == 403 and body["message"] == (
        'virtualmachines.subresources.kubevirt.io "vm1" is forbidden: User "fake-user" cannot update resource '
        '"virtualmachines/start" in API group "subresources.kubevirt.io" in the namespace "default"')
    assert put(apiserver, "stop")[0] == 409  # allowed through; virt-api then refuses: not running


@pytest.fixture
def kubevirt():
    with FakeApiServer(simulate_kubevirt=True) as fake:
        yield fake


def test_simulated_controller_stops_and_starts_the_instance(kubevirt):
    kubevirt.add(vm_on("n1"), o.vmi("default", "vm1", "n1"))
    assert put(kubevirt, "stop")[0] == 202
    vm = kubevirt.get("VirtualMachine", "vm1", "default")
    assert kubevirt.get("VirtualMachineInstance", "vm1", "default") is None
    assert {k: vm["status"][k] for k in ("printableStatus", "ready", "runStrategy")} == {
        "printableStatus": "Stopped", "ready": False, "runStrategy": "Halted"}
    assert put(kubevirt, "start")[0] == 202
    vmi = kubevirt.get("VirtualMachineInstance", "vm1", "default")
    assert (vmi["status"]["phase"], vmi["status"]["nodeName"]) == ("Running", "n1")
    assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == "n1"
    assert vmi["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
    assert vmi["spec"] == vm["spec"]["template"]["spec"]
    vm = kubevirt.get("VirtualMachine", "vm1", "default")
    assert (vm["status"]["printableStatus"], vm["status"]["ready"]) == ("Running", True)
    assert kubevirt.errors == []


def test_simulated_controller_follows_spec_edits_restart_and_deletion(kubevirt):
    kubevirt.add(vm_on(running=False))  # no node annotation
    kubevirt.mutate("VirtualMachine", "vm1", "default", fn=lambda v: v["spec"].update(runStrategy="Always"))
    vmi = kubevirt.get("VirtualMachineInstance", "vm1", "default")
    assert vmi["status"]["phase"] == "Scheduling" and "nodeName" not in vmi["status"]
    status = kubevirt.get("VirtualMachine", "vm1", "default")["status"]
    assert (status["printableStatus"], status["ready"]) == ("Starting", False)
    assert put(kubevirt, "restart")[0] == 202
    again = kubevirt.get("VirtualMachineInstance", "vm1", "default")
    assert again["metadata"]["uid"] != vmi["metadata"]["uid"]
    assert "stateChangeRequests" not in kubevirt.get("VirtualMachine", "vm1", "default")["status"]
    kubevirt.delete_now("VirtualMachine", "vm1", "default")
    assert kubevirt.get("VirtualMachineInstance", "vm1", "default") is None


def test_the_simulation_can_be_switched_on_later(apiserver):
    apiserver.add(vm_on("n1", running=False))
    put(apiserver, "start")
    assert apiserver.get("VirtualMachineInstance", "vm1", "default") is None
    apiserver.simulate_kubevirt = True
    put(apiserver, "stop")
    put(apiserver, "start")
    assert apiserver.get("VirtualMachineInstance", "vm1", "default")["status"]["nodeName"] == "n1"


@pytest.mark.parametrize("strategy, phase, expected", [
    ("Manual", "Succeeded", "stop-start"), ("Manual", "Failed", "stop-start"),
    ("RerunOnFailure", "Succeeded", "stop-start"), ("RerunOnFailure", "Failed", 409),
])
def test_start_after_a_finished_instance_as_virt_api_answers(apiserver, strategy, phase, expected):
    """kubevirt/kubevirt@v1.9.0 pkg/virt-api/rest/lifecycle.go StartVMRequestHandler: a Manual VM whose VMI finished,
    or a RerunOnFailure one whose VMI succeeded, gets a Stop of that VMI then a Start; RerunOnFailure refuses to
    start from a Failed VMI (its controller restarts that one itself)."""
    apiserver.add(vm_on("n1", run_strategy=strategy), o.vmi("default", "vm1", "n1", phase=phase))
    uid = apiserver.get("VirtualMachineInstance", "vm1", "default")["metadata"]["uid"]
    status, body, _ = put(apiserver, "start")
    if expected == 409:
        assert (status, body["message"]) == (409, 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm1": '
                                                  "RerunOnFailure does not support starting VM from failed state")
        assert "stateChangeRequests" not in (apiserver.get("VirtualMachine", "vm1", "default").get("status") or {})
    else:
        assert status == 202
        assert apiserver.get("VirtualMachine", "vm1", "default")["status"]["stateChangeRequests"] == [
            {"action": "Stop", "uid": uid}, {"action": "Start"}]


def test_simulated_controller_leaves_a_running_instance_to_a_vm_changed_to_manual(kubevirt):
    """v1.9.0 pkg/virt-controller/watch/vm/vm.go syncRunStrategy: Manual stops a VMI only on a Stop request."""
    kubevirt.add(vm_on("n1"), o.vmi("default", "vm1", "n1"))
    kubevirt.mutate("VirtualMachine", "vm1", "default", fn=lambda v: v["spec"].update(runStrategy="Manual"))
    assert kubevirt.get("VirtualMachineInstance", "vm1", "default")["status"]["phase"] == "Running"


def _started_dra_vm(kubevirt, npus: int, devices: list[dict], tolerations: list[dict] | None = None) -> dict:
    """A VM of `npus` DRA NPUs started on n1, whose slice offers `devices`: its launcher pod."""
    template = o.resource_claim_template("default", "rbln-npu-2", npus=npus)
    for r in template["spec"]["spec"]["devices"]["requests"]:
        if tolerations:
            r["exactly"]["tolerations"] = tolerations
    vm = o.dra_vm("default", "vm1", npus, template="rbln-npu-2")
    vm["metadata"]["annotations"] = {VM_NODE_ANNOTATION: "n1"}
    kubevirt.add(o.resource_slice("n1", devices=devices), template, vm)
    assert put(kubevirt, "start")[0] == 202
    (pod,) = [p for p in kubevirt.list("Pod", "default")
              if p["metadata"]["labels"].get("kubevirt.io") == "virt-launcher"]
    return pod


def _vfio(n: int, taint: dict | None = None) -> dict:
    return {"name": f"vfio-{n}", "attributes": {"type": {"string": "vfio"}}, **({"taints": [taint]} if taint else {})}


TAINT = {"key": "rebellions.ai/unhealthy", "value": "true", "effect": "NoSchedule"}


def test_the_launcher_carries_kubevirts_node_selector_and_its_claim_skips_tainted_devices(kubevirt):
    """As the real ones: virt-controller puts kubevirt.io/schedulable=true into the launcher's nodeSelector
    (nodeselectorrenderer.go), and the scheduler allocates no device whose NoSchedule taint the request does not
    tolerate (allocator_stable.go taintPreventsAllocation: tests/kubevirt_real/test_scheduler_agrees.py)."""
    pod = _started_dra_vm(kubevirt, 2, [_vfio(1, TAINT), _vfio(2), _vfio(3)])
    assert pod["spec"]["nodeSelector"] == {"kubevirt.io/schedulable": "true"}
    (claim,) = kubevirt.list("ResourceClaim", "default")
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["vfio-2", "vfio-3"]


def test_a_claim_left_only_tainted_devices_stays_unallocated_unless_its_requests_tolerate_them(kubevirt):
    pod = _started_dra_vm(kubevirt, 2, [_vfio(1, TAINT), _vfio(2)])
    (claim,) = kubevirt.list("ResourceClaim", "default")
    assert "allocation" not in (claim.get("status") or {}) and pod["metadata"]["name"] in claim["metadata"]["name"]


def test_a_request_that_tolerates_the_taint_gets_the_tainted_device(kubevirt):
    _started_dra_vm(kubevirt, 2, [_vfio(1, TAINT), _vfio(2)], tolerations=[{"key": TAINT["key"], "operator": "Exists"}])
    (claim,) = kubevirt.list("ResourceClaim", "default")
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["vfio-1", "vfio-2"]
