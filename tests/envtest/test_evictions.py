"""What pods/eviction answers under PodDisruptionBudgets, on the fake and on a real kube-apiserver alike.

The real server judges a budget on the status its disruption controller computed (kube-controller-manager's
``disruption`` controller runs in the real tier); the fake computes that status at the eviction
(tests/fakes/apiserver/eviction.py). Each case evicts through the harness's own client and compares the answer:
the code, the Status reason and the cause's message, word for word.
"""

from __future__ import annotations

import pytest

from tests.cluster.client import ApiFailure
from tests.fakes import objects as o

NS = "team-a"


def evict(backend, name: str) -> tuple[int, dict | None]:
    try:
        backend.api.request("POST", f"/api/v1/namespaces/{NS}/pods/{name}/eviction",
                            {"apiVersion": "policy/v1", "kind": "Eviction",
                             "metadata": {"name": name, "namespace": NS}})
    except ApiFailure as e:
        return e.status, e.body
    return 201, None


def cause(body: dict | None) -> str:
    return ((body or {}).get("details") or {}).get("causes", [{}])[0].get("message", "")


def budget(backend, name: str, **spec) -> None:
    """Create a budget and, on a real server, wait until its controller has looked at it."""
    pdb = o.pdb(NS, name, **spec)
    pdb.pop("status")
    backend.api.create(pdb)
    settle(backend, name)


def settle(backend, name: str) -> None:
    """On a real server: until the disruption controller's status of the budget matches the pods as they are now
    (the fake computes it at each eviction)."""
    if backend.name != "real":
        return

    def caught_up() -> bool:
        pdb = backend.api.get("PodDisruptionBudget", name, NS)
        st = pdb.get("status") or {}
        if any(c.get("reason") == "SyncFailed" for c in st.get("conditions") or []):
            return True
        if st.get("observedGeneration") != pdb["metadata"]["generation"]:
            return False
        sel = pdb["spec"]["selector"]["matchLabels"]
        pods = backend.api.list("Pod", NS, labels=",".join(f"{k}={v}" for k, v in sel.items()))
        ready = [p for p in pods if not p["metadata"].get("deletionTimestamp") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions") or [])]
        return st.get("currentHealthy") == len(ready) and not st.get("disruptedPods")

    backend.api.wait_for(caught_up, timeout_s=30, message=f"the disruption controller to settle budget {name}")


def pods(backend, app: str, n: int, *, owner: tuple[str, str] | None = None, status: bool = True) -> list[str]:
    names = [f"{app}-{i}" for i in range(n)]
    for name in names:
        p = o.pod(NS, name, node="n1", labels={"app": app}, owner_kind=owner[0] if owner else None,
                  owner_name=owner[1] if owner else None)
        if not status:
            p.pop("status")
        backend.api.seed(p)
    return names


@pytest.fixture
def cluster(backend):
    backend.api.seed(o.node("n1"))
    return backend


def test_a_budget_paces_evictions_of_a_replicaset(cluster):
    cluster.api.seed(o.replicaset(NS, "web", labels={"app": "web"}, replicas=3))
    pods(cluster, "web", 3, owner=("ReplicaSet", "web"))
    budget(cluster, "web", selector={"app": "web"}, max_unavailable=1)
    assert evict(cluster, "web-0") == (201, None)
    assert cluster.api.get("Pod", "web-0", NS)["metadata"]["deletionTimestamp"]  # Terminating: no kubelet here
    settle(cluster, "web")
    code, body = evict(cluster, "web-1")
    assert (code, body["reason"], body["message"]) == (
        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
    assert cause(body) == "The disruption budget web needs 2 healthy pods and has 2 currently"
    assert "retryAfterSeconds" not in body["details"]


def test_a_pending_pod_is_evicted_whatever_its_budget_says(cluster):
    pods(cluster, "db", 2)
    pods(cluster, "db-new", 1, status=False)  # no kubelet ever reported it: Pending
    cluster.api.patch("Pod", "db-new-0", {"metadata": {"labels": {"app": "db"}}}, NS)
    budget(cluster, "db", selector={"app": "db"}, min_available=2)
    code, body = evict(cluster, "db-0")
    assert code == 429 and cause(body) == "The disruption budget db needs 2 healthy pods and has 2 currently"
    assert evict(cluster, "db-new-0") == (201, None)


def test_a_budget_over_pods_without_a_controller(cluster):
    pods(cluster, "loose", 2)
    budget(cluster, "loose", selector={"app": "loose"}, max_unavailable=1)  # expects no pod: allows nothing
    code, body = evict(cluster, "loose-0")
    assert code == 429 and cause(body) == "The disruption budget loose does not allow evicting pods currently"
    pods(cluster, "fixed", 2)
    budget(cluster, "fixed", selector={"app": "fixed"}, min_available=1)  # an integer needs no controller
    assert evict(cluster, "fixed-0") == (201, None)


@pytest.mark.parametrize("owner", ["missing ReplicaSet", "DaemonSet"])
def test_a_budget_whose_controller_cannot_be_found_is_still_being_processed(cluster, owner):
    if owner == "DaemonSet":  # a DaemonSet has no scale subresource
        cluster.api.seed(o.daemonset(NS, "agent", labels={"app": "agent"}))
        pods(cluster, "agent", 2, owner=("DaemonSet", "agent"))
    else:
        pods(cluster, "agent", 2, owner=("ReplicaSet", "gone"))
    budget(cluster, "agent", selector={"app": "agent"}, min_available="50%")
    code, body = evict(cluster, "agent-0")
    assert (code, body["reason"]) == (429, "TooManyRequests")
    assert cause(body) == "The disruption budget agent is still being processed by the server."
    assert body["details"]["retryAfterSeconds"] == 10


def test_an_unready_pod_goes_past_its_budget_only_while_some_pods_must_stay_healthy(cluster):
    """The IfHealthyBudget shortcut (an unready pod may go while the budget holds) needs desiredHealthy > 0: under
    maxUnavailable 100% nothing must stay healthy, and an unready pod is judged by disruptionsAllowed like any."""
    cluster.api.seed(o.replicaset(NS, "warm", labels={"app": "warm"}, replicas=2))
    for name in ("warm-0", "warm-1"):
        cluster.api.seed(o.pod(NS, name, node="n1", labels={"app": "warm"}, owner_kind="ReplicaSet",
                               owner_name="warm", ready=False))
    budget(cluster, "warm", selector={"app": "warm"}, max_unavailable="100%")
    code, body = evict(cluster, "warm-0")
    assert code == 429 and cause(body) == "The disruption budget warm needs 0 healthy pods and has 0 currently"
    cluster.api.seed(o.replicaset(NS, "cold", labels={"app": "cold"}, replicas=2))
    cluster.api.seed(o.pod(NS, "cold-0", node="n1", labels={"app": "cold"}, owner_kind="ReplicaSet",
                           owner_name="cold", ready=False),
                     o.pod(NS, "cold-1", node="n1", labels={"app": "cold"}, owner_kind="ReplicaSet",
                           owner_name="cold"))
    budget(cluster, "cold", selector={"app": "cold"}, min_available=1)  # 1 healthy, 1 needed: the shortcut
    assert evict(cluster, "cold-0") == (201, None)


# ---- the pod rblnctl decided on: preconditions.uid (issue 37) ---------------------------------------------------


@pytest.mark.parametrize("disable_eviction", [False, True], ids=["evict", "delete"])
def test_a_pod_recreated_under_its_name_is_reported_not_evicted(backend, disable_eviction):
    """rblnctl's eviction (or --disable-eviction's DELETE) carries preconditions.uid of the pod it listed. Here the
    pod was deleted and re-created under the same name in between: the server answers 409 and rblnctl reports the
    replacement, leaving the new pod alone. Before: the new pod was evicted in its place."""
    from rblnctl.kube import KubeOptions, connect
    from rblnctl.node.evict import Evictor
    from rblnctl.node.events import NodeEvents
    from rblnctl.node.options import DrainOptions
    from rblnctl.node.pods import PodRef

    backend.api.seed(o.npu_node("n1"), o.pod(NS, "web-0", node="n1", labels={"app": "web"}))
    old = backend.api.get("Pod", "web-0", NS)["metadata"]["uid"]
    backend.api.delete("Pod", "web-0", NS, grace_s=0)
    backend.api.wait_for(lambda: backend.api.get("Pod", "web-0", NS) is None, message="web-0 gone")
    backend.api.seed(o.pod(NS, "web-0", node="n1", labels={"app": "web"}))  # a StatefulSet's re-creation
    new = backend.api.get("Pod", "web-0", NS)["metadata"]["uid"]
    assert new != old
    warned: list[str] = []
    kube = connect(KubeOptions(kubeconfig=str(backend.kubeconfig)))
    evictor = Evictor(kube=kube, options=DrainOptions(disable_eviction=disable_eviction),
                      events=NodeEvents(on_warning=warned.append))
    backend.mark()
    outcome = evictor.evict([PodRef(namespace=NS, name="web-0", uid=old)], deadline=float("inf"))
    assert outcome.replaced == [PodRef(namespace=NS, name="web-0", uid=old)] and outcome.evicted == []
    assert warned == [f"pod {NS}/web-0 was deleted and re-created (another uid) since rblnctl listed it: the new pod "
                      "is not evicted"]
    pod = backend.api.get("Pod", "web-0", NS)
    assert pod["metadata"]["uid"] == new and not pod["metadata"].get("deletionTimestamp")
    (sent,) = [w for w in backend.writes() if "/pods/web-0" in w.path]
    assert sent.code == 409, sent
