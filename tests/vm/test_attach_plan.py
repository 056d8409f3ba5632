"""vm attach|detach planning as a pure function of its facts (rblnctl.vm.attach.plan): no API server, no reads.

The facts are built by hand (VmFacts: the VM, its VMI, the templates read and who names them); the fakes' object
builders spell the objects as the API server would hold them. Names are written out, not imported from
rblnctl.constants (a wrong constant cannot pass its own tests), but the annotations' keys (tests/test_hygiene.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rblnctl import constants as C
from rblnctl.errors import InvalidInput, NotFound
from rblnctl.vm.attach import RUN_STATE, AttachOptions, DetachOptions, Target, VmFacts, vm_plan
from rblnctl.vm.attach.mark import held_guards
from rblnctl.vm.attach.model import of_run_state
from rblnctl.vm.attach.plan import detach_target
from tests.fakes import objects as o
from tests.vm.support import CA22, CA25, NS, NVIDIA, V1_CLAIM, VFIO_CLASS

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LEFT = C.VM_TEMPLATE_LEFT_ANNOTATION
STOPPED = C.VM_STOPPED_ANNOTATION


def _facts(vm: dict, vmi: dict | None = None, **kw) -> VmFacts:
    return VmFacts(vm=vm, vmi=vmi, now=NOW, **kw)


def _sandbox(npus: int, resource: str = CA22) -> Target:
    return Target(action="attach", method="sandbox", npus=npus, resource=resource, claim=V1_CLAIM)


def _dra(npus: int) -> Target:
    return Target(action="attach", method="dra", npus=npus, device_class=VFIO_CLASS, claim=V1_CLAIM)


def _plan(facts: VmFacts, target: Target, **options) -> object:
    return vm_plan(facts, target, options=AttachOptions(**options), identity="rblnctl@test/1/0")


def test_sandbox_names_the_resource_on_each_host_device_and_no_claim():
    vm = o.vm(NS, "v1", running=False, host_devices=[NVIDIA])
    plan = _plan(_facts(vm), _sandbox(2))
    assert plan.host_devices_after == [NVIDIA, {"name": "npu0", "deviceName": CA22},
                                       {"name": "npu1", "deviceName": CA22}]  # the GPU is kept
    assert plan.resource_claims_after == [] and plan.template is None and plan.template_create is None
    assert (plan.method, plan.npus_before, plan.npus_after, plan.added) == ("sandbox", 0, 2, ["npu0", "npu1"])
    assert not plan.noop and not plan.blockers and plan.patch is not None


def test_dra_points_each_host_device_at_its_request_and_creates_the_missing_template():
    vm = o.vm(NS, "v1", running=False)
    plan = _plan(_facts(vm, templates={"rbln-npu-2": None}), _dra(2))  # read: not there
    assert plan.host_devices_after == [{"name": "npu0", "claimName": V1_CLAIM, "requestName": "npu0"},
                                       {"name": "npu1", "claimName": V1_CLAIM, "requestName": "npu1"}]
    assert plan.resource_claims_after == [{"name": V1_CLAIM, "resourceClaimTemplateName": "rbln-npu-2"}]
    assert plan.template == "rbln-npu-2" and plan.template_create is not None
    assert plan.template_create["metadata"]["name"] == "rbln-npu-2"
    requests = plan.template_create["spec"]["spec"]["devices"]["requests"]
    assert [(r["name"], r["exactly"]["deviceClassName"]) for r in requests] == [("npu0", VFIO_CLASS),
                                                                                ("npu1", VFIO_CLASS)]


def test_a_template_of_that_name_asking_for_something_else_blocks():
    vm = o.vm(NS, "v1", running=False)
    other = o.resource_claim_template(NS, "rbln-npu-2", npus=1, managed=False)
    plan = _plan(_facts(vm, templates={"rbln-npu-2": other}), _dra(2))
    assert plan.template_create is None
    assert [b.message for b in plan.blockers] == [
        f"ResourceClaimTemplate {NS}/rbln-npu-2 exists but asks for something else (npu0: {VFIO_CLASS} x1); "
        "rblnctl does not change templates it did not write: delete or rename it"]


def test_a_vm_that_has_the_npus_already_is_a_noop():
    vm = o.vm(NS, "v1", running=False, host_devices=[CA22, CA22])
    plan = _plan(_facts(vm), _sandbox(2))
    assert plan.noop and plan.patch is None and not plan.blockers and not plan.added and not plan.removed


def test_another_resource_is_replaced_with_a_warning():
    vm = o.vm(NS, "v1", running=False, host_devices=[CA25])
    plan = _plan(_facts(vm), _sandbox(1))
    assert plan.host_devices_after == [{"name": "npu0", "deviceName": CA22}] and plan.removed == ["npu0"]
    assert f"replacing 1 NPU(s) of {CA25} with {CA22}" in plan.warnings


def test_a_running_vm_without_restart_is_blocked_and_restart_is_the_way_on():
    vm = o.vm(NS, "v1", running=True)
    vmi = o.vmi(NS, "v1", "n1")
    blocked = _plan(_facts(vm, vmi), _sandbox(1))
    assert [(b.message, b.override) for b in blocked.blockers] == [
        (f"VM {NS}/v1 is running (VMI Running on n1): a change to its NPUs takes effect only when it restarts",
         "restart")]
    assert blocked.running and not blocked.restart
    restarted = _plan(_facts(vm, vmi), _sandbox(1), restart=True)
    assert restarted.blockers == [] and restarted.restart
    staged = _plan(_facts(vm, vmi), _sandbox(1), next_restart=True)
    assert staged.blockers == [] and not staged.restart and staged.next_restart


def test_a_stopped_vms_patch_tests_its_run_state_and_a_running_ones_does_not():
    stopped = _plan(_facts(o.vm(NS, "v1", running=False)), _sandbox(1))
    running = _plan(_facts(o.vm(NS, "v1", running=True), o.vmi(NS, "v1", "n1")), _sandbox(1), restart=True)

    def run_tests(plan):
        return [op["path"] for op in plan.patch if op["op"] == "test" and of_run_state(op["path"])]

    assert run_tests(stopped) == ["/spec/runStrategy", "/spec/running", "/status/stateChangeRequests"]
    assert run_tests(running) == []


def test_the_held_guards_test_the_spec_members_of_the_one_run_state_list():
    """Issue 42's review leftover: value_tests(RUN_STATE) and the held guards spell one list of run-state paths."""
    vm = o.vm(NS, "v1", running=False)
    vm["metadata"]["annotations"] = {STOPPED: "2026-01-01T00:00:00Z stopped"}
    guards = held_guards(vm)
    assert guards == [{"op": "test", "path": "/spec/runStrategy", "value": "Halted"},
                      {"op": "test", "path": "/spec/running", "value": None},
                      {"op": "test", "path": "/metadata/annotations/" + STOPPED.replace("/", "~1"),
                       "value": "2026-01-01T00:00:00Z stopped"}]
    assert [p for p in RUN_STATE if p[0] == "spec"] == [("spec", "runStrategy"), ("spec", "running")]


def test_a_vm_leaving_its_template_records_it_and_deletes_it_when_no_one_else_names_it():
    vm = o.dra_vm(NS, "v1", 1)  # names rbln-npu-1, stopped
    old = o.resource_claim_template(NS, "rbln-npu-1", npus=1)
    uid = old["metadata"]["uid"]
    facts = _facts(vm, templates={"rbln-npu-1": old, "rbln-npu-2": None})
    plan = _plan(facts, _dra(2))
    assert plan.templates_delete == ["rbln-npu-1"] and plan.template_left == f"rbln-npu-1 uid={uid}"
    assert {"op": "test", "path": "/metadata/annotations", "value": None} in plan.patch
    assert {"op": "add", "path": "/metadata/annotations", "value": {LEFT: f"rbln-npu-1 uid={uid}"}} in plan.patch
    shared = _plan(_facts(vm, templates=facts.templates, leaving_users=("VirtualMachine v2",)), _dra(2))
    assert shared.templates_delete == [] and shared.template_left is None
    assert shared.templates_kept == ["ResourceClaimTemplate rbln-npu-1 kept: VirtualMachine v2 still uses it"]


def test_a_vm_with_nothing_to_change_deletes_only_the_template_an_interrupted_run_left():
    vm = o.dra_vm(NS, "v1", 2)
    left = o.resource_claim_template(NS, "rbln-npu-1", npus=1)
    vm["metadata"]["annotations"] = {LEFT: f"rbln-npu-1 uid={left['metadata']['uid']}"}
    plan = _plan(_facts(vm, templates={"rbln-npu-1": left}), _dra(2))
    assert not plan.noop and plan.patch is None and plan.templates_delete == ["rbln-npu-1"]
    replaced = o.resource_claim_template(NS, "rbln-npu-1", npus=1)
    replaced["metadata"]["uid"] = "another-uid"  # deleted and made again since: not the template the VM left
    assert _plan(_facts(vm, templates={"rbln-npu-1": replaced}), _dra(2)).noop


def test_detach_of_a_host_device_that_is_no_npu_or_no_device_at_all_is_refused():
    vm = o.vm(NS, "v1", running=False, host_devices=[NVIDIA, CA22])
    with pytest.raises(InvalidInput, match="has no NPU host device 'gpu0'"):
        detach_target(_facts(vm), DetachOptions(device="gpu0"))
    with pytest.raises(NotFound, match="has no host device 'npu7'"):
        detach_target(_facts(vm), DetachOptions(device="npu7"))
    target, warnings = detach_target(_facts(vm), DetachOptions(device="npu1"))
    assert (target.remove, target.npus, warnings) == (("npu1",), 0, [])
    assert _plan(_facts(vm), target).host_devices_after == [NVIDIA]
