"""`rblnctl node set-mode ... --rehearse` on the fake API server: the prediction, its document, zero writes, and
the same switch run for real afterwards evicting what the rehearsal said (the real apiserver's version of this
test, with the real scheduler and disruption controller: tests/envtest/test_rehearse_real.py)."""

from __future__ import annotations

import json

import pytest

from tests.fakes import objects as o
from tests.fakes.objects import ONE_NPU as NPU
from tests.fakes.operator import SimulatedOperator
from tests.helpers import cli

HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}
NODES = ["n1", "n2", "n3"]


@pytest.fixture
def pool(apiserver):
    # `spare` is an NPU node outside the pool with 2 free NPUs: n1's two pods fit there, n2's and n3's then do not
    apiserver.add(o.cluster_policy(**HYBRID), o.replicaset("default", "web", replicas=6),
                  o.npu_node("spare", labels={"pool": "b"}), o.node("cpu", labels={"pool": "a"}))
    for n in NODES:
        apiserver.add(o.npu_node(n, labels={"pool": "a"}),
                      *(o.pod("default", f"{n}-p{i}", node=n, owner_kind="ReplicaSet", owner_name="web", requests=NPU,
                              labels={"app": "web"}) for i in range(2)))
    op = SimulatedOperator(apiserver, ready_delay_s=0.05).start()
    assert op.wait_idle()
    apiserver.clear_requests()
    yield apiserver
    op.stop()


def rehearsal(pool, *args: str) -> dict:
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--rehearse", "-o", "json", *args, server=pool.url)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_the_rehearsal_reads_only_and_says_where_each_pod_could_go(pool):
    doc = rehearsal(pool, "--max-unavailable", "2")
    assert pool.writes() == [] and {r.method for r in pool.requests} == {"GET"}  # not even the lock's Lease
    assert doc["kind"] == "ModeRehearsal" and doc["target"] == "vm-passthrough" and doc["maxUnavailable"] == 2
    assert [[n["node"] for n in w["nodes"]] for w in doc["waves"]] == [["n1", "n2"], ["n3"]]
    first = {e["pod"]: e for n in doc["waves"][0]["nodes"] for e in n["evictions"]}
    assert sorted(first) == ["default/n1-p0", "default/n1-p1", "default/n2-p0", "default/n2-p1"]
    # spare has two free NPUs: the first two replacements take them, the next two have nowhere to go
    assert [first[p]["likely"] for p in sorted(first)] == ["spare", "spare", None, None]
    assert "no free rebellions.ai/npu x1" in first["default/n2-p0"]["nowhere"]
    n1 = doc["waves"][0]["nodes"][0]
    assert n1["rollout"]["deploys"] == ["vfio-manager", "sandbox-device-plugin"]
    assert "device-plugin" in n1["rollout"]["removes"]
    assert n1["basis"].startswith("defaults:") and n1["estimateSeconds"] > 0
    assert doc["estimateSeconds"] == sum(w["estimateSeconds"] for w in doc["waves"])


def test_the_table_names_waves_moves_and_the_estimates_basis(pool):
    r = cli("node", "set-mode", "vm", "n1", "n2", "--rehearse", server=pool.url)
    assert r.exit_code == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "rehearsal: switch 2 node(s) to vm, at most 1 at once; nothing was written"
    assert out[2].split() == ["WAVE", "NODE", "FROM", "RESULT", "EVICT", "ESTIMATE"]
    assert out[3].split()[:5] == ["1", "n1", "container", "switch", "2"]
    assert ["1", "n1", "default/n1-p0", "spare"] in [line.split() for line in out]
    assert any(line.startswith("estimate: ~") for line in out) and "(defaults: 5s writes" in r.stdout
    # piped, a line is never folded (grep finds it whole); a terminal folds it at its width (docs/screens.md)
    assert any(line.startswith("node n1: ~1m35s (defaults: 5s writes + 30s") for line in out)
    assert pool.writes() == []


def test_what_the_rehearsal_evicts_is_what_the_switch_then_evicts(pool):
    doc = rehearsal(pool)
    predicted = {n["node"]: sorted(e["pod"] for e in n["evictions"]) for w in doc["waves"] for n in w["nodes"]}
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--yes", "-o", "json", server=pool.url)
    assert r.exit_code == 0, r.stderr
    done = json.loads(r.stdout)
    evicted = {i["node"]: sorted(f"{p['namespace']}/{p['name']}" for p in i["evicted"]) for i in done["items"]}
    assert evicted == predicted  # (the fake has no ReplicaSet controller: no replacement comes back)


def test_a_budget_that_allows_nothing_is_predicted_to_fail_the_first_node_and_stop_the_pool(pool):
    pool.add(o.pdb("default", "web", selector={"app": "web"}, min_available=6))
    doc = rehearsal(pool)
    assert [n["outcome"] for w in doc["waves"] for n in w["nodes"]] == ["fails", "skipped", "skipped"]
    (pace,) = doc["waves"][0]["budgets"]
    assert (pace["budget"], pace["allowed"], pace["blocks"]) == ("default/web", 0, True)
    assert pool.writes() == []
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--yes", "-o", "json", "--timeout", "2s", server=pool.url)
    assert r.exit_code != 0
    outcomes = [i["outcome"] for i in json.loads(r.stdout)["items"]]
    assert outcomes == ["failed", "skipped", "skipped"]


def test_a_refused_pool_is_said_and_exits_as_a_refused_dry_run(pool):
    pool.add(o.pod("default", "bare", node="n2", requests=NPU))  # nothing recreates it: refused without --force
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--rehearse", "-o", "json", server=pool.url)
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["poolRefused"] is True and doc["waves"] == [] and [n["node"] for n in doc["refused"]] == ["n2"]
    assert "the pool would be refused" in r.stderr and pool.writes() == []


def test_rehearse_takes_no_dry_run():
    r = cli("node", "set-mode", "vm", "n1", "--rehearse", "--dry-run")
    assert r.exit_code == 2 and "--rehearse writes nothing" in r.stderr


def test_a_vm_holding_npus_is_named_with_why_it_blocks(apiserver):
    pf = "rebellions.ai/RBLN-CA22_PF"
    apiserver.add(o.cluster_policy(**HYBRID))
    for n in ("v1", "v2"):
        apiserver.add(o.npu_node(n, mode=o.MODE_VM, labels={"pool": "v"}))
    apiserver.add(o.vmi("vms", "db", "v1", host_devices=[pf]), o.virt_launcher("vms", "db", "v1", resources={pf: "1"}))
    op = SimulatedOperator(apiserver, ready_delay_s=0.05).start()
    try:
        assert op.wait_idle()
        apiserver.clear_requests()
        r = cli("node", "set-mode", "container", "-l", "pool=v", "--continue-on-error", "--rehearse", "-o", "json",
                server=apiserver.url)
        assert r.exit_code == 0, r.stderr
        doc = json.loads(r.stdout)
        (refused,) = doc["refused"]
        assert refused["node"] == "v1" and refused["outcome"] == "refused"
        assert refused["vms"] == [f"vms/db ({pf})"]
        assert any("vms/db" in b and "cannot live-migrate" in b for b in refused["blockers"])
        assert [[n["node"] for n in w["nodes"]] for w in doc["waves"]] == [["v2"]]
        r = cli("node", "set-mode", "container", "-l", "pool=v", "--continue-on-error", "--rehearse",
                server=apiserver.url)
        assert "refused: node v1: " in r.stdout and "node v1: VMs holding its NPUs: vms/db" in r.stdout
        assert apiserver.writes() == []
    finally:
        op.stop()


def test_the_rehearsal_reads_the_operator_no_more_often_than_the_plan_of_the_real_run(pool):
    """The pool's precheck reads the policies and the operator Deployments first; the rehearsal reuses that answer
    for its own policy instead of reading both again after the plan (issue 42)."""
    def operator_reads() -> int:
        return sum(1 for r in pool.requests if r.path in ("/apis/rebellions.ai/v1beta1/rblnclusterpolicies",
                                                           "/apis/apps/v1/deployments"))

    rehearsal(pool)
    rehearsed = operator_reads()
    pool.clear_requests()
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--dry-run", server=pool.url)
    assert r.exit_code == 0, r.stderr
    assert pool.writes() == [] and rehearsed == operator_reads() > 0
