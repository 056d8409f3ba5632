"""`dra.driver` and `dra.deviceclass`."""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.preflight.cluster_support import dra_daemonset, seed, run, cluster


def test_dra_driver_missing_and_deviceclass_missing(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.delete_now("DeviceClass", "vfio-npu.rebellions.ai")
    c = cluster(run(kube))
    assert c["dra.driver"].status == Status.FAIL and "draKubeletPlugin.enabled=true" in c["dra.driver"].remedy
    assert c["dra.deviceclass"].status == Status.FAIL


def test_dra_driver_too_old(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.add(dra_daemonset("v0.2.0"))
    d = cluster(run(kube))["dra.driver"]
    assert d.status == Status.FAIL and "v0.2.0 < 0.2.1" in d.evidence


def test_dra_driver_not_ready_warns(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.add(dra_daemonset(desired=3, ready=1))
    d = cluster(run(kube))["dra.driver"]
    assert d.status == Status.WARN and "1/3 ready" in d.evidence


def test_dra_daemonset_list_forbidden(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.forbid("list", "daemonsets")
    d = cluster(run(kube))["dra.driver"]
    assert d.status == Status.WARN and "forbidden" in d.evidence
    assert "grant `list` on `daemonsets.apps` cluster-wide" in d.remedy

