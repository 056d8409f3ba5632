"""`policy set-method --convert-vms` and other actors (issue 37): the VMs it converts are the ones it read (their
uid), a policy switched back under it stops the conversions, and what an interrupted conversion left (rblnctl's
unused ResourceClaimTemplate) is deleted by the re-run. The explorer's cases (tests/explore/, worlds `set-method`
and `set-method-sandbox`) found each; these are the same on the fake, one step at a time."""

from __future__ import annotations

import uuid

import pytest

from rblnctl.errors import Partial
from tests.fakes import objects as o
from tests.method.support import POLICY, SANDBOX_RES, changer, cluster

NS = "team"
VM_PATH = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/two"


def recreate(apiserver, name: str = "two") -> str:
    """The owner: `kubectl delete` the VM, then `kubectl create` it again from the manifest it had (another uid)."""
    old = apiserver.get("VirtualMachine", name, NS)
    apiserver.delete_now("VirtualMachine", name, NS)
    fresh = {k: v for k, v in old.items() if k != "status"}
    fresh["metadata"] = {k: v for k, v in old["metadata"].items() if k in ("name", "namespace", "labels",
                                                                          "annotations")}
    fresh["metadata"]["uid"] = str(uuid.uuid4())
    apiserver.add(fresh)
    return fresh["metadata"]["uid"]


def vm_writes(apiserver) -> list[str]:
    return [f"{r.method} {r.path} -> {r.status}" for r in apiserver.requests
            if r.method in ("PATCH", "PUT", "POST", "DELETE") and r.path.startswith(VM_PATH)]


def test_a_vm_recreated_after_the_plan_is_reported_replaced_and_not_converted(apiserver, kube):
    """Before: the conversion planned the VM again by name and converted the re-created one (the explorer's
    set-method owner-recreate at before-01 and after-02)."""
    op = cluster(apiserver)
    apiserver.add(o.vm(NS, "two", running=False, host_devices=[SANDBOX_RES]))
    ch = changer(kube, op, convert_vms=True)
    plan = ch.plan("dra")
    new_uid = recreate(apiserver)
    apiserver.clear_requests()
    with pytest.raises(Partial) as caught:  # a multi-object command: the VM failed (exit 6), named and why
        ch.apply(plan)
    (outcome,) = caught.value.result.conversions
    assert outcome.state == "failed" and "was deleted and re-created while rblnctl switched the allocation method" \
        in outcome.reason and "wrote nothing to it" in outcome.reason
    assert vm_writes(apiserver) == []
    vm = apiserver.get("VirtualMachine", "two", NS)
    assert vm["metadata"]["uid"] == new_uid and vm["spec"]["template"]["spec"]["domain"]["devices"][
        "hostDevices"][0]["deviceName"] == SANDBOX_RES


def test_a_policy_switched_back_between_the_template_create_and_the_vm_patch_stops_the_conversions(apiserver, kube):
    """A second `set-method sandbox` lands after the first run created rbln-npu-1 and before its VM patch. Before:
    the VM was patched onto DRA under a sandbox policy, exit 0 (the explorer's set-method second-opposite at
    after-03)."""
    op = cluster(apiserver)
    apiserver.add(o.vm(NS, "two", running=False, host_devices=[SANDBOX_RES]),
                  o.vm(NS, "zz", running=False, host_devices=[SANDBOX_RES]))
    ch = changer(kube, op, convert_vms=True)
    plan = ch.plan("dra")
    armed = [True]

    def second_admin(req):
        if armed[0] and req.method == "POST" and req.path.endswith("/resourceclaimtemplates") and req.status < 300:
            armed[0] = False
            apiserver.mutate("RBLNClusterPolicy", POLICY, None, lambda p: p["spec"].update(
                sandboxDevicePlugin={**p["spec"]["sandboxDevicePlugin"], "enabled": True},
                draKubeletPlugin={**p["spec"]["draKubeletPlugin"], "enabled": False}))

    apiserver.on_handled(second_admin)
    apiserver.clear_requests()
    with pytest.raises(Partial) as caught:
        ch.apply(plan)
    first, second = caught.value.result.conversions
    assert first.state == "failed" and "was changed by someone else while rblnctl converted the VMs: it now " \
        "selects sandbox, not dra" in first.reason and first.remedy is None  # not `vm attach --convert`
    assert second.state == "not-attempted" and "it now selects sandbox" in second.reason
    assert vm_writes(apiserver) == []
    for name in ("two", "zz"):
        devices = apiserver.get("VirtualMachine", name, NS)["spec"]["template"]["spec"]["domain"]["devices"]
        assert devices["hostDevices"][0]["deviceName"] == SANDBOX_RES
