"""Drainer against the fake API server: kubectl's classification, NPU scope, PDB backoff, cordon-then-list, locks."""

from __future__ import annotations

import threading

import pytest

from rblnctl.errors import Forbidden, InvalidInput, NotFound, OutcomeUnknown, Refused, WaitTimeout
from rblnctl.node.drain import Drainer
from rblnctl.node.evict import Evictor
from rblnctl.node.events import NodeEvents
from rblnctl.node.options import DrainOptions
from rblnctl.node.pods import PodRef
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from rblnctl.constants import OPERATOR_NAMESPACE as OPS
from tests.fakes.objects import ONE_NPU as NPU

PDB_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."


def drainer_for(kube, *, clock=None, events=None, **options):
    """A Drainer with DrainOptions(**options), a fast poll, and (by default) a FakeClock."""
    options.setdefault("poll_s", 0.01)
    return Drainer(kube=kube, options=DrainOptions(**options), clock=clock or FakeClock(start=0.0),
                   events=events or NodeEvents())


def node_writes(apiserver):
    """Writes to anything but the node's lock (a Lease the drain takes and gives back)."""
    return [w for w in apiserver.writes() if "/leases" not in w.path]


def rs_pod(name, *, node="n1", ns="default", **kw):
    return o.pod(ns, name, node=node, owner_kind="ReplicaSet", owner_name="web", **kw)


def seed_mixed(apiserver):
    claim_npu = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "npu-claim", "namespace": "default"},
                 "spec": {"devices": {"requests": [
                     {"name": "npu", "exactly": {"deviceClassName": "npu.rebellions.ai"}}]}},
                 "status": {"allocation": {"devices": {"results": [
                     {"request": "npu", "driver": "npu.rebellions.ai", "pool": "n1", "device": "npu-0"}]}}}}
    claim_gpu = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "gpu-claim", "namespace": "default"},
                 "spec": {"devices": {"requests": [
                     {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
                 "status": {"allocation": {"devices": {"results": [
                     {"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]}}}}
    dra_npu = rs_pod("dra-npu")
    dra_npu["spec"]["resourceClaims"] = [{"name": "npu", "resourceClaimName": "npu-claim"}]
    dra_gpu = rs_pod("dra-gpu")
    dra_gpu["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
    init_npu = rs_pod("init-npu")
    init_npu["spec"]["initContainers"] = [{"name": "warm", "image": "x", "resources": {"limits": NPU}}]
    apiserver.add(
        o.npu_node("n1"), o.npu_node("n2"), o.replicaset("default", "web"), claim_npu, claim_gpu,
        o.pod("kube-system", "agent-n1", node="n1", owner_kind="DaemonSet", requests=NPU),
        o.pod("kube-system", "etcd-n1", node="n1", annotations={"kubernetes.io/config.mirror": "abc"}),
        o.pod(OPS, "rbln-vfio-manager-x", node="n1", owner_kind="DaemonSet", owner_name="rbln-vfio-manager",
              labels={"app": "rbln-vfio-manager"}, requests=NPU),
        rs_pod("npu-app", requests=NPU),
        rs_pod("vf-app", limits={"rebellions.ai/RBLN-CA22_VF": "1"}),
        init_npu, dra_npu, dra_gpu,
        rs_pod("cpu-app"),
        rs_pod("done-job", requests=NPU, phase="Succeeded"),
        rs_pod("elsewhere", node="n2", requests=NPU),
    )


def actions(plan):
    out = {f"{e.namespace}/{e.name}": "evict" for e in plan.evict}
    out.update({f"{e.namespace}/{e.name}": e.reason for e in plan.ignored})
    return out


def test_plan_classifies_like_kubectl_and_the_driver_manager(apiserver, kube):
    seed_mixed(apiserver)
    apiserver.clear_requests()
    plan = drainer_for(kube).plan("n1")
    a = actions(plan)
    assert plan.blockers == [] and plan.scope == "npu"
    assert sorted(k for k, v in a.items() if v == "evict") == [
        "default/dra-npu", "default/init-npu", "default/npu-app", "default/vf-app"]
    assert "DaemonSet" in a["kube-system/agent-n1"]
    assert "mirror pod" in a["kube-system/etcd-n1"]
    assert "operator component vfio-manager" in a["rbln-system/rbln-vfio-manager-x"]
    assert "uses no NPU" in a["default/cpu-app"] and "uses no NPU" in a["default/dra-gpu"]
    assert "finished (Succeeded)" in a["default/done-job"]
    assert "default/elsewhere" not in a
    assert apiserver.writes() == []
    lists = [r for r in apiserver.requests if r.path == "/api/v1/pods"]
    assert lists and lists[0].query["fieldSelector"] == ["spec.nodeName=n1"]


def test_all_pods_scope_evicts_every_non_daemonset_pod(apiserver, kube):
    seed_mixed(apiserver)
    plan = drainer_for(kube, all_pods=True).plan("n1")
    evict = sorted(f"{e.namespace}/{e.name}" for e in plan.evict)
    assert evict == ["default/cpu-app", "default/dra-gpu", "default/dra-npu", "default/init-npu", "default/npu-app",
                     "default/vf-app"]
    assert plan.scope == "all"


def test_blockers_are_collected_and_nothing_is_evicted(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"),
                  rs_pod("scratch", requests=NPU, volumes=[{"name": "tmp", "emptyDir": {}}]),
                  o.pod("default", "bare", node="n1", requests=NPU),
                  o.vmi("vms", "vm1", "n1", ["rebellions.ai/RBLN-CA22_PF"]),
                  o.virt_launcher("vms", "vm1", "n1", resources={"rebellions.ai/RBLN-CA22_PF": "1"}),
                  rs_pod("npu-app", requests=NPU))
    drainer = drainer_for(kube)
    plan = drainer.plan("n1")
    assert len(plan.blockers) == 3 and [e.name for e in plan.evict] == ["npu-app"]
    text = "\n".join(str(b) for b in plan.blockers)
    assert "default/scratch has emptyDir" in text and "default/bare is not managed by a controller" in text
    assert "KubeVirt VM vms/vm1 holding NPUs" in text
    # Each names, as data, the option that would let the drain go ahead.
    assert sorted(b.override for b in plan.blockers) == ["delete_emptydir_data", "evict_vms", "force"]
    apiserver.clear_requests()
    with pytest.raises(Refused) as exc:
        drainer.apply(plan)
    assert len(exc.value.blockers) == 3 and apiserver.writes() == []  # not even the lock was taken

    plan = drainer_for(kube, delete_emptydir_data=True, force=True, evict_vms=True).plan("n1")
    assert plan.blockers == []
    assert sorted(e.name for e in plan.evict) == ["bare", "npu-app", "scratch", "virt-launcher-vm1-abcde"]
    launcher = next(e for e in plan.evict if e.name.startswith("virt-launcher"))
    assert launcher.vmi == "vm1" and launcher.npu


def test_run_cordons_evicts_and_waits(apiserver, kube):
    seed_mixed(apiserver)
    seen: list[str] = []
    events = NodeEvents(on_evicted=lambda p: seen.append(f"evicted {p}"), on_gone=lambda p: seen.append(f"gone {p}"),
                        on_step=lambda step, detail: seen.append(f"{step} {detail}"))
    drainer = drainer_for(kube, events=events)
    plan = drainer.plan("n1")
    assert plan.cordon
    res = drainer.apply(plan)
    assert res.cordoned and apiserver.get("Node", "n1")["spec"]["unschedulable"] is True
    assert sorted(p.name for p in res.evicted) == ["dra-npu", "init-npu", "npu-app", "vf-app"]
    for name in ("dra-npu", "init-npu", "npu-app", "vf-app"):
        assert apiserver.get("Pod", name, "default") is None
    for name in ("cpu-app", "dra-gpu"):
        assert apiserver.get("Pod", name, "default") is not None
    assert apiserver.get("Pod", "agent-n1", "kube-system") is not None
    assert seen[:2] == ["lock locking node n1 (rbln-system/rblnctl-node-n1)", "cordon cordoning node n1"]
    assert "gone default/npu-app" in seen
    # The lock was taken before anything else and given back at the end.
    lease_writes = [(w.method, w.path) for w in apiserver.writes() if "/leases" in w.path]
    assert lease_writes == [("POST", "/apis/coordination.k8s.io/v1/namespaces/rbln-system/leases"),
                            ("DELETE", "/apis/coordination.k8s.io/v1/namespaces/rbln-system/leases/rblnctl-node-n1")]
    assert apiserver.get("Lease", "rblnctl-node-n1", "rbln-system") is None
    cordon = [w for w in node_writes(apiserver) if w.method == "PATCH"]
    assert len(cordon) == 1 and cordon[0].content_type == "application/strategic-merge-patch+json"
    # kubectl's cordon patch, guarded by the resourceVersion rblnctl read (a late duplicate cannot land).
    assert cordon[0].body["spec"] == {"unschedulable": True} and cordon[0].body["metadata"]["resourceVersion"]
    ev = [w for w in apiserver.writes() if w.path.endswith("/eviction")]
    assert ev and all(w.body["apiVersion"] == "policy/v1" and w.body["kind"] == "Eviction" for w in ev)
    assert {w.body["metadata"]["name"] for w in ev} == {"dra-npu", "init-npu", "npu-app", "vf-app"}


def test_already_cordoned_node_is_not_patched(apiserver, kube):
    apiserver.add(o.npu_node("n1", unschedulable=True))
    drainer = drainer_for(kube)
    plan = drainer.plan("n1")
    assert not plan.cordon and plan.unschedulable and plan.noop
    apiserver.clear_requests()
    assert drainer.apply(plan).cordoned is False
    assert node_writes(apiserver) == []


def test_pdb_refusal_backs_off_and_reports_then_succeeds(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    refusals = {"n": 0}

    def hook(pod, body):
        if refusals["n"] < 3:
            refusals["n"] += 1
            return 429, "Cannot evict pod as it would violate the pod's disruption budget."
        return None

    apiserver.eviction_hook = hook
    clock = FakeClock()
    blocked: list[tuple[str, int]] = []
    drainer = drainer_for(kube, clock=clock, events=NodeEvents(
        on_pdb_blocked=lambda p, msg, n: blocked.append((str(p), n, "disruption budget" in msg))))
    res = drainer.apply(drainer.plan("n1"))
    assert [p.name for p in res.evicted] == ["npu-app"]
    assert blocked == [("default/npu-app", 1, True), ("default/npu-app", 2, True), ("default/npu-app", 3, True)]
    assert clock.sleeps[:3] == [1.0, 2.0, 4.0]
    assert apiserver.get("Pod", "npu-app", "default") is None


def test_backoff_is_capped_at_10_seconds(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    apiserver.eviction_hook = lambda pod, body: (429, "budget")
    clock = FakeClock()
    drainer = drainer_for(kube, clock=clock, timeout_s=60)
    with pytest.raises(WaitTimeout) as exc:
        drainer.apply(drainer.plan("n1"))
    assert clock.sleeps[:6] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert str(exc.value) == "pods did not leave within 60s"
    assert exc.value.details[0] == "disruption budgets still refuse evicting default/npu-app"


def test_real_pdb_blocks_then_frees(apiserver, kube):
    """A real PodDisruptionBudget judged by the fake: freed by a test thread when the backoff sleeps."""
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web", replicas=1),
                  rs_pod("npu-app", requests=NPU, labels={"app": "web"}),
                  o.pdb("default", "web", selector={"app": "web"}, min_available=1))
    freed: list[int] = []

    class Freeing(FakeClock):
        def sleep(self, seconds, stop=None):
            if not freed:
                apiserver.delete_now("PodDisruptionBudget", "web", "default")
                freed.append(1)
            return super().sleep(seconds, stop)

    reports: list[str] = []
    drainer = drainer_for(kube, clock=Freeing(), events=NodeEvents(on_pdb_blocked=lambda p, m, n: reports.append(m)))
    res = drainer.apply(drainer.plan("n1"))
    assert [p.name for p in res.evicted] == ["npu-app"]
    assert len(reports) == 1 and "disruption budget web needs 1 healthy pods" in reports[0]


def test_404_during_eviction_counts_as_gone(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))

    def hook(pod, body):
        apiserver.delete_now("Pod", "npu-app", "default")  # gone between our list and our eviction
        return 404, 'pods "npu-app" not found'

    apiserver.eviction_hook = hook
    drainer = drainer_for(kube, poll_s=0.01)
    res = drainer.apply(drainer.plan("n1"))
    assert [p.name for p in res.evicted] == ["npu-app"]


def test_an_eviction_whose_outcome_cannot_be_read_back_stays_unknown(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    kube.clock = FakeClock()  # the client's read retries back off on it
    drainer = drainer_for(kube)
    plan = drainer.plan("n1")
    apiserver.inject_fault(method="POST", path="/pods/npu-app/eviction$", lose_reply=True)
    apiserver.inject_fault(method="GET", path="/pods/npu-app$", status=503, times=20)
    with pytest.raises(OutcomeUnknown) as exc:
        drainer.apply(plan)
    assert "reading pod default/npu-app back" in str(exc.value)


def test_other_eviction_errors_propagate(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    apiserver.forbid("create", "pods/eviction")
    drainer = drainer_for(kube)
    with pytest.raises(Forbidden):
        drainer.apply(drainer.plan("n1"))


def test_waits_for_graceful_deletion(apiserver, kube):
    apiserver.deletion_delay_s = 0.3
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    seen: list[str] = []

    def on_gone(p):  # apply() must not report the pod gone while the server still has it
        seen.append(str(p))
        assert apiserver.get("Pod", "npu-app", "default") is None

    apiserver.clear_requests()
    drainer = Drainer(kube=kube, options=DrainOptions(poll_s=0.05), events=NodeEvents(on_gone=on_gone))
    res = drainer.apply(drainer.plan("n1"))
    assert [p.name for p in res.evicted] == ["npu-app"] and seen == ["default/npu-app"]
    assert apiserver.get("Pod", "npu-app", "default") is None
    # The wait asks for the node's pods, never for each pod: a LIST, then one watch that saw the pod go.
    assert not [r for r in apiserver.requests if r.method == "GET" and r.path.startswith("/api/v1/namespaces/")]
    reads = [r for r in apiserver.requests if r.path == "/api/v1/pods"]
    assert all(r.query["fieldSelector"] == ["spec.nodeName=n1"] for r in reads)
    evicted_at = next(i for i, r in enumerate(apiserver.requests) if r.path.endswith("/eviction"))
    wait = [r for r in apiserver.requests[evicted_at:] if r.path == "/api/v1/pods"]
    assert ["watch" in r.query for r in wait] == [False, True, False]  # list, watch; the last: the next round's


def test_a_replacement_with_a_new_uid_counts_as_gone(apiserver, kube):
    """kubectl's rule: a pod of the same name with another UID is a replacement; the evicted one has left."""
    apiserver.deletion_delay_s = 30
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU),
                  rs_pod("other", requests=NPU))
    evicted = [PodRef(namespace="default", name=n, uid=apiserver.get("Pod", n, "default")["metadata"]["uid"])
               for n in ("npu-app", "other")]

    def replace(name):
        apiserver.delete_now("Pod", name, "default")
        apiserver.add(rs_pod(name, requests=NPU))  # recreated on the same node, under the same name

    replace("npu-app")  # before the wait: its first list sees the replacement
    gone: list[str] = []
    evictor = Evictor(kube=kube, options=DrainOptions(timeout_s=5), events=NodeEvents(on_gone=lambda p: gone.append(
        p.name)))
    opened = threading.Event()
    apiserver.on_request(lambda r: opened.set() if "watch" in r.query else None)
    threading.Timer(0, lambda: opened.wait(5) and replace("other")).start()  # while the wait watches
    evictor.wait_gone("n1", evicted, deadline=evictor.clock.monotonic() + 5)
    assert gone == ["npu-app", "other"]
    assert {p["metadata"]["uid"] for p in apiserver.list("Pod", "default")}.isdisjoint(p.uid for p in evicted)


def test_timeout_names_the_pods_still_there(apiserver, kube):
    apiserver.deletion_delay_s = 30
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU),
                  rs_pod("cpu-app"))
    drainer = Drainer(kube=kube, options=DrainOptions(poll_s=0.05, timeout_s=0.3))
    with pytest.raises(WaitTimeout) as exc:
        drainer.apply(drainer.plan("n1"))
    assert exc.value.details == ["still terminating: default/npu-app",
                                 "evicted from node n1 before that: default/npu-app"]  # issue 28: what it did, too


def test_parallel_evictions_are_bounded(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"),
                  *(rs_pod(f"npu-{i:02d}", requests=NPU) for i in range(10)))
    lock = threading.Lock()
    state = {"now": 0, "max": 0, "held": 0}
    full = threading.Event()  # max_parallel evictions are in flight at the same time
    over = threading.Event()  # more than max_parallel are

    def hook(pod, body):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
            if state["now"] == 3:
                full.set()
            if state["now"] > 3:
                over.set()
            hold = state["held"] < 3
            state["held"] += hold
        if hold:
            # A rendezvous, not a timing guess: the first three stay in flight until all three are (a serial
            # drainer never gets there and fails below), then give a fourth the chance to show up.
            full.wait(3)
            over.wait(0.3)
        with lock:
            state["now"] -= 1

    apiserver.eviction_hook = hook
    drainer = drainer_for(kube, max_parallel=3, poll_s=0.01)
    res = drainer.apply(drainer.plan("n1"))
    assert len(res.evicted) == 10
    assert full.is_set() and not over.is_set() and state["max"] == 3  # parallel, never more than max_parallel


def test_disable_eviction_deletes_with_grace_period(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"),
                  rs_pod("npu-app", requests=NPU, labels={"app": "web"}),
                  o.pdb("default", "web", selector={"app": "web"}, min_available=1))
    drainer = drainer_for(kube, disable_eviction=True, grace_period_s=0, poll_s=0.01)
    drainer.apply(drainer.plan("n1"))
    writes = [w for w in node_writes(apiserver) if "/pods/" in w.path]
    assert [(w.method, w.path) for w in writes] == [("DELETE", "/api/v1/namespaces/default/pods/npu-app")]
    uid = writes[0].body["preconditions"]["uid"]  # the pod the survey decided on (issue 37)
    assert writes[0].body == {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}} and uid
    assert apiserver.get("Pod", "npu-app", "default") is None


def test_eviction_carries_grace_period(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    uid = apiserver.get("Pod", "npu-app", "default")["metadata"]["uid"]
    drainer = drainer_for(kube, grace_period_s=5, poll_s=0.01)
    drainer.apply(drainer.plan("n1"))
    (ev,) = [w for w in apiserver.writes() if w.path.endswith("/eviction")]
    assert ev.body == {"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": "npu-app", "namespace": "default"},
                       "deleteOptions": {"preconditions": {"uid": uid}, "gracePeriodSeconds": 5}}


def test_server_dry_run_sends_dry_run_all_and_changes_nothing(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    drainer = drainer_for(kube, server_dry_run=True)
    res = drainer.apply(drainer.plan("n1"))
    assert res.server_dry_run and [p.name for p in res.evicted] == ["npu-app"]
    writes = apiserver.writes()  # the lock, the cordon, the eviction: each only validated
    assert len(writes) == 3 and all(w.query.get("dryRun") == ["All"] for w in writes)
    assert apiserver.list("Lease", "rbln-system") == []
    assert apiserver.get("Pod", "npu-app", "default") is not None
    assert not apiserver.get("Node", "n1")["spec"].get("unschedulable")


def test_unknown_node_and_bad_options(apiserver, kube):
    with pytest.raises(NotFound, match='"nope" not found'):
        drainer_for(kube).plan("nope")
    with pytest.raises(InvalidInput, match="max_parallel must be at least 1"):
        DrainOptions(max_parallel=0)
    with pytest.raises(InvalidInput, match="grace period must be 0 or more"):
        DrainOptions(grace_period_s=-1)
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(InvalidInput, match="timeout must be a finite number of seconds above 0"):
            DrainOptions(timeout_s=bad)
    for bad in ("./nope", "x/../nope", "nope?", "..", "Nope"):
        with pytest.raises(InvalidInput, match="invalid node name"):
            drainer_for(kube).plan(bad)
    assert apiserver.writes() == []


def test_server_dry_run_blocked_by_a_budget_reports_it_once_and_does_not_wait(apiserver, kube):
    """Issue 37, finding 6: a dry run never waits for what a real run would wait for. Before: retried until the
    timeout (WaitTimeout); now one dry-run eviction and a refusal naming the pod (Refused, exit 1)."""
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    apiserver.eviction_hook = lambda pod, body: (429, PDB_REFUSAL)
    blocked: list = []
    drainer = drainer_for(kube, server_dry_run=True, timeout_s=30,
                          events=NodeEvents(on_pdb_blocked=lambda *a: blocked.append(a)))
    with pytest.raises(Refused) as exc:
        drainer.apply(drainer.plan("n1"))
    assert str(exc.value).startswith("server dry run: disruption budgets refuse evicting default/npu-app now; a real "
                                     "run retries for up to 30s")
    ev = [w for w in apiserver.writes() if w.path.endswith("/eviction")]
    assert len(ev) == 1 and ev[0].dry_run
    assert blocked == []  # no retry reported: there is none
    assert apiserver.get("Pod", "npu-app", "default") is not None


def test_podref_prints_namespace_and_name():
    assert str(PodRef(namespace="a", name="b")) == "a/b"


def _join_once_started(t: threading.Thread, *, timeout: float) -> None:
    """join() a thread that threading.enumerate() may list while it is still starting (on a loaded machine)."""
    import time

    end = time.monotonic() + timeout
    while True:
        try:
            t.join(timeout=max(0.0, end - time.monotonic()))
            return
        except RuntimeError:  # "cannot join thread before it is started"
            if time.monotonic() >= end:
                raise
            time.sleep(0.01)


def test_ctrl_c_during_pdb_backoff_stops_the_workers_at_once(apiserver, kube):
    """Ctrl-C while budgets refuse: run() raises without sitting out the backoff or the timeout, and no
    eviction is sent afterwards."""
    import signal

    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web", replicas=2),
                  rs_pod("a", requests=NPU, labels={"app": "web"}), rs_pod("b", requests=NPU, labels={"app": "web"}),
                  o.pdb("default", "web", selector={"app": "web"}, min_available=2))
    fired: list[int] = []
    interrupted = threading.Event()

    def evictions() -> int:
        return len([r for r in apiserver.requests if r.path.endswith("/eviction")])

    def on_sigint(signum, frame):  # Python's own behaviour, plus a mark that the main thread got there
        interrupted.set()
        raise KeyboardInterrupt

    def ctrl_c(pod, message, attempt):  # the user presses Ctrl-C while the first refusal is reported
        if not fired:
            fired.append(evictions())
            # A terminal's Ctrl-C reaches the main thread; os.kill() from this worker would signal the
            # worker itself, and the main thread would only notice when its wait ended on its own.
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        # Go on backing off only once the main thread has the interrupt (however loaded the machine is):
        # from then on a worker that is not told to stop would retry after its 1 s backoff.
        interrupted.wait(10)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        drainer = Drainer(kube=kube, options=DrainOptions(timeout_s=20), events=NodeEvents(on_pdb_blocked=ctrl_c))
        plan = drainer.plan("n1")
        with pytest.raises(KeyboardInterrupt):
            drainer.apply(plan)
    finally:
        signal.signal(signal.SIGINT, previous)
    at_interrupt = evictions()
    # A run() that waited for its workers would only return after they had retried for the whole 20 s
    # timeout (1 + 2 + 4 + 8 s of backoff): many evictions per pod.
    assert interrupted.is_set() and fired and fired[0] >= 1 and at_interrupt <= 2
    # The workers stop as soon as they are told to (their backoff wakes at once), not after the backoff.
    workers = [t for t in threading.enumerate() if t.name.startswith("rblnctl-evict")]
    for t in workers:
        _join_once_started(t, timeout=5)
    assert not [t for t in workers if t.is_alive()]
    # No retry after the interrupt: each pod was tried at most once (b's first try may have been in flight).
    sent = [r.path.split("/")[-2] for r in apiserver.requests if r.path.endswith("/eviction")]
    assert sent.count("a") <= 1 and sent.count("b") <= 1


def test_a_budget_that_never_frees_is_tried_last_at_the_timeout(apiserver, kube):
    """The final wait is cut to the deadline: the last try happens at --timeout, not a backoff early."""
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    apiserver.eviction_hook = lambda pod, body: (429, PDB_REFUSAL)
    clock = FakeClock(start=0.0)
    tries: list[float] = []
    apiserver.on_request(lambda r: tries.append(clock.monotonic()) if r.path.endswith("/eviction") else None)
    drainer = drainer_for(kube, clock=clock, timeout_s=5)
    with pytest.raises(WaitTimeout) as exc:
        drainer.apply(drainer.plan("n1"))
    assert "default/npu-app" in exc.value.details[0]
    assert tries == [0.0, 1.0, 3.0, 5.0]  # backoff 1 s, 2 s, then 4 s cut to the 2 s left


# -- evictions whose outcome is unknown: settled by reading the pod back ------------------------------


def _evict_all(kube, apiserver, names, **options):
    refs = [PodRef(namespace="default", name=n, uid=apiserver.get("Pod", n, "default")["metadata"]["uid"])
            for n in names]
    evictor = Evictor(kube=kube, options=DrainOptions(timeout_s=5, **options), clock=FakeClock(start=0.0))
    return refs, evictor.evict(refs, deadline=5)


EVICTIONS = r"/api/v1/namespaces/default/pods/[^/]+/eviction$"


def test_an_eviction_whose_reply_is_lost_after_it_applied_counts_as_done(apiserver, kube):
    """Before: the lost reply failed the drain (and set-mode rolled back) though the pod was gone."""
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    apiserver.inject_fault(method="POST", path=EVICTIONS, lose_reply=True, times=1)
    refs, done = _evict_all(kube, apiserver, ["npu-app"])
    assert done.evicted == refs
    assert apiserver.get("Pod", "npu-app", "default") is None
    assert len(apiserver.requests_matching("POST", EVICTIONS)) == 1  # read back, not sent again


def test_a_connection_reset_in_a_burst_of_evictions_evicts_again_what_is_still_there(apiserver, kube):
    """Dropped connections (nothing applied) and lost replies (applied) in one burst: every pod ends evicted,
    none twice. Before: the first reset raised OutcomeUnknown (exit 3) and set-mode rolled back."""
    apiserver.deletion_delay_s = 0.5  # evicted pods terminate for a while: terminating counts as done
    names = [f"p{i}" for i in range(8)]
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), *(rs_pod(n, requests=NPU) for n in names))
    apiserver.inject_fault(method="POST", path=EVICTIONS, drop=True, times=3)
    apiserver.inject_fault(method="POST", path=EVICTIONS, lose_reply=True, times=2)
    refs, done = _evict_all(kube, apiserver, names, max_parallel=8)
    assert sorted(map(str, done.evicted)) == sorted(map(str, refs))
    sent = apiserver.requests_matching("POST", EVICTIONS)
    applied = [r for r in sent if r.applied]
    assert len(applied) == len(names)  # each pod evicted exactly once
    assert len(sent) == len(names) + 3  # the dropped ones were sent again


def test_an_eviction_answered_503_is_sent_again(apiserver, kube):
    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    apiserver.inject_fault(method="POST", path=EVICTIONS, status=503, times=2)
    refs, done = _evict_all(kube, apiserver, ["npu-app"])
    assert done.evicted == refs
    assert [r.status for r in apiserver.requests_matching("POST", EVICTIONS)] == [503, 503, 201]


def test_a_drain_leaves_its_start_and_end_on_the_node(apiserver, kube):
    from rblnctl.audit import Auditor
    from rblnctl.node.history import read_history

    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    apiserver.kubelet = lambda pod: None
    d = drainer_for(kube)
    d.audit = Auditor(kube=kube, clock=d.clock)
    d.apply(d.plan("n1"))
    evs = sorted(apiserver.list("events.events.k8s.io"), key=lambda e: "Started" not in e["reason"])  # FakeClock
    assert [(e["reason"], e["type"]) for e in evs] == [("DrainStarted", "Normal"), ("Drained", "Normal")]
    assert evs[1]["note"] == "drained node n1: 1 pod(s) evicted in 1 round(s), cordoned (by fake-user)"
    (entry,) = read_history(kube, "n1").entries
    assert (entry.action, entry.result, entry.from_mode, entry.to_mode) == ("drain", "done", None, None)


def test_a_failed_drain_ends_with_a_warning_event(apiserver, kube):
    from rblnctl.audit import Auditor

    apiserver.add(o.npu_node("n1"), o.replicaset("default", "web"), rs_pod("npu-app", requests=NPU))
    apiserver.eviction_hook = lambda pod, body: (400, "denied by a policy webhook")
    d = drainer_for(kube)
    d.audit = Auditor(kube=kube, clock=d.clock)
    with pytest.raises(Exception):
        d.apply(d.plan("n1"))
    (_, end) = sorted(apiserver.list("events.events.k8s.io"), key=lambda e: "Started" not in e["reason"])
    assert (end["reason"], end["type"]) == ("DrainFailed", "Warning") and "denied by a policy webhook" in end["note"]


def test_a_node_registered_again_after_the_plan_is_not_cordoned(apiserver, kube):
    """The cordon tests the uid the drain's plan read: a node deleted and registered again under its name (another
    uid) is another object; nothing is written to it and nothing evicted."""
    import uuid

    from rblnctl.errors import Replaced

    seed_mixed(apiserver)
    drainer = drainer_for(kube)
    plan = drainer.plan("n1")
    apiserver.delete_now("Node", "n1")
    node = o.npu_node("n1")
    node["metadata"]["uid"] = str(uuid.uuid4())  # the objects' uids are derived from the name
    apiserver.add(node)
    with pytest.raises(Replaced, match="node n1 was deleted and registered again"):
        drainer.apply(plan)
    assert not apiserver.get("Node", "n1")["spec"].get("unschedulable")
    assert [w for w in node_writes(apiserver)] == []
