"""PoolRunner against the fake API server and the simulated operator: max-unavailable, failures, resume."""

from __future__ import annotations

import threading

import pytest

from rblnctl.errors import InvalidInput, NotFound, Refused
from rblnctl.node.events import NodeEvents
from rblnctl.node.options import DrainOptions, ModeOptions
from rblnctl.node.pool import MaxUnavailable, Outcome, PoolEvents, PoolOptions, PoolRunner, select_nodes
from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from rblnctl.constants import SET_MODE_ANNOTATION as ANN, WORKLOAD_LABEL as MODE
from tests.fakes.objects import ONE_NPU as NPU

HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}


@pytest.fixture
def operator(apiserver):
    op = SimulatedOperator(apiserver, ready_delay_s=0.05)
    yield op
    op.stop()


def seed(apiserver, names, *, pods=2, labels=None):
    apiserver.add(o.cluster_policy(**HYBRID), o.replicaset("default", "web"))
    for n in names:
        apiserver.add(o.npu_node(n, labels=labels or {"pool": "a"}),
                      *(o.pod("default", f"{n}-p{i}", node=n, owner_kind="ReplicaSet", owner_name="web", requests=NPU)
                        for i in range(pods)))


def mode_runner(kube, *, max_unavailable="1", continue_on_error=False, events=None, timeout_s=10):
    options = ModeOptions(drain=DrainOptions(timeout_s=timeout_s))
    return PoolRunner.for_mode(kube, "vm", options, events=events, pool=PoolOptions(
        max_unavailable=MaxUnavailable.parse(max_unavailable), continue_on_error=continue_on_error))


def outcomes(result):
    return {i.node: str(i.outcome) for i in result.items}


def fail_evictions_on(apiserver, node):
    """Evictions of `node`'s pods are refused for good (400, as a denying webhook answers): that node's switch
    fails (and is rolled back). A 5xx would not do: its outcome is unknown, so it is read back and retried."""
    apiserver.eviction_hook = lambda pod, body: (400, "denied by a policy webhook") if pod["spec"].get(
        "nodeName") == node else None


# -- max unavailable -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text,total,expected", [
    ("1", 10, 1), ("3", 10, 3), ("3", 2, 2), ("25%", 10, 2), ("25%", 12, 3), ("10%", 5, 1), ("100%", 7, 7),
    ("50%", 1, 1), ("99%", 4, 3),
])
def test_max_unavailable_rounds_a_percentage_down_but_never_below_one(text, total, expected):
    assert MaxUnavailable.parse(text).resolve(total) == expected


@pytest.mark.parametrize("text", ["0", "0%", "-1", "x", "1.5", "150%", "%", ""])
def test_max_unavailable_refuses_what_is_not_a_count_or_a_percentage(text):
    with pytest.raises(InvalidInput):
        MaxUnavailable.parse(text)


def test_max_unavailable_is_never_exceeded(apiserver, kube, operator):
    """Sampled on the server at every change: nodes carrying rblnctl's record, and cordoned nodes."""
    names = [f"n{i}" for i in range(6)]
    seed(apiserver, names)
    operator.start()
    assert operator.wait_idle()
    peak = {"recorded": 0, "cordoned": 0}
    sample_lock = threading.Lock()

    def sample(event, obj):
        if obj.get("kind") != "Node":
            return
        nodes = apiserver.list("Node")
        with sample_lock:
            peak["recorded"] = max(peak["recorded"], sum(1 for n in nodes if ANN in (n["metadata"].get(
                "annotations") or {})))
            peak["cordoned"] = max(peak["cordoned"], sum(1 for n in nodes if n["spec"].get("unschedulable")))

    # A rendezvous proves the pool runs two nodes at once: each node's first eviction waits until two nodes
    # are evicting (a pool that ran one node at a time would never get there, and the test would fail below).
    evicting: set[str] = set()
    both = threading.Event()

    def hook(pod, body):
        with sample_lock:
            evicting.add(pod["spec"]["nodeName"])
            if len(evicting) >= 2:
                both.set()
        both.wait(5)

    apiserver.eviction_hook = hook
    apiserver.on_change(sample)
    result = mode_runner(kube, max_unavailable="2").apply(mode_runner(kube, max_unavailable="2").plan(names))
    assert set(outcomes(result).values()) == {"done"}
    assert both.is_set()
    assert peak == {"recorded": 2, "cordoned": 2}
    assert all(apiserver.get("Node", n)["metadata"]["labels"][MODE] == "vm-passthrough" for n in names)


def test_a_percentage_of_the_selected_nodes(apiserver, kube):
    seed(apiserver, [f"n{i}" for i in range(8)])
    runner = mode_runner(kube, max_unavailable="30%")
    assert runner.plan(select_nodes(kube, selector="pool=a")).max_unavailable == 2  # 30% of 8 = 2.4


# -- failures ------------------------------------------------------------------------------------------


def test_after_a_failure_no_new_node_starts(apiserver, kube, operator):
    seed(apiserver, ["n1", "n2", "n3", "n4"])
    operator.start()
    assert operator.wait_idle()
    fail_evictions_on(apiserver, "n2")
    runner = mode_runner(kube)
    result = runner.apply(runner.plan(["n1", "n2", "n3", "n4"]))
    assert outcomes(result) == {"n1": "done", "n2": "failed", "n3": "skipped", "n4": "skipped"}
    failed = result.failed[0]
    assert "denied by a policy webhook" in str(failed.error) and failed.duration_s > 0
    # n2 was rolled back (nothing past the cordon had landed); n3 and n4 were never touched.
    n2 = apiserver.get("Node", "n2")
    assert not n2["spec"].get("unschedulable") and ANN not in (n2["metadata"].get("annotations") or {})
    assert not [w for w in apiserver.writes() if w.path.endswith(("/nodes/n3", "/nodes/n4"))]


def test_continue_on_error_runs_every_other_node(apiserver, kube, operator):
    seed(apiserver, ["n1", "n2", "n3", "n4"])
    operator.start()
    assert operator.wait_idle()
    fail_evictions_on(apiserver, "n2")
    runner = mode_runner(kube, continue_on_error=True)
    result = runner.apply(runner.plan(["n1", "n2", "n3", "n4"]))
    assert outcomes(result) == {"n1": "done", "n2": "failed", "n3": "done", "n4": "done"}
    assert [i.node for i in result.failed] == ["n2"]


def test_running_nodes_finish_after_a_failure(apiserver, kube, operator):
    """With two at once, the node running beside the failing one finishes; only new starts stop."""
    seed(apiserver, ["n1", "n2", "n3"])
    operator.start()
    assert operator.wait_idle()
    started = threading.Event()

    def hook(pod, body):
        if pod["spec"]["nodeName"] == "n2":
            started.wait(5)  # n1 is evicting too: it is running when n2 fails
            return 400, "no"
        started.set()
        return None

    apiserver.eviction_hook = hook
    runner = mode_runner(kube, max_unavailable="2")
    result = runner.apply(runner.plan(["n1", "n2", "n3"]))
    assert outcomes(result) == {"n1": "done", "n2": "failed", "n3": "skipped"}


def test_refused_nodes_refuse_the_pool_before_any_write(apiserver, kube):
    seed(apiserver, ["n1", "n2"])
    apiserver.add(o.node("cpu-only"), o.vmi("vms", "vm1", "n2", host_devices=["rebellions.ai/RBLN-CA22_PF"]))
    runner = mode_runner(kube)
    plan = runner.plan(["n1", "n2", "cpu-only", "ghost"])
    assert set(plan.refused) == {"n2", "cpu-only", "ghost"}
    messages = [b.message for b in plan.blockers]
    assert any(m.startswith("node n2: VM vms/vm1") for m in messages)
    assert any(m.startswith("node cpu-only: node cpu-only has no Rebellions NPU") for m in messages)
    assert any(m.startswith("node ghost:") and "not found" in m for m in messages)
    apiserver.clear_requests()
    with pytest.raises(Refused):
        runner.apply(plan)
    assert apiserver.writes() == []


def test_continue_on_error_skips_refused_nodes_and_runs_the_rest(apiserver, kube, operator):
    seed(apiserver, ["n1", "n2"])
    apiserver.add(o.vmi("vms", "vm1", "n2", host_devices=["rebellions.ai/RBLN-CA22_PF"]))
    operator.start()
    assert operator.wait_idle()
    runner = mode_runner(kube, continue_on_error=True)
    plan = runner.plan(["n1", "n2"])
    assert plan.blockers == [] and any("node n2 is skipped" in str(w) for w in plan.warnings)
    result = runner.apply(plan)
    assert outcomes(result) == {"n1": "done", "n2": "refused"}
    assert "vms/vm1" in " ".join(str(b) for b in result.failed[0].error.blockers)


# -- interrupting and resuming -------------------------------------------------------------------------


def test_an_interrupted_pool_resumes_where_it_stopped(apiserver, kube, operator):
    names = ["n1", "n2", "n3", "n4"]
    seed(apiserver, names)
    operator.start()
    assert operator.wait_idle()
    runner = mode_runner(kube, max_unavailable="2")

    def interrupt_at_relabel(req):  # Ctrl-C lands while n1 and n2 are mid-switch
        if req.method == "PATCH" and MODE in (((req.body or {}).get("metadata") or {}).get("labels") or {}):
            runner.stop.set()

    unsubscribe = apiserver.on_request(interrupt_at_relabel)
    result = runner.apply(runner.plan(names))
    unsubscribe()
    first = outcomes(result)
    assert first["n3"] == first["n4"] == "skipped" and Outcome.INTERRUPTED in {i.outcome for i in result.items}
    interrupted = [n for n, out in first.items() if out == "interrupted"]
    # Left as Ctrl-C leaves a single switch: with its record (cordoned unless stopped between the two), or untouched
    # when the stop came before its first write (n2 runs beside n1: how far it got is the machine's timing); locks
    # given back.
    mid = [n for n in interrupted if ANN in (apiserver.get("Node", n)["metadata"].get("annotations") or {})]
    assert "n1" in mid  # stopped at its relabel
    for n in set(interrupted) - set(mid):
        assert not apiserver.get("Node", n)["spec"].get("unschedulable")
    assert not apiserver.list("Lease", "rbln-system")
    order: list[str] = []
    again = PoolRunner.for_mode(kube, "vm", ModeOptions(drain=DrainOptions(timeout_s=10)),
                                events=PoolEvents(on_start=order.append))  # one at a time: a strict order
    plan = again.plan(names)
    assert set(plan.resumes) == set(mid)
    result = again.apply(plan)
    assert order[:len(mid)] == mid  # the nodes left mid-switch go first
    assert outcomes(result) == {n: ("unchanged" if first[n] == "done" else "done") for n in names}
    for n in names:
        node = apiserver.get("Node", n)
        assert node["metadata"]["labels"][MODE] == "vm-passthrough" and not node["spec"].get("unschedulable")
        assert ANN not in (node["metadata"].get("annotations") or {})


def test_a_node_stopped_while_waiting_for_its_pods_stops_at_once(apiserver, kube, operator):
    apiserver.deletion_delay_s = 30  # its pods would take 30 s to go
    seed(apiserver, ["n1"])
    operator.start()
    assert operator.wait_idle()
    runner = mode_runner(kube, timeout_s=60)
    apiserver.on_request(lambda req: threading.Timer(0.1, runner.stop.set).start()
                         if "watch" in req.query and req.path == "/api/v1/pods" else None)
    result = runner.apply(runner.plan(["n1"]))
    assert outcomes(result) == {"n1": "interrupted"}
    assert result.items[0].duration_s < 30  # not the deletion time: the watch was woken


# -- selection and drain -------------------------------------------------------------------------------


def test_a_selector_picks_npu_nodes_only(apiserver, kube):
    seed(apiserver, ["n1", "n2"])
    apiserver.add(o.node("cpu", labels={"pool": "a"}), o.npu_node("other", labels={"pool": "b"}))
    assert select_nodes(kube, selector="pool=a") == ["n1", "n2"]
    with pytest.raises(NotFound, match="no NPU node matches the label selector 'pool=c'"):
        select_nodes(kube, selector="pool=c")
    assert select_nodes(kube, names=["n2", "n1", "n2"]) == ["n2", "n1"]
    with pytest.raises(InvalidInput):
        select_nodes(kube, names=["n1"], selector="pool=a")
    with pytest.raises(InvalidInput):
        select_nodes(kube, names=["../n1"])


def test_a_drain_pool(apiserver, kube):
    names = ["n1", "n2", "n3"]
    seed(apiserver, names, pods=3)
    seen: list[tuple[str, str]] = []

    def node_events(node):
        return NodeEvents(on_evicted=lambda pod: seen.append((node, pod.name)))

    runner = PoolRunner.for_drain(kube, DrainOptions(timeout_s=10), pool=PoolOptions(
        max_unavailable=MaxUnavailable(2)), events=PoolEvents(for_node=node_events))
    plan = runner.plan(names)
    assert plan.max_unavailable == 2 and not plan.noop
    result = runner.apply(plan)
    assert outcomes(result) == {n: "done" for n in names}
    assert sorted(seen) == sorted((n, f"{n}-p{i}") for n in names for i in range(3))  # events know their node
    assert all(apiserver.get("Node", n)["spec"]["unschedulable"] for n in names)
    assert not [p for p in apiserver.list("Pod", "default") if p["spec"].get("nodeName") in names]


def test_every_node_of_a_pool_records_its_own_switch_and_who_is_asked_once(apiserver, kube, operator):
    """A pool of set-mode leaves each node its Events (a failed node its warning), with one SelfSubjectReview."""
    from rblnctl.audit import Auditor

    seed(apiserver, ["n1", "n2", "n3"])
    operator.start()
    assert operator.wait_idle()
    fail_evictions_on(apiserver, "n2")
    options = ModeOptions(drain=DrainOptions(timeout_s=10))
    runner = PoolRunner.for_mode(kube, "vm", options, audit=Auditor(kube=kube),
                                 pool=PoolOptions(max_unavailable=MaxUnavailable.parse("2"), continue_on_error=True))
    result = runner.apply(runner.plan(["n1", "n2", "n3"]))
    assert outcomes(result) == {"n1": "done", "n2": "failed", "n3": "done"}
    reasons: dict[str, list[str]] = {}
    for e in sorted(apiserver.list("events.events.k8s.io"), key=lambda e: e["eventTime"]):
        reasons.setdefault(e["regarding"]["name"], []).append(e["reason"])
    assert reasons == {"n1": ["ModeSwitchStarted", "ModeSwitched"], "n2": ["ModeSwitchStarted", "ModeSwitchFailed"],
                       "n3": ["ModeSwitchStarted", "ModeSwitched"]}
    assert len([r for r in apiserver.requests if r.path.endswith("/selfsubjectreviews")]) == 1


def test_a_pool_of_drains_records_each_drain(apiserver, kube):
    from rblnctl.audit import Auditor

    seed(apiserver, ["n1", "n2"])
    runner = PoolRunner.for_drain(kube, DrainOptions(timeout_s=10), audit=Auditor(kube=kube),
                                  pool=PoolOptions(max_unavailable=MaxUnavailable.parse("2")))
    runner.apply(runner.plan(["n1", "n2"]))
    got = sorted((e["regarding"]["name"], e["reason"], e["action"]) for e in apiserver.list("events.events.k8s.io"))
    assert got == [("n1", "DrainStarted", "Drain"), ("n1", "Drained", "Drain"),
                   ("n2", "DrainStarted", "Drain"), ("n2", "Drained", "Drain")]
