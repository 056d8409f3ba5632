"""Issue 37, findings 1-4, on real KubeVirt v1.9.0: another actor moves between two steps of `vm attach --restart`.

The owner acts through the real virt-api (`kv.virtctl`, what `virtctl start|stop` sends) or edits the VM through the
real apiserver; real virt-controller writes what it writes (status.stateChangeRequests carried out,
status.observedGeneration set from each VMI it starts). Only virt-api's refusal of rblnctl's own start (RBAC's 403) is
modelled, at Kube.request (`strike`): the real tier runs rblnctl as an admin. Same scenarios on the fake:
tests/vm/test_other_actors.py.
"""

from __future__ import annotations

from typing import Any

from rblnctl.errors import Forbidden
from tests.kubevirt_real.test_restart import create, is_npu_patch, npus_permitted, run, strike
from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm
from rblnctl.constants import VM_STOPPED_ANNOTATION as STOPPED

REFUSED = 'virtualmachines.kubevirt.io "v" is forbidden: User "u" cannot update resource "virtualmachines/start"'


def is_start(method: str, path: str, _body: Any) -> bool:
    return method == "PUT" and path.endswith("/v/start")


def refuse(_send: Any) -> Any:
    raise Forbidden(REFUSED, status=403, reason="Forbidden", server_message=REFUSED)


def owner(kv, action: str) -> None:
    status, body = kv.virtctl(action, "v")
    assert status == 202, body


def running(kv, strategy: str) -> None:
    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy=strategy, host_devices=[SANDBOX_RESOURCE]))
    if strategy == "Manual":
        owner(kv, "start")
    kv.wait_vmi_phase("v", "Running")


def mark(kv) -> str | None:
    return (kv.vm("v")["metadata"].get("annotations") or {}).get(STOPPED)


def starts(kv) -> list:
    return [e for e in kv.requests() if e.verb == "update" and e.uri.split("?")[0].endswith("/v/start")]


def test_a_manual_vm_its_owner_started_and_stopped_since_is_left_stopped_by_the_rerun_real(kv, monkeypatch):
    running(kv, "Manual")
    strike(monkeypatch, is_start, refuse)
    code, _, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "60s")
    assert code == 4 and "re-run this command: it starts a VM rblnctl stopped" in err, err
    monkeypatch.undo()
    kv.wait_no_vmi("v")
    generation = kv.vm("v")["metadata"]["generation"]
    assert mark(kv) and kv.vm("v")["spec"]["runStrategy"] == "Manual"
    owner(kv, "start")  # real virt-api: a Start request, nothing in the spec
    kv.wait_vmi_phase("v", "Running")
    owner(kv, "stop")
    kv.wait_no_vmi("v")
    now = kv.vm("v")
    assert now["metadata"]["generation"] == generation  # the owner's start and stop moved no generation
    assert now["status"]["observedGeneration"] == generation  # ...but the VMI they ran came from it
    kv.mark()
    code, doc, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "60s")
    assert code == 0, err
    assert not doc["plan"]["start"] and "it was started since" in err and "starting it" not in err
    assert starts(kv) == [] and kv.vmi("v") is None


def test_a_vm_recreated_while_stopped_is_not_changed_marked_or_started_real(kv, monkeypatch):
    running(kv, "Always")
    uid = kv.vm("v")["metadata"]["uid"]

    def recreate(send: Any) -> Any:
        kv.api.delete("VirtualMachine", "v", kv.namespace)
        kv.api.wait_for(lambda: kv.vm("v") is None, timeout_s=30, interval_s=0.2)
        create(kv, vm(kv.namespace, "v", run_strategy="Halted", host_devices=[SANDBOX_RESOURCE]))
        return send()

    strike(monkeypatch, is_npu_patch, recreate)
    kv.mark()
    code, _, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "60s")
    assert code == 1, err
    assert f"VM {kv.namespace}/v was deleted and re-created while rblnctl" in err
    now = kv.vm("v")
    assert now["metadata"]["uid"] != uid and now["spec"]["runStrategy"] == "Halted" and mark(kv) is None
    assert len(now["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]) == 1
    assert starts(kv) == [] and kv.vmi("v") is None


def test_a_vm_its_owner_started_before_the_patch_is_not_changed_and_the_rerun_restarts_it_real(kv, monkeypatch):
    """The owner's `virtctl start` lands after rblnctl's stop and before its NPU patch: real virt-api flips
    spec.runStrategy Halted -> Always, so the patch's test of it fails on real kube-apiserver (422); nothing is
    written, the VM runs its old NPUs as its owner started it, exit 1; the same command again restarts it with 2."""
    running(kv, "Always")

    def owner_starts(send: Any) -> Any:
        owner(kv, "start")
        kv.wait_vmi_phase("v", "Running")  # the VMI of the template before rblnctl's patch: 1 NPU
        return send()

    strike(monkeypatch, is_npu_patch, owner_starts)
    kv.mark()
    code, _, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "60s")
    assert code == 1, err
    said = " ".join(err.split())
    assert "started by someone else after rblnctl stopped it and before it changed its NPUs" in said, err
    assert "nothing was written" in said and "restarted and Ready" not in said
    assert [w.code for w in kv.writes() if w.verb == "patch" and w.path.endswith("/v")].count(422) == 1
    assert len(kv.vm("v")["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]) == 1
    assert len(kv.vmi("v")["spec"]["domain"]["devices"]["hostDevices"]) == 1
    assert starts(kv) == [] and mark(kv) is None
    monkeypatch.undo()
    code, doc, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "90s")
    assert code == 0, err
    assert doc["result"]["ready"] is True and mark(kv) is None
    assert len(kv.vmi("v")["spec"]["domain"]["devices"]["hostDevices"]) == 2


def test_a_second_run_refuses_while_the_first_holds_the_vm_stopped_real(kv, monkeypatch):
    """Issue 37: a second `vm attach --restart` (another change) while the first has the VM stopped, just before its
    NPU patch: the mark names the first run and is live, so the second refuses and writes nothing; the first
    finishes as if alone."""
    running(kv, "Always")
    second: list = []

    def second_run(send: Any) -> Any:
        second.append(run(kv, "attach", "v", "--npus", "3", "--restart", "--yes", "--timeout", "60s"))
        return send()

    strike(monkeypatch, is_npu_patch, second_run)
    code, doc, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "60s")
    assert code == 0, err
    ((code2, _, err2),) = second
    assert code2 == 1 and "is held by another rblnctl run (rblnctl@" in " ".join(err2.split()), err2
    assert doc["result"]["ready"] is True and mark(kv) is None
    assert len(kv.vmi("v")["spec"]["domain"]["devices"]["hostDevices"]) == 2


def test_an_owner_edit_while_stopped_does_not_stop_the_printed_rerun_from_starting_it_real(kv, monkeypatch):
    running(kv, "Always")

    def edit_memory(send: Any) -> Any:
        kv.api.patch("VirtualMachine", "v", {"spec": {"template": {"spec": {"domain": {"resources": {
            "requests": {"memory": "128Mi"}}}}}}}, kv.namespace)
        return send()

    strike(monkeypatch, is_npu_patch, edit_memory)
    code, _, err = refused_start(monkeypatch, kv)
    assert code == 4 and "re-run this command: it starts a VM rblnctl stopped" in err, err
    monkeypatch.undo()
    code, doc, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "60s")
    assert code == 0, err
    assert doc["plan"]["start"] and doc["result"]["ready"] is True and doc["result"]["restarted"] is True
    assert kv.vm("v")["spec"]["runStrategy"] == "Always" and mark(kv) is None
    assert len(kv.vmi("v")["spec"]["domain"]["devices"]["hostDevices"]) == 2


def refused_start(monkeypatch, kv) -> tuple[int, dict | None, str]:
    """`vm attach v --npus 2 --restart`, virt-api refusing its start (on top of the strike already set)."""
    from rblnctl.kube.client import Kube

    struck = Kube.request

    def both(self, method, path, *args, **kw):
        if is_start(method, path, None):
            refuse(None)
        return struck(self, method, path, *args, **kw)
    monkeypatch.setattr(Kube, "request", both)
    return run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "60s")


# -- a stopped VM's NPU patch tests how it runs (issue 37, RUN_STATE in rblnctl/vm/attach.py) -------------------------


def npu_patches(kv) -> list:
    return [e for e in kv.requests() if e.verb == "patch" and e.uri.split("?")[0].endswith("/virtualmachines/v")]


def test_a_stopped_vm_is_changed_with_its_run_state_tested_real(kv):
    """The real apiserver applies the `test` ops of /spec/runStrategy, /spec/running and /status/stateChangeRequests
    (absent members by `null`) to a stopped VM as read: the patch goes through at once."""
    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy="Halted", host_devices=[SANDBOX_RESOURCE]))
    # virt-controller writes a new VM's status a moment after its create: read before that, the patch's test of the
    # absent /status fails once (422, re-read, sent again: 2 attempts, seen in CI); a user's VM has its status
    kv.api.wait_for(lambda: (kv.vm("v") or {}).get("status"), timeout_s=60, interval_s=0.1, message="VM v's status")
    kv.mark()
    code, doc, err = run(kv, "attach", "v", "--npus", "2", "--yes")
    assert code == 0, err
    assert doc["result"]["attempts"] == 1 and [e.code for e in npu_patches(kv)] == [200]
    assert len(kv.vm("v")["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]) == 2


def test_a_stopped_vm_its_owner_starts_before_the_npu_patch_is_refused_not_changed_real(kv, monkeypatch):
    """Before: the patch landed on the VM virt-api had just set to Always (its uid test held), exit 0 "1 -> 2 NPU(s)"
    while its VMI started with 1 (the explorer's vm-attach-dra owner-start)."""
    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy="Halted", host_devices=[SANDBOX_RESOURCE]))

    def owner_starts(send: Any) -> Any:
        owner(kv, "start")  # real virt-api: spec.runStrategy Halted -> Always
        return send()

    strike(monkeypatch, is_npu_patch, owner_starts)
    kv.mark()
    code, _, err = run(kv, "attach", "v", "--npus", "2", "--yes")
    assert code == 1, err
    assert "was started by someone else after rblnctl read it as stopped (" in err and "--restart" in err, err
    assert 422 in [e.code for e in npu_patches(kv)]  # the run-state test refused it on the real apiserver
    assert len(kv.vm("v")["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]) == 1


def test_a_manual_vm_its_owner_starts_before_the_npu_patch_is_refused_not_changed_real(kv, monkeypatch):
    """A Manual VM's start writes only status.stateChangeRequests (then virt-controller makes the VMI and clears
    them): a patch that meets the request is refused by its test of it, nothing changed; one that comes after
    virt-controller cleared it lands (seen in CI under load: exit 0, "1 -> 2 NPU(s)", the VM running with 1), and the
    read-back of the VMI says it runs without the change and names `vm restart`. Either way: exit 1, and what the
    run says is what the VM is."""
    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy="Manual", host_devices=[SANDBOX_RESOURCE]))

    def owner_starts(send: Any) -> Any:
        owner(kv, "start")
        return send()

    strike(monkeypatch, is_npu_patch, owner_starts)
    kv.mark()
    code, _, err = run(kv, "attach", "v", "--npus", "2", "--yes")
    assert code == 1, err
    said = " ".join(err.split())
    spec_npus = len(kv.vm("v")["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"])
    if "was started by someone else after rblnctl read it as stopped (" in said:  # the patch met the request
        assert 422 in [e.code for e in npu_patches(kv)]
        assert spec_npus == 1
    else:  # virt-controller had cleared it: the patch landed, the VMI runs with what it had
        assert "was started by someone else while rblnctl changed its NPUs" in said and "vm restart v" in said, err
        assert spec_npus == 2
