"""`kubevirt permit-devices --from-cluster` under a resource name both the device plugin and the sandbox plugin
advertise (Policy.shared_resources: chart v0.3.0's CRD default when sandboxDevicePlugin.resourceList is left out;
the real server's defaulting: tests/envtest/test_crd_defaults.py).

Container-mode nodes then advertise the name VMs ask for: that alone is no reason to permit it for VMs. Only
vm-passthrough nodes decide, and the plan says why, with the policy's remedy.
"""

from __future__ import annotations

import pytest

from rblnctl import constants as C
from rblnctl.errors import NotFound
from rblnctl.remedy import Remedy
from tests.fakes import objects as o
from tests.fakes.releases import V0_3_0
from tests.helpers import cli
from tests.kubevirt.support import permitter, stored
from tests.operator.test_shared_resource_names import crd_defaulted_policy

ATOM = "rebellions.ai/ATOM"
EDIT = "kubectl edit rblnclusterpolicy rbln-cluster-policy"


@pytest.fixture
def containers_only(apiserver):
    """The CRD-defaulted policy; c1, c2 in container mode advertise rebellions.ai/ATOM; no vm-passthrough node."""
    policy = crd_defaulted_policy()
    apiserver.add(o.kubevirt(), policy, o.npu_node("c1", release=V0_3_0, policy=policy),
                  o.npu_node("c2", release=V0_3_0, policy=policy))
    assert apiserver.get("Node", "c1")["status"]["allocatable"].get(ATOM) == "2"
    return apiserver


def test_container_nodes_alone_permit_nothing(containers_only, kube):
    with pytest.raises(NotFound) as exc:
        permitter(kube).plan(from_cluster=True)
    text = str(exc.value)
    assert "no NPU node is in vm-passthrough mode yet" in text
    assert f"{ATOM} is advertised by both the device plugin and the sandbox device plugin" in text
    assert "not permitted: only container-mode nodes advertise it (c1, c2)" in text
    assert f"`{EDIT}`" in text
    assert "permittedHostDevices" not in (stored(containers_only).get("spec", {}).get("configuration") or {})


def test_a_vm_node_permits_it_and_the_container_nodes_are_named(containers_only, kube):
    containers_only.add(o.npu_node("v1", mode=C.MODE_VM, release=V0_3_0, allocatable={ATOM: "2"}))
    plan = permitter(kube).plan(from_cluster=True)
    assert plan.added == [ATOM]
    notes = [w for w in plan.warnings if isinstance(w, Remedy)]
    assert len(notes) == 1 and notes[0].command is not None and notes[0].command.line == EDIT
    assert "permitted for the vm-passthrough node(s) that advertise it (v1)" in notes[0].text
    assert "container-mode node(s) offering it (c1, c2)" in notes[0].text


def test_the_command_prints_the_warning_with_its_command(containers_only):
    containers_only.add(o.npu_node("v1", mode=C.MODE_VM, release=V0_3_0, allocatable={ATOM: "2"}))
    r = cli("kubevirt", "permit-devices", "--from-cluster", "--dry-run", server=containers_only.url)
    assert r.exit_code == 0, r.output
    assert "container-mode node(s) offering it (c1, c2)" in r.output
    assert f"`{EDIT}`" in r.output
