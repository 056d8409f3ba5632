"""Results say where a switch really started, and warnings say what a change leads to (issue 21 items 5 and 6).

- a resumed `set-mode` reports the FROM its record holds, not the mode the relabel already set;
- switching the last vm-passthrough node to container while VMs still ask for NPUs warns (in -o json too);
- `vm manifest --npus N` warns as `vm attach` does when no vm-passthrough node has N;
- `vm diagnose` never tells to free NPUs for a VM no node could ever fit.
"""

from __future__ import annotations

import json

import pytest

from rblnctl.node.events import Step
from rblnctl.node.record import SwitchRecord
from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.helpers import cli
from tests.vm.support import CA22, sandbox_cluster

ANN = "rebellions.ai/rblnctl.set-mode"
MODE = "rebellions.ai/npu.workload.config"
STRANDED = "no NPU node is left in vm-passthrough mode after this switch"


def test_a_resumed_switch_reports_the_mode_it_really_started_from(apiserver):
    """After Ctrl-C past the relabel, the re-run said `vm-passthrough -> vm-passthrough`."""
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True),
                  o.npu_node("n1", mode="vm-passthrough"))
    node = apiserver.get("Node", "n1")
    node["spec"]["unschedulable"] = True
    node["metadata"].setdefault("annotations", {})[ANN] = SwitchRecord(
        target="vm-passthrough", from_mode="container", started="2026-12-03T00:00:00Z", cordoned_by_rblnctl=True,
        step=Step.RELABEL).to_json()
    apiserver.update(node)
    op = SimulatedOperator(apiserver).start()
    try:
        assert op.wait_idle()
        r = cli("node", "set-mode", "vm", "n1", "--yes", "-o", "json", server=apiserver.url)
    finally:
        op.stop()
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["plan"]["resume"] is True and doc["plan"]["currentMode"] == "vm-passthrough"
    assert doc["plan"]["fromMode"] == "container"
    assert (doc["result"]["previousMode"], doc["result"]["mode"]) == ("container", "vm-passthrough")
    assert ANN not in (apiserver.get("Node", "n1")["metadata"].get("annotations") or {})


def test_the_record_written_on_resume_keeps_its_from(apiserver):
    """The record is the only memory of where the switch started: a resumed run must not overwrite it."""
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True),
                  o.npu_node("n1", mode="vm-passthrough"))
    node = apiserver.get("Node", "n1")
    node["metadata"].setdefault("annotations", {})[ANN] = SwitchRecord(
        target="vm-passthrough", from_mode="container", started="2026-12-03T00:00:00Z", cordoned_by_rblnctl=False,
        step=Step.RELABEL).to_json()
    apiserver.update(node)
    apiserver.clear_requests()
    # No operator: the wait times out, and the record on the node still says where the switch started.
    r = cli("node", "set-mode", "vm", "n1", "--yes", "--timeout", "0.5", server=apiserver.url)
    assert r.exit_code == 5, r.stderr
    record = json.loads(apiserver.get("Node", "n1")["metadata"]["annotations"][ANN])
    assert record["from"] == "container"
    # every flag of the run, the connection first (issue 29)
    assert (f"go back: rblnctl --server {apiserver.url} node set-mode container n1 --reverse --timeout 0.5 --yes"
            in r.stderr)


@pytest.fixture
def vm_cluster(apiserver):
    """n1 in vm-passthrough mode (2 RBLN-CA22), n9 in container mode, a stopped VM asking for a CA22."""
    sandbox_cluster(apiserver)
    apiserver.add(o.vm("vms", "v1", running=False, host_devices=[CA22]))
    op = SimulatedOperator(apiserver).start()
    assert op.wait_idle()
    apiserver.clear_requests()
    yield apiserver
    op.stop()


def test_switching_the_last_vm_node_to_container_warns_about_the_vms_left(vm_cluster):
    r = cli("node", "set-mode", "container", "n1", "--dry-run", "-o", "json", server=vm_cluster.url)
    assert r.exit_code == 0, r.stderr
    warnings = json.loads(r.stdout)["plan"]["warnings"]
    assert any(STRANDED in w and "1 VM(s) still ask for NPUs (vms/v1)" in w for w in warnings), warnings
    assert STRANDED in r.stderr and vm_cluster.writes() == []


def test_no_warning_while_another_vm_node_remains(vm_cluster):
    vm_cluster.add(o.npu_node("n2", mode="vm-passthrough", product="RBLN-CA22", npus=2))
    r = cli("node", "set-mode", "container", "n1", "--dry-run", "-o", "json", server=vm_cluster.url)
    assert r.exit_code == 0, r.stderr
    assert not any(STRANDED in w for w in json.loads(r.stdout)["plan"]["warnings"])


def test_a_pool_switching_every_vm_node_warns_once_for_the_pool(vm_cluster):
    vm_cluster.add(o.npu_node("n2", mode="vm-passthrough", product="RBLN-CA22", npus=2))
    r = cli("node", "set-mode", "container", "n1", "n2", "--dry-run", "-o", "json", server=vm_cluster.url)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [w for w in doc["warnings"] if STRANDED in w] and r.stderr.count(STRANDED) == 1
    assert not any(STRANDED in w for item in doc["items"] for w in item["plan"]["warnings"])
    r = cli("node", "set-mode", "container", "n1", "--dry-run", "-o", "json", server=vm_cluster.url)
    assert not any(STRANDED in w for w in json.loads(r.stdout)["plan"]["warnings"])  # n2 stays in vm mode


PODS_STRANDED = "no NPU node is left in container mode after this switch"


@pytest.fixture
def container_cluster(apiserver):
    """c1 and c2 in container mode (the only ones), each running a ReplicaSet's NPU pod; no vm-passthrough node."""
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True), o.replicaset("default", "web"))
    for n in ("c1", "c2"):
        apiserver.add(o.npu_node(n, mode="container"),
                      o.pod("default", f"{n}-app", node=n, owner_kind="ReplicaSet", owner_name="web",
                            requests={"rebellions.ai/npu": "1"}))
    op = SimulatedOperator(apiserver).start()
    assert op.wait_idle()
    apiserver.clear_requests()
    yield apiserver
    op.stop()


def test_switching_the_last_container_node_to_vm_warns_about_the_npu_pods_it_evicts(container_cluster):
    """Issue 28 finding 9: the other direction warned about the VMs left without a node; this one evicted the last
    container node's NPU pods with no word that nothing could run them (they sit Pending)."""
    r = cli("node", "set-mode", "vm", "c1", "--dry-run", "-o", "json", server=container_cluster.url)
    assert r.exit_code == 0, r.stderr
    assert not any(PODS_STRANDED in w for w in json.loads(r.stdout)["plan"]["warnings"])  # c2 can run them
    r = cli("node", "set-mode", "vm", "c1", "c2", "--dry-run", "-o", "json", server=container_cluster.url)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    (warning,) = [w for w in doc["warnings"] if PODS_STRANDED in w]  # said once, for the pool
    assert "it evicts 2 NPU pod(s) (default/c1-app, default/c2-app)" in warning
    assert f"`rblnctl --server {container_cluster.url} node set-mode container c1`" in warning
    assert r.stderr.count(PODS_STRANDED) == 1
    container_cluster.mutate("Node", "c2", fn=lambda n: n["metadata"]["labels"].update(
        {MODE: "vm-passthrough"}))
    r = cli("node", "set-mode", "vm", "c1", "--dry-run", "-o", "json", server=container_cluster.url)
    warnings = json.loads(r.stdout)["plan"]["warnings"]
    assert any(PODS_STRANDED in w and "1 NPU pod(s) (default/c1-app)" in w for w in warnings), warnings
    assert container_cluster.writes() == []


TOO_MANY = "8 NPUs: no vm-passthrough node offers that many (the most is 2, on n1)"


def test_vm_manifest_warns_like_attach_when_no_node_has_that_many(vm_cluster):
    r = cli("vm", "manifest", "big", "-n", "vms", "--npus", "8", server=vm_cluster.url)
    assert r.exit_code == 0, r.stderr
    assert TOO_MANY in r.stderr and r.stdout.startswith("apiVersion:")  # the manifest stays clean
    attach = cli("vm", "attach", "v1", "-n", "vms", "--npus", "8", "--dry-run", server=vm_cluster.url)
    assert TOO_MANY in attach.stderr  # the same computation, the same words
    fits = cli("vm", "manifest", "small", "-n", "vms", "--npus", "2", server=vm_cluster.url)
    assert "no vm-passthrough node offers" not in fits.stderr


def test_diagnose_never_says_free_npus_for_a_vm_no_node_could_fit(vm_cluster):
    vm_cluster.add(o.vm("vms", "big", running=False, host_devices=[CA22] * 8))
    r = cli("vm", "diagnose", "big", "-n", "vms", "-o", "json", server=vm_cluster.url)
    doc = json.loads(r.stdout)
    link = next(link for link in doc["links"] if link["status"] == "FAIL")
    assert link["name"] == "FreeCapacity"
    assert "stop a VM" not in link["remedy"] and "ask for at most 2 NPU(s)" in link["remedy"]
    assert link["remedyCommand"] == ["rblnctl", "--server", vm_cluster.url, "vm", "attach", "big", "-n", "vms",
                                     "--npus", "2"]
    assert any("8 rebellions.ai/RBLN-CA22_PF never fit" in e for e in link["evidence"])
    # a VM that fits a node whose NPUs are in use still gets "free NPUs"
    vm_cluster.add(o.vm("vms", "two", running=False, host_devices=[CA22] * 2),
                   o.virt_launcher("vms", "holder", "n1", resources={CA22: "2"}))
    r = cli("vm", "diagnose", "two", "-n", "vms", "-o", "json", server=vm_cluster.url)
    link = next(link for link in json.loads(r.stdout)["links"] if link["status"] == "FAIL")
    assert link["name"] == "FreeCapacity" and "stop a VM" in link["remedy"]


def test_diagnose_a_dra_vm_asking_more_vfio_npus_than_any_node_has(apiserver):
    """The claim link's remedy was `free one (stop a VM ...)` even when no node has that many vfio devices."""
    from tests.vm.support import dra_cluster

    dra_cluster(apiserver)  # n1 offers 2 vfio NPUs
    claim_entry = o.template_claim("rbln-npu", "rbln-npu-4")
    devices = [o.dra_host_device(f"npu{i}") for i in range(4)]
    apiserver.add(o.resource_claim_template("vms", "rbln-npu-4"),
                  o.vm("vms", "big", host_devices=devices, resource_claims=[claim_entry]),
                  o.vmi("vms", "big", None, devices, resource_claims=[claim_entry], phase="Scheduling"))
    pod = o.virt_launcher("vms", "big", None, claims={"rbln-npu": "big-rbln-npu-x7k2p"})
    apiserver.add(pod, o.resource_claim("vms", "big-rbln-npu-x7k2p", pod=pod))
    r = cli("vm", "diagnose", "big", "-n", "vms", "-o", "json", server=apiserver.url)
    link = next(link for link in json.loads(r.stdout)["links"] if link["status"] == "FAIL")
    assert link["name"] == "ClaimAllocated"
    assert "stop a VM" not in link["remedy"] and "ask for at most 2 NPU(s)" in link["remedy"]
    assert link["remedyCommand"] == ["rblnctl", "--server", apiserver.url, "vm", "attach", "big", "-n", "vms",
                                     "--npus", "2", "--restart"]
