"""What the operator's real v0.3.0 CRD fills in when a policy leaves a field out, and how rblnctl reads the result.

RBLN-SW/rbln-npu-operator@v0.3.0 api/v1beta1/rblnclusterpolicy_types.go defaults `sandboxDevicePlugin.resourceList`
to the same `rebellions.ai/ATOM` entry as `devicePlugin.resourceList` (the chart renders the sandbox list only when
its values set one). tests/operator/test_shared_resource_names.py holds the pure side.
"""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.operator.convergence import Missing, pending
from rblnctl.operator.policy import parse_policy
from tests.fakes import objects as o
from tests.fakes.releases import V0_3_0
from tests.operator.test_shared_resource_names import CRD_DEFAULT_SANDBOX


def test_v030_crd_gives_the_sandbox_plugin_the_device_plugins_name(real):
    policy = V0_3_0.policy(vfio_manager=True, sandbox=True)
    del policy["spec"]["sandboxDevicePlugin"]["resourceList"]
    real.api.seed(policy)
    stored = real.api.get("RBLNClusterPolicy", policy["metadata"]["name"])
    assert stored["spec"]["sandboxDevicePlugin"]["resourceList"] == CRD_DEFAULT_SANDBOX
    parsed = parse_policy(stored)
    assert parsed.shared_resources == ("rebellions.ai/ATOM",)
    # a vm-passthrough node whose sandbox plugin advertises that name is not "still offering the old mode's"
    node = o.npu_node("v1", mode=C.MODE_VM, release=V0_3_0, allocatable={"rebellions.ai/ATOM": "2"})
    assert [p.text for p in pending(node, C.MODE_VM, parsed, []) if p.kind == Missing.RESOURCE] == []
