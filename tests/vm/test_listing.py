"""vm list (library): which VMs and VMIs hold or request NPUs, where, and how."""

from __future__ import annotations

from rblnctl.vm.listing import list_vm_npus
from tests.fakes import objects as o
from tests.vm.support import CA22, NS, NVIDIA, VFIO_CLASS


def _by_name(listing):
    return {e.ref.name: e for e in listing.items}


def test_lists_vms_of_both_methods_and_standalone_vmis(apiserver, kube):
    claim = o.template_claim("rbln-npu", "rbln-npu-1")
    apiserver.add(
        o.vm(NS, "sandbox-vm", host_devices=[CA22, CA22]), o.vmi(NS, "sandbox-vm", "n1", [CA22, CA22]),
        o.vm(NS, "dra-vm", running=False, host_devices=[o.dra_host_device("npu0")], resource_claims=[claim]),
        o.vm(NS, "plain", host_devices=[NVIDIA]), o.vmi(NS, "plain", "n1", [NVIDIA]),
        o.vmi(NS, "bare", "n2", [CA22]),
        o.vm("other", "elsewhere", running=False, host_devices=[CA22]))
    listing = list_vm_npus(kube, namespace=NS)
    items = _by_name(listing)
    assert sorted(items) == ["bare", "dra-vm", "sandbox-vm"]
    s = items["sandbox-vm"]
    assert (s.kind, s.status, s.node, s.method, s.npus, s.holds, s.restart_pending) == (
        "VirtualMachine", "Running", "n1", "sandbox", 2, 2, False)
    d = items["dra-vm"]
    assert (d.status, d.node, d.method, d.npus, d.running_devices) == ("Stopped", None, "dra", 1, None)
    assert d.devices[0].source == "rbln-npu/npu0"
    b = items["bare"]
    assert (b.kind, b.status, b.node, b.holds) == ("VirtualMachineInstance", "Running", "n2", 1)
    assert listing.by_node() == {"n1": [f"{NS}/sandbox-vm"], "n2": [f"{NS}/bare"]}
    assert sorted(_by_name(list_vm_npus(kube))) == ["bare", "dra-vm", "elsewhere", "sandbox-vm"]


def test_a_vmi_started_before_the_npus_were_added_needs_a_restart(apiserver, kube):
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22]), o.vmi(NS, "v1", "n1"))
    (e,) = list_vm_npus(kube, namespace=NS).items
    assert e.restart_pending and e.holds == 0 and list_vm_npus(kube, namespace=NS).by_node() == {}


def test_hand_made_claims_count_when_their_template_asks_for_vfio_npus(apiserver, kube):
    mine = o.template_claim("my-npu", "my-template")
    gpu = o.template_claim("gpu", "gpu-template")
    apiserver.add(o.cluster_policy(dra=True, sandbox=False),
                  o.resource_claim_template(NS, "my-template", device_class=VFIO_CLASS, managed=False),
                  o.resource_claim_template(NS, "gpu-template", device_class="gpu.nvidia.com", managed=False),
                  o.vm(NS, "npu-vm", running=False, resource_claims=[mine],
                       host_devices=[o.dra_host_device("accel", claim="my-npu", request="npu0")]),
                  o.vm(NS, "gpu-vm", running=False, resource_claims=[gpu],
                       host_devices=[o.dra_host_device("gpu0", claim="gpu", request="gpu")]))
    items = _by_name(list_vm_npus(kube, namespace=NS))
    assert sorted(items) == ["npu-vm"] and items["npu-vm"].devices[0].managed is False


def test_kubevirt_not_installed(apiserver, kube):
    apiserver.remove_resource("virtualmachines.kubevirt.io")
    listing = list_vm_npus(kube, namespace=NS)
    assert listing.items == [] and listing.served is False


def test_forbidden_lists_are_noted(apiserver, kube):
    apiserver.forbid("list", "virtualmachineinstances.kubevirt.io")
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    listing = list_vm_npus(kube, namespace=NS)
    assert [e.ref.name for e in listing.items] == ["v1"]
    assert listing.notes and "cannot list VirtualMachineInstances" in listing.notes[0]


def _legacy_dra(ns, name, node):
    claims = [o.template_claim("rbln-npu", "rbln-npu-1")]
    devices = [o.dra_host_device("npu0", claim="rbln-npu")]
    return (o.vm(ns, name, host_devices=devices, resource_claims=claims),
            o.vmi(ns, name, node, devices, resource_claims=claims))


def test_vms_whose_claim_names_collide_on_one_node_are_flagged(apiserver, kube):
    """Two VMIs on n1 with the old fixed claim name rbln-npu: the RBLN DRA driver prepares only one of them."""
    apiserver.add(*_legacy_dra("a", "vm", "n1"), *_legacy_dra("b", "vm", "n1"), *_legacy_dra("c", "vm", "n2"))
    listing = list_vm_npus(kube)
    got = {str(e.ref): e.collisions for e in listing.items}
    assert got == {"a/vm": ["b/vm"], "b/vm": ["a/vm"], "c/vm": []}
    assert all(e.claims == ["resourceclaimtemplates/rbln-npu"] for e in listing.items)
    (note,) = [n for n in listing.notes if "share the DRA claim key" in n]
    assert "3 VMs share" in note and "vm attach of each gives it its own name" in note  # issue 39: no placeholders


def test_vms_with_their_own_claim_names_do_not_collide(apiserver, kube):
    for ns in ("a", "b"):
        claims = [o.template_claim(o.vm_claim(ns, "vm"), "rbln-npu-1")]
        devices = [o.dra_host_device("npu0", claim=o.vm_claim(ns, "vm"))]
        apiserver.add(o.vm(ns, "vm", host_devices=devices, resource_claims=claims),
                      o.vmi(ns, "vm", "n1", devices, resource_claims=claims))
    listing = list_vm_npus(kube)
    assert [e.collisions for e in listing.items] == [[], []] and not listing.notes
