"""`helm.version` through the helm runner seam: no helm binary is ever run."""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.preflight.cluster_support import cluster, fake_helm, run, seed


def test_helm_versions(apiserver, kube):
    seed(apiserver, nodes=1)
    assert cluster(run(kube))["helm.version"].status == Status.SKIP
    h = cluster(run(kube, helm=fake_helm("v3.8.2+g6e3701e")))["helm.version"]
    assert h.status == Status.FAIL and "v3.8.2+g6e3701e < 3.9.0" in h.evidence and "/opt/bin/helm" in h.evidence
    assert cluster(run(kube, helm=fake_helm("v3.14.2+gc309b6f")))["helm.version"].status == Status.PASS
    h = cluster(run(kube, helm=fake_helm("Error: boom", code=1)))["helm.version"]
    assert h.status == Status.WARN and "exited 1" in h.evidence and "Error: boom" in h.evidence
    h = cluster(run(kube, helm=fake_helm("helm, built from source")))["helm.version"]
    assert h.status == Status.WARN and "no version" in h.evidence
