"""The node half of rblnctl (set-mode, drain) on the fake and on a real kube-apiserver alike.

Each scenario runs twice through the ``backend`` fixture: on the project's fake API server and on a real
kube-apiserver v1.36.2 with kube-controller-manager's disruption controller (tests/envtest). What a cluster
would do around rblnctl is simulated over HTTP on both: the RBLN NPU operator of one release layout
(tests/fakes/operator.py), the kubelet of the nodes (tests/cluster/kubelet.py: pods Running/Ready through
pods/status, graceful deletions confirmed). rblnctl runs in-process through its CLI with the backend's kubeconfig;
what it wrote is what the server saw (the fake's request log, the real server's audit log).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cluster.client import ApiFailure
from tests.cluster.kubelet import HOLD, HOLD_DELETION
from tests.envtest.crds import later_policy_crd
from tests.fakes import objects as o
from tests.fakes.releases import NEWER, V0_3_0
from rblnctl.constants import WORKLOAD_LABEL as MODE, SET_MODE_ANNOTATION as RECORD

NS = "team-a"
HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}
PRODUCT = "RBLN-CA25"


# ---- the cluster around rblnctl -------------------------------------------------------------------------------


@pytest.fixture
def npu_cluster(backend):
    """``npu_cluster(release, ...)``: the release's operator Deployment and policy, NPU nodes (RBLN-CA25, which both
    layouts' resource names cover) in container mode as the release's operator leaves them, a ReplicaSet's NPU pod
    on the first node; a kubelet for the nodes (heartbeats every 0.5 s) and the release's operator, converged.
    Returns (kubelet, operator).

    On a real server the RBLNClusterPolicy CRD must be the release's: the session's is v0.3.0's chart CRD; a later
    release's policy (no rblnDaemon, which v0.3.0 requires) needs the later operator's (``later_crd``), swapped in
    for the test and back after it."""
    swapped: list[dict] = []

    def make(release, *, policy: dict | None = None, nodes=("n1",), workload=True, **op_kw):
        if backend.name == "real" and release is not V0_3_0 and not swapped:
            v030 = backend.api.get("CustomResourceDefinition", "rblnclusterpolicies.rebellions.ai")
            _swap_crd(backend.api, later_crd(v030), accepts=True)
            swapped.append(v030)
        policy = policy or release.policy(**HYBRID)
        backend.api.seed(release.operator_deployment(), policy,
                         *[o.npu_node(n, release=release, policy=policy, product=PRODUCT) for n in nodes])
        if workload:
            backend.api.seed(o.replicaset(NS, "web", labels={"app": "web"}, replicas=1))
            backend.api.seed(o.pod(NS, "npu-app", node=nodes[0], labels={"app": "web"}, owner_kind="ReplicaSet",
                                   owner_name="web", requests={release.container_resource(policy, PRODUCT): "1"}))
        # The kubelet beats as a real one does, only more often: rblnctl's resourceVersion-guarded node writes
        # meet concurrent node status updates, as on a live cluster.
        kubelet = backend.kubelet(nodes, heartbeat_s=0.5)
        op = backend.operator(release=release, **op_kw)
        assert op.wait_idle(15), op.errors
        return kubelet, op

    yield make
    if swapped:
        backend.close()  # the operator and kubelets first: nothing may write a policy under the old CRD
        _swap_crd(backend.api, swapped[0], accepts=False)


def later_crd(v030: dict) -> dict:
    """later_policy_crd (the later operator's rules and plugins: no resourceList, useGenericResourceName) with the
    later ``driver.enabled`` (tests/fakes/releases.NEWER's policy switches its driver so; rblnctl reads
    ``driver.enabled`` or v0.3.0's ``useRBLNDriverCRD``): without it the v0.3.0 schema prunes it and the later
    release's policy would store a disabled driver. Assumption: the later CRD's other defaults match v0.3.0's."""
    crd = later_policy_crd(v030)
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    props["driver"]["properties"]["enabled"] = {"type": "boolean"}
    return crd


def _swap_crd(api, crd: dict, *, accepts: bool) -> None:
    """Replace the CRD's spec, then wait until the server validates with it (a dry-run create of a later release's
    policy is accepted by the later CRD, refused by v0.3.0's)."""
    api.mutate("CustomResourceDefinition", crd["metadata"]["name"], None,
               lambda c: c.update(spec=crd["spec"]))
    probe = NEWER.policy("crd-probe")
    probe.pop("status")

    def validating() -> bool:
        try:
            api.create(probe, dry_run=True)
            return accepts
        except ApiFailure as e:
            return not accepts and e.status == 422

    api.wait_for(validating, timeout_s=30, message="the swapped RBLNClusterPolicy CRD to validate")


def node(backend, name="n1") -> dict:
    return backend.api.get("Node", name)


def run(backend, *args, **kw):
    r = backend.rblnctl(*args, **kw)
    assert "Traceback" not in r.stderr, r.stderr
    return r


# ---- set-mode -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("release", [NEWER, V0_3_0], ids=lambda r: r.name)
def test_set_mode_vm_and_back(backend, release, npu_cluster):
    """NEWER: to vm and back, converging each way (the NPU pod evicted first, the node uncordoned last). V0_3_0:
    to vm is refused before any write (its sandbox plugin never leaves Init on a vm node); past that check
    (--skip-release-check), the wait times out with the plugin stuck; back to container (--reverse) converges."""
    kubelet, op = npu_cluster(release)
    backend.mark()
    if release is NEWER:
        r = run(backend, "node", "set-mode", "vm", "n1", "--yes", "--timeout", "60s", "-o", "json")
        assert r.exit_code == 0, r.stderr
        res = json.loads(r.stdout)["result"]
        assert res["changed"] and res["cordoned"] and res["uncordoned"]
        assert [p["name"] for p in res["evicted"]] == ["npu-app"]
        n = node(backend)
        assert n["metadata"]["labels"][MODE] == "vm-passthrough" and not n["spec"].get("unschedulable")
        assert n["status"]["allocatable"].get("rebellions.ai/RBLN-CA25_PF") == "2"
        assert backend.api.get("Pod", "npu-app", NS) is None  # evicted, and the kubelet confirmed it
    else:
        r = run(backend, "node", "set-mode", "vm", "n1", "--yes", "--timeout", "60s")
        assert r.exit_code == 1 and "upgrade the operator" in r.stderr, r.stderr
        assert backend.writes() == []
        r = run(backend, "node", "set-mode", "vm", "n1", "--yes", "--skip-release-check", "--timeout", "3s")
        assert r.exit_code == 5, r.stderr
        assert "sandbox-device-plugin" in r.stderr, r.stderr
        assert op.stuck_in_init
    back = ("--reverse",) if release is V0_3_0 else ()  # its switch to vm was left in progress
    r = run(backend, "node", "set-mode", "container", "n1", "--yes", *back, "--timeout", "60s", "-o", "json")
    assert r.exit_code == 0, r.stderr
    n = node(backend)
    assert n["metadata"]["labels"][MODE] == "container" and not n["spec"].get("unschedulable")
    assert RECORD not in (n["metadata"].get("annotations") or {})
    resource = release.container_resource(release.policy(**HYBRID), PRODUCT)
    assert n["status"]["allocatable"].get(resource) == "2"
    assert not [k for k in n["status"]["allocatable"] if k.endswith(("_PF", "_PT"))]
    assert kubelet.errors == [] and op.errors == []


# ---- drain: budgets, graceful deletion ------------------------------------------------------------------------


def npu_pod(name: str, node: str, *, app: str = "web", owner: str | None = "web", annotations=None) -> dict:
    return o.pod(NS, name, node=node, labels={"app": app}, owner_kind="ReplicaSet" if owner else None,
                 owner_name=owner, requests={"rebellions.ai/npu": "1"}, annotations=annotations)


def settle_budget(backend, name: str) -> None:
    """On a real server, until the disruption controller has computed the budget's status (the fake computes it at
    each eviction): a drain started before then meets 429 "still being processed" first (rblnctl backs off and
    tries again, as for any budget refusal), which would only make the scenario slower."""
    if backend.name == "real":
        backend.api.wait_for(lambda: (backend.api.get("PodDisruptionBudget", name, NS).get("status") or {}).get(
            "observedGeneration"), timeout_s=30, message=f"the disruption controller to compute budget {name}")


def test_drain_is_paced_by_a_budget_through_the_disruption_controller(backend):
    """A ReplicaSet of 3 (two NPU pods on n1, one on n2) under maxUnavailable 1: the first eviction is allowed, the
    second is refused (429, the budget's own words) until the first pod's replacement runs Ready on n2, then allowed
    on rblnctl's retry. A Pending NPU pod (no kubelet ever reported it) is evicted at once whatever the budget says."""
    backend.api.seed(o.npu_node("n1"), o.npu_node("n2"), o.replicaset(NS, "web", labels={"app": "web"}, replicas=3),
                     npu_pod("web-a", "n1"), npu_pod("web-b", "n1"), npu_pod("web-c", "n2"))
    backend.api.seed(o.replicaset(NS, "batch", labels={"app": "batch"}, replicas=2),
                     npu_pod("batch-ok", "n2", app="batch", owner="batch"))
    pending = npu_pod("batch-new", "n1", app="batch", owner="batch", annotations={HOLD: "true"})
    pending.pop("status")
    backend.api.seed(pending)
    backend.kubelet(["n1"])
    backend.kubelet(["n2"], ready_delay_s=2.0)  # a replacement runs Ready 2 s after it was created
    rs = backend.replicaset(NS, "web", node="n2", template=npu_pod("tpl", "n2"))
    budget = o.pdb(NS, "web", selector={"app": "web"}, max_unavailable=1)
    batch = o.pdb(NS, "batch", selector={"app": "batch"}, min_available=1)  # 1 healthy of 1: nothing may go
    for b in (budget, batch):
        b.pop("status")
        backend.api.create(b)
        settle_budget(backend, b["metadata"]["name"])
    backend.mark()
    r = run(backend, "node", "drain", "n1", "--yes", "--timeout", "60s", "-o", "json")
    assert r.exit_code == 0, r.stderr
    evicted = sorted(p["name"] for p in json.loads(r.stdout)["result"]["evicted"])
    assert evicted == ["batch-new", "web-a", "web-b"]
    refusals = [line for line in r.stderr.splitlines() if "PodDisruptionBudget refuses" in line]
    assert refusals and all("team-a/web-" in line for line in refusals), r.stderr  # batch-new never waited
    assert any("needs 2 healthy pods and has 2 currently" in line for line in refusals), r.stderr
    assert rs.created[:1] == ["web-r0"] and rs.errors == []
    assert sorted(p["metadata"]["name"] for p in backend.api.list("Pod", NS, fields="spec.nodeName=n1")) == []
    assert node(backend)["spec"]["unschedulable"] is True  # drain leaves the node cordoned, like kubectl
    evictions = [w for w in backend.writes() if w.path.endswith("/eviction")]
    assert len([w for w in evictions if "/web-" in w.path]) >= 3  # one allowed, one refused then allowed
    assert len([w for w in evictions if "/batch-new/" in w.path]) == 1


def test_a_budget_the_controller_cannot_compute_holds_the_drain_until_its_timeout(backend):
    """Pods owned by a ReplicaSet that does not exist: the disruption controller never computes the budget, and
    every eviction is 429 "still being processed" (Retry-After 10). rblnctl backs off, tries last at the deadline
    and fails naming the budget's words; the node is left cordoned with the pod still there."""
    backend.api.seed(o.npu_node("n1"), npu_pod("orphan", "n1", owner="gone"))
    backend.kubelet(["n1"])
    b = o.pdb(NS, "orphan", selector={"app": "web"}, min_available="50%")
    b.pop("status")
    backend.api.create(b)
    r = run(backend, "node", "drain", "n1", "--yes", "--timeout", "2s")
    assert r.exit_code == 5, r.stderr
    assert "still being processed by the server" in r.stderr and "team-a/orphan" in r.stderr, r.stderr
    assert backend.api.get("Pod", "orphan", NS)["metadata"].get("deletionTimestamp") is None


def test_a_drained_pod_stays_terminating_until_its_kubelet_confirms(backend):
    """Eviction is a graceful deletion: the pod keeps its deletionTimestamp until the kubelet confirms (DELETE
    gracePeriodSeconds 0). rblnctl waits for that, not for the eviction's 201: held, it times out naming the pod;
    released, the pod goes and a second drain has nothing left to do."""
    backend.api.seed(o.npu_node("n1"), o.replicaset(NS, "web", labels={"app": "web"}, replicas=1),
                     npu_pod("slow", "n1", annotations={HOLD_DELETION: "true"}))
    backend.kubelet(["n1"])
    r = run(backend, "node", "drain", "n1", "--yes", "--timeout", "2s")
    assert r.exit_code == 5, r.stderr
    assert "team-a/slow" in r.stderr and "evicted team-a/slow" in r.stderr, r.stderr
    pod = backend.api.get("Pod", "slow", NS)
    assert pod["metadata"]["deletionTimestamp"] and pod["metadata"]["deletionGracePeriodSeconds"] == 30
    backend.api.patch("Pod", "slow", {"metadata": {"annotations": {HOLD_DELETION: None}}}, NS)
    backend.api.wait_for(lambda: backend.api.get("Pod", "slow", NS) is None, message="the kubelet to confirm")
    r = run(backend, "node", "drain", "n1", "--yes", "--timeout", "10s")
    assert r.exit_code == 0, r.stderr


# ---- two runs at once ------------------------------------------------------------------------------------------


def rblnctl_process(backend, *args: str) -> subprocess.Popen:
    """rblnctl in a process of its own (two in-process runs would share sys.stdout), on the backend's kubeconfig."""
    return subprocess.Popen([sys.executable, "-m", "rblnctl", "--kubeconfig", str(backend.cli_kubeconfig), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_node_lock_lets_one_of_two_runs_at_once_through(backend, npu_cluster):
    """A switch to vm holds the node's Lease while it waits for the vfio-manager; a second run at that moment, to
    the other mode with --reverse --take-over, is refused naming the holder (a live lock is never taken over)
    and writes nothing; the first then finishes and gives the lock back."""
    _, op = npu_cluster(NEWER, component_delays={"vfio-manager": 600.0})  # Ready when the test says
    lease = ("Lease", "rblnctl-node-n1", "rbln-system")
    first = rblnctl_process(backend, "node", "set-mode", "vm", "n1", "--yes", "--timeout", "90s")
    try:
        backend.api.wait_for(lambda: node(backend)["metadata"]["labels"].get(MODE) == "vm-passthrough",
                             timeout_s=60, message="the first run to relabel (it then waits, holding the lock)")
        holder = backend.api.get(*lease)["spec"]["holderIdentity"]
        assert holder.startswith("rblnctl@") and f"pid {first.pid}: set-mode" in holder
        backend.mark()
        r = run(backend, "node", "set-mode", "container", "n1", "--yes", "--reverse", "--take-over", "--timeout",
                "30s")
        assert r.exit_code == 1, r.stderr
        assert "locked by rblnctl@" in r.stderr and f"pid {first.pid}" in r.stderr, r.stderr
        assert backend.writes() == []
        op.make_ready("n1", "vfio-manager")
        out, err = first.communicate(timeout=90)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, err
    assert backend.api.get(*lease) is None
    n = node(backend)
    assert n["metadata"]["labels"][MODE] == "vm-passthrough" and not n["spec"].get("unschedulable")


# ---- dry runs --------------------------------------------------------------------------------------------------


def test_a_dry_run_writes_nothing_and_a_server_dry_run_stores_nothing(backend, npu_cluster):
    """--dry-run: the plan, and not one write request (the real server's audit log is the judge there).
    --dry-run=server: every write sent with dryRun=All, admitted and validated, nothing stored."""
    npu_cluster(NEWER)
    before = node(backend)
    backend.mark()
    for args in (("node", "set-mode", "vm", "n1", "--dry-run"), ("node", "drain", "n1", "--dry-run")):
        r = run(backend, *args)
        assert r.exit_code == 0, r.stderr
    assert backend.writes() == []
    for args in (("node", "set-mode", "vm", "n1", "--dry-run=server", "--yes"),
                 ("node", "drain", "n1", "--dry-run=server", "--yes")):
        backend.mark()
        r = run(backend, *args)
        assert r.exit_code == 0, r.stderr
        writes = backend.writes()
        assert writes and all(w.dry_run for w in writes), writes
        assert {w.verb for w in writes} >= {"create", "patch"}
    after = node(backend)
    for part in ("labels", "annotations"):
        assert after["metadata"].get(part) == before["metadata"].get(part)
    assert after["spec"] == before["spec"]  # (its status moves: the kubelet beats)
    assert backend.api.get("Lease", "rblnctl-node-n1", "rbln-system") is None
    assert backend.api.get("Pod", "npu-app", NS)["metadata"].get("deletionTimestamp") is None


# ---- lost replies ----------------------------------------------------------------------------------------------


def test_node_writes_whose_replies_are_lost_are_settled_by_reading_back(backend, npu_cluster):
    """Every node write of a switch (record, cordon, relabel, uncordon) is applied and its reply lost: rblnctl reads
    the node back each time, sees it landed, goes on, and never sends a landed write again."""
    npu_cluster(NEWER)
    backend.lose_reply("PATCH", r"^/api/v1/nodes/n1$", times=4)
    backend.mark()
    r = run(backend, "node", "set-mode", "vm", "n1", "--yes", "--timeout", "60s")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("was lost") >= 4, r.stderr
    patches = [w for w in backend.writes() if w.verb == "patch" and w.path == "/api/v1/nodes/n1"]
    # Four landed, each once; a guarded write refused because the kubelet or the operator wrote the node first
    # (409) did not land, and is sent again from a fresh read.
    assert len([w for w in patches if w.code == 200]) == 4
    assert all(w.code in (200, 409) for w in patches), patches
    n = node(backend)
    assert n["metadata"]["labels"][MODE] == "vm-passthrough" and not n["spec"].get("unschedulable")
    assert RECORD not in (n["metadata"].get("annotations") or {})


def test_an_eviction_whose_reply_is_lost_is_settled_by_reading_back(backend, npu_cluster):
    npu_cluster(NEWER)
    backend.lose_reply("POST", r"/namespaces/team-a/pods/npu-app/eviction$")
    backend.mark()
    r = run(backend, "node", "drain", "n1", "--yes", "--timeout", "60s", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert [p["name"] for p in json.loads(r.stdout)["result"]["evicted"]] == ["npu-app"]
    assert len([w for w in backend.writes() if w.path.endswith("/npu-app/eviction")]) == 1
    assert backend.api.get("Pod", "npu-app", NS) is None


# ---- dry runs never wait (issue 37, finding 6) ------------------------------------------------------------------


def test_a_server_dry_run_reports_a_budget_refusal_once_and_does_not_wait_for_it(backend, npu_cluster):
    """`node set-mode vm n1 --dry-run=server` with a budget that allows no eviction: before, it retried until
    --timeout (600 s), 4 lines per pod per attempt, then said the pods did not leave (exit 5). Now one dry-run
    eviction, the refusal said once with the budget's numbers, exit 1 (the server refused a write);
    nothing persisted."""
    npu_cluster(NEWER)
    budget = o.pdb(NS, "web", selector={"app": "web"}, min_available=1)  # 1 healthy of 1: nothing may go
    budget.pop("status")
    backend.api.create(budget)
    settle_budget(backend, "web")
    backend.mark()
    r = run(backend, "node", "set-mode", "vm", "n1", "--dry-run=server", "--timeout", "600s")
    assert r.exit_code == 1, r.stderr
    flat = " ".join(r.stderr.split())
    assert f"server dry run: disruption budgets refuse evicting {NS}/npu-app now; a real run retries for up to 600s" \
        in flat, r.stderr
    assert f"PodDisruptionBudget {NS}/web needs 1 healthy pod(s) and has 1" in flat, r.stderr
    assert "PodDisruptionBudget refuses" not in flat and "did not leave" not in flat, r.stderr  # no retry lines
    evictions = [w for w in backend.writes() if w.path.endswith("/eviction")]
    assert len(evictions) == 1 and all(w.dry_run for w in evictions), evictions
    assert not [w for w in backend.writes() if not w.dry_run]
    n = node(backend)
    assert n["metadata"]["labels"][MODE] == "container" and not n["spec"].get("unschedulable")
    assert backend.api.get("Pod", "npu-app", NS)["metadata"].get("deletionTimestamp") is None
