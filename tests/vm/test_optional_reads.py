"""Optional reads (rblnctl.kube.optional): served, absent (404), or forbidden (403) — and a forbidden read never
reads as "none" (issue 29)."""

from __future__ import annotations

import pytest

from rblnctl.errors import Forbidden, NotFound, one_line
from rblnctl.kube.optional import ERROR, NOTE, UNKNOWN, optional
from rblnctl.node.vms import stranded_vms
from rblnctl.operator.cluster import read_operator
from rblnctl.vm.listing import list_vm_npus
from tests.fakes import objects as o
from tests.node.test_mode import seed, switcher
from tests.vm.support import CA22, NS, VFIO_CLASS


def _raise(err):
    def call():
        raise err
    return call


def test_the_three_outcomes_and_what_the_caller_makes_of_a_refusal():
    assert optional(lambda: [1], what="list x", on_forbidden=UNKNOWN).value == [1]
    gone = optional(_raise(NotFound("no")), what="list x", on_forbidden=UNKNOWN, absent=[])
    assert (gone.value, gone.absent, gone.known) == ([], True, True)
    notes: list[str] = []
    refused = optional(_raise(Forbidden("x is\n  forbidden")), what="list x", on_forbidden=NOTE, notes=notes,
                       absent=[])
    assert (refused.value, refused.known, refused.absent) == (None, False, False)  # never the `absent` value
    assert notes == ["cannot list x (forbidden): x is forbidden"]
    assert optional(_raise(Forbidden("f")), what="list x", on_forbidden=UNKNOWN).note == "cannot list x (forbidden): f"
    with pytest.raises(Forbidden):
        optional(_raise(Forbidden("f")), what="list x", on_forbidden=ERROR)
    with pytest.raises(TypeError):
        optional(lambda: 1, what="list x", on_forbidden=NOTE)


def test_one_line():
    assert one_line(ValueError("a\n  b\tc ")) == "a b c"
    assert one_line(ValueError()) == "ValueError"
    assert one_line("x  y") == "x y"


def test_a_forbidden_claim_template_list_is_a_note_not_no_npus(apiserver, kube):
    """Before: the hand-made claim's template could not be read, so the VM silently asked for no NPU."""
    mine = o.template_claim("my-npu", "my-template")
    apiserver.add(o.cluster_policy(dra=True, sandbox=False),
                  o.resource_claim_template(NS, "my-template", device_class=VFIO_CLASS, managed=False),
                  o.vm(NS, "npu-vm", running=False, resource_claims=[mine],
                       host_devices=[o.dra_host_device("accel", claim="my-npu", request="npu0")]))
    apiserver.forbid("list", "resourceclaimtemplates.resource.k8s.io")
    listing = list_vm_npus(kube, namespace=NS)
    assert any("cannot list ResourceClaimTemplates in namespace" in n and "(forbidden)" in n for n in listing.notes)


def test_stranded_vms_when_vms_cannot_be_listed_is_unknown_not_none(apiserver, kube):
    """Before: leaving no vm node with VMs unlistable said nothing, as if no VM asked for NPUs."""
    apiserver.add(o.cluster_policy(), o.npu_node("v1", mode=o.MODE_VM),
                  o.vm(NS, "v", running=False, host_devices=[CA22]))
    policy = read_operator(kube).policy
    assert "1 VM(s) still ask for NPUs" in str(stranded_vms(kube, policy, ["v1"]))
    apiserver.forbid("list", "virtualmachines.kubevirt.io")
    warning = stranded_vms(kube, policy, ["v1"])
    assert warning is not None and "unknown" in warning and "cannot list VirtualMachines (forbidden)" in warning


def test_set_mode_vm_with_nodefeatures_forbidden_warns_the_iommu_was_not_checked(apiserver, kube):
    """Before: a refused NodeFeature list judged nothing and said nothing."""
    seed(apiserver)
    apiserver.forbid("list", "nodefeatures.nfd.k8s-sigs.io")
    plan = switcher(kube).plan("n1", "vm")
    assert any("cannot list NodeFeatures (node n1's IOMMU was not checked) (forbidden)" in w for w in plan.warnings)


def test_diagnose_with_pods_forbidden_does_not_say_kubevirt_made_no_launcher_pod(apiserver, kube):
    """Before: a refused pod list read as "KubeVirt made no virt-launcher pod for it"."""
    from rblnctl.vm.diagnose import LinkName, diagnose
    from tests.vm.support import sandbox_cluster

    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22]), o.vmi(NS, "v1", None, [CA22], phase="Scheduling"),
                  o.virt_launcher(NS, "v1", None, resources={CA22: "1"}))
    apiserver.forbid("list", "pods", NS)
    d = diagnose(kube, "v1", NS)
    b = d.broken
    assert b is not None and b.name == LinkName.INSTANCE
    assert b.failure == "its virt-launcher pod cannot be read (forbidden)" and "made no virt-launcher pod" not in str(b)
    assert any(f"cannot list the pods in {NS}" in w and "(forbidden)" in w for w in d.warnings)


def test_diagnose_with_events_forbidden_says_so(apiserver, kube):
    """Before: a refused Event list read as "no events" (no FailedScheduling), silently."""
    from rblnctl.vm.diagnose import diagnose
    from tests.vm.support import sandbox_cluster

    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22]), o.vmi(NS, "v1", None, [CA22], phase="Scheduling"))
    pod = o.virt_launcher(NS, "v1", None, resources={CA22: "1"})
    apiserver.add(pod, o.failed_scheduling(pod, "0/1 nodes are available: 1 Insufficient " + CA22 + "."))
    apiserver.forbid("list", "events", NS)
    d = diagnose(kube, "v1", NS)
    assert any("cannot list the Events of pod" in w and "(forbidden)" in w for w in d.warnings)


def test_diagnose_a_dra_vm_with_vmis_forbidden_says_its_neighbours_are_unknown(apiserver, kube):
    """Before: a refused cluster-wide VMI list read as "no other VM shares its claims"."""
    from rblnctl.vm.diagnose import read_facts
    from tests.vm.support import dra_cluster

    dra_cluster(apiserver)
    claim_entry = o.template_claim("rbln-npu", "rbln-npu-1")
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-1"),
                  o.vm(NS, "v1", host_devices=[o.dra_host_device("npu0")], resource_claims=[claim_entry]),
                  o.vmi(NS, "v1", "n1", [o.dra_host_device("npu0")], resource_claims=[claim_entry]))
    apiserver.forbid("list", "virtualmachineinstances.kubevirt.io")
    facts = read_facts(kube, "v1", NS)
    assert facts.neighbours == ()
    assert any("cannot list the VirtualMachineInstances of every namespace" in n for n in facts.unread)
