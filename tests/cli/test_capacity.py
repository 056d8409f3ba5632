"""NPU capacity: what nodes have free, and what a change leaves (issues 22, 21 items 5 and 6).

Issue 22's scenario, on the fake API server and on a real kube-apiserver (`backend`): a running VM whose
virt-launcher requests 2 of n1's 4 NPUs, an inference pod requesting 1 of n2's 4 (and a finished one that
held 2); `node list` says 2/2 and 1/3, and `vm fit` answers from the same numbers.

The real server has no virt-controller and no scheduler: the VMI and its virt-launcher pod are seeded as
KubeVirt leaves them (tests/cluster), bound to their nodes (the pod labelled with the VMI's uid as the server
gave it). It has no virt-api either: there `vm start` and `vm stop` are checked where they have nothing to ask
(a running VM, a stopped one: exit 0, no write, as the audit log shows); the requests themselves, and the
capacity they free and take, run on the fake's simulated virt-controller. The policy is the chart v0.3.0's, as the real
server's CRD defaults any policy to: its resourceList names the resources (ATOM_PT for VMs, ATOM for pods).

Warnings say what a change leads to: switching the last vm-passthrough node to container while VMs still ask for
NPUs warns (in -o json too), the last container node to vm-passthrough while pods do; `vm manifest --npus N` warns as
`vm attach` does when no vm-passthrough node has N; `vm diagnose` never tells to free NPUs for a VM no node could
ever fit.
"""

from __future__ import annotations

import json

import pytest

from rblnctl.constants import WORKLOAD_LABEL as MODE
from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.fakes.releases import V0_3_0
from tests.helpers import cli
from tests.vm.support import CA22, sandbox_cluster

NS = "vms"
VM_RES = "rebellions.ai/ATOM_PT"  # the VM resource of an RBLN-CA12 under chart v0.3.0's resourceList
POD_RES = "rebellions.ai/ATOM"  # its container resource


def seed(backend) -> None:
    policy = V0_3_0.policy(vfio_manager=True, sandbox=True)
    backend.api.seed(
        policy, o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0", permitted_pci=[("1EFF:1120", VM_RES)]),
        o.npu_node("n1", mode="vm-passthrough", npus=4, product="RBLN-CA12", release=V0_3_0, policy=policy),
        o.npu_node("n2", npus=4, product="RBLN-CA12", release=V0_3_0, policy=policy),
        o.vm(NS, "v1", host_devices=[VM_RES, VM_RES], node="n1"),
        o.vm(NS, "v2", host_devices=[VM_RES], running=False, node="n1"))
    (vmi,) = backend.api.seed(o.vmi(NS, "v1", "n1", [VM_RES, VM_RES]))
    launcher = o.virt_launcher(NS, "v1", "n1", resources={VM_RES: "2"})
    launcher["metadata"]["labels"]["kubevirt.io/created-by"] = vmi["metadata"]["uid"]
    launcher["metadata"]["ownerReferences"][0]["uid"] = vmi["metadata"]["uid"]
    backend.api.seed(
        launcher,
        o.pod("team-a", "inference-0", node="n2", owner_kind="ReplicaSet", owner_name="inference",
              requests={POD_RES: "1"}),
        o.pod("team-a", "batch-done", node="n2", phase="Succeeded", ready=False, requests={POD_RES: "2"}),
    )


def test_node_list_counts_what_pods_hold_and_vm_fit_answers_from_the_same_numbers(backend):
    seed(backend)
    r = backend.rblnctl("node", "list", "-o", "json")
    assert r.exit_code == 0, r.stderr
    nodes = {n["name"]: n for n in json.loads(r.stdout)["items"]}
    assert [(nodes[n]["npuAllocatable"], nodes[n]["npuAllocated"], nodes[n]["npuFree"]) for n in ("n1", "n2")] == [
        (4, 2, 2), (4, 1, 3)]
    assert nodes["n1"]["npuResources"] == [{"name": VM_RES, "dra": False, "allocatable": 4, "allocated": 2, "free": 2,
                                            "holders": [f"{NS}/virt-launcher-v1-abcde"], "tainted": []}]
    assert nodes["n2"]["npuResources"][0]["holders"] == ["team-a/inference-0"]  # the finished pod holds nothing

    table = backend.rblnctl("node", "list").stdout.splitlines()
    assert table[0].split()[:6] == ["NAME", "MODE", "STATUS", "NPUS", "ALLOCATED", "FREE"]
    assert [line.split()[3:6] for line in table[1:]] == [["4", "2", "2"], ["4", "1", "3"]]

    r = backend.rblnctl("vm", "fit", "--npus", "2", "--count", "3", "-o", "json")
    assert r.exit_code == 1, r.stderr  # only one fits
    answer = json.loads(r.stdout)
    assert (answer["fits"], answer["ok"], answer["resource"]) == (1, False, VM_RES)
    rows = {n["name"]: n for n in answer["nodes"]}
    assert (rows["n1"]["free"], rows["n1"]["fits"]) == (nodes["n1"]["npuFree"], 1)  # the same numbers
    assert not rows["n2"]["eligible"] and rows["n2"]["fits"] == 0
    assert "container mode" in rows["n2"]["reason"] and f"{nodes['n2']['npuFree']} of 4 free" in rows["n2"]["reason"]
    assert "only 1 fit now, on n1 (1)" in r.stderr

    r = backend.rblnctl("vm", "fit", "--npus", "2")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"1 VM(s) of 2 NPU(s) ({VM_RES}): 1 fit now (1 could), on n1 (1)")
    assert backend.rblnctl("vm", "fit", "--npus", "3").exit_code == 1  # 2 free on n1: no 3-NPU VM fits


def test_start_of_a_running_vm_and_stop_of_a_stopped_one_ask_nothing(backend):
    seed(backend)
    backend.mark()
    r = backend.rblnctl("vm", "start", "v1", "-n", NS, "--wait", "--timeout", "30s", "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["plan"]["noop"] and doc["result"]["state"]["npus"]["attached"] is True
    assert doc["result"]["state"]["npus"]["launcherPod"] == "virt-launcher-v1-abcde"
    r = backend.rblnctl("vm", "stop", "v2", "-n", NS, "--wait", "--timeout", "30s")
    assert r.exit_code == 0, r.stderr
    assert "already stopped" in r.stderr
    assert backend.writes() == []


def test_stop_frees_the_npus_and_start_takes_them_again(apiserver, tmp_path):
    """On the simulated virt-controller: the same cluster, v1 stopped and started through virt-api; node list and vm
    fit follow. Each command again is a no-op."""
    from tests.cluster.backend import FakeBackend

    apiserver.simulate_kubevirt = True
    fake = FakeBackend(apiserver, tmp_path)
    seed(fake)

    def n1():
        items = json.loads(fake.rblnctl("node", "list", "-o", "json").stdout)["items"]
        return next((n["npuAllocated"], n["npuFree"]) for n in items if n["name"] == "n1")

    assert fake.rblnctl("vm", "stop", "v1", "-n", NS, "--yes", "--wait").exit_code == 0
    assert n1() == (0, 4)
    assert fake.rblnctl("vm", "fit", "--npus", "2", "--count", "2").exit_code == 0  # n1 now holds two such VMs
    fake.mark()
    assert fake.rblnctl("vm", "stop", "v1", "-n", NS, "--yes", "--wait").exit_code == 0
    assert fake.writes() == []
    r = fake.rblnctl("vm", "start", "v1", "-n", NS, "--wait")
    assert r.exit_code == 0, r.stderr
    assert "Ready on n1 with 2 NPU(s) attached" in r.stderr and n1() == (2, 2)
    fake.mark()
    assert fake.rblnctl("vm", "start", "v1", "-n", NS, "--wait").exit_code == 0
    assert fake.writes() == []


STRANDED = "no NPU node is left in vm-passthrough mode after this switch"


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
