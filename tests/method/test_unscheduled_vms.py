"""Issue 37 finding 7: `policy set-method dra --dry-run` said VM vms/my-vm "holds NPUs through sandbox ... stop it
first" for a VM that is ErrorUnschedulable: its VMI is on no node and its launcher pod was never placed, so it holds
nothing. "Holds NPUs" is decided from the VMI and its pod as they exist (real KubeVirt v1.9.0's shape of such a VMI:
tests/kubevirt_real/test_guard.py test_an_unschedulable_vm_holds_no_npu_and_blocks_nothing)."""

from __future__ import annotations

from tests.fakes import objects as o
from tests.helpers import cli
from tests.method.support import SANDBOX_RES, changer, cluster

UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient rebellions.ai/RBLN-CA22_PF."}


def _unschedulable_vm(apiserver, ns: str = "vms", name: str = "my-vm") -> None:
    vmi = o.vmi(ns, name, None, host_devices=[SANDBOX_RES] * 5, phase="Scheduling", conditions=[UNSCHEDULABLE])
    launcher = o.virt_launcher(ns, name, None, resources={SANDBOX_RES: "5"})
    apiserver.add(o.vm(ns, name, host_devices=[SANDBOX_RES] * 5, printable_status="ErrorUnschedulable"), vmi,
                  launcher)
    apiserver.mark_unschedulable(ns, launcher["metadata"]["name"], UNSCHEDULABLE["message"])


def test_an_unschedulable_vm_holds_nothing_and_blocks_no_method_switch(apiserver, kube):
    op = cluster(apiserver)
    _unschedulable_vm(apiserver)
    plan = changer(kube, op).plan("dra")
    assert not [b for b in plan.blockers if "holds NPUs" in b.message], plan.blockers
    assert plan.holders == []
    r = cli("policy", "set-method", "dra", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "holds NPUs" not in r.stderr and "virtctl stop my-vm" not in r.stderr, r.stderr


def test_the_same_vm_once_placed_holds_its_npus_again(apiserver, kube):
    """The guard still refuses once the scheduler placed it (a node, PodScheduled True): the rule is the pod's
    state, not a name on a list."""
    op = cluster(apiserver)
    apiserver.add(o.vm("vms", "my-vm", host_devices=[SANDBOX_RES]),
                  o.vmi("vms", "my-vm", "vm0", host_devices=[SANDBOX_RES], phase="Scheduled"))
    plan = changer(kube, op).plan("dra")
    assert [b.message.split(" holds")[0] for b in plan.blockers if "holds NPUs" in b.message] == \
        [f"VM vms/my-vm ({SANDBOX_RES})"]
