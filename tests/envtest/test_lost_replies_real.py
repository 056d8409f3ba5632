"""A write applied on the real server whose reply never arrives (tests/envtest/proxy.py loses it).

rblnctl must settle it by reading back, as client-go's callers must: exit as if the reply had come, and
never apply a change twice. The proxy forwards the request, lets the real server apply it, reads its answer
and closes the connection instead of relaying it.
"""

from __future__ import annotations

from tests.fakes import objects as o
from tests.fakes.releases import NEWER

CA22 = "rebellions.ai/RBLN-CA22_PF"


def world(real, *, dra: bool = False) -> None:
    real.api.seed(o.npu_node("v1", mode="vm-passthrough", dra=dra), o.node_feature("v1"),
                  NEWER.policy(vfio_manager=True, sandbox=not dra, dra=dra, device_plugin=False),
                  NEWER.operator_deployment(),
                  o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"] if dra else ["Snapshot"],
                             version="v1.9.0", permitted_pci=[("1EFF:1220", CA22)]),
                  o.vm("vms", "fresh", running=False))
    if dra:
        real.api.seed(o.deviceclass("vfio-npu.rebellions.ai"), o.resource_slice("v1", devices=[
            {"name": "vfio-0000-3b-00-0", "attributes": {"type": {"string": "vfio"}}}]))


def test_enable_gates_settles_a_lost_reply(later_policy_crd_installed, real):
    world(real)
    real.lose_reply("PATCH", r"/kubevirts/kubevirt$")
    r = real.rblnctl("kubevirt", "enable-gates", "--dra")
    assert r.exit_code == 0, r.stderr
    assert [p.action for p in real.proxy.log if p.method == "PATCH"] == ["lose_reply"]
    gates = real.api.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["developerConfiguration"]
    assert gates["featureGates"] == ["Snapshot", "HostDevices", "HostDevicesWithDRA"]


def test_set_method_settles_a_lost_reply_on_the_policy_patch(later_policy_crd_installed, real):
    world(real)
    real.api.patch("KubeVirt", "kubevirt", {"spec": {"configuration": {"developerConfiguration": {
        "featureGates": ["HostDevices", "HostDevicesWithDRA"]}}}}, "kubevirt")
    real.lose_reply("PATCH", r"/rblnclusterpolicies/rbln-cluster-policy$")
    r = real.rblnctl("policy", "set-method", "dra", "--yes", "--no-wait")
    assert r.exit_code == 0, r.stderr
    assert [p.action for p in real.proxy.log if p.method == "PATCH"] == ["lose_reply"]
    spec = real.api.get("RBLNClusterPolicy", "rbln-cluster-policy")["spec"]
    assert spec["draKubeletPlugin"]["enabled"] is True and spec["sandboxDevicePlugin"]["enabled"] is False


def test_vm_attach_settles_lost_replies_on_the_template_and_the_vm(later_policy_crd_installed, real):
    world(real, dra=True)
    real.lose_reply("POST", r"/resourceclaimtemplates$")
    real.lose_reply("PATCH", r"/virtualmachines/fresh$")
    r = real.rblnctl("vm", "attach", "fresh", "-n", "vms", "--method", "dra", "--npus", "1")
    assert r.exit_code == 0, r.stderr
    lost = [(p.method, p.path.rsplit("/", 1)[-1]) for p in real.proxy.log if p.action == "lose_reply"]
    assert lost == [("POST", "resourceclaimtemplates"), ("PATCH", "fresh")]
    spec = real.api.get("VirtualMachine", "fresh", "vms")["spec"]["template"]["spec"]
    [claim] = spec["resourceClaims"]
    assert len(real.api.list("ResourceClaimTemplate", "vms")) == 1
    assert real.api.get("ResourceClaimTemplate", claim["resourceClaimTemplateName"], "vms") is not None
