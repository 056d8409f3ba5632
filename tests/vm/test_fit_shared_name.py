"""`vm fit` under a resource name both the device plugin and the sandbox plugin advertise.

Chart v0.3.0's CRD defaults sandboxDevicePlugin.resourceList to devicePlugin's `rebellions.ai/ATOM`
(rblnctl.operator.policy.Policy.shared_resources; the real server's defaulting: tests/envtest/test_crd_defaults.py),
so container-mode nodes advertise the name VMs ask for. kube-scheduler may place a VM there (the resource exists),
but its NPUs are not vfio-bound: only vm-passthrough nodes count as fitting, and the answer says where else the
scheduler may put the VM, with the policy's remedy.
"""

from __future__ import annotations

import json

import pytest

from rblnctl import constants as C
from rblnctl.remedy import Remedy
from rblnctl.vm.fit import FitOptions, fit
from tests.fakes import objects as o
from tests.fakes.releases import V0_3_0
from tests.helpers import cli
from tests.operator.test_shared_resource_names import crd_defaulted_policy
from tests.vm.support import NS

ATOM = "rebellions.ai/ATOM"


@pytest.fixture
def shared(apiserver):
    """v1 (vm-passthrough, sandbox plugin: 2 ATOM, one held by a VM); c1, c2 (container mode, 4 ATOM each)."""
    policy = crd_defaulted_policy()
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[("1EFF:1220", ATOM)]), policy)
    apiserver.add(o.npu_node("v1", mode=C.MODE_VM, release=V0_3_0, allocatable={ATOM: "2"}),
                  o.npu_node("c1", release=V0_3_0, policy=policy, npus=4),
                  o.npu_node("c2", release=V0_3_0, policy=policy, npus=4),
                  o.virt_launcher(NS, "a", "v1", resources={ATOM: "1"}))
    assert apiserver.get("Node", "c1")["status"]["allocatable"].get(ATOM) == "4"
    return apiserver


def test_only_vm_passthrough_nodes_fit_and_the_container_nodes_are_named(shared, kube):
    answer = fit(kube, FitOptions(npus=1, resource=ATOM))
    assert answer.kind == ATOM
    assert {n.node: n.fits for n in answer.nodes} == {"v1": 1, "c1": 0, "c2": 0}
    assert answer.shared_with == ("c1", "c2")
    remedies = [w for w in answer.warnings if isinstance(w, Remedy)]
    assert len(remedies) == 1
    assert "may also place a VM asking for it on the 2 container-mode node(s) offering it (c1, c2)" in remedies[0].text
    assert remedies[0].command is not None and remedies[0].command.line == \
        "kubectl edit rblnclusterpolicy rbln-cluster-policy"


def test_the_command_prints_the_warning_with_its_command(shared):
    r = cli("vm", "fit", "--npus", "1", "--resource", ATOM, server=shared.url)
    assert r.exit_code == 0, r.output
    assert "container-mode node(s) offering it (c1, c2)" in r.output
    assert "give sandboxDevicePlugin.resourceList names of its own" in r.output
    assert "`kubectl edit rblnclusterpolicy rbln-cluster-policy`" in r.output
    doc = json.loads(cli("vm", "fit", "--npus", "3", "--resource", ATOM, "-o", "json", server=shared.url).stdout)
    assert doc["fits"] == 0  # c1 and c2 have 4 free each, but not for VMs
    assert any("kubectl edit rblnclusterpolicy" in w for w in doc["warnings"])


def test_own_names_give_no_warning(apiserver, kube):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]), V0_3_0.policy(vfio_manager=True, sandbox=True),
                  o.npu_node("v1", mode=C.MODE_VM, release=V0_3_0, allocatable={"rebellions.ai/ATOM_PT": "2"}),
                  o.npu_node("c1", release=V0_3_0, npus=4))
    answer = fit(kube, FitOptions(npus=1))
    assert answer.shared_with == () and not any(isinstance(w, Remedy) for w in answer.warnings)


def test_vm_diagnose_counts_only_vm_nodes_and_warns(shared, kube):
    from rblnctl.vm.diagnose import LinkName, diagnose

    shared.add(o.vm(NS, "s", running=False, host_devices=[ATOM]))
    d = diagnose(kube, "s", NS)
    capacity = next(link for link in d.links if link.name == LinkName.CAPACITY)
    assert capacity.ok and capacity.evidence[0] == f"1 {ATOM} fit on v1"
    assert f"not counted: container-mode c1, c2 also advertise {ATOM}" in capacity.evidence
    remedies = [w for w in d.warnings if isinstance(w, Remedy)]
    assert any("container-mode node(s) offering it (c1, c2)" in w.text and w.command is not None
               and w.command.line == "kubectl edit rblnclusterpolicy rbln-cluster-policy" for w in remedies)
    r = cli("vm", "diagnose", "s", "-n", NS, server=shared.url)
    assert "`kubectl edit rblnclusterpolicy rbln-cluster-policy`" in r.output, r.output


def test_vm_attach_warns_that_the_scheduler_may_use_the_container_nodes(shared, kube):
    shared.add(o.vm(NS, "s", running=False))
    r = cli("vm", "attach", "s", "-n", NS, "--npus", "1", "--resource", ATOM, "--dry-run", server=shared.url)
    assert r.exit_code == 0, r.output
    assert "container-mode node(s) offering it (c1, c2)" in r.output
    assert "`kubectl edit rblnclusterpolicy rbln-cluster-policy`" in r.output


def test_vm_manifest_warns_on_stderr(shared):
    r = cli("vm", "manifest", "s", "-n", NS, "--npus", "1", "--resource", ATOM, server=shared.url)
    assert r.exit_code == 0, r.output
    assert "container-mode node(s) offering it (c1, c2)" in r.stderr
    assert "`kubectl edit rblnclusterpolicy rbln-cluster-policy`" in r.stderr
    assert "kubectl edit" not in r.stdout  # the manifest stays a List kubectl applies as is
