"""The pure set-mode planner (rblnctl.node.mode.plan.plan_mode) over facts built by hand: no server, no Kube."""

from __future__ import annotations

import copy

import pytest

from rblnctl import constants as C
from rblnctl.errors import Refused
from rblnctl.node.drain import Survey
from rblnctl.node.events import Step
from rblnctl.node.mode import ModeFacts, plan_mode
from rblnctl.node.options import DrainOptions, ModeOptions
from rblnctl.node.record import SwitchRecord
from rblnctl.operator.cluster import OperatorView
from rblnctl.operator.policy import choose_active
from rblnctl.plan import Blocker
from rblnctl.vm.guard import NpuVm
from tests.fakes import objects as o
from tests.preflight.cluster_support import nfd_features

HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}
VIEW = OperatorView(choice=choose_active([o.cluster_policy(**HYBRID)]), crd_installed=True,
                    namespace=C.OPERATOR_NAMESPACE, namespace_source="given")
OPTIONS = ModeOptions(drain=DrainOptions(timeout_s=60))


def node(mode: str = o.MODE_CONTAINER, *, record: SwitchRecord | None = None, cordoned: bool = False) -> dict:
    obj = copy.deepcopy(o.npu_node("n1", mode=mode))
    if record is not None:
        obj["metadata"].setdefault("annotations", {})[C.SET_MODE_ANNOTATION] = record.to_json()
    if cordoned:
        obj.setdefault("spec", {})["unschedulable"] = True
    return obj


def facts(obj: dict, **kw) -> ModeFacts:
    """Facts as the reader leaves them for a node not yet converged: its pods listed (none by default)."""
    kw.setdefault("survey", Survey(evict=[], ignored=[]))
    kw.setdefault("pending", ("vfio-manager: no pod on the node yet",))
    return ModeFacts(node_obj=obj, view=VIEW, **kw)


def test_a_node_already_in_the_target_mode_with_the_operator_done_is_a_noop():
    plan = plan_mode(ModeFacts(node_obj=node(o.MODE_VM), view=VIEW), "n1", "vm", OPTIONS)
    assert plan.noop and plan.steps == [] and plan.blockers == []
    assert plan.current_mode == C.MODE_VM and plan.target == C.MODE_VM
    # nothing pending for the target, but the node is in the other mode: a switch
    plan = plan_mode(ModeFacts(node_obj=node(o.MODE_CONTAINER), view=VIEW, survey=Survey(evict=[], ignored=[])),
                     "n1", "vm", OPTIONS)
    assert not plan.noop and not plan.converged and plan.steps[4].detail.startswith(f"set {C.WORKLOAD_LABEL}=")


def test_a_noop_still_waits_for_another_runs_lock():
    lock = Blocker("node n1 is locked by someone else")
    plan = plan_mode(ModeFacts(node_obj=node(o.MODE_VM), view=VIEW, lock_blockers=(lock,)), "n1", "vm", OPTIONS)
    assert not plan.noop and plan.blockers == [lock] and plan.converged


def test_a_running_vm_holding_npus_blocks_the_switch_and_is_named():
    vm = NpuVm(namespace="vms", name="vm1", holds="rebellions.ai/RBLN-CA22_PF")
    plan = plan_mode(facts(node(o.MODE_VM), vms=(vm,)), "n1", "container", OPTIONS)
    assert plan.vms == ["vms/vm1 (rebellions.ai/RBLN-CA22_PF)"]
    (b,) = plan.blockers
    assert "vms/vm1" in b.message and "holds NPUs on n1" in b.message
    # evicting VMs turns the blocker into a warning that says the VM stops
    evicting = ModeOptions(drain=DrainOptions(timeout_s=60, evict_vms=True))
    plan = plan_mode(facts(node(o.MODE_VM), vms=(vm,)), "n1", "container", evicting)
    assert plan.blockers == [] and any("1 VM(s) holding NPUs" in str(w) for w in plan.warnings)


def test_an_iommu_nfd_reports_off_blocks_vm_mode_only():
    devices = [{"vendor": "1eff", "device": "1220", "class": "1200"},
               {"vendor": "15b3", "device": "101d", "class": "0200", "iommu_group/type": "DMA"}]
    features = (nfd_features("n1", iommu=False, pci_devices=devices),)
    plan = plan_mode(facts(node(), node_features=features), "n1", "vm", OPTIONS)
    (b,) = plan.blockers
    assert "node n1's IOMMU is off for its NPUs" in b.message and b.override == "skip_iommu_check"
    skipping = ModeOptions(drain=DrainOptions(timeout_s=60), skip_iommu_check=True)
    plan = plan_mode(facts(node(), node_features=features), "n1", "vm", skipping)
    assert plan.blockers == [] and any("check skipped" in str(w) and "IOMMU" in str(w) for w in plan.warnings)
    # back to container mode needs no IOMMU
    assert plan_mode(facts(node(o.MODE_VM), node_features=features), "n1", "container", OPTIONS).blockers == []
    # the NodeFeatures could not be read: nothing judged
    assert plan_mode(facts(node(), node_features=None), "n1", "vm", OPTIONS).blockers == []


def test_a_node_mid_switch_resumes_its_record():
    record = SwitchRecord(target=C.MODE_VM, from_mode=C.MODE_CONTAINER, started="2026-01-02T03:04:05Z",
                          cordoned_by_rblnctl=True, step=Step.RELABEL)
    plan = plan_mode(facts(node(o.MODE_VM, record=record, cordoned=True)), "n1", "vm", OPTIONS)
    assert plan.resume and not plan.noop and plan.mid_switch
    assert plan.started == "2026-01-02T03:04:05Z" and plan.from_mode == C.MODE_CONTAINER
    assert plan.cordoned_by_rblnctl and plan.unschedulable
    assert plan.steps[1].detail.endswith("(resuming an unfinished switch)")
    assert plan.steps[-1].detail == "uncordon node n1"  # rblnctl cordoned it: it uncordons


def test_an_unfinished_switch_to_the_other_mode_is_refused_without_reverse():
    record = SwitchRecord(target=C.MODE_CONTAINER, from_mode=C.MODE_VM, started="2026-01-02T03:04:05Z",
                          cordoned_by_rblnctl=True, step=Step.CORDON)
    with pytest.raises(Refused, match="is unfinished"):
        plan_mode(facts(node(o.MODE_VM, record=record, cordoned=True)), "n1", "vm", OPTIONS)
    reverse = ModeOptions(drain=DrainOptions(timeout_s=60), reverse=True)
    plan = plan_mode(facts(node(o.MODE_VM, record=record, cordoned=True)), "n1", "vm", reverse)
    assert plan.resume and plan.cordoned_by_rblnctl and "reversing an unfinished switch to container" in plan.warnings


@pytest.mark.parametrize(("mode", "target", "relabel"), [
    (o.MODE_CONTAINER, "vm", f"set {C.WORKLOAD_LABEL}=vm-passthrough (was container)"),
    (o.MODE_VM, "container", f"set {C.WORKLOAD_LABEL}=container (was vm-passthrough)"),
])
def test_the_steps_of_a_switch_in_order(mode, target, relabel):
    plan = plan_mode(facts(node(mode)), "n1", target, OPTIONS)
    assert [s.step for s in plan.steps] == [Step.LOCK, Step.RECORD, Step.CORDON, Step.EVICT, Step.RELABEL,
                                            Step.WAIT, Step.UNCORDON]
    assert [s.detail for s in plan.steps] == [
        "take the lock of node n1 (a Lease)",
        f"annotate node n1 with {C.SET_MODE_ANNOTATION} (progress, for resuming)",
        "cordon node n1",
        "list the pods again and evict 0 NPU pod(s)",
        relabel,
        "wait up to 60s for the operator to converge",
        "uncordon node n1",
    ]
    assert plan.drain is not None and plan.drain.cordon and not plan.resume and not plan.mid_switch


def test_a_node_without_npus_is_refused():
    obj = node()
    obj["metadata"]["labels"] = {"kubernetes.io/hostname": "n1"}
    with pytest.raises(Refused, match="has no Rebellions NPU"):
        plan_mode(facts(obj), "n1", "vm", OPTIONS)


def test_facts_without_the_nodes_pods_cannot_plan_a_switch():
    """Facts the reader stopped early for (the node converged on the other mode) planned for a switch: the planner
    refuses to plan blind (an empty survey would pass every pod and VM on the node) instead of planning no blocker."""
    vm = NpuVm(namespace="vms", name="db", holds="rebellions.ai/RBLN-CA22_PF")
    blind = ModeFacts(node_obj=node(o.MODE_VM), view=VIEW, vms=(vm,), pending=("driver: no pod on the node yet",))
    with pytest.raises(ValueError, match="its pods were not read"):
        plan_mode(blind, "n1", "container", OPTIONS)
