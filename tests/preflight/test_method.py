"""Choosing the allocation method: --method, or what the active RBLNClusterPolicy enables."""

from __future__ import annotations

from rblnctl.preflight.facts import Fetch
from rblnctl.preflight.method import choose_method
from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import seed, run, cluster


def test_method_auto_without_any_plugin_falls_back_to_sandbox_with_warning(apiserver, kube):
    seed(apiserver, policy=o.cluster_policy(sandbox=False, dra=False))
    report = run(kube)
    c = cluster(report)
    assert report.method == "sandbox"
    assert c["cluster.method"].status == Status.WARN and "neither" in c["cluster.method"].evidence
    assert c["operator.policy"].status == Status.FAIL


def test_method_flag_overrides_policy(apiserver, kube):
    seed(apiserver, method="sandbox")
    report = run(kube, method="dra")
    c = cluster(report)
    assert report.method == "dra" and c["cluster.method"].evidence == "dra: --method dra"
    assert c["operator.policy"].status == Status.FAIL
    assert "draKubeletPlugin is disabled but the dra method needs it" in c["operator.policy"].evidence
    assert c["dra.driver"].status == Status.FAIL and c["dra.deviceclass"].status == Status.FAIL


def test_choose_method_pure():
    def policies(**kw):
        return Fetch(verb="list", resource="rblnclusterpolicies.rebellions.ai", value=[o.cluster_policy(**kw)])

    assert choose_method("auto", policies(dra=True, sandbox=False))[0] == "dra"
    assert choose_method("auto", policies(dra=False, sandbox=True))[0] == "sandbox"
    assert choose_method("auto", policies(dra=False, sandbox=False))[2] == Status.WARN
    absent = Fetch(verb="list", resource="rblnclusterpolicies.rebellions.ai", absent=True)
    assert choose_method("auto", absent)[:3] == ("sandbox", "auto: no RBLNClusterPolicy CRD, so checking the "
                                                 "sandbox method", Status.WARN)
    assert choose_method("sandbox", absent)[2] == Status.PASS



def test_method_remedy_turns_the_device_plugin_off_for_dra_only_when_it_is_on(apiserver, kube):
    seed(apiserver, policy=o.cluster_policy(sandbox=False, dra=False, device_plugin=False))
    m = cluster(run(kube))["cluster.method"]
    assert '"draKubeletPlugin":{"enabled":true}' in m.remedy and "devicePlugin" not in m.remedy
    apiserver.delete_now("RBLNClusterPolicy", "rbln-cluster-policy")
    apiserver.add(o.cluster_policy(sandbox=False, dra=False, device_plugin=True))
    m = cluster(run(kube))["cluster.method"]
    assert '"draKubeletPlugin":{"enabled":true},"devicePlugin":{"enabled":false}' in m.remedy
