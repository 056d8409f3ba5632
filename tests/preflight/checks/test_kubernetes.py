"""`kubernetes.version` against the method's floor."""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.preflight.cluster_support import seed, run, cluster


def test_old_kubernetes_for_dra(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.set_version("v1.33.2")
    c = cluster(run(kube))
    k = c["kubernetes.version"]
    assert k.status == Status.FAIL and k.evidence == "v1.33.2 < 1.34.0, the dra method's floor"
    assert "sandbox method" in k.remedy


def test_kubernetes_floor_for_sandbox(apiserver, kube):
    seed(apiserver)
    apiserver.set_version("v1.18.20")
    assert cluster(run(kube))["kubernetes.version"].status == Status.FAIL
    apiserver.set_version("v1.19.0")
    assert cluster(run(kube))["kubernetes.version"].status == Status.PASS

