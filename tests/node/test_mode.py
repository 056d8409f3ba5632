"""ModeSwitcher against the fake API server and the simulated RBLN operator."""

from __future__ import annotations

import json

import pytest

from rblnctl.errors import Forbidden, InvalidInput, NotFound, Refused, WaitTimeout
from rblnctl.node.events import NodeEvents
from rblnctl.node.mode import ModeSwitcher
from rblnctl.node.options import DrainOptions, ModeOptions
from rblnctl.node.record import Recovery
from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from rblnctl.constants import (
    OPERATOR_NAMESPACE as OPS,
    SET_MODE_ANNOTATION as ANN,
    WORKLOAD_LABEL as MODE,
    DEPLOY_LABEL_PREFIX as DEPLOY,
)
from tests.fakes.objects import ONE_NPU as NPU

PF = "rebellions.ai/RBLN-CA22_PF"
CONTAINER_DEPLOY = {DEPLOY + c for c in o.CONTAINER_COMPONENTS}
VM_DEPLOY = {DEPLOY + c for c in o.VM_COMPONENTS}
# A hybrid cluster's policy (the operator docs' "Helm settings for container/VM mix"): sandbox plugin for VMs.
HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}
# What the simulated operator runs per mode under HYBRID: the enabled components only.
VM_PODS = {"vfio-manager", "sandbox-device-plugin"}
CONTAINER_PODS = {"driver", "device-plugin", "metrics-exporter", "npu-feature-discovery", "operator-validator",
                  "container-toolkit"}


@pytest.fixture
def operator(apiserver):
    op = SimulatedOperator(apiserver, ready_delay_s=0.1)
    yield op
    op.stop()


def switcher(kube, *, force=False, uncordon=True, on_step=None, **drain):
    """A ModeSwitcher with a short timeout and poll; `drain` are DrainOptions fields. `force` turns on every
    override (what the single --force meant before each got its own flag; tests/cli/test_overrides.py has each)."""
    drain.setdefault("timeout_s", 5)
    drain.setdefault("poll_s", 0.05)
    options = ModeOptions(drain=DrainOptions(force=force, evict_vms=force, take_over=force, **drain),
                          evict_daemonsets=force, skip_iommu_check=force, skip_release_check=force, reverse=force,
                          uncordon=uncordon)
    events = NodeEvents(on_step=on_step) if on_step else NodeEvents()
    return ModeSwitcher(kube=kube, options=options, events=events)


def node_writes(apiserver):
    """Writes other than the node's lock (a Lease taken first and given back last)."""
    return [w for w in apiserver.writes() if "/leases" not in w.path]


def seed(apiserver, mode=o.MODE_CONTAINER, **node_kw):
    apiserver.add(o.cluster_policy(**HYBRID), o.npu_node("n1", mode=mode, **node_kw), o.replicaset("default", "web"),
                  o.pod("default", "npu-app", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU),
                  o.pod("default", "cpu-app", node="n1", owner_kind="ReplicaSet", owner_name="web"))


def deploy_labels(apiserver):
    return {k for k in apiserver.get("Node", "n1")["metadata"]["labels"] if k.startswith(DEPLOY)}


def component_pods(apiserver):
    """Component -> pod on n1, by the DaemonSet that owns it (as every operator release names them)."""
    out = {}
    for p in apiserver.list("Pod", OPS):
        if p["spec"].get("nodeName") != "n1":
            continue
        owner = p["metadata"]["ownerReferences"][0]["name"]
        out[owner.removeprefix("rbln-").replace("driver-ubuntu22.04", "driver")] = p
    return out


def ready(p):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])


def npu_alloc(apiserver):
    return {k: v for k, v in apiserver.get("Node", "n1")["status"]["allocatable"].items()
            if k.startswith("rebellions.ai/")}


def test_container_to_vm_full_run(apiserver, kube, operator):
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    old_uids = {c: p["metadata"]["uid"] for c, p in component_pods(apiserver).items()}
    steps: list[str] = []
    sw = switcher(kube, on_step=lambda s, d: steps.append(s))
    plan = sw.plan("n1", "vm")
    assert (plan.current_mode, plan.target, plan.noop, plan.blockers) == ("container", "vm-passthrough", False, [])
    assert [s.step for s in plan.steps] == ["lock", "record", "cordon", "evict", "relabel", "wait", "uncordon"]
    assert [e.name for e in plan.drain.evict] == ["npu-app"]
    res = sw.apply(plan)
    assert res.changed and res.cordoned and res.uncordoned and [p.name for p in res.evicted] == ["npu-app"]
    node = apiserver.get("Node", "n1")
    assert node["metadata"]["labels"][MODE] == "vm-passthrough"
    assert deploy_labels(apiserver) == VM_DEPLOY
    pods = component_pods(apiserver)
    assert set(pods) == VM_PODS and all(ready(p) for p in pods.values())
    assert not set(old_uids) & set(pods)
    assert npu_alloc(apiserver) == {PF: "2"}
    assert not node["spec"].get("unschedulable")
    assert ANN not in (node["metadata"].get("annotations") or {})
    assert apiserver.get("Pod", "npu-app", "default") is None
    assert apiserver.get("Pod", "cpu-app", "default") is not None
    assert steps == ["lock", "record", "cordon", "evict", "relabel", "wait", "uncordon", "finish"]
    # The writes, in order, with their content types: the lock first and last, everything else under it.
    writes = [(w.method, w.path.rsplit("/", 1)[-1], w.content_type) for w in apiserver.writes()
              if not w.path.startswith("/api/v1/namespaces/rbln-system")]
    assert writes == [
        ("POST", "leases", "application/json"),
        ("PATCH", "n1", "application/merge-patch+json"),
        ("PATCH", "n1", "application/strategic-merge-patch+json"),
        ("POST", "eviction", "application/json"),
        ("PATCH", "n1", "application/merge-patch+json"),
        ("PATCH", "n1", "application/strategic-merge-patch+json"),
        ("DELETE", "rblnctl-node-n1", "application/json"),
    ]
    lease = apiserver.writes()[0].body
    assert lease["spec"]["holderIdentity"].startswith("rblnctl@") and lease["spec"]["leaseDurationSeconds"] == 60
    relabel = [w for w in node_writes(apiserver) if w.method == "PATCH"][2].body
    assert relabel["metadata"]["labels"] == {MODE: "vm-passthrough"} and relabel["metadata"]["resourceVersion"]


def test_vm_to_container(apiserver, kube, operator):
    apiserver.add(o.cluster_policy(**HYBRID), o.npu_node("n1", mode=o.MODE_VM))
    operator.start()
    assert operator.wait_idle()
    assert npu_alloc(apiserver) == {PF: "2"}
    res = switcher(kube).apply(switcher(kube).plan("n1", "container"))
    assert res.previous_mode == "vm-passthrough" and res.mode == "container"
    assert deploy_labels(apiserver) == CONTAINER_DEPLOY
    assert set(component_pods(apiserver)) == CONTAINER_PODS
    assert all(ready(p) for p in component_pods(apiserver).values())
    assert npu_alloc(apiserver) == {"rebellions.ai/npu": "2"}
    assert not apiserver.get("Node", "n1")["spec"].get("unschedulable")


def test_dra_policy_vm_mode_needs_no_extended_resource(apiserver, kube, operator):
    apiserver.add(o.cluster_policy(dra=True, sandbox=False, device_plugin=False), o.npu_node("n1"))
    operator.start()
    assert operator.wait_idle()
    switcher(kube).apply(switcher(kube).plan("n1", "vm"))
    assert deploy_labels(apiserver) == VM_DEPLOY
    assert set(component_pods(apiserver)) == {"vfio-manager", "dra-kubelet-plugin"}
    assert npu_alloc(apiserver) == {}
    # Converged means the DRA driver offers the NPUs as vfio devices, not that its pod is Ready.
    (slice_,) = apiserver.list("ResourceSlice")
    assert [d["name"] for d in slice_["spec"]["devices"]] == ["vfio-0000-3b-00-0", "vfio-0000-3b-01-0"]


def test_already_in_target_is_a_noop_with_zero_writes(apiserver, kube, operator):
    seed(apiserver, mode=o.MODE_VM)
    operator.start()
    assert operator.wait_idle()
    apiserver.clear_requests()
    sw = switcher(kube)
    plan = sw.plan("n1", "vm-passthrough")
    assert plan.noop and plan.steps == []
    res = sw.apply(plan)
    assert not res.changed and apiserver.writes() == []  # a no-op takes no lock either


def test_node_cordoned_beforehand_stays_cordoned(apiserver, kube, operator):
    seed(apiserver, unschedulable=True)
    operator.start()
    assert operator.wait_idle()
    sw = switcher(kube)
    plan = sw.plan("n1", "vm")
    assert "already cordoned" in plan.steps[2].detail and "cordoned before rblnctl" in plan.steps[-1].detail
    res = sw.apply(plan)
    assert not res.cordoned and not res.uncordoned
    node = apiserver.get("Node", "n1")
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"][MODE] == "vm-passthrough"
    assert ANN not in (node["metadata"].get("annotations") or {})
    assert not any(w.body.get("spec") for w in node_writes(apiserver) if w.path == "/api/v1/nodes/n1")


def test_no_uncordon_leaves_node_cordoned(apiserver, kube, operator):
    seed(apiserver)
    operator.start()
    res = switcher(kube, uncordon=False).apply(switcher(kube, uncordon=False).plan("n1", "vm"))
    assert res.cordoned and not res.uncordoned
    node = apiserver.get("Node", "n1")
    assert node["spec"]["unschedulable"] is True and ANN not in (node["metadata"].get("annotations") or {})


def test_vm_guard_refuses_then_force_evicts_the_launcher(apiserver, kube, operator):
    seed(apiserver, mode=o.MODE_VM)
    apiserver.add(o.vmi("vms", "vm1", "n1", host_devices=[PF]),
                  o.virt_launcher("vms", "vm1", "n1", resources={PF: "1"}),
                  o.vmi("vms", "plain", "n1"), o.vmi("vms", "far", "n2", host_devices=[PF]))
    operator.start()
    assert operator.wait_idle()
    apiserver.clear_requests()
    sw = switcher(kube)
    plan = sw.plan("n1", "container")
    assert plan.vms == [f"vms/vm1 ({PF})"]
    # issue 21: NPU passthrough VMs cannot live-migrate, so the blocker says how to stop it, and its one flag
    assert any("vms/vm1" in str(b) and "cannot live-migrate" in str(b) and "`virtctl stop vm1 -n vms`" in str(b)
               for b in plan.blockers)
    assert {b.override for b in plan.blockers} == {"evict_vms"}
    with pytest.raises(Refused) as exc:
        sw.apply(plan)
    assert any("vms/vm1" in str(b) for b in exc.value.blockers)
    assert apiserver.writes() == []
    vmi_list = [r for r in apiserver.requests if r.path.endswith("/virtualmachineinstances")]
    assert vmi_list[0].query["labelSelector"] == ["kubevirt.io/nodeName=n1"]

    forced = switcher(kube, force=True)
    plan = forced.plan("n1", "container")
    assert plan.blockers == [] and any("evicting the virt-launcher pods" in w for w in plan.warnings)
    res = forced.apply(plan)
    assert "virt-launcher-vm1-abcde" in [p.name for p in res.evicted]
    assert apiserver.get("VirtualMachineInstance", "vm1", "vms") is not None  # never deleted by us


def test_vm_guard_finds_launchers_without_a_vmi(apiserver, kube):
    seed(apiserver, mode=o.MODE_VM)
    apiserver.add(o.virt_launcher("vms", "ghost", "n1", resources={PF: "1"}))
    plan = switcher(kube).plan("n1", "container")
    assert plan.vms == ["vms/ghost (virt-launcher pod virt-launcher-ghost-abcde requests NPUs)"]
    assert plan.blockers


def test_deploy_skip_and_non_npu_nodes_are_refused(apiserver, kube):
    apiserver.add(o.cluster_policy(**HYBRID), o.npu_node("skip", labels={"rebellions.ai/npu.deploy.skip": "true"}),
                  o.node("cpu"))
    with pytest.raises(Refused, match="deploy.skip=true"):
        switcher(kube).plan("skip", "vm")
    with pytest.raises(Refused, match="no Rebellions NPU"):
        switcher(kube).plan("cpu", "vm")
    with pytest.raises(NotFound):
        switcher(kube).plan("nope", "vm")
    with pytest.raises(InvalidInput, match="unknown mode 'gpu'"):
        switcher(kube).plan("skip", "gpu")
    assert apiserver.writes() == []


def test_invalid_label_value_is_reported(apiserver, kube):
    apiserver.add(o.cluster_policy(**HYBRID),
                  o.npu_node("n1", mode="vm"))  # "vm" is what users type, not a value the operator knows
    plan = switcher(kube).plan("n1", "vm")
    assert plan.current_mode == "container" and any("does not know" in w for w in plan.warnings)


def test_failure_before_relabel_rolls_back(apiserver, kube, operator):
    seed(apiserver)
    operator.start()
    apiserver.forbid("create", "pods/eviction")
    steps: list[tuple[str, str]] = []
    sw = switcher(kube, on_step=lambda s, d: steps.append((s, d)))
    with pytest.raises(Forbidden):
        sw.apply(sw.plan("n1", "vm"))
    node = apiserver.get("Node", "n1")
    assert not node["spec"].get("unschedulable")
    assert ANN not in (node["metadata"].get("annotations") or {})
    assert node["metadata"]["labels"][MODE] == "container"
    assert steps[-1][0] == "rollback"


def test_failure_after_relabel_leaves_cordoned_then_rerun_resumes(apiserver, kube):
    seed(apiserver)
    op = SimulatedOperator(apiserver).start()
    assert op.wait_idle()
    op.stop()  # the operator goes away: the label changes but nothing converges
    sw = switcher(kube, timeout_s=0.4)
    with pytest.raises(WaitTimeout) as exc:
        sw.apply(sw.plan("n1", "vm"))
    assert str(exc.value) == "the operator did not switch node n1 to vm-passthrough within 0.4s"
    details = "\n".join(exc.value.details)
    assert "in progress" in details and "still missing: " in details
    assert exc.value.recovery == Recovery(node="n1", target="vm-passthrough", back="container")
    node = apiserver.get("Node", "n1")
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"][MODE] == "vm-passthrough"
    progress = json.loads(node["metadata"]["annotations"][ANN])
    assert progress["target"] == "vm-passthrough" and progress["cordoned_by_rblnctl"] is True
    assert progress["step"] == "relabel"

    with pytest.raises(Refused, match="unfinished"):
        switcher(kube).plan("n1", "container")  # another target while one is in progress

    with SimulatedOperator(apiserver) as op2:
        assert op2.wait_idle()
        sw = switcher(kube)
        plan = sw.plan("n1", "vm")
        assert plan.resume and plan.cordoned_by_rblnctl and plan.started == progress["started"]
        apiserver.clear_requests()
        res = sw.apply(plan)
        assert res.resumed and res.uncordoned
        node = apiserver.get("Node", "n1")
        assert not node["spec"].get("unschedulable") and ANN not in (node["metadata"].get("annotations") or {})
        # the label was already ours: no second relabel
        assert not any("labels" in (w.body or {}).get("metadata", {}) for w in node_writes(apiserver))


def test_resume_after_interruption_before_relabel(apiserver, kube, operator):
    """Interrupted after the cordon: the annotation says rblnctl cordoned, so the re-run uncordons."""
    progress = {"target": "vm-passthrough", "from": "container", "started": "2026-01-01T00:00:00Z",
                "cordoned_by_rblnctl": True, "step": "cordon"}
    seed(apiserver, unschedulable=True, annotations={ANN: json.dumps(progress)})
    operator.start()
    sw = switcher(kube)
    plan = sw.plan("n1", "vm")
    assert plan.resume and plan.unschedulable and plan.cordoned_by_rblnctl
    res = sw.apply(plan)
    assert res.uncordoned and [p.name for p in res.evicted] == ["npu-app"]
    node = apiserver.get("Node", "n1")
    assert not node["spec"].get("unschedulable") and node["metadata"]["labels"][MODE] == "vm-passthrough"


def test_conflicting_target_with_force_takes_over(apiserver, kube, operator):
    progress = {"target": "container", "from": "vm-passthrough", "started": "2026-01-01T00:00:00Z",
                "cordoned_by_rblnctl": True, "step": "cordon"}
    seed(apiserver, unschedulable=True, annotations={ANN: json.dumps(progress)})
    operator.start()
    with pytest.raises(Refused) as exc:
        switcher(kube).plan("n1", "vm")
    assert "switch of node n1 to container" in str(exc.value) and "unfinished" in str(exc.value)
    assert exc.value.recovery == Recovery(node="n1", target="container", back="vm-passthrough")
    sw = switcher(kube, force=True)
    res = sw.apply(sw.plan("n1", "vm"))
    assert res.uncordoned  # the abandoned switch had cordoned it; we keep that knowledge


def test_relabel_retries_on_conflict(apiserver, kube, operator):
    seed(apiserver)
    operator.start()
    bumped: list[int] = []

    def race(req):
        body = req.body if isinstance(req.body, dict) else {}
        if req.method == "PATCH" and "labels" in body.get("metadata", {}) and not bumped:
            bumped.append(1)  # someone else edits the node between our read and our write
            apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({"team": "a"}))

    apiserver.on_request(race)
    retries: list[str] = []
    sw = switcher(kube, on_step=lambda s, d: retries.append(d) if "changed under us" in d else None)
    sw.apply(sw.plan("n1", "vm"))
    labels = apiserver.get("Node", "n1")["metadata"]["labels"]
    assert labels[MODE] == "vm-passthrough" and labels["team"] == "a" and len(retries) == 1
    relabels = [w for w in node_writes(apiserver) if "labels" in (w.body or {}).get("metadata", {})]
    assert [w.status for w in relabels] == [409, 200]


def test_server_dry_run_persists_nothing(apiserver, kube, operator):
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    before = apiserver.get("Node", "n1")
    apiserver.clear_requests()
    sw = switcher(kube, server_dry_run=True)
    res = sw.apply(sw.plan("n1", "vm"))
    assert res.server_dry_run and not res.changed
    writes = apiserver.writes()
    assert writes and all(w.dry_run for w in writes)
    after = apiserver.get("Node", "n1")
    assert after["metadata"]["labels"] == before["metadata"]["labels"] and not after["spec"].get("unschedulable")
    assert apiserver.get("Pod", "npu-app", "default") is not None


def test_plan_makes_zero_writes(apiserver, kube, operator):
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    apiserver.clear_requests()
    plan = switcher(kube).plan("n1", "vm")
    assert not plan.noop and apiserver.writes() == []
    assert any("vfio-manager" in p for p in plan.pending)
    assert [r.path for r in apiserver.requests if "/leases" in r.path] == [
        "/apis/coordination.k8s.io/v1/namespaces/rbln-system/leases/rblnctl-node-n1"]  # the lock is read, not taken


def test_bad_options_and_names(apiserver, kube):
    with pytest.raises(InvalidInput, match="timeout must be a finite number of seconds above 0"):
        DrainOptions(timeout_s=0)
    with pytest.raises(InvalidInput, match="grace period must be 0 or more seconds"):
        DrainOptions(grace_period_s=-1)
    seed(apiserver)
    apiserver.clear_requests()
    for bad in ("./n1", "x/../n1", "n1?", "..", "N1", ""):
        with pytest.raises(InvalidInput, match="invalid node name"):
            switcher(kube).plan(bad, "vm")
    assert apiserver.requests == []  # refused before any request: no path is built from a bad name


def test_resumed_run_failing_after_its_relabel_keeps_the_switch_in_progress(apiserver, kube):
    """A resumed run whose label is already written must not roll back (uncordon, drop the record) on failure."""
    progress = {"target": "vm-passthrough", "from": "container", "started": "2026-01-01T00:00:00Z",
                "cordoned_by_rblnctl": True, "step": "relabel"}
    seed(apiserver, mode=o.MODE_VM, unschedulable=True, annotations={ANN: json.dumps(progress)})
    apiserver.add(o.pod("default", "late", node="n1", owner_kind="ReplicaSet", owner_name="web",
                        limits={PF: "1"}))  # a VM-mode NPU pod scheduled before the cordon
    apiserver.forbid("create", "pods/eviction")
    steps: list[str] = []
    sw = switcher(kube, on_step=lambda s, d: steps.append(s))
    plan = sw.plan("n1", "vm")
    assert plan.resume and [e.name for e in plan.drain.evict]
    with pytest.raises(Forbidden) as exc:
        sw.apply(plan)
    details = " ".join(exc.value.details)
    assert "in progress" in details and "stays cordoned" in details
    assert exc.value.recovery == Recovery(node="n1", target="vm-passthrough", back="container")
    assert "rollback" not in steps
    node = apiserver.get("Node", "n1")
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"][MODE] == "vm-passthrough"
    assert json.loads(node["metadata"]["annotations"][ANN])["target"] == "vm-passthrough"


def _is_node_list(req):
    """The wait's look at the node: a LIST of nodes by name (then a watch of it)."""
    return req.method == "GET" and req.path == "/api/v1/nodes" and req.query.get("fieldSelector") == [
        "metadata.name=n1"] and "watch" not in req.query


def _after_relabel(apiserver, action):
    """Run `action` on the wait's first look at the node after the relabel PATCH."""
    state: list[str] = []

    def hook(req):
        if req.method == "PATCH" and "labels" in ((req.body or {}) if isinstance(req.body, dict) else {}).get(
                "metadata", {}):
            state.append("relabeled")
        elif state == ["relabeled"] and _is_node_list(req):
            state.append("done")
            action()

    apiserver.on_request(hook)


def test_label_changed_by_someone_else_while_waiting_stops_at_once(apiserver, kube):
    seed(apiserver)
    op = SimulatedOperator(apiserver).start()
    assert op.wait_idle()
    op.stop()  # nothing converges: without the check the wait would sit out the whole timeout
    _after_relabel(apiserver, lambda: apiserver.mutate(
        "Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "container"})))
    sw = switcher(kube, timeout_s=10)
    plan = sw.plan("n1", "vm")
    apiserver.clear_requests()
    with pytest.raises(Refused) as exc:  # not a WaitTimeout after 10 s of polling
        sw.apply(plan)
    relabel = next(i for i, r in enumerate(apiserver.requests)
                   if r.method == "PATCH" and MODE in ((r.body or {}).get("metadata") or {}).get("labels", {}))
    looks = [r for r in apiserver.requests[relabel:] if _is_node_list(r)]
    assert len(looks) == 1  # stopped at the first look that saw the foreign label
    msg = str(exc.value)
    assert "changed" in msg and "'container'" in msg and exc.value.recovery.node == "n1"
    node = apiserver.get("Node", "n1")
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"][MODE] == "container"
    assert ANN in node["metadata"]["annotations"]


def test_node_deleted_while_waiting_says_so_instead_of_resume(apiserver, kube):
    seed(apiserver)
    _after_relabel(apiserver, lambda: apiserver.delete_now("Node", "n1"))
    sw = switcher(kube, timeout_s=10)
    with pytest.raises(NotFound) as exc:
        sw.apply(sw.plan("n1", "vm"))
    msg = str(exc.value)
    assert "n1 was deleted" in msg and exc.value.recovery is None
    assert exc.value.details == ["evicted from node n1 before that: default/npu-app"]  # no resume, what it did


def test_node_deleted_before_the_relabel_needs_no_rollback(apiserver, kube):
    seed(apiserver)

    def delete_node(req):
        if req.method == "POST" and req.path.endswith("/eviction") and apiserver.get("Node", "n1"):
            apiserver.delete_now("Node", "n1")

    apiserver.on_request(delete_node)
    steps: list[tuple[str, str]] = []
    sw = switcher(kube, on_step=lambda s, d: steps.append((s, d)))
    with pytest.raises(NotFound, match="n1 was deleted"):
        sw.apply(sw.plan("n1", "vm"))
    assert not any("rollback failed" in d for _, d in steps)


def test_going_back_after_an_interruption_before_the_relabel_evicts_nothing(apiserver, kube, operator):
    """The recovery the Ctrl-C message names: the NPUs never left container mode, so no NPU pod must go."""
    progress = {"target": "vm-passthrough", "from": "container", "started": "2026-01-01T00:00:00Z",
                "cordoned_by_rblnctl": True, "step": "cordon"}
    seed(apiserver, unschedulable=True, annotations={ANN: json.dumps(progress)})
    operator.start()
    assert operator.wait_idle()
    sw = switcher(kube, force=True)
    plan = sw.plan("n1", "container")
    assert plan.drain.evict == [] and plan.blockers == []
    res = sw.apply(plan)
    assert res.evicted == [] and res.uncordoned
    assert apiserver.get("Pod", "npu-app", "default") is not None
    node = apiserver.get("Node", "n1")
    assert not node["spec"].get("unschedulable") and ANN not in (node["metadata"].get("annotations") or {})
    assert not [w for w in node_writes(apiserver) if w.path.endswith("/eviction")]


def test_the_policy_the_operator_ignores_does_not_decide_the_default_mode(apiserver, kube):
    """Two RBLNClusterPolicies: the operator acts on the one not marked ignored (as preflight and status read it)."""
    leftover = o.cluster_policy("a-leftover", workload_type="vm-passthrough")
    leftover["status"] = {"state": "ignored"}
    apiserver.add(leftover, o.cluster_policy("b-active", workload_type="container"), o.npu_node("n1", mode=None))
    plan = switcher(kube).plan("n1", "vm")
    assert plan.current_mode == "container" and not plan.noop


def test_a_daemonset_pod_using_npus_blocks_the_switch_until_forced(apiserver, kube, operator):
    """kubectl never evicts DaemonSet pods, but one holding the node's NPUs would keep them through the switch."""
    seed(apiserver)
    apiserver.add(o.pod("monitoring", "npu-agent-n1", node="n1", owner_kind="DaemonSet", owner_name="npu-agent",
                        requests=NPU))
    operator.start()
    assert operator.wait_idle()
    apiserver.clear_requests()
    sw = switcher(kube)
    plan = sw.plan("n1", "vm")
    (b,) = [b for b in plan.blockers if "npu-agent" in str(b)]
    assert "DaemonSet monitoring/npu-agent" in str(b) and b.override == "evict_daemonsets"  # issue 21
    with pytest.raises(Refused):
        sw.apply(plan)
    assert apiserver.writes() == []

    res = switcher(kube, force=True).apply(switcher(kube, force=True).plan("n1", "vm"))
    assert res.mode == "vm-passthrough" and "npu-agent-n1" in [p.name for p in res.evicted]
    assert apiserver.get("Pod", "npu-agent-n1", "monitoring") is None


def test_a_node_whose_iommu_nfd_reports_off_is_refused_before_any_write(apiserver, kube, operator):
    """The VFIO Manager cannot bind NPUs without an IOMMU: cordoning and evicting would be for nothing."""
    from tests.preflight.cluster_support import nfd_features

    devices = [{"vendor": "1eff", "device": "1220", "class": "1200"},
               {"vendor": "15b3", "device": "101d", "class": "0200", "iommu_group/type": "DMA"}]
    seed(apiserver)
    apiserver.add(nfd_features("n1", iommu=False, pci_devices=devices))
    operator.start()
    assert operator.wait_idle()
    apiserver.clear_requests()
    plan = switcher(kube).plan("n1", "vm")
    (b,) = [b for b in plan.blockers if "IOMMU" in str(b)]
    assert "node n1's IOMMU is off for its NPUs" in b.message and b.override == "skip_iommu_check"  # issue 21
    with pytest.raises(Refused):
        switcher(kube).apply(plan)
    assert apiserver.writes() == []
    forced = switcher(kube, force=True).plan("n1", "vm")
    assert not [b for b in forced.blockers if "IOMMU" in str(b)]
    assert any("IOMMU is off" in w for w in forced.warnings)
    # back to container needs no IOMMU: not asked
    assert not [b for b in switcher(kube).plan("n1", "container").blockers if "IOMMU" in str(b)]


# -- the audit trail: Events on the node (rblnctl.audit), read back by rblnctl.node.history ------------------------

EVENTS = "events.events.k8s.io"


def audited(kube, **kw):
    from rblnctl.audit import Auditor

    sw = switcher(kube, **kw)
    sw.audit = Auditor(kube=kube, instance="rblnctl@test")
    return sw


def node_events(apiserver, node="n1"):
    evs = [e for e in apiserver.list(EVENTS) if e["regarding"]["name"] == node]
    return [(e["reason"], e["type"]) for e in sorted(evs, key=lambda e: e["eventTime"])]


def test_a_switch_leaves_its_start_and_its_end_on_the_node_and_who_in_its_record(apiserver, kube, operator):
    from rblnctl.node.history import read_history

    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    records = []
    sw = audited(kube, on_step=lambda s, d: records.append(
        (apiserver.get("Node", "n1")["metadata"].get("annotations") or {}).get(ANN)) if s == "relabel" else None)
    sw.apply(sw.plan("n1", "vm"))
    assert node_events(apiserver) == [("ModeSwitchStarted", "Normal"), ("ModeSwitched", "Normal")]
    uid = apiserver.get("Node", "n1")["metadata"]["uid"]
    assert {e["regarding"]["uid"] for e in apiserver.list(EVENTS)} == {uid}  # kubectl describe node finds them
    assert json.loads(records[0])["by"] == "fake-user"  # the record says who, while the switch runs
    (entry,) = read_history(kube, "n1").entries
    assert (entry.action, entry.user, entry.from_mode, entry.to_mode, entry.result) == (
        "set-mode", "fake-user", "container", "vm-passthrough", "done")
    assert entry.message.startswith("switched node n1 from container to vm-passthrough in ")


def test_a_failed_switch_and_its_resume_are_two_runs_of_one_switch(apiserver, kube):
    from rblnctl.node.history import read_history

    seed(apiserver)
    op = SimulatedOperator(apiserver).start()
    assert op.wait_idle()
    op.stop()
    sw = audited(kube, timeout_s=0.4)
    with pytest.raises(WaitTimeout):
        sw.apply(sw.plan("n1", "vm"))
    assert node_events(apiserver) == [("ModeSwitchStarted", "Normal"), ("ModeSwitchFailed", "Warning")]
    (failed,) = read_history(kube, "n1").entries
    assert failed.result == "failed" and "did not switch node n1 to vm-passthrough within 0.4s" in failed.message
    assert failed.message.endswith("unfinished: the record on the node says it reached step relabel, cordoned by "
                                   "rblnctl")
    with SimulatedOperator(apiserver) as op2:
        assert op2.wait_idle()
        sw = audited(kube)
        sw.apply(sw.plan("n1", "vm"))
    first, second = read_history(kube, "n1").entries
    assert (first.result, second.result) == ("failed", "done") and first.run != second.run
    assert first.started == second.started  # one switch, resumed: the record's start
    assert not first.message.endswith("cordoned by rblnctl")  # the record is gone: nothing is unfinished


def test_an_interrupted_switch_ends_with_a_warning_event(apiserver, kube, operator):
    from rblnctl.clock import Stopped

    seed(apiserver)
    operator.start()
    assert operator.wait_idle()

    def interrupt(step, detail):
        if step == "evict":
            raise Stopped("interrupted")

    sw = audited(kube, on_step=interrupt)
    with pytest.raises(Stopped):
        sw.apply(sw.plan("n1", "vm"))
    assert node_events(apiserver) == [("ModeSwitchStarted", "Normal"), ("ModeSwitchInterrupted", "Warning")]


def test_no_event_without_a_change(apiserver, kube, operator):
    """A no-op, a refusal and a server dry run change nothing: they write no Event (a dry run: zero writes)."""
    seed(apiserver, mode=o.MODE_VM)
    operator.start()
    assert operator.wait_idle()
    sw = audited(kube)
    sw.apply(sw.plan("n1", "vm"))  # already there
    apiserver.add(o.vmi("vms", "holder", "n1", [PF]), o.virt_launcher("vms", "holder", "n1", resources={PF: "1"}))
    plan = sw.plan("n1", "container")
    with pytest.raises(Refused):
        sw.apply(plan)  # a VM holds NPUs
    sw = audited(kube, server_dry_run=True, force=True)
    sw.apply(sw.plan("n1", "container"))
    assert apiserver.list(EVENTS) == []
    assert not [r for r in apiserver.requests if "selfsubjectreviews" in r.path]


def test_an_event_the_server_refuses_never_fails_the_switch(apiserver, kube, operator):
    seed(apiserver)
    operator.start()
    assert operator.wait_idle()
    apiserver.forbid("create", EVENTS)
    sw = audited(kube)
    res = sw.apply(sw.plan("n1", "vm"))
    assert res.changed and apiserver.get("Node", "n1")["metadata"]["labels"][MODE] == "vm-passthrough"
    assert apiserver.list(EVENTS) == []


def _registered_again(apiserver, name="n1", **node_kw):
    """The host re-imaged and rejoined: the Node deleted and a new one (another uid) registered under its name."""
    import uuid

    apiserver.delete_now("Node", name)
    node = o.npu_node(name, **node_kw)
    node["metadata"]["uid"] = str(uuid.uuid4())  # the objects' uids are derived from the name
    apiserver.add(node)


def test_a_node_registered_again_after_the_plan_is_not_written(apiserver, kube, operator):
    """Every node write tests the uid the plan read (rblnctl.node.cordon.write_node): a node re-registered under
    the same name between plan and apply gets no record, no cordon, no label; nothing is rolled back on it."""
    from rblnctl.errors import Replaced

    seed(apiserver)
    sw = switcher(kube)
    plan = sw.plan("n1", "vm")
    _registered_again(apiserver)
    new_uid = apiserver.get("Node", "n1")["metadata"]["uid"]
    assert new_uid != plan.uid
    with pytest.raises(Replaced, match="node n1 was deleted and registered again"):
        sw.apply(plan)
    now = apiserver.get("Node", "n1")
    assert now["metadata"]["uid"] == new_uid and ANN not in now["metadata"].get("annotations", {})
    assert not now["spec"].get("unschedulable") and now["metadata"]["labels"][MODE] == o.MODE_CONTAINER
    assert [w for w in node_writes(apiserver) if "/nodes" in w.path] == []


def test_a_node_registered_again_mid_eviction_gets_no_rollback_written(apiserver, kube, operator):
    """Re-registered after rblnctl cordoned the old node and while it evicts: the new node is another object; the
    rollback writes nothing to it (its record, cordon and label stay the new node's own)."""
    from rblnctl.errors import Replaced

    seed(apiserver)

    written_before: list[int] = []

    def rejoin(req):
        if req.method == "POST" and req.path.endswith("/eviction") and not written_before:
            written_before.append(len([w for w in node_writes(apiserver) if "/nodes" in w.path]))
            _registered_again(apiserver)

    sw = switcher(kube)
    plan = sw.plan("n1", "vm")
    planned = plan.uid
    apiserver.on_request(rejoin)
    with pytest.raises(Replaced):
        sw.apply(plan)
    now = apiserver.get("Node", "n1")
    assert now["metadata"]["uid"] != planned
    assert ANN not in now["metadata"].get("annotations", {}) and not now["spec"].get("unschedulable")
    assert written_before == [2]  # the record, then the cordon: both on the old node
    assert [w for w in node_writes(apiserver) if "/nodes" in w.path][written_before[0]:] == []


def test_an_unfinished_switch_to_vm_under_a_known_v030_offers_only_going_back(apiserver, kube):
    """The refusal of another target while a switch to vm is unfinished printed two ways on: resume (`set-mode vm`)
    and go back (`--reverse`). Under a known v0.3.0 operator, whose sandbox plugin serves no VM, set-mode refuses the
    resume: only going back is offered (found by the remedy check on the real operator, issue 39). Unknown release:
    both, as before."""
    from rblnctl.node.events import Step
    from rblnctl.node.record import SwitchRecord
    from tests.fakes.releases import V0_3_0

    seed(apiserver, mode=o.MODE_VM)
    record = SwitchRecord(target=o.MODE_VM, from_mode=o.MODE_CONTAINER, started="2026-12-06T00:00:00Z",
                          cordoned_by_rblnctl=True, step=Step.RELABEL)
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"].setdefault("annotations", {}).update(
        {ANN: record.to_json()}))
    with pytest.raises(Refused, match="unfinished") as unknown:
        switcher(kube, force=False).plan("n1", "container")
    assert [r.text for r in unknown.value.recovery.remedies] == ["resume", "go back"]
    apiserver.add(V0_3_0.operator_deployment(namespace=OPS))
    with pytest.raises(Refused, match="unfinished") as known:
        switcher(kube, force=False).plan("n1", "container")
    assert [(r.text, r.command.words) for r in known.value.recovery.remedies] == [
        ("go back", ("node", "set-mode", "container", "n1"))]
