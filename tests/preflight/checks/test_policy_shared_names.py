"""`operator.policy` warns when the device plugin and the sandbox plugin advertise one resource name.

Chart v0.3.0's CRD defaults sandboxDevicePlugin.resourceList to devicePlugin's `rebellions.ai/ATOM` entry
(tests/envtest/test_crd_defaults.py shows the real server doing it): VMs then ask for a name container-mode nodes
advertise too, and the scheduler may place them there.
"""

from __future__ import annotations

from rblnctl.preflight.model import Status
from tests.fakes.releases import V0_3_0
from tests.operator.test_shared_resource_names import crd_defaulted_policy
from tests.preflight.cluster_support import cluster, run, seed


def test_shared_name_warns(apiserver, kube):
    seed(apiserver, policy=crd_defaulted_policy())
    p = cluster(run(kube))["operator.policy"]
    assert p.status == Status.WARN, p
    assert "devicePlugin and sandboxDevicePlugin both advertise rebellions.ai/ATOM" in p.evidence
    assert p.remedy_command == "kubectl edit rblnclusterpolicy rbln-cluster-policy"


def test_the_charts_own_names_pass(apiserver, kube):
    seed(apiserver, policy=V0_3_0.policy(vfio_manager=True, sandbox=True))
    assert cluster(run(kube))["operator.policy"].status == Status.PASS
