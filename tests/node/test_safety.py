"""set-mode and drain under lost replies, late pods, odd names, a second admin and a flaky API server.

Each test puts the cluster in the state a hostile run would (a write that lands but whose reply is
lost, a pod bound to the node after the plan, a second rblnctl, 5xx during the wait) and checks the
end state the docs promise: no node left schedulable half-switched, none cordoned without a record,
no NPU pod left on a node reported switched, no concurrent switch.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest

from rblnctl.errors import Forbidden, OutcomeUnknown, Refused
from rblnctl.kube import KubeOptions, connect
from rblnctl.node.drain import Drainer
from rblnctl.node.events import NodeEvents
from rblnctl.node.lock import NodeLock, lease_name
from rblnctl.node.mode import ModeSwitcher
from rblnctl.node.options import DrainOptions, ModeOptions
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from tests.fakes.operator import SimulatedOperator
from rblnctl.constants import WORKLOAD_LABEL as MODE, SET_MODE_ANNOTATION as ANN
from tests.fakes.objects import ONE_NPU as NPU

PF = "rebellions.ai/RBLN-CA22_PF"
HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}


def seed(apiserver, **node_kw):
    apiserver.add(o.cluster_policy(**HYBRID), o.npu_node("n1", **node_kw), o.replicaset("default", "web"),
                  o.pod("default", "npu-app", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU),
                  o.pod("default", "cpu-app", node="n1", owner_kind="ReplicaSet", owner_name="web"))


@pytest.fixture
def operator(apiserver):
    op = SimulatedOperator(apiserver, ready_delay_s=0.05)
    yield op
    op.stop()


def switcher(kube, *, steps=None, warnings=None, identity=None, force=False, **drain):
    drain.setdefault("timeout_s", 10)
    drain.setdefault("poll_s", 0.05)
    events = NodeEvents(on_step=(lambda s, d: steps.append((str(s), d))) if steps is not None else NodeEvents().on_step,
                        on_warning=warnings.append if warnings is not None else NodeEvents().on_warning)
    take_over = drain.pop("take_over", force)
    # `force`: every override (the old single --force); tests/cli/test_overrides.py has each flag on its own.
    options = ModeOptions(drain=DrainOptions(force=force, evict_vms=force, take_over=take_over, **drain),
                          evict_daemonsets=force, skip_iommu_check=force, skip_release_check=force, reverse=force)
    return ModeSwitcher(kube=kube, options=options, events=events, identity=identity)


def body_of(req):
    return req.body if isinstance(req.body, dict) else {}


def is_relabel(req):
    return req.method == "PATCH" and MODE in ((body_of(req).get("metadata") or {}).get("labels") or {})


def is_cordon(req):
    return req.method == "PATCH" and (body_of(req).get("spec") or {}).get("unschedulable") is True


def lose_reply_of(apiserver, match, *, delay_s=1.0):
    """The first request `match` picks is applied by the server only after the client gave up (a lost reply)."""
    done: list[int] = []

    def hook(req):
        if not done and match(req):
            done.append(1)
            apiserver.inject_fault(method=req.method, path=f"^{req.path}$", status=None, delay_s=delay_s, times=1)

    apiserver.on_request(hook)


def test_a_relabel_whose_reply_is_lost_is_never_rolled_back(apiserver, operator):
    """The relabel lands but its reply is lost: rblnctl reads back instead of rolling back, and finishes."""
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    kube = connect(KubeOptions(server=apiserver.url, request_timeout_s=0.4))
    lose_reply_of(apiserver, is_relabel)
    steps: list[tuple[str, str]] = []
    sw = switcher(kube, steps=steps)
    res = sw.apply(sw.plan("n1", "vm"))
    assert res.changed and res.uncordoned
    assert not [s for s in steps if s[0] == "rollback"]
    node = apiserver.get("Node", "n1")
    assert node["metadata"]["labels"][MODE] == "vm-passthrough" and not node["spec"].get("unschedulable")
    assert ANN not in (node["metadata"].get("annotations") or {})
    relabels = [r for r in apiserver.requests if is_relabel(r)]
    assert relabels[0].status in (0, 200)  # the client never saw its answer
    assert any("was lost" in d for s, d in steps if s == "relabel")


def test_an_eviction_whose_reply_is_lost_neither_fails_nor_rolls_back_the_switch(apiserver, operator):
    """The eviction lands but its reply is lost: the pod read back is gone (or terminating), so it is evicted.
    Before: the switch failed at once (exit 3) and rolled back, though the pod was gone."""
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    kube = connect(KubeOptions(server=apiserver.url, request_timeout_s=5))
    apiserver.inject_fault(method="POST", path="/pods/npu-app/eviction$", lose_reply=True, times=1)
    steps: list[tuple[str, str]] = []
    sw = switcher(kube, steps=steps)
    res = sw.apply(sw.plan("n1", "vm"))
    assert res.changed and [r.name for r in res.evicted] == ["npu-app"]
    assert not [s for s in steps if s[0] == "rollback"]
    assert apiserver.get("Node", "n1")["metadata"]["labels"][MODE] == "vm-passthrough"


def test_a_cordon_whose_reply_is_lost_is_known_and_rolled_back_correctly(apiserver):
    """The cordon lands, its reply is lost, then an eviction is refused: the rollback must uncordon."""
    seed(apiserver)
    kube = connect(KubeOptions(server=apiserver.url, request_timeout_s=0.4))
    lose_reply_of(apiserver, is_cordon)
    apiserver.forbid("create", "pods/eviction")
    sw = switcher(kube)
    with pytest.raises(Forbidden):
        sw.apply(sw.plan("n1", "vm"))
    node = apiserver.get("Node", "n1")
    assert not node["spec"].get("unschedulable"), "a cordon that landed was not rolled back"
    assert ANN not in (node["metadata"].get("annotations") or {})
    assert node["metadata"]["labels"][MODE] == "container"


def test_when_even_reading_back_fails_the_relabel_counts_as_in_progress(apiserver):
    """Outcome unknown and the node unreadable: keep the cordon and the record, say how to resume."""
    seed(apiserver)
    kube = connect(KubeOptions(server=apiserver.url, request_timeout_s=0.4))
    kube.clock = FakeClock()
    done: list[int] = []

    def hook(req):
        if not done and is_relabel(req):
            done.append(1)
            apiserver.inject_fault(method="PATCH", path="^/api/v1/nodes/n1$", status=None, delay_s=1.0, times=1)
            apiserver.inject_fault(method="GET", path="^/api/v1/nodes/n1$", status=503, times=50)

    apiserver.on_request(hook)
    sw = switcher(kube)
    with pytest.raises(OutcomeUnknown) as exc:
        sw.apply(sw.plan("n1", "vm"))
    assert exc.value.recovery is not None and any("unknown" in d for d in exc.value.details)
    apiserver.clear_faults()
    node = apiserver.get("Node", "n1")
    assert node["spec"]["unschedulable"] is True and json.loads(node["metadata"]["annotations"][ANN])["target"] == \
        "vm-passthrough"


def test_npu_pods_bound_after_the_plan_are_evicted(apiserver, operator):
    """A pod that lands between the plan and the cordon, and one during the evictions: both go."""
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    kube = connect(KubeOptions(server=apiserver.url))
    sw = switcher(kube)
    plan = sw.plan("n1", "vm")
    assert [e.name for e in plan.drain.evict] == ["npu-app"]
    apiserver.add(o.pod("default", "late-1", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU))
    added: list[int] = []

    def second(req):
        if not added and req.method == "POST" and req.path.endswith("/eviction"):
            added.append(1)
            apiserver.add(o.pod("default", "late-2", node="n1", owner_kind="ReplicaSet", owner_name="web",
                                requests=NPU))

    apiserver.on_request(second)
    res = sw.apply(plan)
    assert sorted(p.name for p in res.evicted) == ["late-1", "late-2", "npu-app"]
    for name in ("late-1", "late-2", "npu-app"):
        assert apiserver.get("Pod", name, "default") is None
    assert apiserver.get("Pod", "cpu-app", "default") is not None


def test_drain_cordons_before_it_lists(apiserver):
    seed(apiserver)
    kube = connect(KubeOptions(server=apiserver.url))
    drainer = Drainer(kube=kube, options=DrainOptions(poll_s=0.01))
    plan = drainer.plan("n1")
    apiserver.add(o.pod("default", "late", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU))
    apiserver.clear_requests()
    res = drainer.apply(plan)
    assert sorted(p.name for p in res.evicted) == ["late", "npu-app"]
    order = [("cordon" if is_cordon(r) else "list") for r in apiserver.requests
             if is_cordon(r) or (r.method == "GET" and r.path == "/api/v1/pods")]
    assert order[0] == "cordon" and order[1] == "list"


def test_a_blocker_that_arrives_after_the_plan_stops_the_switch_and_rolls_back(apiserver, operator):
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    kube = connect(KubeOptions(server=apiserver.url))
    sw = switcher(kube)
    plan = sw.plan("n1", "vm")
    apiserver.add(o.vmi("vms", "vm1", "n1", host_devices=[PF]))  # a VM started with an NPU meanwhile
    with pytest.raises(Refused) as exc:
        sw.apply(plan)
    assert any("vms/vm1" in str(b) for b in exc.value.blockers)
    node = apiserver.get("Node", "n1")
    assert not node["spec"].get("unschedulable") and ANN not in (node["metadata"].get("annotations") or {})
    assert apiserver.get("Pod", "npu-app", "default") is not None  # nothing evicted


def test_going_back_from_a_half_switched_node_never_rolls_it_back_to_schedulable(apiserver, operator):
    """A timed-out `set-mode vm` leaves the label written, the node cordoned and its record; the printed
    `go back` (set-mode container --reverse) takes that record over. When it fails before its own relabel,
    the node is still half-switched: it stays cordoned with a record (docs/node.md), never uncordoned."""
    from rblnctl.node.events import Step
    from rblnctl.node.record import SwitchRecord

    record = SwitchRecord(target="vm-passthrough", from_mode="container", started="2026-12-03T00:00:00Z",
                          cordoned_by_rblnctl=True, step=Step.RELABEL)
    seed(apiserver, mode=o.MODE_VM)
    node = apiserver.get("Node", "n1")
    node["spec"]["unschedulable"] = True
    node["metadata"].setdefault("annotations", {})[ANN] = record.to_json()
    apiserver.update(node)
    kube = connect(KubeOptions(server=apiserver.url))
    sw = switcher(kube, force=True)
    plan = sw.plan("n1", "container")
    assert plan.mid_switch and plan.blockers == []
    # A pod with local data arrives after the plan: it blocks (no override but --delete-emptydir-data covers it).
    apiserver.add(o.pod("default", "scratch", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU,
                        volumes=[{"name": "tmp", "emptyDir": {}}]))
    with pytest.raises(Refused):
        sw.apply(plan)
    node = apiserver.get("Node", "n1")
    assert node["spec"].get("unschedulable") is True
    assert ANN in (node["metadata"].get("annotations") or {})
    assert node["metadata"]["labels"]["rebellions.ai/npu.workload.config"] == "vm-passthrough"


# -- the lock ----------------------------------------------------------------------------------------


def lease(apiserver, holder, *, renewed_ago_s, duration=60):
    now = FakeClock().now() - timedelta(seconds=renewed_ago_s)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    apiserver.add({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": lease_name("n1"), "namespace": "rbln-system"},
                   "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": stamp,
                            "renewTime": stamp, "leaseTransitions": 0}})


def test_a_live_lock_refuses_a_second_run_naming_its_holder(apiserver):
    seed(apiserver)
    lease(apiserver, "rblnctl@laptop pid 42: set-mode n1 vm", renewed_ago_s=5)
    kube = connect(KubeOptions(server=apiserver.url))
    sw = switcher(kube, force=True)
    sw.clock = FakeClock()
    plan = sw.plan("n1", "vm")
    (b,) = [b for b in plan.blockers if "locked" in str(b)]
    assert "rblnctl@laptop pid 42" in str(b) and "last renewed 5s ago" in str(b) and b.override is None
    apiserver.clear_requests()
    with pytest.raises(Refused):
        sw.apply(plan)
    assert apiserver.writes() == []


def test_an_expired_lock_is_taken_over_only_when_asked(apiserver, operator):
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    lease(apiserver, "rblnctl@gone pid 7: set-mode n1 vm", renewed_ago_s=600)
    kube = connect(KubeOptions(server=apiserver.url))
    sw = switcher(kube)
    sw.clock = FakeClock()
    (b,) = [b for b in sw.plan("n1", "vm").blockers]
    assert "expired" in str(b) and b.override == "take_over"
    warnings: list[str] = []
    sw = switcher(kube, warnings=warnings, take_over=True)
    sw.clock = FakeClock()
    res = sw.apply(sw.plan("n1", "vm"))
    assert res.changed and any("took over the expired lock" in w and "rblnctl@gone" in w for w in warnings)
    assert apiserver.get("Lease", lease_name("n1"), "rbln-system") is None  # given back at the end


def test_two_admins_at_once_only_one_switches(apiserver):
    """The first run holds the lock while it waits for a slow operator; the second is refused, whatever its flags."""
    seed(apiserver)
    op = SimulatedOperator(apiserver, ready_delay_s=1.0).start()
    try:
        assert op.wait_idle()
        kube = connect(KubeOptions(server=apiserver.url))
        first = switcher(kube, identity="rblnctl@a pid 1: set-mode n1 vm")
        plan = first.plan("n1", "vm")
        locked = threading.Event()
        first.events = NodeEvents(on_step=lambda s, d: locked.set() if s == "record" else None)
        out: list[object] = []
        t = threading.Thread(target=lambda: out.append(first.apply(plan)))
        t.start()
        assert locked.wait(10)
        second = switcher(kube, identity="rblnctl@b pid 2: set-mode n1 container", force=True)
        with pytest.raises(Refused) as exc:
            second.apply(second.plan("n1", "container"))
        assert any("locked by rblnctl@a pid 1" in str(b) for b in exc.value.blockers)
        t.join(30)
        assert out and out[0].changed
        assert apiserver.get("Node", "n1")["metadata"]["labels"][MODE] == "vm-passthrough"
    finally:
        op.stop()


def test_a_lock_taken_over_mid_run_stops_the_writes(apiserver):
    seed(apiserver)
    kube = connect(KubeOptions(server=apiserver.url))
    lock = NodeLock(kube=kube, node="n1", namespace="rbln-system", identity="me", duration_s=30)
    lock.acquire()
    apiserver.mutate("Lease", lease_name("n1"), "rbln-system",
                     fn=lambda obj: obj["spec"].update({"holderIdentity": "someone else"}))
    lock.renew()
    assert lock.lost.is_set()
    with pytest.raises(Refused, match="took over the lock"):
        lock.ensure_held()
    lock.release()
    assert apiserver.get("Lease", lease_name("n1"), "rbln-system")["spec"]["holderIdentity"] == "someone else"


# -- a flaky API server ---------------------------------------------------------------------------------


def test_transient_errors_during_the_wait_do_not_abort_the_switch(apiserver):
    seed(apiserver)
    op = SimulatedOperator(apiserver, ready_delay_s=0.3).start()
    try:
        assert op.wait_idle()
        kube = connect(KubeOptions(server=apiserver.url))
        kube.read_retries = 0  # the wait itself must ride out the failures, not only the transport
        waits: list[list[str]] = []
        sw = switcher(kube)
        sw.events = NodeEvents(on_waiting=waits.append)
        plan = sw.plan("n1", "vm")

        def hook(req):
            if is_relabel(req):
                apiserver.inject_fault(method="GET", path="^/api/v1/nodes$", status=503, times=3,
                                       retry_after_s=1)
                apiserver.inject_fault(method="GET", path="/pods$", status=429, times=2)

        apiserver.on_request(hook)
        res = sw.apply(plan)
        assert res.changed and res.uncordoned
        assert any("did not answer" in line for w in waits for line in w)
    finally:
        op.stop()


def test_a_forbidden_vmi_list_falls_back_to_launcher_pods(apiserver):
    seed(apiserver)
    apiserver.add(o.virt_launcher("vms", "vm1", "n1", resources={PF: "1"}))
    apiserver.forbid("list", "virtualmachineinstances")
    kube = connect(KubeOptions(server=apiserver.url))
    plan = switcher(kube).plan("n1", "vm")
    assert plan.vms == ["vms/vm1 (virt-launcher pod virt-launcher-vm1-abcde requests NPUs)"]
    assert any("cannot list VirtualMachineInstances" in w for w in plan.warnings)
    assert any("vms/vm1" in str(b) for b in plan.blockers)


def test_a_vmi_holding_npus_only_through_dra_claims_is_guarded(apiserver):
    """issue 15: a VMI whose NPUs come from spec.resourceClaims, with no NPU-requesting launcher pod visible."""
    seed(apiserver, mode="vm-passthrough")
    vmi = o.vmi("vms", "dra-vm", "n1", host_devices=[{"name": "npu0", "claimName": "npu", "requestName": "npu"}])
    vmi["spec"]["resourceClaims"] = [{"name": "npu", "resourceClaimTemplateName": "npu-1"}]
    only_claims = o.vmi("vms", "claims-only", "n1")
    only_claims["spec"]["resourceClaims"] = [{"name": "npu", "resourceClaimName": "npu-claim"}]
    apiserver.add(vmi, only_claims)
    kube = connect(KubeOptions(server=apiserver.url))
    plan = switcher(kube).plan("n1", "container")
    assert plan.vms == ["vms/claims-only (claim npu)", "vms/dra-vm (claim npu)"]
    assert len([b for b in plan.blockers if "cannot live-migrate" in str(b)]) == 2


# -- replies that are lost after the write landed, and replies that are not Kubernetes ----------------


@pytest.mark.parametrize("which", ["record", "cordon", "relabel", "finish"])
def test_each_node_write_whose_reply_is_lost_after_it_landed_is_settled_by_reading_back(apiserver, operator, which):
    """The server applies the write, then the connection drops (client-go's unknown outcome)."""
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    kube = connect(KubeOptions(server=apiserver.url))
    matchers = {
        "record": lambda r: r.method == "PATCH" and ((body_of(r).get("metadata") or {}).get("annotations") or {}).get(
            ANN) is not None and not is_cordon(r) and not is_relabel(r),
        "cordon": is_cordon,
        "relabel": is_relabel,
        "finish": lambda r: r.method == "PATCH" and (body_of(r).get("spec") or {}).get("unschedulable") is False,
    }
    done: list[int] = []

    def hook(req):
        if not done and req.path == "/api/v1/nodes/n1" and matchers[which](req):
            done.append(1)
            apiserver.inject_fault(method="PATCH", path="^/api/v1/nodes/n1$", lose_reply=True, times=1)

    apiserver.on_request(hook)
    steps: list[tuple[str, str]] = []
    sw = switcher(kube, steps=steps)
    res = sw.apply(sw.plan("n1", "vm"))
    assert done and res.changed and res.uncordoned
    lost = [r for r in apiserver.requests if getattr(r, "reply_lost", False)]
    assert len(lost) == 1 and lost[0].applied
    node = apiserver.get("Node", "n1")
    assert node["metadata"]["labels"][MODE] == "vm-passthrough" and not node["spec"].get("unschedulable")
    assert ANN not in (node["metadata"].get("annotations") or {})
    assert not [s for s in steps if s[0] == "rollback"]
    # The write was not sent again: reading back showed it had landed.
    same = [r for r in apiserver.requests if r.method == "PATCH" and r.path == "/api/v1/nodes/n1"
            and matchers[which](r)]
    assert len(same) == 1


def test_a_lost_reply_on_the_cordon_then_a_failure_rolls_back_what_landed(apiserver):
    seed(apiserver)
    kube = connect(KubeOptions(server=apiserver.url))
    done: list[int] = []

    def hook(req):
        if not done and is_cordon(req):
            done.append(1)
            apiserver.inject_fault(method="PATCH", path="^/api/v1/nodes/n1$", lose_reply=True, times=1)

    apiserver.on_request(hook)
    apiserver.forbid("create", "pods/eviction")
    sw = switcher(kube)
    with pytest.raises(Forbidden):
        sw.apply(sw.plan("n1", "vm"))
    node = apiserver.get("Node", "n1")
    assert done and not node["spec"].get("unschedulable") and ANN not in (node["metadata"].get("annotations") or {})


@pytest.mark.parametrize(("body", "content_type", "error"), [
    ("<html><body>502 Bad Gateway</body></html>", "text/html", "NotAnApiServer"),
    ("{not json", "application/json", "MalformedReply"),
    ([{"kind": "Node"}], "application/json", "MalformedReply"),
])
def test_a_malformed_reply_mid_switch_keeps_the_switch_resumable(apiserver, operator, body, content_type, error):
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    kube = connect(KubeOptions(server=apiserver.url))
    kube.read_retries = 0
    done: list[int] = []

    def hook(req):
        if not done and is_relabel(req):
            done.append(1)
            apiserver.inject_fault(method="GET", path="^/api/v1/nodes/n1$", body=body, content_type=content_type,
                                   times=1)

    apiserver.on_request(hook)
    sw = switcher(kube)
    with pytest.raises(Exception) as exc:
        sw.apply(sw.plan("n1", "vm"))
    assert type(exc.value).__name__ == error
    assert exc.value.recovery is not None  # after the relabel: resume, never a silent rollback
    node = apiserver.get("Node", "n1")
    assert node["spec"]["unschedulable"] is True and ANN in node["metadata"]["annotations"]
