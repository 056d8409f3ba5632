"""Issue 37, findings 1-4: another actor moves between two steps of `vm attach --restart` (the VM's owner, or a
delete and re-create of the same name), on the fake API server's virt-api and simulated virt-controller.

The rule (docs/architecture.md, "VMs rblnctl stops"): rblnctl never changes or starts what it did not stop or what
was replaced under it, its message is true, and the recovery it prints converges. The owner's actions go through
the fake's virt-api (`owner`), as `virtctl start|stop` would, or edit the VM as `kubectl edit` would.
"""

from __future__ import annotations

import json
import uuid

import pytest

from rblnctl.errors import Forbidden, Replaced
from rblnctl.vm.attach import StartedMeanwhile, stale_mark
from tests.fakes import objects as o
from tests.helpers import cli
from tests.vm.support import CA22, NS, attacher, host_devices, sandbox_cluster
from tests.vm.test_restart import START, is_npu_patch, vm
from rblnctl.constants import VM_STOPPED_ANNOTATION as STOPPED

SUB = f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/v1/"
REFUSED = 'virtualmachines.kubevirt.io "v1" is forbidden: User "u" cannot update resource "virtualmachines/start"'


def owner(apiserver, action: str) -> None:
    """The VM's owner asks virt-api (`virtctl start|stop v1`): the fake's virt-api serves it as for any client."""
    apiserver._kubevirt.handle("PUT", SUB + action, {})


def running(apiserver, run_strategy: str = "Always") -> None:
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", node="n1", run_strategy=run_strategy, printable_status="Running"),
                  o.vmi(NS, "v1", "n1"))
    apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["status"].update(ready=True, created=True))


def vmi(apiserver) -> dict | None:
    return apiserver.get("VirtualMachineInstance", "v1", NS)


def marked(apiserver) -> str | None:
    return (vm(apiserver)["metadata"].get("annotations") or {}).get(STOPPED)


def start_refused(apiserver) -> None:
    """virt-api refuses rblnctl's start (RBAC: 403), as often as it is asked."""
    apiserver.inject_fault(method="PUT", path=START, status=403, reason="Forbidden", message=REFUSED, times=50)


def on_npu_patch(apiserver, action) -> None:
    """`action` runs once, just before the server takes rblnctl's NPU patch (the VM is stopped by rblnctl then)."""
    armed = [True]

    def hook(req):
        if armed[0] and is_npu_patch(req):
            armed[0] = False
            action()
    apiserver.on_request(hook)


# -- 37.1: a Manual VM its owner started and stopped since is not started by the printed re-run -------------------


def test_a_manual_vm_its_owner_started_and_stopped_since_is_left_stopped_by_the_rerun(apiserver, kube):
    """Before: virt-api's start/stop of a Manual VM only write status.stateChangeRequests, the generation never moved,
    and the re-run said "was stopped by an earlier rblnctl run ... starting it" and started it."""
    running(apiserver, "Manual")
    planner = attacher(kube, npus=2, restart=True)
    start_refused(apiserver)
    with pytest.raises(Forbidden) as err:
        planner.apply(planner.plan("v1", NS))
    assert any("re-run this command: it starts a VM rblnctl stopped" in d for d in err.value.details)
    assert marked(apiserver) and vmi(apiserver) is None and vm(apiserver)["spec"]["runStrategy"] == "Manual"
    apiserver.clear_faults()
    generation = vm(apiserver)["metadata"]["generation"]
    owner(apiserver, "start")  # a Start request: virt-controller makes a VMI
    assert vmi(apiserver) is not None
    owner(apiserver, "stop")  # a Stop request: it goes
    assert vmi(apiserver) is None and vm(apiserver)["metadata"]["generation"] == generation  # status only
    again = attacher(kube, npus=2).plan("v1", NS)
    assert not again.start and again.stale_mark
    assert "it was started since" in str(stale_mark(vm(apiserver)))
    assert not any("was stopped by an earlier rblnctl run" in str(w) for w in again.warnings)
    apiserver.clear_requests()
    attacher(kube, npus=2).apply(again)
    assert vmi(apiserver) is None and not [r for r in apiserver.requests if r.path.endswith("/start")]


def test_the_cli_rerun_of_a_manual_vm_its_owner_cycled_says_so_and_starts_nothing(apiserver):
    running(apiserver, "Manual")
    start_refused(apiserver)
    first = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", server=apiserver.url)
    assert first.exit_code == 4 and "re-run this command" in first.stderr
    apiserver.clear_faults()
    owner(apiserver, "start")
    owner(apiserver, "stop")
    again = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", server=apiserver.url)
    assert again.exit_code == 0, again.stderr
    assert "starting it" not in again.stderr and "it was started since" in again.stderr
    assert vmi(apiserver) is None


# -- 37.2: a VM deleted and re-created while rblnctl has it stopped is not changed, marked or started -------------


def recreate(apiserver) -> None:
    """The owner deletes v1 and creates it again from the same manifest, runStrategy Halted (another uid)."""
    apiserver.delete_now("VirtualMachine", "v1", NS)
    fresh = o.vm(NS, "v1", node="n1", running=False)
    fresh["metadata"]["uid"] = str(uuid.uuid4())
    apiserver.add(fresh)


def test_a_vm_recreated_while_stopped_is_not_changed_marked_or_started(apiserver, kube):
    """Before: the patch, the mark and the start all landed on the new VM: Always, Running, 2 NPUs, exit 0."""
    running(apiserver)
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    on_npu_patch(apiserver, lambda: recreate(apiserver))
    with pytest.raises(Replaced) as err:
        planner.apply(plan)
    assert f"VM {NS}/v1 was deleted and re-created while rblnctl" in str(err.value)
    now = vm(apiserver)
    assert now["metadata"]["uid"] != plan.uid
    assert now["spec"]["runStrategy"] == "Halted" and host_devices(apiserver) == []  # as its owner made it
    assert marked(apiserver) is None and vmi(apiserver) is None
    assert not [r for r in apiserver.requests if r.path.endswith("/start")]


def test_the_cli_says_the_vm_was_recreated_and_exits_1(apiserver):
    running(apiserver)
    on_npu_patch(apiserver, lambda: recreate(apiserver))
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    assert f"VM {NS}/v1 was deleted and re-created while rblnctl" in r.stderr
    assert vm(apiserver)["spec"]["runStrategy"] == "Halted" and marked(apiserver) is None


# -- 37.3: never "restarted and Ready" while the VM runs with its old NPUs -------------------------------------------


def test_a_vm_its_owner_started_before_the_patch_is_not_changed_and_the_rerun_restarts_it(apiserver, kube):
    """Before: exit 0, "1 -> 2 NPU(s), restarted and Ready", ready: true, restarted: true; the VMI had 1 NPU and
    rblnctl never sent a start. Then (issue 37's first fix): exit 0, "changed; not restarted", the VM running its old
    NPUs with a spec that asks for others, and a re-run that found nothing to do. Now the NPU patch tests the run
    state rblnctl left (virt-api's start flips spec.runStrategy): refused, nothing written, the VM runs as its owner
    started it, and the run says so and exits 1; its re-run restarts it with the change."""
    running(apiserver)
    apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"]["template"]["spec"]["domain"]["devices"].update(
        hostDevices=[{"name": "npu0", "deviceName": CA22}]))
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)
    on_npu_patch(apiserver, lambda: owner(apiserver, "start"))
    with pytest.raises(StartedMeanwhile, match="started by someone else after rblnctl stopped it and before it "
                                               "changed its NPUs"):
        planner.apply(plan)
    assert len(host_devices(apiserver)) == 1  # nothing written
    assert [r.status for r in apiserver.requests if is_npu_patch(r)] == [422]
    assert any("it runs as they started it, with the NPUs it had" in line for line in planner.recovery)
    assert len(vmi(apiserver)["spec"]["domain"]["devices"]["hostDevices"]) == 1
    assert marked(apiserver) is None  # not rblnctl's to start any more: its owner's
    assert not [r for r in apiserver.requests if r.path.endswith("/start")]  # rblnctl sent none (the owner's is direct)


def test_the_cli_says_nothing_changed_when_the_owner_started_it_first_and_its_rerun_converges(apiserver):
    running(apiserver)
    apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"]["template"]["spec"]["domain"]["devices"].update(
        hostDevices=[{"name": "npu0", "deviceName": CA22}]))
    on_npu_patch(apiserver, lambda: owner(apiserver, "start"))
    argv = ("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes")
    r = cli(*argv, server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    said = " ".join(r.stderr.split())
    assert "restarted and Ready" not in said and "nothing was written" in said
    assert f"VM {NS}/v1 was started by someone else after rblnctl stopped it and before it changed its NPUs" in said
    again = cli(*argv, "-o", "json", server=apiserver.url)
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["result"]["ready"] is True
    assert len(vmi(apiserver)["spec"]["domain"]["devices"]["hostDevices"]) == 2


# -- 37.4: the printed recovery converges after an edit of the VM by its owner --------------------------------------


def test_an_owner_edit_while_stopped_does_not_stop_the_printed_rerun_from_starting_it(apiserver, kube):
    """Before: generation 3 past the mark (allowance 2): the re-run called its own mark stale, left the VM Halted and
    exited 0."""
    running(apiserver)
    planner = attacher(kube, npus=2, restart=True)
    plan = planner.plan("v1", NS)

    def edit_memory():
        apiserver.mutate("VirtualMachine", "v1", NS, lambda v: v["spec"]["template"]["spec"]["domain"][
            "resources"]["requests"].update(memory="8Gi"))
    on_npu_patch(apiserver, edit_memory)
    start_refused(apiserver)
    with pytest.raises(Forbidden) as err:
        planner.apply(plan)
    assert any("re-run this command: it starts a VM rblnctl stopped" in d for d in err.value.details)
    apiserver.clear_faults()
    again = attacher(kube, npus=2).plan("v1", NS)  # the printed recovery
    assert again.start and not again.stale_mark
    result = attacher(kube, npus=2).apply(again)
    assert result.restarted and result.ready and vm(apiserver)["spec"]["runStrategy"] == "Always"
    assert marked(apiserver) is None and len(vmi(apiserver)["spec"]["domain"]["devices"]["hostDevices"]) == 2


# -- identity on every write: vm start|stop|restart too -----------------------------------------------------------


def test_vm_restart_of_a_vm_recreated_after_its_plan_sends_nothing(apiserver, kube):
    """The [y/N] of `vm restart` sits between the plan and the request: a VM re-created meanwhile is another one."""
    from rblnctl.vm.lifecycle import VmLifecycle

    running(apiserver)
    life = VmLifecycle(kube=kube, timeout_s=10)
    plan = life.plan("restart", "v1", NS)
    apiserver.delete_now("VirtualMachine", "v1", NS)  # its VMI goes with it (garbage collection)
    fresh = o.vm(NS, "v1", node="n1")
    fresh["metadata"]["uid"] = str(uuid.uuid4())
    apiserver.add(fresh, o.vmi(NS, "v1", "n1"))
    apiserver.clear_requests()
    with pytest.raises(Replaced, match="was deleted and re-created while rblnctl was about to restart it"):
        life.apply(plan)
    assert not [r for r in apiserver.requests if r.method == "PUT"]


# -- a Manual VM started as its patch lands: its start is a status request virt-controller clears -----------------

def _stopped_manual(apiserver) -> None:
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, run_strategy="Manual", host_devices=[CA22]))


def test_a_manual_vm_started_as_its_patch_lands_is_said_to_run_without_the_change(apiserver, kube):
    """A Manual VM's start is a Start request in its status, which virt-controller turns into a VMI and clears before
    the NPU patch can test it (real KubeVirt v1.9.0 under load, tests/kubevirt_real/test_other_actors_real.py): the
    patch landed and the run said "1 -> 2 NPU(s)", exit 0, while the VM ran with 1. Now the read-back finds a VMI made
    without the change: StartedMeanwhile, `vm restart` named."""
    _stopped_manual(apiserver)
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    assert not plan.running and not plan.blockers
    on_npu_patch(apiserver, lambda: apiserver.add(o.vmi(NS, "v1", "n1", host_devices=[CA22])))
    with pytest.raises(StartedMeanwhile, match="started by someone else while rblnctl changed its NPUs: the change is "
                                               "in its spec, but it runs with the NPUs it had") as e:
        planner.apply(plan)
    assert len(host_devices(apiserver)) == 2  # the patch landed: the spec holds the change
    assert e.value.blockers[0].remedy.command.words == ("vm", "restart", "v1")


def test_an_always_vm_read_between_two_vmis_is_said_to_be_started_by_kubevirt(apiserver, kube):
    """runStrategy Always and no VMI when rblnctl read it (its last one just gone; real KubeVirt v1.9.0 under load,
    tests/kubevirt_real/test_attach_interrupted.py): virt-controller made the next one from the old spec before the
    patch landed. The read-back says who started it: KubeVirt, not "someone else"."""
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, run_strategy="Always", host_devices=[CA22]))
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)
    assert not plan.running and not plan.blockers
    on_npu_patch(apiserver, lambda: apiserver.add(o.vmi(NS, "v1", "n1", host_devices=[CA22])))
    said = r"started by KubeVirt \(runStrategy Always\) while rblnctl changed its NPUs: the change is in its spec"
    with pytest.raises(StartedMeanwhile, match=said) as e:
        planner.apply(plan)
    assert e.value.blockers[0].remedy.command.words == ("vm", "restart", "v1")


def test_a_manual_vm_started_after_its_patch_landed_runs_with_the_change_and_is_done(apiserver, kube):
    """The same race the other way round: the owner's start came after the patch, so virt-controller made the VMI
    from the changed spec: done, nothing to say."""
    _stopped_manual(apiserver)
    planner = attacher(kube, npus=2)
    plan = planner.plan("v1", NS)

    def started_with_the_change(req):
        if is_npu_patch(req) and req.status == 200:
            apiserver.add(o.vmi(NS, "v1", "n1", host_devices=[CA22, CA22]))
    apiserver.on_handled(started_with_the_change)
    result = planner.apply(plan)
    assert result.changed and len(host_devices(apiserver)) == 2
