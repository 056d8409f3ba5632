"""remedyCommand: the command of a remedy as its own field, derived by the check (never parsed from the prose)."""

from __future__ import annotations

import pytest

from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import CA22_PF, VM, cluster, nfd_features, operator_deployment, per_node, run, seed

HELM = "helm upgrade rbln-npu-operator rebellions/rbln-npu-operator -n rbln-system --reuse-values"


def test_a_healthy_cluster_has_no_commands(apiserver, kube):
    seed(apiserver)
    assert {c.remedy_command for c in run(kube).checks} == {""}


def test_gates(apiserver, kube):
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=[], permitted_pci=[("1EFF:1220", CA22_PF)]))
    assert cluster(run(kube))["kubevirt.gates"].remedy_command == "rblnctl kubevirt enable-gates"


def test_gates_on_an_unknown_version_need_force_and_an_old_release_has_none(apiserver, kube):
    kv = o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0")
    kv["status"]["observedKubeVirtVersion"] = ""
    seed(apiserver, method="dra", kubevirt=kv)
    assert cluster(run(kube))["kubevirt.gates"].remedy_command == "rblnctl kubevirt enable-gates --dra --force"
    apiserver.delete_now("KubeVirt", "kubevirt", "kubevirt")
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], version="v1.8.2"))
    gates = cluster(run(kube))["kubevirt.gates"]
    assert gates.status == Status.FAIL and gates.remedy_command == ""  # enable-gates would refuse: upgrade first


def test_permitted_devices_with_both_problems_chains_both_commands(apiserver, kube):
    entry = {"pciVendorSelector": "1EFF:1250", "resourceName": "rebellions.ai/RBLN-CA25_PF",
             "externalResourceProvider": False}
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[entry]))
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert p.remedy_command == ("rblnctl kubevirt permit-devices --from-cluster && "
                                "rblnctl kubevirt permit-devices --fix")


def test_policy_sets_the_values_on_the_release_that_installed_the_operator(apiserver, kube):
    seed(apiserver, policy=o.cluster_policy(workload_type=VM, vfio_manager=False))
    p = cluster(run(kube))["operator.policy"]
    assert p.remedy_command == (f"{HELM} --set vfioManager.enabled=true --set sandboxDevicePlugin.enabled=true "
                                "--set draKubeletPlugin.enabled=false")


def test_policy_command_names_a_release_and_namespace_of_its_own(apiserver, kube):
    dep = operator_deployment("0.6.0", namespace="npu-ops")
    dep["metadata"]["labels"]["app.kubernetes.io/instance"] = "npu"
    seed(apiserver, method="dra", operator=dep, policy=o.cluster_policy(sandbox=True, dra=True, device_plugin=False))
    p = cluster(run(kube))["operator.policy"]
    assert p.remedy_command.startswith("helm upgrade npu rebellions/rbln-npu-operator -n npu-ops --reuse-values "
                                       "--set vfioManager.enabled=true --set draKubeletPlugin.enabled=true")


def test_operator_missing_installs_it(apiserver, kube):
    seed(apiserver)
    apiserver.delete_now("Deployment", "rbln-npu-operator", "rbln-system")
    apiserver.remove_resource("rblnclusterpolicies.rebellions.ai")
    op = cluster(run(kube))["operator.version"]
    assert op.remedy_command == ("helm upgrade --install rbln-npu-operator rebellions/rbln-npu-operator "
                                 "-n rbln-system --create-namespace")
    assert f"`{op.remedy_command}`" in op.remedy


def test_dra_driver_missing_enables_it(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    assert cluster(run(kube))["dra.driver"].remedy_command == f"{HELM} --set draKubeletPlugin.enabled=true"


def test_forbidden_read_names_the_can_i_check(apiserver, kube):
    seed(apiserver)
    apiserver.forbid("list", "kubevirts")
    k = cluster(run(kube))["kubevirt.installed"]
    assert k.remedy_command == "kubectl auth can-i list kubevirts.kubevirt.io -A"


@pytest.mark.parametrize("value, command", [
    ("vm", "rblnctl node set-mode vm-passthrough n-bad"),
    ("Container", "rblnctl node set-mode container n-bad"),
    ("gpu", ""),  # which mode was meant is the user's choice
])
def test_mode_label_command_only_when_the_value_names_a_mode(apiserver, kube, value, command):
    seed(apiserver, nodes=0)
    apiserver.add(o.npu_node("n-bad", mode=value), nfd_features("n-bad"))
    r = per_node(run(kube), "node.mode-label")["n-bad"]
    assert r.status == Status.FAIL and r.remedy_command == command


def test_deploy_skip_command_names_the_node(apiserver, kube):
    seed(apiserver, nodes=0)
    apiserver.add(o.npu_node("n-skip", mode=VM, labels={"rebellions.ai/npu.deploy.skip": "true"}),
                  nfd_features("n-skip"))
    r = per_node(run(kube), "node.deploy-skip")["n-skip"]
    assert r.remedy_command == "kubectl label node n-skip rebellions.ai/npu.deploy.skip-"
    assert "NODE" in r.remedy  # the prose stays the same for every node, so identical rows still group
