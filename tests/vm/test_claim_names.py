"""Pod-level claim names: one per VM, so two DRA VMs can run on one node (the RBLN DRA driver's per-node rule)."""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.fakes.dradriver import DraNode, PrepareFailed
from tests.fakes.operator import SimulatedOperator
from tests.vm.support import NS, attacher, dra_cluster


def vm_spec(apiserver, ns, name):
    return apiserver.get("VirtualMachine", name, ns)["spec"]["template"]["spec"]


def start_both_on_one_node(specs):
    node = DraNode("n1")
    for i, spec in enumerate(specs):
        node.start_vmi(spec, f"virt-launcher-vm-{i}")


def test_the_driver_model_refuses_a_second_claim_of_the_old_fixed_name():
    """The model itself: two VMs written with the old fixed name cannot both prepare on one node."""
    specs = [{"resourceClaims": [o.template_claim("rbln-npu", "rbln-npu-1")]} for _ in range(2)]
    with pytest.raises(PrepareFailed, match="another claim with the same name is prepared on this node"):
        start_both_on_one_node(specs)


@pytest.mark.parametrize("names", [[("a", "vm"), ("b", "vm")], [("a", "vm-1"), ("a", "vm-2")]],
                         ids=["same-name-two-namespaces", "two-names-one-namespace"])
def test_two_dra_vms_attached_by_rblnctl_start_on_one_node(apiserver, kube, names):
    """Before: both got rbln-npu, and the second VM on a node never started."""
    dra_cluster(apiserver)
    for ns, name in names:
        apiserver.add(o.vm(ns, name, running=False))
        planner = attacher(kube, npus=1)
        planner.apply(planner.plan(name, ns))
    specs = [vm_spec(apiserver, ns, name) for ns, name in names]
    claim_names = [spec["resourceClaims"][0]["name"] for spec in specs]
    assert len(set(claim_names)) == 2 and all(len(c) <= 63 for c in claim_names)
    start_both_on_one_node(specs)  # no PrepareFailed


def test_attach_renames_the_old_fixed_name_and_is_stable(apiserver, kube):
    """A VM written with rbln-npu (an older rblnctl) gets its own name; a re-run keeps it and writes nothing."""
    dra_cluster(apiserver)
    legacy = dict(resource_claims=[o.template_claim("rbln-npu", "rbln-npu-1")],
                  host_devices=[o.dra_host_device("npu0", claim="rbln-npu")])
    apiserver.add(o.resource_claim_template("a", "rbln-npu-1"), o.resource_claim_template("b", "rbln-npu-1"),
                  o.vm("a", "vm", running=False, **legacy), o.vm("b", "vm", running=False, **legacy))
    with pytest.raises(PrepareFailed):
        start_both_on_one_node([vm_spec(apiserver, ns, "vm") for ns in ("a", "b")])
    for ns in ("a", "b"):
        plan = attacher(kube).plan("vm", ns)
        assert not plan.noop and plan.npus_after == 1
        assert any("renaming rblnctl's pod-level claim rbln-npu" in str(w) for w in plan.warnings)
        attacher(kube).apply(plan)
        spec = vm_spec(apiserver, ns, "vm")
        assert spec["resourceClaims"] == [{"name": o.vm_claim(ns, "vm"), "resourceClaimTemplateName": "rbln-npu-1"}]
        assert [d["claimName"] for d in spec["domain"]["devices"]["hostDevices"]] == [o.vm_claim(ns, "vm")]
    start_both_on_one_node([vm_spec(apiserver, ns, "vm") for ns in ("a", "b")])
    apiserver.clear_requests()
    assert attacher(kube).plan("vm", "a").noop


def test_renaming_a_running_vm_needs_restart(apiserver, kube):
    dra_cluster(apiserver)
    legacy = dict(resource_claims=[o.template_claim("rbln-npu", "rbln-npu-1")],
                  host_devices=[o.dra_host_device("npu0", claim="rbln-npu")])
    apiserver.add(o.resource_claim_template("a", "rbln-npu-1"), o.vm("a", "vm", running=True, **legacy),
                  o.vmi("a", "vm", "n1", host_devices=legacy["host_devices"],
                        resource_claims=legacy["resource_claims"]))
    (b,) = attacher(kube).plan("vm", "a").blockers
    assert b.override == "restart" and "is running" in b.message


@pytest.mark.parametrize("npus", [1, 0], ids=["attach", "detach"])
def test_an_old_claim_entry_no_device_uses_any_more_is_not_left_behind(apiserver, kube, npus):
    """rblnctl's old fixed entry (rbln-npu) with no host device on it (removed by hand): attach writes the VM's own
    entry in its place, detach drops it. Left there, the pod would still get a claim named rbln-npu, and the
    RBLN DRA driver would refuse a second VM's of that name on the node."""
    dra_cluster(apiserver)
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-1"),
                  o.vm(NS, "v1", running=False, resource_claims=[o.template_claim("rbln-npu", "rbln-npu-1")]))
    planner = attacher(kube, npus=npus)
    planner.apply(planner.plan("v1", NS))
    want = [o.template_claim(o.vm_claim(NS, "v1"), "rbln-npu-1")] if npus else []
    assert vm_spec(apiserver, NS, "v1").get("resourceClaims", []) == want


def test_a_finished_vmi_sharing_the_claim_name_is_no_collision(apiserver, kube):
    """vm diagnose: a VMI that has ended holds no claim on its node; only running ones collide."""
    from rblnctl.vm.diagnose import LinkName, LinkStatus, diagnose

    dra_cluster(apiserver)
    with SimulatedOperator(apiserver) as op:
        op.wait_idle()
        legacy = dict(resource_claims=[o.template_claim("rbln-npu", "rbln-npu-1")],
                      host_devices=[o.dra_host_device("npu0", claim="rbln-npu")])
        apiserver.add(o.resource_claim_template(NS, "rbln-npu-1"), o.resource_claim_template("other", "rbln-npu-1"),
                      o.vm(NS, "v1", **legacy), o.vmi(NS, "v1", "n1", legacy["host_devices"],
                                                        resource_claims=legacy["resource_claims"]),
                      o.vm("other", "v2", running=False, **legacy),
                      o.vmi("other", "v2", "n1", legacy["host_devices"], resource_claims=legacy["resource_claims"],
                            phase="Succeeded"))
        pod = o.virt_launcher(NS, "v1", "n1", claims={"rbln-npu": "v1-rbln-npu-x7k2p"})
        apiserver.add(pod, o.resource_claim(NS, "v1-rbln-npu-x7k2p", allocated=[("n1", "vfio-0000-3b-00-0")],
                                            pod=pod))
        d = diagnose(kube, "v1", NS)
    (link,) = [link for link in d.links if link.name == LinkName.CLAIM_NAME]
    assert link.status == LinkStatus.PASS, link.evidence
    assert not any("shares a DRA claim name" in str(w) for w in d.warnings)
