"""`dra.driver` and `dra.deviceclass`."""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import dra_daemonset, seed, run, cluster


def test_dra_driver_missing_and_deviceclass_missing(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.delete_now("DeviceClass", "vfio-npu.rebellions.ai")
    c = cluster(run(kube))
    assert c["dra.driver"].status == Status.FAIL and "draKubeletPlugin.enabled=true" in c["dra.driver"].remedy
    assert c["dra.deviceclass"].status == Status.FAIL


def test_dra_driver_too_old(apiserver, kube):
    seed(apiserver, method="dra", slices=False)
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



def test_dra_driver_below_the_floor_only_warns_when_its_slices_offer_vfio_devices(apiserver, kube):
    names = seed(apiserver, method="dra", slices=False)
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.add(dra_daemonset("v0.2.0"), *(o.resource_slice(n) for n in names))
    d = cluster(run(kube))["dra.driver"]
    assert d.status == Status.WARN and "v0.2.0 < 0.2.1" in d.evidence
    assert "offer 3 vfio device(s) on 3 node(s)" in d.evidence


def test_dra_driver_below_the_floor_with_no_vm_node_is_not_a_blocker(apiserver, kube):
    seed(apiserver, method="dra", mode="container")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.add(dra_daemonset("v0.2.0"))
    d = cluster(run(kube))["dra.driver"]
    assert d.status == Status.WARN and "no node is in vm-passthrough mode" in d.evidence


def test_deviceclass_is_the_one_the_policy_names(apiserver, kube):
    policy = o.cluster_policy(sandbox=False, dra=True, device_plugin=False)
    policy["spec"]["draKubeletPlugin"]["driverName"] = "npu.example.com"
    seed(apiserver, method="dra", policy=policy)
    dc = cluster(run(kube))["dra.deviceclass"]
    assert dc.status == Status.FAIL and "vfio-npu.example.com" in dc.evidence  # the default one exists, not this
    apiserver.add(o.deviceclass("vfio-npu.example.com", driver="npu.example.com"))
    dc = cluster(run(kube))["dra.deviceclass"]
    assert dc.status == Status.PASS and dc.title == "DeviceClass vfio-npu.example.com"


def test_a_public_dra_driver_is_said_to_offer_no_passthrough_device(apiserver, kube):
    """Issue 41.5: no public RBLN DRA driver release has vfio devices (RBLN-SW/rbln-k8s-dra-driver tags
    v0.1.0-v0.1.2, main@dd9af1b): the image the operator chart v0.3.0 deploys (k8s-dra-driver-npu:v0.1.0, its
    values.yaml draKubeletPlugin) is named as such, not only "needs >= 0.2.1". A driver above the public releases
    but below the floor is not called public."""
    seed(apiserver, method="dra", mode="container")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    ds = dra_daemonset("v0.1.0")
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "docker.io/rebellions/k8s-dra-driver-npu:v0.1.0"
    apiserver.add(ds)
    d = cluster(run(kube))["dra.driver"]
    assert "public DRA driver release" in d.evidence and "zero devices to VMs" in d.evidence, d.evidence
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.add(dra_daemonset("v0.2.0"))
    d = cluster(run(kube))["dra.driver"]
    assert "v0.2.0 < 0.2.1" in d.evidence and "public" not in d.evidence
