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


# What virt-api v1.9.0 answered through kube-apiserver's aggregator (measured on ../shared/kubevirt, 2026-12-04):
# go-restful's plain-text failures, Content-Type `text/plain; charset=utf-8`, `X-Content-Type-Options: nosniff`.
REAL_406 = "406: Not Acceptable\n\nAvailable representations: "


@pytest.mark.parametrize("accept", ["application/json", "application/vnd.kubernetes.protobuf,application/json",
                                    "application/yaml", "text/plain, application/json"])
def test_an_accept_without_any_type_is_406_before_the_vm_is_looked_up(apiserver, accept):
    apiserver.add(vm_on("n1", running=False))
    for name in ("vm1", "ghost"):  # a VM that does not exist is 406 too: no route, no handler
        status, body, headers = raw(apiserver, "PUT", f"{SUB}/{name}/start", {}, headers={"Accept": accept})
        assert (status, body) == (406, REAL_406)
        assert headers["Content-Type"] == "text/plain; charset=utf-8" and headers["X-Content-Type-Options"] == "nosniff"
    assert apiserver.get("VirtualMachine", "vm1", "default")["spec"]["runStrategy"] == "Halted"


@pytest.mark.parametrize("accept", ["application/json, */*", "*/*", "application/json;q=0.9, */*;q=0.8", None])
def test_an_accept_with_any_type_reaches_virt_api(apiserver, accept):
    apiserver.add(vm_on("n1", running=False))
    status, body, headers = raw(apiserver, "PUT", f"{SUB}/vm1/start", {}, headers={"Accept": accept} if accept else {})
    assert (status, body) == (202, "")
    status, body, _ = raw(apiserver, "PUT", f"{SUB}/ghost/start", {}, headers={"Accept": accept} if accept else {})
    assert status == 404 and body["message"] == 'virtualmachine.kubevirt.io "ghost" not found'


def test_go_restful_answers_a_path_or_method_it_has_no_route_for_in_plain_text(apiserver):
    apiserver.add(vm_on("n1", running=False))
    status, body, headers = raw(apiserver, "GET", f"{SUB}/vm1/start", headers={"Accept": "application/json"})
    assert (status, body, headers["Allow"]) == (405, "405: Method Not Allowed", "PUT")  # method before Accept
    for accept in ("application/json", "application/json, */*"):
        status, body, headers = raw(apiserver, "PUT", f"{SUB}/vm1/nope", headers={"Accept": accept})
        assert (status, body, headers["Content-Type"]) == (404, "404: Page Not Found", "text/plain; charset=utf-8")


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


# The KubeVirt-CR update webhook's Warning headers, as virt-operator v1.9.0 answered them through kube-apiserver
# (raw replies measured on ../shared/kubevirt, 2026-12-04), one header each, in this order.
KV_CR = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
GA = ('299 - "feature gate {} is deprecated (feature state is \\"General Availability\\"), therefore it can be safely '
      'removed and is redundant. For more info, please look at: '
      'https://github.com/kubevirt/kubevirt/blob/main/docs/deprecation.md"')
REAL_GATE_WARNINGS = [
    GA.format("LiveMigration"),
    '299 - "HotplugVolumes has been deprecated since v1.9.0 and has been replaced by DeclarativeHotplugVolumes"',
    GA.format("NUMA"),
    GA.format("GPU"),
    '299 - "MultiArchitecture has been deprecated since v1.8.0"',
    '299 - "DockerSELinuxMCSWorkaround has been deprecated since v1.4."',
    '299 - "Macvtap network binding is discontinued since v1.3. Please refer to Kubevirt user guide for '
    'alternatives."',
    '299 - "Passt network binding is discontinued since v1.3. Please refer to Kubevirt user guide for alternatives."',
    '299 - "Seamless migration with passt network binding plugin is no longer supported since KubeVirt v1.8. Please '
    'use the passt core binding instead."',
    '299 - "DisableMDEVConfiguration has been deprecated since v1.8.0"',
]
MANY_GATES = ["LiveMigration", "HotplugVolumes", "HostDevices", "NUMA", "GPU", "LiveMigration", "MultiArchitecture",
              "DockerSELinuxMCSWorkaround", "Macvtap", "VirtIOFS", "Passt", "PasstIPStackMigration",
              "DisableMDEVConfiguration"]


def patch_gates(fake, gates, disabled=None, query=""):
    dev = {"featureGates": gates, **({"disabledFeatureGates": disabled} if disabled is not None else {})}
    return raw(fake, "PATCH", KV_CR + query, {"spec": {"configuration": {"developerConfiguration": dev}}},
               content_type="application/merge-patch+json")


def test_the_kubevirt_cr_webhook_warns_on_every_deprecated_or_ga_gate_listed_as_the_real_one(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    status, _, headers = patch_gates(apiserver, MANY_GATES)
    # the duplicate LiveMigration once (kube-apiserver's recorder), the Alpha HostDevices and unknown VirtIOFS none
    assert (status, headers.get_all("Warning")) == (200, REAL_GATE_WARNINGS)
    assert patch_gates(apiserver, MANY_GATES)[2].get_all("Warning") is None  # the lists did not change: nothing
    status, _, headers = patch_gates(apiserver, ["HostDevices", "NUMA"], query="?dryRun=All")
    assert (status, headers.get_all("Warning")) == (200, [GA.format("NUMA")])  # a dry run is admitted too
    assert patch_gates(apiserver, ["HostDevices"])[2].get_all("Warning") is None  # Alpha gates: no warning
    # the whole list is judged whenever it changes: a GA gate listed before warns again when another one is added
    assert patch_gates(apiserver, ["HostDevices", "NUMA"])[2].get_all("Warning") == [GA.format("NUMA")]
    assert patch_gates(apiserver, ["HostDevices", "NUMA"], disabled=["Snapshot"])[2].get_all("Warning") == [
        GA.format("NUMA")]  # the disabled list changed


def test_the_kubevirt_cr_webhook_warns_on_deprecated_mediated_device_fields_on_every_update(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    body = {"spec": {"configuration": {"mediatedDevicesConfiguration": {"mediatedDevicesTypes": ["nvidia-222"]}}}}
    for _ in range(2):
        status, _, headers = raw(apiserver, "PATCH", KV_CR, body, content_type="application/merge-patch+json")
        assert (status, headers.get_all("Warning")) == (
            200, ['299 - "spec.configuration.mediatedDevicesConfiguration.mediatedDevicesTypes is deprecated, use '
                  'mediatedDeviceTypes"'])


def test_status_writes_and_other_kinds_get_no_kubevirt_warning(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]), vm_on())
    status, _, headers = raw(apiserver, "PATCH", KV_CR + "/status", {"status": {"phase": "Deployed"}},
                             content_type="application/merge-patch+json")
    assert (status, headers.get_all("Warning")) == (200, None)
    status, _, headers = raw(apiserver, "PATCH", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm1",
                             {"spec": {"featureGates": ["NUMA"]}}, content_type="application/merge-patch+json")
    assert headers.get_all("Warning") is None


# -- kube-aggregator: APIServices, and virt-api out of reach -------------------------------------


def test_apiservices_are_local_but_virt_apis(apiserver):
    _, groups, _ = raw(apiserver, "GET", "/apis")
    assert "apiregistration.k8s.io" in {g["name"] for g in groups["groups"]}
    apiservices = "/apis/apiregistration.k8s.io/v1/apiservices"
    status, virt_api, _ = raw(apiserver, "GET", f"{apiservices}/v1.subresources.kubevirt.io")
    assert status == 200 and virt_api["spec"]["service"] == {"name": "virt-api", "namespace": "kubevirt", "port": 443}
    assert virt_api["status"]["conditions"][0]["status"] == "True"
    _, core, _ = raw(apiserver, "GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1.")
    _, kv, _ = raw(apiserver, "GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1.kubevirt.io")
    for local in (core, kv):
        assert "service" not in local["spec"] and local["status"]["conditions"][0]["reason"] == "Local"
    status, body, _ = raw(apiserver, "GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1.nope.io")
    assert (status, body["message"], body["details"]) == (  # measured on kube-apiserver v1.36.2
        404, 'apiservices.apiregistration.k8s.io "v1.nope.io" not found',
        {"name": "v1.nope.io", "group": "apiregistration.k8s.io", "kind": "apiservices"})
    _, listed, _ = raw(apiserver, "GET", "/apis/apiregistration.k8s.io/v1/apiservices")
    assert {"v1.", "v1.kubevirt.io", "v1.subresources.kubevirt.io", "v1.apiregistration.k8s.io"} <= {
        s["metadata"]["name"] for s in listed["items"]}


def test_an_unreachable_virt_api_is_the_aggregators_plain_503_for_the_whole_group(apiserver):
    apiserver.add(vm_on("n1", running=False))
    apiserver.virt_api_available = False
    for method, path in (("PUT", f"{SUB}/vm1/start"), ("GET", "/apis/subresources.kubevirt.io/v1")):
        status, body, headers = raw(apiserver, method, path, {} if method == "PUT" else None)
        assert (status, body, headers["Content-Type"]) == (503, "service unavailable\n", "text/plain; charset=utf-8")
    _, virt_api, _ = raw(apiserver, "GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1.subresources.kubevirt.io")
    assert virt_api["status"]["conditions"][0] | {"lastTransitionTime": None} == {
        "type": "Available", "status": "False", "reason": "ServiceNotFound",
        "message": 'service/virt-api in "kubevirt" is not present', "lastTransitionTime": None}
    _, groups, _ = raw(apiserver, "GET", "/apis")
    assert "subresources.kubevirt.io" in {g["name"] for g in groups["groups"]}  # still listed, as measured
    assert apiserver.get("VirtualMachine", "vm1", "default")["spec"]["runStrategy"] == "Halted"
def _restart_required(fake):
    return [c for c in fake.get("VirtualMachine", "vm1", "default")["status"].get("conditions") or []
            if c["type"] == "RestartRequired"]


def _edit_template(fake, fn):
    fake.mutate("VirtualMachine", "vm1", "default", fn=lambda v: fn(v["spec"]["template"]["spec"]))


def test_simulated_controller_marks_a_template_change_restart_required_as_v190_does(kubevirt):
    """syncRestartRequired (kubevirt/kubevirt@v1.9.0 pkg/virt-controller/watch/vm/vm.go): a change the controller cannot
    make live sets RestartRequired (the words and fields the real one writes, tests/kubevirt_real/test_next_restart.py);
    live fields do not; putting the template back, or a restart, clears it."""
    kubevirt.add(vm_on("n1", running=False))
    assert put(kubevirt, "start")[0] == 202
    _edit_template(kubevirt, lambda t: t.update(nodeSelector={"a": "b"}, tolerations=[{"operator": "Exists"}]))
    assert _restart_required(kubevirt) == []
    _edit_template(kubevirt, lambda t: t["domain"]["devices"].update(
        hostDevices=[{"name": "npu0", "deviceName": "rebellions.ai/RBLN-CA22_PF"}]))
    (c,) = _restart_required(kubevirt)
    assert {k: v for k, v in c.items() if k != "lastTransitionTime"} == {
        "type": "RestartRequired", "status": "True", "lastProbeTime": None,
        "message": "a non-live-updatable field was changed in the template spec"}
    _edit_template(kubevirt, lambda t: t["domain"]["devices"].pop("hostDevices"))
    assert _restart_required(kubevirt) == []  # the template is what runs again
    _edit_template(kubevirt, lambda t: t["domain"]["devices"].update(hostDevices=[]))
    assert _restart_required(kubevirt) == []  # an empty list is an absent one to equality.Semantic.DeepEqual
    _edit_template(kubevirt, lambda t: t["domain"]["devices"].update(
        hostDevices=[{"name": "npu0", "deviceName": "rebellions.ai/RBLN-CA22_PF"}]))
    assert _restart_required(kubevirt) != []
    assert put(kubevirt, "restart")[0] == 202
    assert _restart_required(kubevirt) == []  # the new VMI started from this template


def test_a_vmi_the_controller_did_not_start_never_gets_restart_required(kubevirt):
    """Without the spec it started from (a VMI seeded by the test, as a VMI without a revision) there is nothing to
    compare: syncRestartRequired returns early."""
    kubevirt.add(vm_on("n1"), o.vmi("default", "vm1", "n1"))
    _edit_template(kubevirt, lambda t: t["domain"]["devices"].update(
        hostDevices=[{"name": "npu0", "deviceName": "rebellions.ai/RBLN-CA22_PF"}]))
    assert _restart_required(kubevirt) == []
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
