"""`node set-mode --rehearse` against reality: the real kube-apiserver, kube-scheduler, ReplicaSet and disruption
controllers, and the real RBLN NPU Operator v0.3.0 (tests/envtest/operator_stack.py).

The rehearsal must write nothing (the server's own audit log says so), and the same switch, run for real right
after it, must go as it said: the same waves in the same order, the same pods evicted from each node (a
replacement the scheduler put on a node that switches later evicted there again), the same nodes refused.

The switch runs vm-passthrough -> container (to vm, v0.3.0's sandbox plugin never gets Ready: the switch is
refused, tests/envtest/test_operator_v030.py), with --all-pods, so a ReplicaSet's plain pods are what moves.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.backend import RealBackend
from tests.envtest.operator_stack import MODE_VM, OperatorStack
from tests.envtest.test_operator_v030 import relabel_by_hand
from tests.fakes import objects as o

pytestmark = pytest.mark.envtest

NODES = ["npu-node-1", "npu-node-2"]
NS = "rehearse"


@pytest.fixture
def op(operator_cluster: OperatorStack, tmp_path: Path) -> Iterator[RealBackend]:
    b = RealBackend(operator_cluster.control_plane, tmp_path)
    if operator_cluster.api.get("Namespace", NS) is None:
        operator_cluster.api.create({"kind": "Namespace", "metadata": {"name": NS}})
    try:
        yield b
    finally:
        for kind in ("PodDisruptionBudget", "ReplicaSet"):
            for obj in operator_cluster.api.list(kind, NS):
                operator_cluster.api.delete(kind, obj["metadata"]["name"], NS)
        for p in operator_cluster.api.list("Pod", NS):
            operator_cluster.api.delete("Pod", p["metadata"]["name"], NS, grace_s=0)
        b.stop()


def ready_pods(stack: OperatorStack, labels: str) -> list[dict]:
    return [p for p in stack.api.list("Pod", NS, labels=labels) if p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]


def web(stack: OperatorStack, replicas: int) -> None:
    """A ReplicaSet the scheduler places and a budget allowing one disruption, both settled."""
    rs = o.replicaset(NS, "web", replicas=replicas)
    rs.pop("status")
    stack.api.create(rs)
    pdb = o.pdb(NS, "web", selector={"app": "web"}, max_unavailable=1)
    pdb.pop("status")
    stack.api.create(pdb)
    stack.api.wait_for(lambda: len(ready_pods(stack, "app=web")) == replicas, timeout_s=60,
                       message=f"{replicas} web pods Ready")

    def settled() -> bool:
        b = stack.api.get("PodDisruptionBudget", "web", NS) or {}
        st = b.get("status") or {}
        return st.get("observedGeneration") == b["metadata"]["generation"] and st.get("currentHealthy") == replicas
    stack.api.wait_for(settled, timeout_s=30, message="the disruption controller to settle budget web")


def pods_by_node(stack: OperatorStack) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {n: set() for n in NODES}
    for p in stack.api.list("Pod", NS):
        out.setdefault(p["spec"].get("nodeName") or "", set()).add(f"{NS}/{p['metadata']['name']}")
    return out


def in_vm_mode(stack: OperatorStack) -> None:
    for n in NODES:
        relabel_by_hand(stack, n, MODE_VM)


def rehearse(op: RealBackend, *args: str) -> tuple[dict, int]:
    op.mark()
    r = op.rblnctl("node", "set-mode", "container", *NODES, "--all-pods", "--max-unavailable", "1", "--rehearse",
                   "-o", "json", *args)
    assert op.writes() == [], op.writes()  # the real server's audit log: not one request that changes anything
    return json.loads(r.stdout), r.exit_code


def cordon(stack: OperatorStack, node: str, on: bool) -> None:
    stack.api.patch("Node", node, {"spec": {"unschedulable": on}})


def budget_refusals(op: RealBackend, since: int, where: dict[str, str]) -> set[str]:
    """The nodes whose pods' evictions the API server answered 429 (a PodDisruptionBudget), from its audit log."""
    return {where[f"{e.namespace}/{e.name}"] for e in op.audit.events(since, user_agent="rblnctl/")
            if e.subresource == "eviction" and e.code == 429 and f"{e.namespace}/{e.name}" in where}


def seconds(entry: dict) -> float:
    from datetime import datetime

    def at(t: str) -> datetime:
        return datetime.fromisoformat(t.replace("Z", "+00:00"))

    return (at(entry["finished"]) - at(entry["started"])).total_seconds()


def test_the_rehearsal_writes_nothing_and_the_switch_then_goes_as_it_said(op, operator_cluster):
    stack = operator_cluster
    in_vm_mode(stack)
    cordon(stack, NODES[1], True)  # the scheduler puts all three on node 1 (deterministic), then node 2 opens
    web(stack, 3)
    cordon(stack, NODES[1], False)
    before = pods_by_node(stack)
    assert sum(1 for p in before[NODES[0]] if p.startswith(f"{NS}/web-")) == 3
    doc, code = rehearse(op)
    assert code == 0, doc
    waves = [[n["node"] for n in w["nodes"]] for w in doc["waves"]]
    assert waves == [[NODES[0]], [NODES[1]]] and [n["outcome"] for w in doc["waves"] for n in w["nodes"]] == [
        "switch", "switch"]
    predicted = {n["node"]: n["evictions"] for w in doc["waves"] for n in w["nodes"]}
    # wave 1 evicts what is on node 1 now; each replacement can only go to node 2 (node 1 is cordoned), which
    # evicts it again in wave 2, with its own pods
    first = {e["pod"] for e in predicted[NODES[0]] if e["pod"].startswith(f"{NS}/web-")}
    assert first == {p for p in before[NODES[0]] if p.startswith(f"{NS}/web-")}
    assert all(e["likely"] == NODES[1] for e in predicted[NODES[0]] if e["recreated"])
    again = [e for e in predicted[NODES[1]] if e["again"]]
    assert len(again) == sum(1 for e in predicted[NODES[0]] if e["recreated"]) >= len(first), predicted
    # the budget allows one at a time: in each wave, evictions beyond the first wait for a replacement
    paced = {w["nodes"][0]["node"]: b for w in doc["waves"] for b in w["budgets"] if b["budget"] == f"{NS}/web"}
    assert {n: (b["allowed"], b["waiting"] > 0) for n, b in paced.items()} == {NODES[0]: (1, True),
                                                                              NODES[1]: (1, True)}

    op.mark()
    since = op.audit.mark()
    r = op.rblnctl("node", "set-mode", "container", *NODES, "--all-pods", "--max-unavailable", "1", "--yes",
                   "-o", "json", "--timeout", "240s")
    assert r.exit_code == 0, r.stderr
    items = json.loads(r.stdout)["items"]
    assert [i["node"] for i in items] == [n for w in waves for n in w] and {i["outcome"] for i in items} == {"done"}
    evicted = {i["node"]: {f"{p['namespace']}/{p['name']}" for p in i["evicted"]} for i in items}
    # the same pods from node 1; on node 2 its own pods and as many replacements as the rehearsal said
    assert evicted[NODES[0]] == {e["pod"] for e in predicted[NODES[0]]}
    own = {e["pod"] for e in predicted[NODES[1]] if not e["again"]}
    assert own <= evicted[NODES[1]]
    new = evicted[NODES[1]] - own
    assert len(new) == len(again) and not new & before[NODES[1]] and not new & before[NODES[0]]
    # the budget paced where the rehearsal said: the real server refused (429) evictions of node 1's Ready pods
    # beyond the one it allows, and nowhere the rehearsal did not predict it. (Node 2's pods are the replacements
    # wave 1 made: evicted before they are Ready, the budget lets them go, as kube-apiserver does for a pod that is
    # not Ready while the budget holds: the rehearsal's pacing there is an upper bound.)
    where = {p: n for n, pods in evicted.items() for p in pods}
    refused = budget_refusals(op, since, where)
    assert NODES[0] in refused and refused <= {n for n, b in paced.items() if b["waiting"]}

    # The switches are now on record (Events): a rehearsal of the same switch estimates from them.
    in_vm_mode(stack)
    doc, code = rehearse(op)
    assert code == 0
    for w in doc["waves"]:
        (n,) = w["nodes"]
        r = op.rblnctl("node", "history", n["node"], "-o", "json")
        past = [seconds(e) for e in json.loads(r.stdout)["items"]
                if e["action"] == "set-mode" and e["to"] == "container" and e["result"] == "done"]
        assert past and n["basis"].startswith(f"node history: mean of {len(past)} past switch(es) to container")
        assert n["estimateSeconds"] == pytest.approx(sum(past) / len(past), abs=0.06)


def test_a_refused_node_is_refused_in_the_rehearsal_and_in_the_run(op, operator_cluster):
    stack = operator_cluster
    in_vm_mode(stack)
    web(stack, 2)
    bare = o.pod(NS, "bare", node=NODES[1])  # nothing recreates it: refused without --force
    stack.api.create(bare)
    doc, code = rehearse(op, "--continue-on-error")
    assert code == 0, doc
    assert [n["node"] for n in doc["refused"]] == [NODES[1]]
    assert [[n["node"] for n in w["nodes"]] for w in doc["waves"]] == [[NODES[0]]]
    refused_why = doc["refused"][0]["blockers"]
    doc2, code2 = rehearse(op)  # without --continue-on-error the pool is refused, as the run is
    assert code2 == 1 and doc2["poolRefused"] and doc2["waves"] == []

    r = op.rblnctl("node", "set-mode", "container", *NODES, "--all-pods", "--max-unavailable", "1", "--yes",
                   "--continue-on-error", "-o", "json", "--timeout", "240s")
    items = {i["node"]: i for i in json.loads(r.stdout)["items"]}
    assert (items[NODES[0]]["outcome"], items[NODES[1]]["outcome"]) == ("done", "refused")
    assert {e["pod"] for n in doc["waves"][0]["nodes"] for e in n["evictions"]} == {
        f"{p['namespace']}/{p['name']}" for p in items[NODES[0]]["evicted"]}
    # refused for the same reasons: the run's plan of the node names the blockers the rehearsal named
    assert refused_why and [b["message"] for b in items[NODES[1]]["plan"]["blockers"]] == refused_why
