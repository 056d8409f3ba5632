"""`nfd.installed` and `nfd.npu-nodes`."""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import seed, run, cluster


def test_nfd_missing(apiserver, kube):
    seed(apiserver, features=False, nodes=0)
    apiserver.remove_resource("nodefeatures.nfd.k8s-sigs.io")
    # the operator's own label marks the node, NFD's are absent
    node = o.node("npu-x", labels={"rebellions.ai/npu.present": "true"})
    apiserver.add(node)
    report = run(kube)
    c = cluster(report)
    assert c["nfd.installed"].status == Status.FAIL and "nfd.enabled=true" in c["nfd.installed"].remedy
    assert any(r.path.endswith("/pods") for r in apiserver.requests)  # looked for NFD pods before failing
    apiserver.add(o.pod("node-feature-discovery", "nfd-worker-abc",
                        labels={"app.kubernetes.io/name": "node-feature-discovery"}))
    assert cluster(run(kube))["nfd.installed"].status == Status.PASS


def test_no_npu_nodes(apiserver, kube):
    seed(apiserver, nodes=0)
    apiserver.add(o.node("cpu-1"))
    report = run(kube)
    c = cluster(report)
    assert c["nfd.npu-nodes"].status == Status.FAIL and c["nodes.vm-mode"].status == Status.SKIP
    assert report.nodes == 0 and not [x for x in report.checks if x.scope not in ("cluster",)]

