"""The rehearsal's planner (rblnctl.node.rehearse.plan) as a pure function: facts in, prediction out, no server."""

from __future__ import annotations

import dataclasses

from rblnctl.constants import MODE_VM as VM
from rblnctl.node.drain import SCOPE_NPU, DrainPlan
from rblnctl.node.mode import ModePlan
from rblnctl.node.pods import Action, PodEntry
from rblnctl.node.pool import PoolPlan
from rblnctl.node.history import HistoryEntry
from rblnctl.node.rehearse.facts import BudgetFacts, RehearsalFacts, budget_facts, pod_facts
from rblnctl.node.rehearse.plan import (
    DEFAULT_READY_S,
    DEFAULT_ROLLOUT_S,
    DEFAULT_STEPS_S,
    FAILS,
    SKIPPED,
    SWITCH,
    UNCHANGED,
    rehearse,
    selects,
)
from rblnctl.plan import Blocker

NPU = "rebellions.ai/ATOM"  # the container mode's resource here


def node(name: str, npus: int = 2, *, unschedulable: bool = False, labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {NPU: str(npus), "cpu": "8"}}}


def pod(name: str, on: str, *, owner: str | None = "ReplicaSet/web", npus: int = 1, grace: int | None = 30,
        labels: dict | None = None, selector: dict | None = None) -> dict:
    md: dict = {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {"app": "web"}}
    if owner:
        kind, oname = owner.split("/")
        md["ownerReferences"] = [{"kind": kind, "name": oname, "controller": True}]
    spec: dict = {"nodeName": on, "containers": [{"name": "c", "resources": {"requests": {NPU: str(npus)},
                                                                             "limits": {NPU: str(npus)}}}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": md, "spec": spec, "status": {"phase": "Running"}}


def plan(name: str, pods: list[dict], *, noop: bool = False, blockers: list[Blocker] | None = None) -> ModePlan:
    evict = [PodEntry(namespace="default", name=p["metadata"]["name"], uid=p["metadata"]["uid"], action=Action.EVICT,
                      reason="uses NPUs", npu=True) for p in pods if p["spec"]["nodeName"] == name]
    return ModePlan(node=name, target=VM, current_mode="container", mode_label="container", noop=noop, resume=False,
                    cordoned_by_rblnctl=False, unschedulable=False, blockers=blockers or [],
                    drain=DrainPlan(node=name, scope=SCOPE_NPU, cordon=True, unschedulable=False, evict=evict))


def facts(nodes: list[dict], pods: list[dict], pool: list[str], *, max_unavailable: int = 1,
          budgets: list[BudgetFacts] | None = None, continue_on_error: bool = False,
          plans: dict[str, ModePlan] | None = None, history: dict | None = None) -> RehearsalFacts:
    plans = plans or {n: plan(n, pods) for n in pool}
    p = PoolPlan(operation="set-mode", target=VM, nodes=pool, selector=None, max_unavailable=max_unavailable,
                 continue_on_error=continue_on_error, plans=dict(plans))
    return RehearsalFacts(pool=p, cluster=tuple(nodes), pods=tuple(f for x in pods if (f := pod_facts(x))),
                          budgets=tuple(budgets or ()), history=history or {}, old_resources=frozenset({NPU}),
                          plans=dict(plans))


def test_waves_follow_max_unavailable_and_the_pool_order():
    nodes = [node(n) for n in ("a", "b", "c", "spare")]
    r = rehearse(facts(nodes, [], ["c", "a", "b"], max_unavailable=2))
    assert [[n.node for n in w.nodes] for w in r.waves] == [["c", "a"], ["b"]]
    assert r.blockers == [] and not r.pool_refused


def test_a_replacement_placed_on_a_later_waves_node_is_evicted_again_there():
    # a (1 NPU pod) and b (free NPU) in the pool, no other node: a's pod can only go to b, which switches next.
    nodes = [node("a", 1), node("b", 2)]
    pods = [pod("w-1", "a")]
    r = rehearse(facts(nodes, pods, ["a", "b"]))
    first, second = (w.nodes[0] for w in r.waves)
    (e,) = first.evictions
    assert (e.pod, e.places, e.likely, e.again) == ("default/w-1", ("b",), "b", False)
    (again,) = second.evictions
    assert again.again and again.pod == "default/<new pod of ReplicaSet/web>"
    # b switched last; a switched first and stopped offering the container NPUs: nowhere to go
    assert again.likely is None and "a: no free rebellions.ai/ATOM x1" in (again.nowhere or "")


def test_placement_weighs_the_pods_node_selector_and_cordons():
    nodes = [node("a"), node("x", labels={"zone": "1"}), node("y", labels={"zone": "2"}),
             node("z", labels={"zone": "1"}, unschedulable=True)]
    pods = [pod("w-1", "a", selector={"zone": "1"})]
    (e,) = rehearse(facts(nodes, pods, ["a"])).waves[0].nodes[0].evictions
    assert e.places == ("x",) and e.likely == "x"


def test_a_pod_nothing_recreates_goes_nowhere_and_says_so():
    pods = [pod("bare", "a", owner=None)]
    (e,) = rehearse(facts([node("a"), node("b")], pods, ["a"])).waves[0].nodes[0].evictions
    assert not e.recreated and e.places == () and e.likely is None


def test_a_budget_allowing_one_paces_the_wave_and_adds_a_round():
    nodes = [node("a"), node("b", 4)]
    pods = [pod("w-1", "a"), pod("w-2", "a")]
    budget = BudgetFacts(ref="default/web", namespace="default", selector={"matchLabels": {"app": "web"}}, allowed=1,
                         desired_healthy=1, current_healthy=2)
    r = rehearse(facts(nodes, pods, ["a"], budgets=[budget]))
    (pace,) = r.waves[0].budgets
    assert (pace.budget, pace.allowed, pace.evicting, pace.waiting, pace.blocks) == ("default/web", 1, 2, 1, False)
    n = r.waves[0].nodes[0]
    assert n.outcome == SWITCH
    assert n.estimate_seconds == DEFAULT_STEPS_S + 30 + DEFAULT_READY_S + DEFAULT_ROLLOUT_S
    assert "1 x 30s PodDisruptionBudget round(s)" in n.basis


def test_a_budget_allowing_none_fails_its_node_and_later_waves_are_not_started():
    nodes = [node("a"), node("b", 0), node("spare", 4)]  # b offers no NPU: a's pod goes to spare
    pods = [pod("w-1", "a")]
    budget = BudgetFacts(ref="default/web", namespace="default", selector={"matchLabels": {"app": "web"}}, allowed=0,
                         desired_healthy=1, current_healthy=1)
    r = rehearse(facts(nodes, pods, ["a", "b"], budgets=[budget]))
    assert [n.outcome for w in r.waves for n in w.nodes] == [FAILS, SKIPPED]
    assert "default/web allows no eviction" in r.waves[0].nodes[0].blockers[0]
    r = rehearse(dataclasses.replace(facts(nodes, pods, ["a", "b"], budgets=[budget], continue_on_error=True)))
    assert [n.outcome for w in r.waves for n in w.nodes] == [FAILS, SWITCH]


def test_a_refused_node_refuses_the_pool_unless_it_goes_on_past_errors():
    nodes = [node("a"), node("b")]
    vm = Blocker("VM vms/db holds NPUs of node a", "evict_vms")
    plans = {"a": plan("a", [], blockers=[vm]), "b": plan("b", [])}
    r = rehearse(facts(nodes, [], ["a", "b"], plans=plans))
    assert r.pool_refused and r.waves == () and [b.message for b in r.blockers] == [f"node a: {vm.message}"]
    assert [(n.node, n.blockers) for n in r.refused] == [("a", (vm.message,))]
    r = rehearse(facts(nodes, [], ["a", "b"], plans=plans, continue_on_error=True))
    assert not r.pool_refused and [[n.node for n in w.nodes] for w in r.waves] == [["b"]]
    assert [n.node for n in r.refused] == ["a"]


def test_noop_nodes_are_unchanged_and_take_no_time():
    plans = {"a": plan("a", [], noop=True)}
    r = rehearse(facts([node("a")], [], ["a"], plans=plans))
    assert r.noop and r.waves[0].nodes[0].outcome == UNCHANGED and r.estimate_s == 0


def test_the_estimate_comes_from_the_nodes_own_past_switches_when_there_are_any():
    def run(to: str, seconds: int) -> HistoryEntry:
        return HistoryEntry(run="r", action="set-mode", user=None, started="2026-12-06T01:00:00Z",
                            finished=f"2026-12-06T01:{seconds // 60:02d}:{seconds % 60:02d}Z", from_mode=None,
                            to_mode=to, result="done", message="", source="events")

    hist = {"a": (run(VM, 40), run(VM, 60), run("container", 500))}
    nodes = [node("a"), node("b", 0), node("spare")]
    r = rehearse(facts(nodes, [pod("w-1", "a", grace=300)], ["a", "b"], history=hist))
    a, b = (w.nodes[0] for w in r.waves)
    assert a.estimate_seconds == 50.0 and a.basis.startswith("node history: mean of 2 past switch(es) to vm")
    # b has no history: its pods' grace period (none evicted) and the stated defaults
    assert b.basis.startswith("defaults:") and "no pod to evict" in b.basis
    assert r.estimate_s == 50.0 + b.estimate_seconds


def test_grace_comes_from_the_pods_or_the_api_servers_default():
    pods = [pod("w-1", "a", grace=None), pod("w-2", "a", grace=7)]
    n = rehearse(facts([node("a"), node("b", 4)], pods, ["a"])).waves[0].nodes[0]
    assert "30s the longest terminationGracePeriodSeconds of 2 evicted pod(s)" in n.basis


def test_label_selectors_and_budget_status():
    assert selects({}, {"a": "1"})
    assert selects({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]},
                   {"a": "1"})
    assert not selects({"matchExpressions": [{"key": "a", "operator": "In", "values": ["2"]}]}, {"a": "1"})
    assert selects({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["2"]}]}, {})
    fresh = budget_facts({"metadata": {"name": "p", "namespace": "n", "generation": 2}, "spec": {},
                          "status": {"observedGeneration": 2, "disruptionsAllowed": 3}})
    stale = budget_facts({"metadata": {"name": "p", "namespace": "n", "generation": 2}, "spec": {},
                          "status": {"observedGeneration": 1, "disruptionsAllowed": 3}})
    assert (fresh.allowed, stale.allowed) == (3, None)


def test_a_converged_node_with_leftovers_has_nothing_to_roll_out():
    left = dataclasses.replace(plan("a", []), current_mode=VM, converged=True)
    n = rehearse(facts([node("a")], [], ["a"], plans={"a": left})).waves[0].nodes[0]
    assert n.rollout is not None and (n.rollout.removes, n.rollout.deploys) == ((), ())
    assert n.estimate_seconds == DEFAULT_STEPS_S and "converged already: no rollout" in n.basis
