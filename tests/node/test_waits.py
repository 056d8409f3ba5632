"""The waits of drain and set-mode cost the same requests whatever the number of pods on the node."""

from __future__ import annotations

import threading
from collections import Counter

import pytest


from rblnctl.node.drain import Drainer
from rblnctl.node.mode import ModeSwitcher
from rblnctl.node.options import DrainOptions, ModeOptions
from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.fakes.objects import ONE_NPU as NPU
from tests.helpers import blocked_in, ctrl_c_pending_when




def _seed_pods(apiserver, node, count):
    apiserver.add(*(o.pod("default", f"{node}-p{i:03d}", node=node, owner_kind="ReplicaSet", owner_name="web",
                          requests=NPU) for i in range(count)))


def _kinds(requests, node):
    """Each request as (method, path, watch?): what it costs, not which node or pod it names."""
    return [(r.method, r.path.replace(node, "NODE"), "watch" in r.query) for r in requests]


def _after_last_eviction(apiserver, node, until):
    reqs = list(apiserver.requests)
    start = max(i for i, r in enumerate(reqs) if r.path.endswith("/eviction")) + 1
    end = next(i for i in range(start, len(reqs)) if until(reqs[i]))
    return _kinds(reqs[start:end], node)


def test_waiting_for_20_or_200_pods_to_leave_costs_the_same_requests(apiserver, kube):
    apiserver.deletion_delay_s = 0.5  # each pod terminates for a while: the wait has to watch
    apiserver.add(o.cluster_policy(), o.npu_node("n20"), o.npu_node("n200"), o.replicaset("default", "web"))
    _seed_pods(apiserver, "n20", 20)
    _seed_pods(apiserver, "n200", 200)
    phases = {}
    for node in ("n20", "n200"):
        apiserver.clear_requests()
        drainer = Drainer(kube=kube, options=DrainOptions(timeout_s=30))
        result = drainer.apply(drainer.plan(node))
        assert len(result.evicted) == int(node[1:])
        phases[node] = _after_last_eviction(apiserver, node, lambda r: r.method == "DELETE" and "/leases/" in r.path)
    # One LIST and one watch of the node's pods, then the next round's LIST: nothing per pod.
    assert phases["n20"] == phases["n200"] == [("GET", "/api/v1/pods", False), ("GET", "/api/v1/pods", True),
                                               ("GET", "/api/v1/pods", False)]


def test_a_mode_switch_waits_with_the_same_requests_for_20_or_200_pods(apiserver, kube):
    apiserver.deletion_delay_s = 0.5
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True), o.npu_node("n20"),
                  o.npu_node("n200"), o.replicaset("default", "web"))
    _seed_pods(apiserver, "n20", 20)
    _seed_pods(apiserver, "n200", 200)
    op = SimulatedOperator(apiserver, ready_delay_s=0.3).start()
    try:
        assert op.wait_idle()
        phases = {}
        for node in ("n20", "n200"):
            apiserver.clear_requests()
            sw = ModeSwitcher(kube=kube, options=ModeOptions(drain=DrainOptions(timeout_s=30)))
            result = sw.apply(sw.plan(node, "vm"))
            assert result.changed and len(result.evicted) == int(node[1:])
            phases[node] = _after_last_eviction(  # up to the uncordon
                apiserver, node, lambda r, n=node: r.method == "PATCH" and r.path == f"/api/v1/nodes/{n}"
                and ((r.body or {}).get("spec") or {}).get("unschedulable") is False)
    finally:
        op.stop()
    reads = {n: Counter(k for k in p if not k[2]) for n, p in phases.items()}
    assert reads["n20"] == reads["n200"]  # the same LISTs and GETs, whatever the pods
    for p in phases.values():  # a watch per collection the waits look at, none per pod: the node's pods, then
        watches = Counter(k[1] for k in p if k[2])  # the node, the operator's pods on it and the policies
        assert sum(watches.values()) <= 4 and set(watches) <= {"/api/v1/pods", "/api/v1/nodes",
                                                               "/api/v1/namespaces/rbln-system/pods",
                                                               "/apis/rebellions.ai/v1beta1/rblnclusterpolicies"}


def test_a_ctrl_c_that_lands_as_a_drain_waits_for_its_pods_ends_it_at_once(apiserver, kube):
    """The wait for evicted pods to leave read its watch stream on the main thread: a Ctrl-C that landed just before
    the read (SIGINT's handler pending, the read not interrupted) ran only at the next event or the stream's end,
    minutes later. It is read on a thread (watch_many), the main thread waiting in slices."""
    apiserver.deletion_delay_s = 60  # the pod terminates for longer than the test: only the interrupt ends the wait
    apiserver.add(o.cluster_policy(), o.npu_node("n1"), o.replicaset("default", "web"))
    _seed_pods(apiserver, "n1", 1)
    drainer = Drainer(kube=kube, options=DrainOptions(timeout_s=120))
    plan = drainer.plan("n1")
    main = threading.current_thread()
    with ctrl_c_pending_when(lambda: apiserver.open_watches == 1 and blocked_in(main, "wait_gone")):
        with pytest.raises(KeyboardInterrupt):
            drainer.apply(plan)
