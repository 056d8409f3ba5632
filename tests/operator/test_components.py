"""rblnctl.operator.components: identifying component pods the way every release agrees on."""

from __future__ import annotations

import pytest

from rblnctl.operator.components import component_of_pod, deploy_labels, exclusive_components
from tests.fakes import objects as o
from tests.fakes.releases import NEWER, RELEASES, V0_3_0
from rblnctl.constants import OPERATOR_NAMESPACE as NS


def ds_pod(ds_name, labels=None):
    return o.pod(NS, f"{ds_name}-x", node="n1", owner_kind="DaemonSet", owner_name=ds_name, labels=labels)


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.name)
@pytest.mark.parametrize("comp", ["vfio-manager", "sandbox-device-plugin", "device-plugin", "dra-kubelet-plugin",
                                  "metrics-exporter", "npu-feature-discovery", "container-toolkit",
                                  "operator-validator", "driver"])
def test_each_release_s_pods_are_recognised(release, comp):
    pod = ds_pod(release.daemonset_name(comp), release.pod_labels(comp))
    assert component_of_pod(pod) == comp


def test_the_daemon_under_either_name():
    assert component_of_pod(ds_pod(V0_3_0.daemonset_name("rbln-daemon"), V0_3_0.pod_labels("rbln-daemon"))) == \
        "rbln-daemon"
    assert component_of_pod(ds_pod(NEWER.daemonset_name("rbln-smd"), NEWER.pod_labels("rbln-smd"))) == "rbln-daemon"


def test_a_custom_spec_name_prefixes_the_daemonsets():
    pod = ds_pod("npu-vfio-manager", {"app": "npu-vfio-manager"})
    assert component_of_pod(pod, base_names=("npu", "rbln")) == "vfio-manager"
    assert component_of_pod(ds_pod("npu-vfio-manager")) is None  # unknown prefix and no hint


def test_only_daemonset_pods_are_components():
    deployment = o.pod(NS, "rbln-vfio-manager-x", node="n1", owner_kind="ReplicaSet",
                       labels={"app.kubernetes.io/component": "vfio-manager"})
    assert component_of_pod(deployment) is None
    assert component_of_pod(o.pod(NS, "bare", node="n1", labels={"app": "rbln-vfio-manager"})) is None
    assert component_of_pod(ds_pod("someone-elses-ds", {"app": "web"})) is None


def test_deploy_labels_read_only_true_as_set():
    labels = {"rebellions.ai/npu.deploy.vfio-manager": "true", "rebellions.ai/npu.deploy.sandbox-device-plugin":
              "paused-for-driver-upgrade", "rebellions.ai/npu.deploy.metrics-exporter": "false",
              "rebellions.ai/npu.deploy.rbln-smd": "true", "rebellions.ai/npu.deploy.skip": "true"}
    d = deploy_labels(labels)
    assert d.skip and d.is_set("vfio-manager") and not d.is_set("sandbox-device-plugin")
    assert d.paused() == ["sandbox-device-plugin"] and d.opted_out("metrics-exporter")
    assert d.is_set("rbln-daemon") and d.set_components() == ["rbln-daemon", "vfio-manager"]


def test_exclusive_components():
    assert exclusive_components("vm-passthrough") == ("vfio-manager", "sandbox-device-plugin")
    assert "dra-kubelet-plugin" not in exclusive_components("container")  # it serves both modes
