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



def test_a_read_answered_404_never_says_failed_none(apiserver, kube):
    """issue 21: a read that found nothing (404, no error text) printed `cannot get version (failed): None`."""
    seed(apiserver)
    apiserver.inject_fault(method="GET", path=r"^/version$", status=404, reason="NotFound", times=10)
    k = cluster(run(kube))["kubernetes.version"]
    assert k.status == Status.WARN
    assert "None" not in k.evidence and "404" in k.evidence
    assert "does not serve" in k.remedy


def test_kubernetes_1_37_with_kubevirt_1_9_is_said_and_checked_as_usual(apiserver, kube):
    """Issue 41.7: Kubernetes 1.37 is released; KubeVirt 1.9 documents 1.34-1.36. preflight names the pair outside
    KubeVirt's support (WARN) and judges the rest as on 1.36: no 1.36-only assumption fails the DRA checks."""
    seed(apiserver, method="dra")
    apiserver.set_version("v1.37.0")
    c = cluster(run(kube))
    assert c["kubernetes.version"].status == Status.PASS
    kv = c["kubevirt.version"]
    assert kv.status == Status.WARN and "1.34 to 1.36" in kv.evidence and "runs 1.37" in kv.evidence
    assert c["dra.driver"].status == Status.PASS and c["dra.deviceclass"].status == Status.PASS
