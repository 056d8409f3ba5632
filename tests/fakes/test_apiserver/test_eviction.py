"""pods/eviction: PodDisruptionBudgets, the eviction hook, graceful eviction."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.test_apiserver.helpers import err_body, raw


def _eviction(name, ns="default"):
    return client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))


def test_eviction_respects_pod_disruption_budgets(apiserver, core):
    apiserver.add(o.pdb("default", "web-pdb", selector={"app": "web"}, min_available=2),
                  *(o.pod("default", f"web-{i}", node="n1", labels={"app": "web"}) for i in range(3)),
                  o.pod("default", "other", node="n1"))
    core.create_namespaced_pod_eviction("web-0", "default", _eviction("web-0"))
    assert apiserver.requests[-1].status == 201 and apiserver.get("Pod", "web-0", "default") is None
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("web-1", "default", _eviction("web-1"))
    body = err_body(exc.value)
    assert exc.value.status == 429 and body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    budget = "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget", "message": budget}]
    assert apiserver.get("Pod", "web-1", "default") is not None
    core.create_namespaced_pod_eviction("other", "default", _eviction("other"))  # no PDB covers it
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("ghost", "default", _eviction("ghost"))
    assert exc.value.status == 404 and err_body(exc.value)["message"] == 'pods "ghost" not found'


def test_eviction_max_unavailable_percent_and_unready_pods(apiserver, core):
    owned = dict(labels={"app": "db"}, owner_kind="ReplicaSet", owner_name="db")
    apiserver.add(o.replicaset("default", "db", labels={"app": "db"}, replicas=4),
                  o.pdb("default", "pdb", selector={"app": "db"}, max_unavailable="50%"),
                  o.pod("default", "db-0", node="n1", **owned),
                  o.pod("default", "db-1", node="n1", ready=False, **owned),
                  o.pod("default", "db-2", node="n1", **owned),
                  o.pod("default", "db-3", node="n1", **owned))
    # Scale 4 (from the ReplicaSet), maxUnavailable 50% -> 2 must stay healthy; 3 are healthy now.
    core.create_namespaced_pod_eviction("db-1", "default", _eviction("db-1"))  # unready pod may go
    core.create_namespaced_pod_eviction("db-0", "default", _eviction("db-0"))
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("db-2", "default", _eviction("db-2"))
    assert exc.value.status == 429
    assert "needs 2 healthy pods and has 2 currently" in err_body(exc.value)["details"]["causes"][0]["message"]


def test_eviction_hook_and_forbidden_eviction(apiserver, core):
    apiserver.add(o.pod("default", "p", node="n1"))
    apiserver.eviction_hook = lambda pod, body: (429, "not now") if pod["metadata"]["name"] == "p" else None
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("p", "default", _eviction("p"))
    assert exc.value.status == 429 and err_body(exc.value)["message"] == "not now"
    apiserver.eviction_hook = None
    apiserver.forbid("create", "pods/eviction", namespace="default")
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("p", "default", _eviction("p"))
    body = err_body(exc.value)
    assert exc.value.status == 403
    assert body["message"] == ('pods "p" is forbidden: User "fake-user" cannot create resource "pods/eviction" '
                               'in API group "" in the namespace "default"')
    assert apiserver.get("Pod", "p", "default") is not None


def test_graceful_eviction_keeps_pod_until_delay():
    with FakeApiServer(deletion_delay_s=0.2) as fake:
        fake.add(o.pod("default", "p", node="n1"))
        status, body, _ = raw(fake, "POST", "/api/v1/namespaces/default/pods/p/eviction",
                              {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}})
        assert status == 201 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                          "status": "Success", "code": 201}
        assert fake.get("Pod", "p", "default")["metadata"]["deletionTimestamp"]
        deadline = time.monotonic() + 5  # a bound for a slow machine, not the expected time
        while fake.get("Pod", "p", "default") is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake.get("Pod", "p", "default") is None
