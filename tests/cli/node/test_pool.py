"""`rblnctl node set-mode MODE NODE... | -l` and `node drain NODE... | -l`: selection, output, exit codes."""

from __future__ import annotations

import json
import signal
import threading

import pytest

from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.helpers import cli
from rblnctl.constants import WORKLOAD_LABEL as MODE
from tests.fakes.objects import ONE_NPU as NPU

HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}
NODES = ["n1", "n2", "n3"]


@pytest.fixture
def pool(apiserver):
    apiserver.add(o.cluster_policy(**HYBRID), o.replicaset("default", "web"), o.npu_node("other", labels={"pool": "b"}),
                  o.node("cpu", labels={"pool": "a"}))
    for n in NODES:
        apiserver.add(o.npu_node(n, labels={"pool": "a"}),
                      *(o.pod("default", f"{n}-p{i}", node=n, owner_kind="ReplicaSet", owner_name="web", requests=NPU)
                        for i in range(2)))
    op = SimulatedOperator(apiserver, ready_delay_s=0.05).start()
    assert op.wait_idle()
    apiserver.clear_requests()
    yield apiserver
    op.stop()


def modes(apiserver, names=NODES):
    return {n: apiserver.get("Node", n)["metadata"]["labels"][MODE] for n in names}


def test_a_selector_switches_the_npu_nodes_it_matches(pool):
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--yes", server=pool.url)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NODE", "FROM", "TO", "RESULT", "DURATION", "EVICTED"]
    rows = [line.split() for line in lines[1:]]
    assert [(row[0], row[1], row[2], row[3], row[5]) for row in rows] == [
        (n, "container", "vm-passthrough", "done", "2") for n in NODES]  # cpu (no NPU) is not selected
    # Piped, progress is one line per event, each naming its node.
    assert "n2: cordon: cordoning node n2" in r.stderr and "n3:   evicted default/n3-p1" in r.stderr
    assert "n1: done" in r.stderr
    assert modes(pool) == {n: "vm-passthrough" for n in NODES}


def test_json_is_a_list_of_mode_switch_documents(pool):
    r = cli("node", "set-mode", "vm", "n1", "n2", "--max-unavailable", "2", "--yes", "-o", "json", server=pool.url)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "ModeSwitchList" and doc["maxUnavailable"] == 2 and doc["target"] == "vm-passthrough"
    assert doc["selector"] is None and doc["continueOnError"] is False
    items = doc["items"]
    assert [(i["kind"], i["node"], i["outcome"], i["error"]) for i in items] == [
        ("ModeSwitch", "n1", "done", None), ("ModeSwitch", "n2", "done", None)]
    first = items[0]
    assert first["apiVersion"] == doc["apiVersion"] and first["result"]["mode"] == "vm-passthrough"
    assert [p["name"] for p in first["result"]["evicted"]] == ["n1-p0", "n1-p1"]
    assert first["plan"]["steps"][0]["step"] == "lock" and first["durationSeconds"] > 0
    assert modes(pool, ["n3"]) == {"n3": "container"}


def test_one_node_keeps_the_single_node_document(pool):
    r = cli("node", "set-mode", "n1", "vm", "--yes", "-o", "json", server=pool.url)  # the older order
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["kind"] == "ModeSwitch"


def test_dry_run_plans_every_node_and_writes_nothing(pool):
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--max-unavailable", "50%", "--dry-run", server=pool.url)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0] == "switch 3 node(s) to vm, at most 1 at once (selector pool=a)"  # 50% of 3
    rows = [line.split() for line in r.stdout.splitlines()[3:] if line]
    assert rows == [[n, "container", "vm-passthrough", "switch", "2"] for n in NODES]
    assert "dry run: nothing was sent" in r.stderr
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--dry-run", "-o", "json", server=pool.url)
    items = json.loads(r.stdout)["items"]
    assert [i["result"] for i in items] == [None] * 3 and all(i["plan"]["target"] == "vm-passthrough" for i in items)
    assert pool.writes() == []


def test_one_failing_node_stops_the_pool_and_exits_1(pool):
    pool.eviction_hook = lambda pod, body: (400, "boom") if pod["spec"]["nodeName"] == "n2" else None
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--yes", "--timeout", "20m", server=pool.url)
    assert r.exit_code == 6  # partial: n1 switched, n2 failed, n3 not started
    rows = {line.split()[0]: line.split()[3] for line in r.stdout.splitlines()[1:]}
    assert rows == {"n1": "done", "n2": "failed", "n3": "skipped"}  # the table says which
    assert "error: 1 of 3 node(s) failed or were refused: n2; 1 node(s) not started" in r.stderr
    assert "n2 (failed): " in r.stderr and "boom" in r.stderr
    assert modes(pool) == {"n1": "vm-passthrough", "n2": "container", "n3": "container"}
    # what docs/exit-codes.md promises of exit 6: the command that finishes the job, every flag given (a review
    # found the pool printed none: n3 was left with no word of how to run it)
    finish = [line.strip() for line in r.stderr.splitlines() if line.strip().startswith("finish the job: ")]
    assert finish == [f"finish the job: rblnctl --server {pool.url} node set-mode --selector pool=a --timeout 20m "
                      "--yes vm"], r.stderr
    pool.eviction_hook = None
    again = cli(*finish[0].removeprefix("finish the job: rblnctl ").split())
    assert again.exit_code == 0, again.stderr
    assert modes(pool) == {"n1": "vm-passthrough", "n2": "vm-passthrough", "n3": "vm-passthrough"}


def test_continue_on_error_switches_the_others_and_still_exits_1(pool):
    pool.eviction_hook = lambda pod, body: (400, "boom") if pod["spec"]["nodeName"] == "n2" else None
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--continue-on-error", "--yes", "-o", "json", server=pool.url)
    assert r.exit_code == 6  # partial
    assert [(i["node"], i["outcome"]) for i in json.loads(r.stdout)["items"]] == [
        ("n1", "done"), ("n2", "failed"), ("n3", "done")]
    assert modes(pool) == {"n1": "vm-passthrough", "n2": "container", "n3": "vm-passthrough"}


def test_a_refused_node_refuses_the_pool_naming_it(pool):
    pool.add(o.vmi("vms", "vm1", "n3", host_devices=["rebellions.ai/RBLN-CA22_PF"]))
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--yes", server=pool.url)
    assert r.exit_code == 1
    assert "refusing to switch the pool" in r.stderr and "node n3: VM vms/vm1" in r.stderr
    assert pool.writes() == []


@pytest.mark.parametrize("args,message", [
    (["vm", "n1", "-l", "pool=a"], "not both"),
    (["vm"], "name at least one node"),
    (["vm", "n1", "n2", "--max-unavailable", "0"], "--max-unavailable"),
    (["vm", "n1", "n2", "--max-unavailable", "ten"], "--max-unavailable"),
    (["gpu", "n1", "n2"], "unknown mode 'gpu'"),
    (["vm", "n1", "../n2"], "invalid node name"),
])
def test_bad_selections_exit_2_before_connecting(apiserver, args, message):
    r = cli("node", "set-mode", *args, "--yes", server=apiserver.url)
    assert r.exit_code == 2 and message in r.stderr
    assert apiserver.requests == []


def test_a_selector_matching_no_npu_node_is_an_error_naming_it(pool):
    r = cli("node", "set-mode", "vm", "-l", "pool=nothing", "--yes", server=pool.url)
    assert r.exit_code == 1 and "no NPU node matches the label selector 'pool=nothing'" in r.stderr


def test_the_pool_is_confirmed_once_listing_its_nodes(pool, monkeypatch):
    import rblnctl.cli.console

    monkeypatch.setattr(rblnctl.cli.console, "stdin_is_tty", lambda: True)
    r = cli("node", "set-mode", "vm", "-l", "pool=a", server=pool.url, input="n\n")
    assert r.exit_code == 1 and pool.writes() == []
    assert r.stderr.count("[y/N]") == 1 and "Switch 3 node(s) to vm mode, at most 1 at once?" in r.stderr
    assert all(f"{n}     container" in r.stderr for n in NODES)


def test_drain_takes_several_nodes(pool):
    r = cli("node", "drain", "n1", "n3", "--max-unavailable", "2", "--yes", server=pool.url)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0].split() == ["NODE", "RESULT", "DURATION", "EVICTED", "CORDONED"]
    rows = [line.split() for line in r.stdout.splitlines()[1:]]
    assert [(row[0], row[1], row[3], row[4]) for row in rows] == [("n1", "done", "2", "yes"),
                                                                   ("n3", "done", "2", "yes")]
    assert [pool.get("Node", n)["spec"].get("unschedulable") for n in NODES] == [True, None, True]


def test_drain_by_selector_as_json(pool):
    r = cli("node", "drain", "-l", "pool=a", "--yes", "-o", "json", server=pool.url)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "NodeDrainList" and "target" not in doc
    assert [(i["kind"], i["node"], i["outcome"], i["result"]["cordoned"]) for i in doc["items"]] == [
        ("NodeDrain", n, "done", True) for n in NODES]


def test_ctrl_c_stops_the_pool_exits_130_and_a_rerun_finishes_it(pool):
    fired: list[int] = []

    def ctrl_c(req):  # the user presses Ctrl-C while n1 waits for the operator
        if not fired and req.method == "PATCH" and MODE in (((req.body or {}).get("metadata") or {}).get(
                "labels") or {}):
            fired.append(1)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    unsubscribe = pool.on_request(ctrl_c)
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--yes", server=pool.url)
    unsubscribe()
    assert r.exit_code == 130 and fired
    assert "interrupted mid-switch: node n1 is cordoned; re-run" in r.stderr  # what is true, read back
    assert f"`rblnctl --server {pool.url} node set-mode --selector pool=a --yes vm`" in r.stderr
    assert f"resume:  rblnctl --server {pool.url} node set-mode vm n1 --yes" in r.stderr
    assert pool.get("Node", "n1")["spec"]["unschedulable"] and modes(pool, ["n2", "n3"]) == {
        "n2": "container", "n3": "container"}
    assert not pool.list("Lease", "rbln-system")  # every lock was given back
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--yes", server=pool.url)
    assert r.exit_code == 0, r.stderr
    assert modes(pool) == {n: "vm-passthrough" for n in NODES}
    assert not any(pool.get("Node", n)["spec"].get("unschedulable") for n in NODES)


def test_server_dry_run_of_a_pool_persists_nothing(pool):
    r = cli("node", "set-mode", "vm", "-l", "pool=a", "--dry-run=server", "--yes", server=pool.url)
    assert r.exit_code == 0, r.stderr
    assert [line.split()[3] for line in r.stdout.splitlines()[1:]] == ["server-dry-run"] * 3
    assert pool.writes() and all(w.dry_run for w in pool.writes())
    assert modes(pool) == {n: "container" for n in NODES}


def _refuse_node_patches_after_the_first_eviction(apiserver):
    """Once n1's first pod is evicted, RBAC refuses every node patch: the switch fails after evicting."""

    def hook(req):
        if req.method == "POST" and req.path.endswith("/eviction"):
            apiserver.forbid("patch", "nodes")

    return apiserver.on_request(hook)


@pytest.mark.parametrize("output", ["table", "json"])
@pytest.mark.parametrize("operation", ["set-mode", "drain"])
def test_a_failed_node_reports_the_pods_it_evicted_in_the_table_the_json_and_its_event(pool, operation, output):
    """Issue 28 finding 8: the list of evicted pods was local to the success path, so a node that evicted and then
    failed showed EVICTED 0, its JSON said nothing of it, and its Event (`node history`) neither."""
    if operation == "set-mode":  # RBAC refuses the relabel once n1's pods are evicted
        _refuse_node_patches_after_the_first_eviction(pool)
        args: tuple[str, ...] = ("node", "set-mode", "vm", "n1", "n2")
    else:  # a budget holds one more pod of n1 until the drain's timeout
        pool.add(o.pdb("default", "hold", selector={"app": "held"}, min_available=1),
                 o.pod("default", "held", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU,
                       labels={"app": "held"}))
        args = ("node", "drain", "n1", "n2", "--timeout", "1s")
    r = cli(*args, "--yes", "-o", output, server=pool.url)
    assert r.exit_code == 6, r.stderr
    if output == "table":
        rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:]}
        assert rows["n1"][5 if operation == "set-mode" else 3] == "2" and "failed" in rows["n1"], r.stdout
    else:
        item = {i["node"]: i for i in json.loads(r.stdout)["items"]}["n1"]
        assert item["outcome"] == "failed" and item["result"] is None
        assert [e["name"] for e in item["evicted"]] == ["n1-p0", "n1-p1"]
    assert "evicted from node n1 before that: default/n1-p0, default/n1-p1" in r.stderr
    pool.allow_all()
    history = json.loads(cli("node", "history", "n1", "-o", "json", server=pool.url).stdout)["items"]
    assert [h["result"] for h in history] == ["failed"]
    assert "failed after evicting 2 pod(s)" in history[0]["message"], history


def _held(pool) -> None:
    pool.add(o.pdb("default", "hold", selector={"app": "held"}, min_available=1),
             o.pod("default", "held", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU,
                   labels={"app": "held"}))


def test_a_budget_timeout_names_the_budget_its_numbers_and_what_next(pool):
    _held(pool)
    r = cli("node", "drain", "n1", "--timeout", "1s", "--yes", server=pool.url)
    assert r.exit_code == 5, r.stderr
    assert "PodDisruptionBudget default/hold needs 1 healthy pod(s) and has 1: it allows no eviction of " \
           "default/held" in r.stderr
    assert "next: see the budget (`kubectl get pdb hold -n default`)" in r.stderr and "--disable-eviction" in r.stderr


def test_a_pool_of_one_node_that_times_out_exits_5_not_6(pool):
    _held(pool)
    r = cli("node", "drain", "-l", "kubernetes.io/hostname=n1", "--timeout", "1s", "--yes", server=pool.url)
    assert r.exit_code == 5, r.stderr
    assert "error: node n1: pods did not leave within 1s" in r.stderr
    assert "PodDisruptionBudget default/hold" in r.stderr
