"""remedyCommand: the command of a remedy as its own field, derived by the check (never parsed from the prose)."""

from __future__ import annotations

import pytest

from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import CA22_PF, VM, cluster, nfd_features, operator_deployment, per_node, run, seed

HELM = ("helm upgrade rbln-npu-operator rbln-npu-operator --repo https://rbln-sw.github.io/rbln-npu-operator "
        "--version 0.6.0 -n rbln-system --reuse-values")


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
    # issue 39: remedyCommand is the remedy's (first) command; the prose names both, in order
    assert p.remedy_command == "rblnctl kubevirt permit-devices --from-cluster"
    assert p.remedy == ("`rblnctl kubevirt permit-devices --from-cluster` and "
                        "`rblnctl kubevirt permit-devices --fix`")


def test_policy_field_is_a_kubectl_patch_with_helm_pinned_to_the_installed_chart_as_the_durable_way(apiserver, kube):
    seed(apiserver, policy=o.cluster_policy(workload_type=VM, vfio_manager=False))
    p = cluster(run(kube))["operator.policy"]
    # only the switch that is wrong: sandboxDevicePlugin is on and draKubeletPlugin off already
    assert p.remedy_command == ("kubectl patch rblnclusterpolicy rbln-cluster-policy --type merge "
                                """-p '{"spec":{"vfioManager":{"enabled":true}}}'""")
    assert f"`{p.remedy_command}`" in p.remedy
    assert (f"`{HELM} --set vfioManager.enabled=true`" in p.remedy
            and "put the old values back" in p.remedy)


@pytest.mark.parametrize("chart, version, ref", [
    ("rbln-npu-operator-chart", "0.6.0", "oci://docker.io/rebellions/rbln-npu-operator-chart --version 0.6.0"),
    ("rbln-npu-operator", "v0.2.1",
     "rbln-npu-operator --repo https://rbln-sw.github.io/rbln-npu-operator --version v0.2.1"),
])
def test_helm_commands_name_the_chart_and_version_the_deployment_label_says(apiserver, kube, chart, version, ref):
    dep = operator_deployment(version, namespace="npu-ops", chart=chart)
    dep["metadata"]["labels"]["app.kubernetes.io/instance"] = "npu"
    seed(apiserver, nodes=0, operator=dep, features=False)
    apiserver.delete_now("RBLNClusterPolicy", "rbln-cluster-policy")
    c = cluster(run(kube))
    p = c["operator.policy"]
    assert p.remedy_command == (f"helm upgrade npu {ref} -n npu-ops --reuse-values "
                                "--set vfioManager.enabled=true --set sandboxDevicePlugin.enabled=true")


def test_operator_version_from_the_renamed_charts_label_alone(apiserver, kube):
    dep = operator_deployment(None, labels={"app.kubernetes.io/name": "rbln-npu-operator",
                                            "helm.sh/chart": "rbln-npu-operator-chart-0.6.0"},
                              image="docker.io/rebellions/rbln-npu-operator:latest")
    seed(apiserver, operator=dep)
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.PASS and "0.6.0" in op.evidence


def test_without_a_chart_label_no_helm_command_is_guessed(apiserver, kube):
    seed(apiserver, nodes=0, features=False,
         operator=operator_deployment(None, labels={"app.kubernetes.io/name": "rbln-npu-operator"}))
    apiserver.delete_now("RBLNClusterPolicy", "rbln-cluster-policy")
    p = cluster(run(kube))["operator.policy"]
    assert p.remedy_command == "" and "--version INSTALLED-VERSION" in p.remedy


def test_operator_missing_installs_the_current_chart(apiserver, kube):
    seed(apiserver)
    apiserver.delete_now("Deployment", "rbln-npu-operator", "rbln-system")
    apiserver.remove_resource("rblnclusterpolicies.rebellions.ai")
    op = cluster(run(kube))["operator.version"]
    assert op.remedy_command == ("helm upgrade --install rbln-npu-operator "
                                 "oci://docker.io/rebellions/rbln-npu-operator-chart -n rbln-system --create-namespace")
    assert f"`{op.remedy_command}`" in op.remedy


def test_nfd_is_enabled_on_the_installed_chart_version(apiserver, kube):
    seed(apiserver, features=False, nodes=0, operator=operator_deployment("0.6.0", chart="rbln-npu-operator-chart"))
    apiserver.remove_resource("nodefeatures.nfd.k8s-sigs.io")
    apiserver.add(o.node("npu-x", labels={"rebellions.ai/npu.present": "true"}))
    nfd = cluster(run(kube))["nfd.installed"]
    assert nfd.status == Status.FAIL
    assert nfd.remedy_command == ("helm upgrade rbln-npu-operator oci://docker.io/rebellions/rbln-npu-operator-chart "
                                  "--version 0.6.0 -n rbln-system --reuse-values --set nfd.enabled=true")


def test_dra_driver_missing_enables_it(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    d = cluster(run(kube))["dra.driver"]
    assert d.status == Status.FAIL
    assert d.remedy_command.startswith("kubectl patch rblnclusterpolicy rbln-cluster-policy --type merge -p ")


def test_forbidden_read_names_the_can_i_check(apiserver, kube):
    seed(apiserver)
    apiserver.forbid("list", "kubevirts")
    k = cluster(run(kube))["kubevirt.installed"]
    assert k.remedy_command == "kubectl auth can-i list kubevirts.kubevirt.io -A"


@pytest.mark.parametrize("value, command", [
    ("vm", "rblnctl node set-mode vm --selector rebellions.ai/npu.workload.config=vm"),  # issue 21: MODE first
    ("Container", "rblnctl node set-mode container --selector rebellions.ai/npu.workload.config=Container"),
    # which mode was meant is the user's choice: vm, or container in its place (issue 39: a command that runs)
    ("gpu", "rblnctl node set-mode vm --selector rebellions.ai/npu.workload.config=gpu"),
])
def test_mode_label_command_only_when_the_value_names_a_mode(apiserver, kube, value, command):
    seed(apiserver, nodes=0)
    apiserver.add(o.npu_node("n-bad", mode=value), nfd_features("n-bad"))
    r = per_node(run(kube), "node.mode-label")["n-bad"]
    assert r.status == Status.FAIL and r.remedy_command == command
    assert f"`{command}`" in r.remedy  # by the label: every node with that value in one group, one command


def test_deploy_skip_command_names_the_node(apiserver, kube):
    seed(apiserver, nodes=0)
    apiserver.add(o.npu_node("n-skip", mode=VM, labels={"rebellions.ai/npu.deploy.skip": "true"}),
                  nfd_features("n-skip"))
    r = per_node(run(kube), "node.deploy-skip")["n-skip"]
    assert r.remedy_command == "kubectl label node n-skip rebellions.ai/npu.deploy.skip-"
    assert "NODE" in r.remedy  # the prose stays the same for every node, so identical rows still group
