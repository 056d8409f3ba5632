"""A chart v0.3.0 policy whose sandbox plugin and device plugin advertise the same resource name.

The v0.3.0 CRD defaults *both* `devicePlugin.resourceList` and `sandboxDevicePlugin.resourceList` to
`rebellions.ai/ATOM` for RBLN-CA12/CA22/CA25 (RBLN-SW/rbln-npu-operator@v0.3.0
api/v1beta1/rblnclusterpolicy_types.go, `+kubebuilder:default` of both ResourceList fields; the chart only renders
`sandboxDevicePlugin.resourceList` when its values set one: deployments/rbln-npu-operator/templates/
rblnclusterpolicy.yaml). A policy written without the sandbox list (by hand, or the chart with an empty list) then
has the sandbox plugin advertise `rebellions.ai/ATOM` on vm-passthrough nodes, the name the device plugin
advertises on container nodes. The real server's defaulting is checked in tests/envtest/test_crd_defaults.py.
"""

from __future__ import annotations

import copy

from rblnctl import constants as C
from rblnctl.operator.convergence import Missing, pending
from rblnctl.operator.policy import parse_policy
from tests.fakes import objects as o
from tests.fakes.releases import V0_3_0, V03_DEVICE_PLUGIN_RESOURCES

# What the v0.3.0 CRD defaults sandboxDevicePlugin.resourceList to (the same as devicePlugin's first entry).
CRD_DEFAULT_SANDBOX = [{"productCardNames": ["RBLN-CA12", "RBLN-CA22", "RBLN-CA25"], "resourceName": "ATOM",
                        "resourcePrefix": "rebellions.ai"}]


def crd_defaulted_policy() -> dict:
    policy = V0_3_0.policy(vfio_manager=True, sandbox=True)
    policy["spec"]["sandboxDevicePlugin"]["resourceList"] = copy.deepcopy(CRD_DEFAULT_SANDBOX)
    return policy


def test_the_shared_name_is_not_the_old_modes_resource_on_a_switched_node():
    """A vm-passthrough node whose sandbox plugin advertises rebellions.ai/ATOM has converged as far as its
    allocatable can say: the name is the new mode's as much as the old one's, so it is not "still offered"."""
    policy = parse_policy(crd_defaulted_policy())
    vm_node = o.npu_node("v1", mode=C.MODE_VM, release=V0_3_0, allocatable={"rebellions.ai/ATOM": "2"})
    assert "rebellions.ai/ATOM" in vm_node["status"]["allocatable"]
    resources = [p.text for p in pending(vm_node, C.MODE_VM, policy, []) if p.kind == Missing.RESOURCE]
    assert resources == []
    # and back: a container node offering the shared name is not offering the VM mode's resource either
    c_node = o.npu_node("c1", mode=C.MODE_CONTAINER, release=V0_3_0, allocatable={"rebellions.ai/ATOM": "2"})
    resources = [p.text for p in pending(c_node, C.MODE_CONTAINER, policy, []) if p.kind == Missing.RESOURCE]
    assert resources == []


def test_a_name_only_the_old_mode_uses_is_still_reported():
    """The chart's own lists share no name: a switched node still offering the device plugin's is pending."""
    policy = parse_policy(V0_3_0.policy(vfio_manager=True, sandbox=True))
    node = o.npu_node("v1", mode=C.MODE_VM, release=V0_3_0,
                      allocatable={"rebellions.ai/ATOM": "2", "rebellions.ai/ATOM_PT": "2"})
    resources = [p.text for p in pending(node, C.MODE_VM, policy, []) if p.kind == Missing.RESOURCE]
    assert resources == ["allocatable still offers the old mode's rebellions.ai/ATOM"]


def test_policy_names_the_shared_resources():
    assert parse_policy(crd_defaulted_policy()).shared_resources == ("rebellions.ai/ATOM",)
    assert parse_policy(V0_3_0.policy(vfio_manager=True, sandbox=True)).shared_resources == ()
    assert V03_DEVICE_PLUGIN_RESOURCES[0]["resourceName"] == "ATOM"
