"""vm attach|detach --next-restart (library): a running VM's template changed, the VM left running, KubeVirt's
RestartRequired condition (the fake's virt-controller sets it as v1.9.0's does), and the next restart applying it."""

from __future__ import annotations

import pytest

from rblnctl.errors import InvalidInput
from rblnctl.vm.attach import AttachOptions, DetachOptions
from rblnctl.vm.diagnose import LinkName, LinkStatus, diagnose
from rblnctl.vm.lifecycle import RESTART, VmLifecycle
from rblnctl.vm.listing import list_vm_npus
from rblnctl.remedy import Command, Remedy
from tests.fakes import objects as o
from tests.vm.support import CA22, NS, attacher, detacher, dra_cluster, host_devices, sandbox_cluster

REQUIRED = {"type": "RestartRequired", "status": "True", "lastProbeTime": None,
            "message": "a non-live-updatable field was changed in the template spec"}  # as real v1.9.0 writes it


def _started(apiserver, kube, npus=1, nodes_npus=4):
    """A VM with `npus` NPUs that the fake's virt-controller started (so it keeps the spec the VMI started from)."""
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver, npus=nodes_npus)
    apiserver.add(o.vm(NS, "v1", running=False, node="n1", host_devices=[CA22] * npus))
    VmLifecycle(kube=kube, timeout_s=5).apply(VmLifecycle(kube=kube, timeout_s=5).plan("start", "v1", NS))
    return apiserver.get("VirtualMachineInstance", "v1", NS)


def _vm(apiserver):
    return apiserver.get("VirtualMachine", "v1", NS)


def _restart_required(apiserver):
    found = [c for c in (_vm(apiserver).get("status") or {}).get("conditions") or [] if c["type"] == "RestartRequired"]
    return {k: v for k, v in found[0].items() if k != "lastTransitionTime"} if found else None


def _subresource_requests(apiserver):
    return [r.path for r in apiserver.requests if "subresources.kubevirt.io" in r.path]


def test_next_restart_changes_a_running_vms_spec_and_leaves_it_running(apiserver, kube):
    vmi = _started(apiserver, kube)
    planner = attacher(kube, npus=2, next_restart=True)
    plan = planner.plan("v1", NS)
    assert not plan.blockers and plan.next_restart and not plan.restart and plan.running
    assert (plan.npus_before, plan.npus_after, plan.running_npus) == (1, 2, 1)
    apiserver.clear_requests()
    result = planner.apply(plan)
    assert result.changed and not result.restarted and result.ready is None
    assert [(r.method, r.path.rsplit("/", 1)[1]) for r in apiserver.writes()] == [("PATCH", "v1")]
    assert _subresource_requests(apiserver) == []
    now = apiserver.get("VirtualMachineInstance", "v1", NS)
    assert now["metadata"]["uid"] == vmi["metadata"]["uid"]  # the same VMI runs on, with the NPUs it started with
    assert [d["deviceName"] for d in now["spec"]["domain"]["devices"]["hostDevices"]] == [CA22]
    assert [d["deviceName"] for d in host_devices(apiserver)] == [CA22, CA22]
    assert _restart_required(apiserver) == REQUIRED


def test_without_it_the_running_vm_is_still_refused_and_the_refusal_names_restart(apiserver, kube):
    _started(apiserver, kube)
    plan = attacher(kube, npus=2).plan("v1", NS)
    (b,) = plan.blockers
    assert b.override == "restart" and not plan.next_restart


def test_restart_and_next_restart_exclude_each_other():
    for options in (AttachOptions, DetachOptions):
        with pytest.raises(InvalidInput, match="both restart the VM now and wait for its next restart"):
            options(restart=True, next_restart=True)


def test_the_next_restart_applies_the_staged_change(apiserver, kube):
    vmi = _started(apiserver, kube)
    planner = attacher(kube, npus=2, next_restart=True)
    planner.apply(planner.plan("v1", NS))
    life = VmLifecycle(kube=kube, timeout_s=5)
    result = life.apply(life.plan(RESTART, "v1", NS, wait=True))
    assert result.waited and result.state.attachment.held == 2
    new = apiserver.get("VirtualMachineInstance", "v1", NS)
    assert new["metadata"]["uid"] != vmi["metadata"]["uid"]
    assert [d["deviceName"] for d in new["spec"]["domain"]["devices"]["hostDevices"]] == [CA22, CA22]
    launcher = [p for p in apiserver.list("Pod", NS) if p["metadata"]["labels"].get("kubevirt.io/created-by")
                == new["metadata"]["uid"]]
    assert launcher[0]["spec"]["containers"][0]["resources"]["limits"] == {CA22: "2"}
    assert _restart_required(apiserver) is None


def test_putting_the_spec_back_is_no_staged_change(apiserver, kube):
    _started(apiserver, kube)
    planner = attacher(kube, npus=2, next_restart=True)
    planner.apply(planner.plan("v1", NS))
    back = attacher(kube, npus=1, next_restart=True).plan("v1", NS)
    assert not back.noop and not back.next_restart and back.running_npus == 1  # the spec is what runs again
    attacher(kube, npus=1, next_restart=True).apply(back)
    assert _restart_required(apiserver) is None


def test_a_noop_run_names_a_change_staged_earlier(apiserver, kube):
    _started(apiserver, kube)
    planner = attacher(kube, npus=2, next_restart=True)
    planner.apply(planner.plan("v1", NS))
    again = attacher(kube, npus=2).plan("v1", NS)  # no flag needed: nothing to change
    assert again.noop and not again.blockers and not again.next_restart
    assert [str(w) for w in again.warnings] == [
        f"VM {NS}/v1: its spec asks for 2 NPU(s), its running VMI passes 1 until it restarts (a change made earlier)"]


def test_detach_next_restart(apiserver, kube):
    _started(apiserver, kube, npus=2)
    planner = detacher(kube, next_restart=True)
    plan = planner.plan("v1", NS)
    apiserver.clear_requests()
    assert plan.next_restart and (plan.npus_after, plan.running_npus) == (0, 2)
    planner.apply(plan)
    assert host_devices(apiserver) == [] and _restart_required(apiserver) == REQUIRED
    assert _subresource_requests(apiserver) == []


def test_server_dry_run_persists_nothing(apiserver, kube):
    _started(apiserver, kube)
    before = _vm(apiserver)
    planner = attacher(kube, npus=2, next_restart=True, server_dry_run=True)
    apiserver.clear_requests()
    planner.apply(planner.plan("v1", NS))
    assert [r.query.get("dryRun") for r in apiserver.writes()] == [["All"]]
    assert _vm(apiserver)["spec"] == before["spec"] and _restart_required(apiserver) is None


def test_dra_keeps_the_template_the_running_vmi_still_uses(apiserver, kube):
    """The running VMI's virt-launcher holds a claim made from rbln-npu-1 until it restarts; a migration would make
    another from it: the template stays (and the output says who uses it)."""
    dra_cluster(apiserver)
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-1"), o.dra_vm(NS, "v1", 1, running=True),
                  o.dra_vmi(NS, "v1", "n1", 1))
    planner = attacher(kube, npus=2, method="dra", next_restart=True)
    plan = planner.plan("v1", NS)
    assert plan.next_restart and plan.templates_delete == []
    assert plan.templates_kept == ["ResourceClaimTemplate rbln-npu-1 kept: VirtualMachineInstance v1 still uses it"]
    result = planner.apply(plan)
    assert result.template_created == "rbln-npu-2" and result.templates_deleted == []
    assert sorted(t["metadata"]["name"] for t in apiserver.list("ResourceClaimTemplate", NS)) == [
        "rbln-npu-1", "rbln-npu-2"]


# -- what vm list and vm diagnose show -----------------------------------------------------------------------------


def test_list_shows_the_staged_change_and_kubevirts_condition(apiserver, kube):
    _started(apiserver, kube)
    planner = attacher(kube, npus=2, next_restart=True)
    planner.apply(planner.plan("v1", NS))
    (e,) = list_vm_npus(kube, namespace=NS).items
    assert (e.npus, e.holds, e.restart_pending, e.restart_marker) == (2, 1, True, "RestartPending")
    assert e.restart_required.message == REQUIRED["message"] and e.restart_required.since


def test_list_marks_restart_required_for_a_change_other_than_npus(apiserver, kube):
    vm = o.vm(NS, "v1", host_devices=[CA22])
    vm["status"]["conditions"] = [{**REQUIRED, "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    apiserver.add(vm, o.vmi(NS, "v1", "n1", [CA22]))
    (e,) = list_vm_npus(kube, namespace=NS).items
    assert not e.restart_pending and e.restart_marker == "RestartRequired"


def test_diagnose_passes_a_vm_running_with_npus_and_names_the_staged_change(apiserver, kube):
    _started(apiserver, kube)
    planner = attacher(kube, npus=2, next_restart=True)
    planner.apply(planner.plan("v1", NS))
    d = diagnose(kube, "v1", NS)
    request = next(link for link in d.links if link.name == LinkName.REQUEST)
    assert request.status == LinkStatus.PASS
    assert "its running VMI passes 1 (1x rebellions.ai/RBLN-CA22_PF) until it restarts" in request.message
    assert f"KubeVirt: RestartRequired: {REQUIRED['message']}" in request.evidence
    assert Remedy(f"VM {NS}/v1: its spec asks for 2 NPU(s), its running VMI passes 1 until it restarts; {{command}} "
                  "applies the change", own("vm", "restart", "v1", namespace=NS, wait=True)) in d.warnings


def test_diagnose_warns_when_the_staged_change_would_not_fit(apiserver, kube):
    _started(apiserver, kube, nodes_npus=2)
    planner = attacher(kube, npus=4, next_restart=True)
    planner.apply(planner.plan("v1", NS))
    d = diagnose(kube, "v1", NS)
    assert any(str(w).startswith(f"VM {NS}/v1 after its restart: 4 NPUs: no vm-passthrough node offers that many")
               for w in d.warnings), d.warnings


def test_diagnose_fails_a_vm_whose_vmi_has_no_npu_yet(apiserver, kube):
    """Staged from none: the VM has no NPU until it restarts, so the link fails and the remedy restarts it."""
    _started(apiserver, kube, npus=0)
    planner = attacher(kube, npus=1, next_restart=True)
    planner.apply(planner.plan("v1", NS))
    b = diagnose(kube, "v1", NS).broken
    assert b.name == LinkName.REQUEST and b.remedy.command == own("vm", "restart", "v1", namespace=NS, wait=True)
    assert f"KubeVirt: RestartRequired: {REQUIRED['message']}" in b.evidence


own = Command.own
