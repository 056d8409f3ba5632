"""`operator.policy`: the operator's admission rules on the policy it acts on."""

from __future__ import annotations

import pytest

from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import VM, seed, run, cluster


@pytest.mark.parametrize("policy, fragment", [
    (o.cluster_policy(workload_type=VM, vfio_manager=False),
     "vfioManager is disabled (workloadType is vm-passthrough)"),
    (o.cluster_policy(workload_type=VM, sandbox=False, dra=False),
     "vm-passthrough is in use but neither sandboxDevicePlugin nor draKubeletPlugin is enabled"),
    (o.cluster_policy(sandbox=True, dra=True, device_plugin=False), "both enabled (mutually exclusive)"),
    (o.cluster_policy(sandbox=False, dra=True, device_plugin=True),
     "devicePlugin and draKubeletPlugin are both enabled"),
])
def test_policy_inconsistent(apiserver, kube, policy, fragment):
    seed(apiserver, policy=policy)
    pol = cluster(run(kube))["operator.policy"]  # --method auto: the policy itself decides what is checked
    assert pol.status == Status.FAIL and fragment in pol.evidence and "helm upgrade" in pol.remedy


def test_policy_absent(apiserver, kube):
    seed(apiserver)
    apiserver.delete_now("RBLNClusterPolicy", "rbln-cluster-policy")
    c = cluster(run(kube))
    assert c["operator.policy"].status == Status.FAIL and "no RBLNClusterPolicy" in c["operator.policy"].evidence


def test_ignored_policy_is_not_the_one_checked(apiserver, kube):
    """The operator acts on one RBLNClusterPolicy and marks the others PolicyIgnored: check the active one."""
    seed(apiserver)  # rbln-cluster-policy: sandbox
    ignored = o.cluster_policy("a-leftover", sandbox=False, dra=True, device_plugin=False)
    ignored["status"] = {"state": "ignored", "conditions": [
        {"type": "Ready", "status": "False", "reason": "PolicyIgnored",
         "message": "Another RBLNClusterPolicy is already active; this policy is ignored"}]}
    apiserver.add(ignored)
    report = run(kube)
    assert report.method == "sandbox" and "rbln-cluster-policy" in report.method_note
    p = cluster(report)["operator.policy"]
    assert p.status == Status.PASS and p.evidence.startswith("rbln-cluster-policy:")
    assert "a-leftover" in p.evidence  # the other one is named



@pytest.mark.parametrize("device_plugin, patch", [
    # devicePlugin already off: the remedy leaves it alone
    (False, """'{"spec":{"draKubeletPlugin":{"enabled":true},"sandboxDevicePlugin":{"enabled":false}}}'"""),
    # on: later releases reject it beside draKubeletPlugin, so it has to go
    (True, """'{"spec":{"draKubeletPlugin":{"enabled":true},"sandboxDevicePlugin":{"enabled":false},"""
           """"devicePlugin":{"enabled":false}}}'"""),
])
def test_dra_remedy_turns_the_device_plugin_off_only_when_it_is_on(apiserver, kube, device_plugin, patch):
    seed(apiserver, method="dra", policy=o.cluster_policy(sandbox=True, dra=False, device_plugin=device_plugin))
    p = cluster(run(kube, method="dra"))["operator.policy"]
    assert p.status == Status.FAIL
    assert p.remedy_command == f"kubectl patch rblnclusterpolicy rbln-cluster-policy --type merge -p {patch}"
    assert ("devicePlugin.enabled=false" in p.remedy) is device_plugin
