"""`operator.version`: found by label, chart label or image tag; floors per method; unknown warns."""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.preflight.cluster_support import operator_deployment, seed, run, cluster


def test_operator_missing(apiserver, kube):
    seed(apiserver)
    apiserver.delete_now("Deployment", "rbln-npu-operator", "rbln-system")
    apiserver.remove_resource("rblnclusterpolicies.rebellions.ai")
    report = run(kube)
    c = cluster(report)
    assert c["operator.version"].status == Status.FAIL and "helm upgrade --install" in c["operator.version"].remedy
    assert c["operator.policy"].status == Status.SKIP
    assert c["cluster.method"].status == Status.WARN and report.method == "sandbox"


def test_operator_below_the_documented_minimum_but_supported_warns(apiserver, kube):
    seed(apiserver, operator=operator_deployment("0.4.0"))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.WARN and "0.4.0 < 0.4.4" in op.evidence and "supports releases from 0.3.0" in op.evidence


def test_operator_older_than_rblnctl_supports(apiserver, kube):
    seed(apiserver, operator=operator_deployment("0.2.2"))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.FAIL and "0.2.2 < 0.4.4" in op.evidence


def test_operator_too_old_for_dra_only(apiserver, kube):
    seed(apiserver, method="dra", operator=operator_deployment("0.5.2"))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.FAIL and "0.5.2 < 0.6.0, the dra method's floor" in op.evidence


def test_operator_version_unknown_is_a_warning(apiserver, kube):
    seed(apiserver, operator=operator_deployment(None))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.WARN and "version unknown" in op.evidence


def test_operator_found_by_chart_label_and_image_tag(apiserver, kube):
    dep = operator_deployment(None, name="npu-operator", labels={"helm.sh/chart": "rbln-npu-operator-0.5.1"},
                              image="registry.local/rebellions/rbln-npu-operator:v0.5.1")
    seed(apiserver, operator=dep)
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.PASS and "0.5.1" in op.evidence and "helm.sh/chart" in op.evidence
    dep2 = operator_deployment(None, name="rbln-npu-operator-controller", labels={},
                               image="registry.local/rebellions/rbln-npu-operator:v0.4.1")
    apiserver.delete_now("Deployment", "npu-operator", "rbln-system")
    apiserver.add(dep2)
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.WARN and "0.4.1" in op.evidence and "from image" in op.evidence


def test_unreadable_policy_does_not_claim_the_operator_is_missing(apiserver, kube):
    seed(apiserver, operator=operator_deployment(namespace="elsewhere", labels={}))
    apiserver.forbid("list", "rblnclusterpolicies")
    c = cluster(run(kube))
    m = c["cluster.method"]
    assert m.status == Status.WARN and "install the RBLN NPU Operator" not in m.remedy and "--method" in m.remedy
    op = c["operator.version"]
    assert "(the RBLNClusterPolicy CRD is installed)" not in op.evidence and "unknown" in op.evidence

