"""rblnctl.method: switch the VM allocation method (sandbox <-> DRA) against the simulated operator."""

from __future__ import annotations

import pytest

from rblnctl.clock import Clock
from rblnctl.errors import Conflict, InvalidInput, Partial, Refused, WaitTimeout
from rblnctl.remedy import Command
from rblnctl.method import MethodEvents, MethodOptions, parse_method
from tests.fakes import objects as o
from tests.fakes.releases import NEWER, V0_3_0
from tests.method.support import (
    OPERATORS,
    POLICY,
    SANDBOX_RES,
    changer,
    cluster,
    convert_only,
    npu_alloc,
    pods_on,
    switches,
    vfio_devices,
)


def test_parse_method():
    assert parse_method("DRA") == "dra" and parse_method(" sandbox ") == "sandbox"
    with pytest.raises(InvalidInput, match="use sandbox or dra"):
        parse_method("vfio")


def test_refused_while_vmis_hold_npus_through_the_allocator_turned_off(apiserver, kube):
    """The running-VM guard (rblnctl.vm.guard): sandbox -> dra refuses while a VMI holds NPUs through the sandbox
    plugin, which the switch turns off; a VMI holding a DRA claim depends on nothing the switch takes away
    (issue 28 finding 5), a VMI without NPUs neither. `--evict-vms` is the one override."""
    op = cluster(apiserver)
    claim_vmi = o.vmi("ns2", "claimer", "vm1",
                      host_devices=[{"name": "npu0", "claimName": "npu-claim", "requestName": "npu"}])
    claim_vmi["spec"]["resourceClaims"] = [{"name": "npu-claim", "resourceClaimTemplateName": "npu-tpl"}]
    apiserver.add(o.vmi("ns1", "plugin-vm", "vm0", host_devices=[SANDBOX_RES]), claim_vmi,
                  o.vmi("ns1", "no-npu", "vm0"))
    apiserver.clear_requests()
    ch = changer(kube, op)
    plan = ch.plan("dra")
    held = [b for b in plan.blockers if "holds NPUs" in b.message]
    assert [b.message.split(" holds")[0] for b in held] == ["VM ns1/plugin-vm (rebellions.ai/RBLN-CA22_PF)"]
    assert "through sandbox, which this change takes away" in held[0].message
    assert "`virtctl stop plugin-vm -n ns1`" in held[0].message and held[0].override == "evict_vms"
    with pytest.raises(Refused):
        ch.apply(plan)
    assert apiserver.writes() == []
    overridden = changer(kube, op, evict_vms=True).plan("dra")
    assert not [b for b in overridden.blockers if "holds NPUs" in b.message]
    assert any("going ahead although 1 running VM(s) depend on it (ns1/plugin-vm)" in str(w)
               for w in overridden.warnings)


def test_back_to_sandbox_is_refused_by_the_vmi_holding_a_dra_claim(apiserver, kube):
    op = cluster(apiserver, method="dra")
    claim_vmi = o.vmi("ns2", "claimer", "vm1",
                      host_devices=[{"name": "npu0", "claimName": "npu-claim", "requestName": "npu"}])
    claim_vmi["spec"]["resourceClaims"] = [{"name": "npu-claim", "resourceClaimTemplateName": "npu-tpl"}]
    apiserver.add(claim_vmi, o.vmi("ns1", "finished", "vm0", host_devices=[SANDBOX_RES], phase="Succeeded"))
    plan = changer(kube, op).plan("sandbox")
    held = [b.message for b in plan.blockers if "holds NPUs" in b.message]
    assert len(held) == 1 and held[0].startswith("VM ns2/claimer (claim npu-claim) holds NPUs through dra")


def test_sandbox_to_dra_and_back_waits_for_every_vm_node(apiserver, kube):
    """The later releases roll DRA on vm-passthrough nodes (chart v0.3.0 does not: see the next test). The plugins
    take 0.5 s to be Ready, so the wait has a state to say before they are (at 0.05 s a loaded CI machine's first
    look came after them: nothing was said, and the assertion on what the wait said failed)."""
    op = cluster(apiserver, release=NEWER, ready_delay_s=0.5)
    assert pods_on(apiserver, "vm0") == ["rbln-sandbox-device-plugin", "rbln-vfio-manager"]
    assert npu_alloc(apiserver, "vm0") == {SANDBOX_RES: "2"}
    waiting = []
    ch = changer(kube, op)
    ch.events = MethodEvents(on_waiting=waiting.append)

    plan = ch.plan("dra")
    assert not plan.blockers and plan.current == "sandbox" and plan.vm_nodes == ["vm0", "vm1"]
    assert {c.name: c.ok for c in plan.prerequisites} == {
        "kubernetes": True, "kubevirt": True, "gates": True, "operator": True, "dra-api": True, "dra-driver": True}
    result = ch.apply(plan)
    assert result.changed and result.converged == ["vm0", "vm1"]
    assert switches(apiserver) == {"sandboxDevicePlugin": False, "draKubeletPlugin": True, "devicePlugin": False}
    for n in ("vm0", "vm1"):
        assert pods_on(apiserver, n) == ["rbln-dra-kubelet-plugin", "rbln-vfio-manager"]
        assert npu_alloc(apiserver, n) == {} and vfio_devices(apiserver, n) == ["vfio-0000-3b-00-0",
                                                                              "vfio-0000-3b-01-0"]
    assert apiserver.get("DeviceClass", "vfio-npu.rebellions.ai") is not None
    assert waiting and any("of the old method still on" in m or "vfio-npu" in m or "no ResourceSlice" in m
                           for w in waiting for m in w)
    (patch,) = [w for w in apiserver.writes() if "rblnclusterpolicies" in w.path]
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body["metadata"]["resourceVersion"]  # the guard

    back = ch.plan("sandbox")
    assert not back.blockers and back.current == "dra"
    ch.apply(back)
    assert switches(apiserver)["sandboxDevicePlugin"] is True and switches(apiserver)["draKubeletPlugin"] is False
    for n in ("vm0", "vm1"):
        assert pods_on(apiserver, n) == ["rbln-sandbox-device-plugin", "rbln-vfio-manager"]
        assert npu_alloc(apiserver, n) == {SANDBOX_RES: "2"} and vfio_devices(apiserver, n) == []
    assert apiserver.get("DeviceClass", "vfio-npu.rebellions.ai") is None


def test_the_wait_for_dra_outlasts_a_kubelet_still_advertising_sandbox(apiserver, kube):
    """The sandbox plugin's pods are gone and DRA serves every node, but the kubelet has not yet reported the
    sandbox resource gone (its next node status update): the nodes are not rolled until it has. A VM scheduled
    meanwhile could still be placed on a resource no plugin serves any more."""
    # the kubelet is last, by 4 reconciles 0.5 s apart: at 0.1 s a loaded CI machine's first look came after it had
    # caught up (nothing waited for, `waiting` empty)
    op = cluster(apiserver, kubelet_lag_steps=4, ready_delay_s=0, kubelet_period_s=0.5)
    waiting = []
    ch = changer(kube, op)
    ch.events = MethodEvents(on_waiting=waiting.append)
    result = ch.apply(ch.plan("dra"))
    assert result.converged == ["vm0", "vm1"]
    for n in ("vm0", "vm1"):  # when the wait ended, the kubelet had caught up
        assert npu_alloc(apiserver, n) == {} and pods_on(apiserver, n) == ["rbln-dra-kubelet-plugin",
                                                                        "rbln-vfio-manager"]
    assert op.lagging == {}
    lagging = [f"{n}: allocatable still offers the sandbox plugin's {SANDBOX_RES}" for n in ("vm0", "vm1")]
    assert lagging in waiting  # at one look only the kubelet was behind: the state this test is about


def test_chart_v030_serves_vms_through_neither_method(apiserver, kube):
    """Chart v0.3.0: the DRA plugin is container-only and the sandbox plugin never leaves Init on a
    vm-passthrough node (its driver-ready init container): set-method refuses both, sandbox up to --force."""
    op = cluster(apiserver, release=V0_3_0, method="dra", product="RBLN-CA25")
    plan = changer(kube, op).plan("dra")
    assert plan.noop  # already dra: nothing to write
    before = switches(apiserver)
    plan = changer(kube, op).plan("sandbox")
    (b,) = plan.blockers
    assert "v0.3.0 < 0.4.4" in b.message and ".driver-ctr-ready" in b.message and b.override == "force"
    assert "upgrade the operator to >= 0.4.4" in b.message
    with pytest.raises(Refused):
        changer(kube, op).apply(plan)
    assert switches(apiserver) == before
    # forced: the policy is switched, and the plugin stays in Init, so the wait times out
    forced = changer(kube, op, force=True, timeout_s=0.5, clock=Clock())  # the wait watches: real time passes
    plan = forced.plan("sandbox")
    assert not plan.blockers and any("forced" in str(w) for w in plan.warnings)
    with pytest.raises(WaitTimeout) as err:
        forced.apply(plan)
    assert any("sandbox-device-plugin" in d for d in err.value.details)
    assert pods_on(apiserver, "vm0") == ["rbln-sandbox-device-plugin", "rbln-vfio-manager"]
    assert npu_alloc(apiserver, "vm0") == {}
    # and v0.3.0 never deploys the DRA plugin on vm-passthrough nodes: a switch back to DRA is refused
    plan = changer(kube, op).plan("dra")
    (b,) = [b for b in plan.blockers if "v0.3.0 < 0.6.0" in b.message]
    assert "no DRA kubelet plugin" in b.message and b.override is None


def test_missing_prerequisites_refuse(apiserver, kube):
    op = cluster(apiserver, kubevirt="v1.8.2", gates=("HostDevices",))
    plan = changer(kube, op).plan("dra")
    text = "\n".join(b.message for b in plan.blockers)
    assert "KubeVirt kubevirt/kubevirt v1.8.2 for the dra method < 1.9.0" in text
    assert "lacks feature gate HostDevicesWithDRA" in text
    # issue 39: the gate's remedy is data; below the gate's floor no command (enable-gates refuses until the upgrade)
    (gate,) = [b for b in plan.blockers if "lacks feature gate" in b.message]
    assert "upgrade KubeVirt to >= 1.9.0 first" in gate.remedy.text and gate.remedy.command is None
    # Kubernetes too old for DRA, and an unknown KubeVirt version (only --force goes past that)
    apiserver.set_version("v1.33.2")
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda k: k["status"].pop("observedKubeVirtVersion"))
    plan = changer(kube, op).plan("dra")
    assert any("Kubernetes v1.33.2 for the dra method < 1.34.0" in b.message for b in plan.blockers)
    unknown = [b for b in plan.blockers if "version unknown" in b.message]
    assert unknown and all(b.override == "force" for b in unknown)
    forced = changer(kube, op, force=True).plan("dra")
    assert not [b for b in forced.blockers if "version unknown" in b.message]


def test_dra_refused_beside_a_device_plugin_serving_container_nodes(apiserver, kube):
    op = cluster(apiserver, container_nodes=1)
    plan = changer(kube, op).plan("dra")
    (b,) = [b for b in plan.blockers if "devicePlugin" in b.message]
    assert "c0" in b.message
    # and back from DRA, container nodes that DRA served would be left without an allocator
    apiserver.mutate("RBLNClusterPolicy", POLICY, fn=lambda p: p["spec"].update(
        {"devicePlugin": {"enabled": False}, "draKubeletPlugin": {"enabled": True, "driverName": "npu.rebellions.ai"},
         "sandboxDevicePlugin": {"enabled": False}}))
    plan = changer(kube, op).plan("sandbox")
    assert any("enables neither devicePlugin nor draKubeletPlugin" in b.message for b in plan.blockers)


def test_timeout_exits_with_what_is_pending(apiserver, kube):
    cluster(apiserver)
    OPERATORS.pop().stop()  # nobody reconciles: the operator is down
    ch = changer(kube, None, timeout_s=0.5, clock=Clock())  # the wait watches: real time has to pass
    with pytest.raises(WaitTimeout) as err:
        ch.apply(ch.plan("dra"))
    assert "within 0.5s" in str(err.value) and "stays set to dra" in str(err.value)
    details = "\n".join(err.value.details)
    assert "vm0:" in details and "vm1:" in details and "DeviceClass vfio-npu.rebellions.ai" in details
    assert switches(apiserver)["draKubeletPlugin"] is True


def test_a_concurrent_policy_edit_is_read_again(apiserver, kube):
    op = cluster(apiserver)
    ch = changer(kube, op, wait=False)
    plan = ch.plan("dra")
    apiserver.mutate("RBLNClusterPolicy", POLICY, fn=lambda p: p["metadata"].setdefault("labels", {}).update(
        {"edited": "yes"}))  # a new resourceVersion
    result = ch.apply(plan)
    assert result.changed and result.attempts == 2
    assert [w.status for w in apiserver.writes() if "rblnclusterpolicies" in w.path] == [409, 200]
    assert switches(apiserver)["draKubeletPlugin"] is True
    apiserver.inject_fault(method="PATCH", path="rblnclusterpolicies", status=409, reason="Conflict", times=9)
    with pytest.raises(Conflict, match="kept changing"):
        changer(kube, op, wait=False, max_attempts=2).apply(changer(kube, op).plan("sandbox"))


def test_server_dry_run_sends_one_dry_patch_and_waits_for_nothing(apiserver, kube):
    op = cluster(apiserver)
    ch = changer(kube, op, server_dry_run=True)
    result = ch.apply(ch.plan("dra"))
    (w,) = apiserver.writes()
    assert w.dry_run and not result.waited and switches(apiserver)["sandboxDevicePlugin"] is True


def test_plan_edit_writes_only_what_changes_and_checks_the_result():
    from rblnctl.method import plan_edit

    sandbox = NEWER.policy(vfio_manager=True, sandbox=True)
    sandbox["metadata"]["resourceVersion"] = "7"
    edit = plan_edit(sandbox, "dra", vm_nodes=["vm0"], container_nodes=[])
    assert edit.patch == {"metadata": {"resourceVersion": "7"}, "spec": {
        "sandboxDevicePlugin": {"enabled": False}, "draKubeletPlugin": {"enabled": True},
        "devicePlugin": {"enabled": False}}}
    assert plan_edit(sandbox, "sandbox", vm_nodes=["vm0"], container_nodes=[]).patch == {}
    # a policy already on DRA is not refused for the devicePlugin its container nodes still use
    dra = NEWER.policy(vfio_manager=True, dra=True, device_plugin=True)
    dra["metadata"]["resourceVersion"] = "8"
    edit = plan_edit(dra, "dra", vm_nodes=["vm0"], container_nodes=["c0"])
    assert edit.patch == {} and edit.blockers == []
    # a problem the policy had before (vfioManager off) is not this change's doing: it does not refuse it
    broken = NEWER.policy(vfio_manager=False, sandbox=True, workload_type="vm-passthrough")
    broken["metadata"]["resourceVersion"] = "9"
    edit = plan_edit(broken, "dra", vm_nodes=["vm0"], container_nodes=[])
    assert edit.patch and edit.blockers == []
    # and the method change turns it on: neither method hands VMs NPUs without the VFIO Manager
    assert edit.patch["spec"]["vfioManager"] == {"enabled": True}
    # the chart's defaults (vfioManager, sandbox and DRA all off): set-method sandbox enables both it needs
    default = NEWER.policy(vfio_manager=False, sandbox=False, dra=False)
    default["metadata"]["resourceVersion"] = "11"
    edit = plan_edit(default, "sandbox", vm_nodes=[], container_nodes=["c0"])
    assert edit.patch["spec"] == {"vfioManager": {"enabled": True}, "sandboxDevicePlugin": {"enabled": True}}
    assert edit.after["vfioManager"] is True and edit.blockers == []
    # one it would cause is refused: back to sandbox leaves container nodes DRA served with no allocator
    served = NEWER.policy(vfio_manager=True, dra=True, device_plugin=False)
    served["metadata"]["resourceVersion"] = "10"
    (b,) = plan_edit(served, "sandbox", vm_nodes=["vm0"], container_nodes=["c0"]).blockers
    assert "enables neither devicePlugin nor draKubeletPlugin" in b.message


def host_devices(apiserver, ns, name):
    return apiserver.get("VirtualMachine", name, ns)["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]


def test_convert_vms_rewrites_each_stopped_vm_both_ways(apiserver, kube):
    op = cluster(apiserver)
    apiserver.add(o.vm("team", "two", running=False, host_devices=[SANDBOX_RES, SANDBOX_RES]),
                  o.vm("team", "cpu-only", running=False), o.vm("other", "one", running=False,
                                                                host_devices=[SANDBOX_RES]))
    steps = []
    ch = changer(kube, op, convert_vms=True)
    ch.events = MethodEvents(on_step=lambda s, d: steps.append((str(s), d)))
    plan = ch.plan("dra")
    assert [str(c.vm) for c in plan.conversions] == ["other/one", "team/two"] and not plan.blockers
    result = ch.apply(plan)
    assert result.converted == ["other/one", "team/two"]
    assert ("convert", "VM team/two: 2 NPU(s) from sandbox to dra") in steps
    assert host_devices(apiserver, "team", "two") == [
        {"name": "npu0", "claimName": o.vm_claim("team", "two"), "requestName": "npu0"},
        {"name": "npu1", "claimName": o.vm_claim("team", "two"), "requestName": "npu1"}]
    assert apiserver.get("ResourceClaimTemplate", "rbln-npu-2", "team") is not None
    assert "hostDevices" not in apiserver.get("VirtualMachine", "cpu-only", "team")["spec"]["template"]["spec"][
        "domain"]["devices"]

    back = changer(kube, op, convert_vms=True)
    plan = back.plan("sandbox")
    assert [str(c.vm) for c in plan.conversions] == ["other/one", "team/two"]
    assert back.apply(plan).converted == ["other/one", "team/two"]
    assert [d["deviceName"] for d in host_devices(apiserver, "team", "two")] == [SANDBOX_RES, SANDBOX_RES]
    assert apiserver.get("ResourceClaimTemplate", "rbln-npu-2", "team") is None  # rblnctl's, used by no one now
    # idempotent: nothing left to convert, nothing to write
    apiserver.clear_requests()
    again = changer(kube, op, convert_vms=True)
    plan = again.plan("sandbox")
    assert plan.noop and plan.conversions == []
    again.apply(plan)
    assert apiserver.writes() == []


POLICY_PATH = r"/apis/rebellions\.ai/v1beta1/rblnclusterpolicies/rbln-cluster-policy$"


@pytest.mark.parametrize("fault", [{"status": 409, "reason": "Conflict"}, {"lose_reply": True}],
                         ids=["conflict", "lost-reply"])
def test_convert_vms_still_converts_after_the_policy_patch_was_retried(apiserver, kube, fault):
    """A 409 (the operator writes the policy's status too) or a lost reply on the policy patch: the plan is
    re-planned with dataclasses.replace, so its conversions survive. Before: the retry rebuilt the plan
    field by field, dropped them, and --convert-vms exited 0 having converted nothing."""
    op = cluster(apiserver)
    apiserver.add(o.vm("team", "two", running=False, host_devices=[SANDBOX_RES, SANDBOX_RES]))
    retries = []
    ch = changer(kube, op, convert_vms=True)
    ch.events = MethodEvents(on_retry=lambda attempt, why: retries.append(why))
    plan = ch.plan("dra")
    apiserver.inject_fault(method="PATCH", path=POLICY_PATH, times=1, **fault)
    result = ch.apply(plan)
    assert result.changed and switches(apiserver)["draKubeletPlugin"] is True
    assert result.converted == ["team/two"] and [str(c.vm) for c in result.plan.conversions] == ["team/two"]
    assert all(d.get("claimName") for d in host_devices(apiserver, "team", "two"))
    patches = apiserver.requests_matching("PATCH", POLICY_PATH)
    assert len(patches) == (2 if "status" in fault else 1)  # a lost reply that landed is read back, not resent
    assert len(retries) == (1 if "status" in fault else 0)


def test_convert_only_is_refused_while_a_vmi_holds_npus(apiserver, kube):
    """The policy is on DRA already and VMs are left on sandbox: nothing to patch, only conversions. A VMI holding
    NPUs refuses that run as it refuses a policy switch, before any write."""
    op = convert_only(apiserver, target="dra")
    apiserver.add(o.vm("team", "busy", host_devices=[SANDBOX_RES]),
                  o.vmi("team", "busy", "vm0", host_devices=[SANDBOX_RES]))
    apiserver.clear_requests()
    ch = changer(kube, op, convert_vms=True)
    plan = ch.plan("dra")
    assert plan.edit.patch == {} and [str(c.vm) for c in plan.conversions] == ["team/busy", "team/two"]
    (b,) = plan.blockers
    assert b.message.startswith("VM team/busy (rebellions.ai/RBLN-CA22_PF) holds NPUs through sandbox")
    with pytest.raises(Refused):
        ch.apply(plan)
    assert apiserver.writes() == []
    # stopped, both are converted
    apiserver.delete_now("VirtualMachineInstance", "busy", "team")
    apiserver.mutate("VirtualMachine", "busy", "team", fn=lambda v: v["spec"].update(runStrategy="Halted"))
    plan = ch.plan("dra")
    assert not plan.blockers and ch.apply(plan).converted == ["team/busy", "team/two"]


def test_without_convert_the_vms_left_on_the_old_method_are_a_warning(apiserver, kube):
    op = cluster(apiserver)
    apiserver.add(o.vm("team", "two", running=False, host_devices=[SANDBOX_RES]))
    plan = changer(kube, op).plan("dra")
    (advice,) = [w for w in plan.warnings if getattr(w, "option", None) == "convert_vms"]
    assert "1 VM(s) name their NPUs through sandbox (team/two)" in str(advice)
    assert plan.conversions == []
    with pytest.raises(Exception, match="needs the wait"):
        MethodOptions(convert_vms=True, wait=False)


def test_a_vm_that_cannot_be_converted_is_named_and_the_others_are(apiserver, kube):
    """Back to sandbox, a DRA VM gets the resource vm-passthrough nodes advertise; when two products are
    advertised, which one it meant is unknown: that VM fails, the rest are converted, and the run is partial
    (it was Refused before the multi-object rule: the result now comes with the error)."""
    op = cluster(apiserver, method="dra")
    apiserver.add(o.npu_node("vm9", mode=o.MODE_VM, product="RBLN-CA25"))
    for _ in range(3):
        op.step()
    claims = [o.template_claim("rbln-npu", "rbln-npu-1")]
    apiserver.add(o.resource_claim_template("team", "rbln-npu-1"),
                  o.vm("team", "a", running=False, host_devices=[o.dra_host_device("npu0")], resource_claims=claims))
    ch = changer(kube, op, convert_vms=True)
    with pytest.raises(Partial) as err:
        ch.apply(ch.plan("sandbox"))
    assert "not every VM was converted: 1 failed" in str(err.value)
    (o_,) = err.value.result.conversions
    assert (o_.name, o_.state) == ("team/a", "failed")
    assert o_.remedy.command == Command.own("vm", "attach", "a", namespace="team", method="sandbox", convert=True)
    assert switches(apiserver)["sandboxDevicePlugin"] is True  # the policy switch itself went through


def test_a_vm_deleted_before_its_conversion_is_unchanged_and_the_run_complete(apiserver, kube):
    """Planned for conversion, deleted before its turn: nothing left to convert, so it is `unchanged` (deleted
    meanwhile), not a failure, and the run is complete (exit 0)."""
    op = cluster(apiserver)
    apiserver.add(o.vm("team", "one", running=False, host_devices=[SANDBOX_RES]),
                  o.vm("team", "two", running=False, host_devices=[SANDBOX_RES]))
    ch = changer(kube, op, convert_vms=True)
    plan = ch.plan("dra")
    apiserver.delete_now("VirtualMachine", "one", "team")
    result = ch.apply(plan)
    fate = [(x.name, x.state.value, x.reason) for x in result.conversions]
    assert fate == [("team/one", "unchanged", "deleted meanwhile"), ("team/two", "done", "")]
    assert result.converted == ["team/two"]


def test_a_method_change_that_does_not_finish_names_the_vms_not_converted(apiserver, kube):
    """The operator never rolls the plugin: the wait times out, and the error names the VMs it did not convert."""
    cluster(apiserver)
    OPERATORS.pop().stop()  # the operator is down
    apiserver.add(o.vm("team", "two", running=False, host_devices=[SANDBOX_RES]))
    ch = changer(kube, None, convert_vms=True, timeout_s=0.5, clock=Clock())
    with pytest.raises(WaitTimeout) as err:
        ch.apply(ch.plan("dra"))
    assert "not converted (the method change did not finish): team/two" in err.value.details
    assert apiserver.get("VirtualMachine", "two", "team")["spec"]["template"]["spec"]["domain"]["devices"][
        "hostDevices"] == [{"name": "npu0", "deviceName": SANDBOX_RES}]


def test_a_403_mid_convert_vms_fails_that_vm_and_converts_the_others(apiserver, kube):
    """RBAC that refuses one namespace's VMs: the others are still converted; each VM's fate is in the result.
    Before: the 403 escaped the loop (only NotFound/InvalidInput/Refused/Conflict were caught), the VMs after
    it were never tried, and nothing said which were done."""
    op = cluster(apiserver)
    apiserver.add(o.vm("a", "one", running=False, host_devices=[SANDBOX_RES]),
                  o.vm("b", "two", running=False, host_devices=[SANDBOX_RES]),
                  o.vm("c", "three", running=False, host_devices=[SANDBOX_RES]))
    apiserver.forbid("patch", "virtualmachines.kubevirt.io", "b")
    ch = changer(kube, op, convert_vms=True)
    with pytest.raises(Partial) as err:
        ch.apply(ch.plan("dra"))
    fate = {x.name: (x.state.value, x.reason) for x in err.value.result.conversions}
    assert fate["a/one"][0] == fate["c/three"][0] == "done"
    assert fate["b/two"][0] == "failed" and "RBAC does not allow patch" in fate["b/two"][1]
    assert err.value.result.converted == ["a/one", "c/three"]
    assert any(str(d).startswith("VirtualMachine b/two (failed)") for d in err.value.details)


def test_an_unreachable_api_server_mid_convert_vms_leaves_the_rest_not_attempted(apiserver, kube):
    op = cluster(apiserver)
    apiserver.add(o.vm("a", "one", running=False, host_devices=[SANDBOX_RES]),
                  o.vm("b", "two", running=False, host_devices=[SANDBOX_RES]))
    ch = changer(kube, op, convert_vms=True)
    plan = ch.plan("dra")
    kube.read_retries = 0
    apiserver.inject_fault(method="GET", path="/namespaces/a/virtualmachines/one$", drop=True, times=5)
    with pytest.raises(Partial) as err:
        ch.apply(plan)
    fate = [(x.name, x.state.value) for x in err.value.result.conversions]
    assert fate == [("a/one", "failed"), ("b/two", "not-attempted")]
    assert "could not be reached" in err.value.result.conversions[1].reason


def test_back_to_sandbox_without_permitted_devices_says_what_to_run(apiserver, kube):
    op = cluster(apiserver, method="dra")
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt",
                     fn=lambda k: k["spec"]["configuration"].pop("permittedHostDevices"))
    plan = changer(kube, op).plan("sandbox")
    assert not plan.blockers
    assert any("permits no RBLN device" in str(w) and "kubevirt permit-devices lets VMs use them" in str(w)
               for w in plan.warnings)


# -- the audit trail: Events on the RBLNClusterPolicy ------------------------------------------------------------


def policy_events(apiserver):
    evs = sorted(apiserver.list("events.events.k8s.io"), key=lambda e: "Started" not in e["reason"])
    return [(e["reason"], e["type"], e["regarding"]["kind"], e["regarding"]["name"]) for e in evs]


def test_a_method_change_leaves_its_start_and_end_on_the_policy(apiserver, kube):
    from rblnctl.audit import Auditor

    op = cluster(apiserver)
    ch = changer(kube, op)
    ch.audit = Auditor(kube=kube, clock=ch.clock)
    ch.apply(ch.plan("dra"))
    assert policy_events(apiserver) == [("MethodChangeStarted", "Normal", "RBLNClusterPolicy", POLICY),
                                        ("MethodChanged", "Normal", "RBLNClusterPolicy", POLICY)]
    uid = apiserver.get("RBLNClusterPolicy", POLICY)["metadata"]["uid"]
    ends = [e for e in apiserver.list("events.events.k8s.io") if e["reason"] == "MethodChanged"]
    assert ends[0]["regarding"]["uid"] == uid and ends[0]["action"] == "SetMethod"
    assert ends[0]["note"].startswith(f"switched RBLNClusterPolicy {POLICY} from sandbox to dra: the operator rolled "
                                      "it on 2 node(s), 0 VM(s) converted")
    # a re-run that changes no policy writes no Event
    before = len(apiserver.list("events.events.k8s.io"))
    ch.apply(ch.plan("dra"))
    assert len(apiserver.list("events.events.k8s.io")) == before


def test_a_method_change_that_times_out_ends_with_a_warning_and_a_dry_run_with_none(apiserver, kube):
    from rblnctl.audit import Auditor

    cluster(apiserver)
    dry = changer(kube, None, server_dry_run=True)
    dry.audit = Auditor(kube=kube)
    dry.apply(dry.plan("dra"))
    assert policy_events(apiserver) == []
    OPERATORS.pop().stop()  # nobody reconciles
    ch = changer(kube, None, timeout_s=0.5, clock=Clock())
    ch.audit = Auditor(kube=kube, clock=ch.clock)
    with pytest.raises(WaitTimeout):
        ch.apply(ch.plan("dra"))
    assert [r[:2] for r in policy_events(apiserver)] == [("MethodChangeStarted", "Normal"),
                                                         ("MethodChangeFailed", "Warning")]
