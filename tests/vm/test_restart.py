"""vm attach|detach --restart: what rblnctl stopped, it starts again; or says how, and the next run starts it."""

from __future__ import annotations

import json

import pytest

from rblnctl.errors import Conflict, Forbidden, OutcomeUnknown
from tests.fakes import objects as o
from tests.helpers import cli
from tests.vm.support import CA22, NS, attacher, sandbox_cluster
from rblnctl.constants import VM_STOPPED_ANNOTATION as STOPPED

VM_PATH = rf"/apis/kubevirt\.io/v1/namespaces/{NS}/virtualmachines/v1$"
START = rf"/namespaces/{NS}/virtualmachines/v1/start$"
DENIED = 'virtualmachines.kubevirt.io "v1" is forbidden: User "u" cannot patch resource "virtualmachines"'


def running_vm(apiserver):
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", node="n1"), o.vmi(NS, "v1", "n1"))


def vm(apiserver):
    return apiserver.get("VirtualMachine", "v1", NS)


def is_running(apiserver):
    return vm(apiserver)["spec"].get("runStrategy") == "Always"


def is_npu_patch(req) -> bool:
    """The patch that changes the VM's NPUs (a JSON patch of its template), not one of the mark's."""
    return req.method == "PATCH" and isinstance(req.body, list) and any(
        str(op.get("path", "")).startswith("/spec/template/") for op in req.body if isinstance(op, dict))


def npu_patch_fails(apiserver, **fault):
    """The patch that changes the VM's NPUs (not the annotation one) fails as `fault` says."""
    def hook(req):  # runs before the server takes a fault: this very request gets it
        if is_npu_patch(req):
            apiserver.inject_fault(method="PATCH", path=VM_PATH, times=1, **fault)
    return apiserver.on_request(hook)


@pytest.mark.parametrize("fault, error", [
    ({"status": 403, "reason": "Forbidden", "message": 'virtualmachines.kubevirt.io "v1" is forbidden: User "u" '
      'cannot patch resource "virtualmachines"'}, Forbidden),
    ({"status": 409, "reason": "Conflict", "message": "the object has been modified"}, Conflict),
    ({"drop": True}, OutcomeUnknown),
], ids=["403", "409", "reset"])
def test_a_failure_after_the_stop_starts_the_vm_again(apiserver, kube, fault, error):
    """Before: the VM was left stopped, silently."""
    running_vm(apiserver)
    kube.read_retries = 0
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    if error is OutcomeUnknown:  # a reset patch, and the VM cannot be read back either
        def hook(req):
            if is_npu_patch(req):
                apiserver.inject_fault(method="PATCH", path=VM_PATH, drop=True, times=1)
                apiserver.inject_fault(method="GET", path=VM_PATH, drop=True, times=1)
        apiserver.on_request(hook)
    else:
        npu_patch_fails(apiserver, **fault)
    with pytest.raises(error) as err:
        planner.apply(plan)
    assert is_running(apiserver)
    assert STOPPED not in (vm(apiserver)["metadata"].get("annotations") or {})
    assert any("was stopped by rblnctl and has been started again" in d for d in err.value.details)


def test_a_vm_that_cannot_be_started_again_says_how_and_the_next_run_starts_it(apiserver, kube):
    running_vm(apiserver)
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    unhook = npu_patch_fails(apiserver, status=403, reason="Forbidden", message=DENIED)
    apiserver.inject_fault(method="PUT", path=START, status=500, times=20)
    with pytest.raises(Forbidden) as err:
        planner.apply(plan)
    assert not is_running(apiserver) and vm(apiserver)["metadata"]["annotations"][STOPPED]
    (line,) = [d for d in err.value.details if "is left stopped" in d]
    assert f"virtctl start v1 -n {NS}" in line and "re-run this command" in line
    assert err.value.result.left_stopped and err.value.result.start_command == f"virtctl start v1 -n {NS}"
    # the next run (no --restart needed: the VM is stopped) makes the change and starts the VM rblnctl stopped
    unhook()
    apiserver.clear_faults()
    again = attacher(kube, npus=2).plan("v1", NS)
    assert again.start and not again.noop and not again.blockers
    result = attacher(kube, npus=2).apply(again)
    assert result.restarted and result.ready and is_running(apiserver)
    assert STOPPED not in (vm(apiserver)["metadata"].get("annotations") or {})
    assert [d["deviceName"] for d in vm(apiserver)["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]] \
        == [CA22, CA22]


def test_the_cli_shows_a_vm_left_stopped_on_stderr_and_in_json(apiserver):
    running_vm(apiserver)
    npu_patch_fails(apiserver, status=403, reason="Forbidden", message=DENIED)
    apiserver.inject_fault(method="PUT", path=START, status=403, reason="Forbidden", times=5,
                           message='virtualmachines.subresources.kubevirt.io "v1" is forbidden: User "u" cannot update '
                                   'resource "virtualmachines/start"')
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", "--timeout", "10s", "-o", "json",
            server=apiserver.url)
    assert r.exit_code == 4, r.stderr  # the failure's own exit code
    doc = json.loads(r.stdout)
    assert doc["result"]["leftStopped"] is True and doc["result"]["startCommand"] == f"virtctl start v1 -n {NS}"
    assert "is left stopped" in r.stderr and f"virtctl start v1 -n {NS}" in r.stderr
