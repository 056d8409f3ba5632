"""ClusterPreflight end to end on the fake API server: healthy clusters, --node/-l, failures, scale."""

from __future__ import annotations

import pytest

from rblnctl.errors import ClusterUnreachable, InvalidInput
from rblnctl.kube import KubeOptions, connect
from rblnctl.preflight.cluster import ClusterPreflight
from rblnctl.preflight.model import Status, group_checks
from tests.fakes import objects as o
from tests.helpers import closed_port_url
from tests.preflight.cluster_support import (CA22_PF, CLUSTER_IDS, NODE_IDS, VM, cluster, nfd_features, per_node,
                                             problems, run, seed)


def test_healthy_sandbox_cluster(apiserver, kube):
    names = seed(apiserver, method="sandbox")
    report = run(kube)
    assert problems(report) == []
    assert report.method == "sandbox" and report.summary.ok and report.nodes == 3
    assert [c.id for c in report.checks if c.scope == "cluster"] == CLUSTER_IDS
    c = cluster(report)
    assert c["cluster.method"].evidence.startswith("sandbox: auto: RBLNClusterPolicy rbln-cluster-policy enables "
                                                   "sandboxDevicePlugin")
    assert c["operator.version"].evidence == ("rbln-system/rbln-npu-operator 0.6.0 >= 0.4.4 (from label "
                                              "app.kubernetes.io/version)")
    assert c["dra.driver"].status == Status.SKIP and c["helm.version"].status == Status.SKIP
    assert CA22_PF in c["kubevirt.permitted-devices"].evidence
    for id_ in NODE_IDS:
        assert set(per_node(report, id_)) == set(names)
    # identical per-node results collapse to one group per check
    groups = group_checks(c for c in report.checks if c.scope not in ("cluster", "host"))
    assert [(g.id, g.status, len(g.scopes)) for g in groups] == [(i, Status.PASS, 3) for i in NODE_IDS]


def test_healthy_dra_cluster(apiserver, kube):
    seed(apiserver, method="dra")
    report = run(kube)
    assert problems(report) == []
    c = cluster(report)
    assert report.method == "dra" and "enables draKubeletPlugin" in c["cluster.method"].evidence
    assert c["dra.driver"].status == Status.PASS and "v0.2.1 >= 0.2.1" in c["dra.driver"].evidence
    assert c["dra.deviceclass"].status == Status.PASS
    assert c["kubevirt.permitted-devices"].status == Status.SKIP
    assert "HostDevicesWithDRA: in featureGates" in c["kubevirt.gates"].evidence


def test_invalid_options(kube):
    with pytest.raises(InvalidInput, match="unknown method 'vfio'"):
        ClusterPreflight(kube=kube, method="vfio")
    with pytest.raises(InvalidInput, match="give --node or --selector, not both"):
        ClusterPreflight(kube=kube, node="n1", selector="a=b")


def test_single_node(apiserver, kube):
    seed(apiserver, nodes=5)
    apiserver.clear_requests()
    report = run(kube, node="npu-0003")
    assert {c.scope for c in report.checks if c.scope != "cluster"} == {"npu-0003"}
    assert report.nodes == 1 and problems(report) == []
    assert not any(r.path == "/api/v1/nodes" for r in apiserver.requests)  # one GET, no node list
    report = run(kube, node="ghost")
    assert cluster(report)["nfd.npu-nodes"].status == Status.FAIL


def test_selector_narrows_nodes(apiserver, kube):
    seed(apiserver, nodes=3)
    apiserver.add(o.npu_node("gpu-ish", mode=VM, labels={"pool": "b"}), nfd_features("gpu-ish"))
    report = run(kube, selector="pool=b")
    assert {c.scope for c in report.checks if c.scope != "cluster"} == {"gpu-ish"}


def test_bad_selector_is_invalid_input_not_a_passing_run(apiserver, kube):
    seed(apiserver)
    with pytest.raises(InvalidInput) as err:
        run(kube, selector="bad selector!!")
    assert "bad selector!!" in str(err.value)


def test_unreachable_server_raises():
    url = closed_port_url()
    kube = connect(KubeOptions(server=url, request_timeout_s=2))
    with pytest.raises(ClusterUnreachable, match=url):
        ClusterPreflight(kube=kube).run()


@pytest.mark.parametrize("method", ["sandbox", "dra"])
def test_thousand_nodes_bounded_requests(apiserver, kube, method):
    seed(apiserver, method=method, nodes=1000)
    apiserver.clear_requests()
    before = kube.request_count
    report = run(kube)
    sent = kube.request_count - before
    assert sent == len(apiserver.requests) and sent < 20, [r.path for r in apiserver.requests]
    assert report.nodes == 1000 and problems(report) == []
    assert len(report.checks) == len(CLUSTER_IDS) + 1000 * len(NODE_IDS)
    groups = group_checks(c for c in report.checks if c.scope != "cluster")
    assert len(groups) == len(NODE_IDS)  # one row per check, not 1,000
    # NodeFeature objects are listed once for all nodes, never per node
    nf = [r for r in apiserver.requests if "nodefeatures" in r.path]
    assert all(r.path == "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeatures" for r in nf) and len(nf) <= 3


def test_grouping_of_mixed_results(apiserver, kube):
    seed(apiserver, nodes=4)
    apiserver.mutate("Node", "npu-0001", fn=lambda n: n["metadata"]["labels"].update(
        {"rebellions.ai/npu.workload.config": "VM"}))
    report = run(kube)
    groups = [g for g in group_checks(c for c in report.checks if c.scope != "cluster") if g.id == "node.mode-label"]
    assert [(g.status, g.scopes) for g in groups] == [
        (Status.FAIL, ["npu-0001"]), (Status.PASS, ["npu-0000", "npu-0002", "npu-0003"])]

