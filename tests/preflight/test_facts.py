"""Reading the facts: where the operator is looked for, and a refused or failed read is a finding, not a crash."""

from __future__ import annotations

from rblnctl.preflight.facts import find_operator
from rblnctl.preflight.model import Status
from tests.fakes.clock import FakeClock
from tests.preflight.cluster_support import seed, run, cluster, per_node


def test_find_operator_uses_one_request_when_labelled(apiserver, kube):
    seed(apiserver, nodes=1)
    apiserver.clear_requests()
    found = find_operator(kube)
    assert found.ok and len(found.value) == 1 and len(apiserver.requests) == 1
    assert apiserver.requests[0].query["labelSelector"] == ["app.kubernetes.io/name=rbln-npu-operator"]


def test_forbidden_kubevirt_list_is_a_finding(apiserver, kube):
    seed(apiserver)
    apiserver.forbid("list", "kubevirts")
    report = run(kube)
    k = cluster(report)["kubevirt.installed"]
    assert k.status == Status.WARN and "forbidden" in k.evidence
    assert "grant `list` on `kubevirts.kubevirt.io` cluster-wide" in k.remedy
    assert "kubectl auth can-i list kubevirts.kubevirt.io -A" in k.remedy
    assert cluster(report)["kubevirt.gates"].status == Status.SKIP


def test_forbidden_node_list_is_a_finding(apiserver, kube):
    seed(apiserver)
    apiserver.forbid("list", "nodes")
    report = run(kube)
    n = cluster(report)["nfd.npu-nodes"]
    assert n.status == Status.WARN and "`list` on `nodes`" in n.remedy
    assert report.nodes == 0


def test_forbidden_node_features_list_is_a_finding(apiserver, kube):
    seed(apiserver, nodes=2)
    apiserver.forbid("list", "nodefeatures")
    report = run(kube)
    n = cluster(report)["nfd.installed"]
    assert n.status == Status.WARN and "`list` on `nodefeatures.nfd.k8s-sigs.io`" in n.remedy
    r = per_node(report, "node.vfio-modules")["npu-0000"]
    assert r.status == Status.WARN and "could not be read (see nfd.installed)" in r.evidence


def test_server_error_on_one_list_is_a_finding(apiserver, kube):
    seed(apiserver)
    apiserver.inject_fault(method="GET", path=r"/rblnclusterpolicies$", status=500, message="etcd timeout", times=4)
    kube.clock = FakeClock()  # the read is tried 4 times before it becomes a finding
    c = cluster(run(kube))
    assert c["operator.policy"].status == Status.WARN and "etcd timeout" in c["operator.policy"].evidence

