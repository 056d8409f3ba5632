"""Issue 22's scenario, on the fake API server and on a real kube-apiserver (`backend`): a running VM whose
virt-launcher requests 2 of n1's 4 NPUs, an inference pod requesting 1 of n2's 4 (and a finished one that
held 2); `node list` says 2/2 and 1/3, and `vm fit` answers from the same numbers.

The real server has no virt-controller and no scheduler: the VMI and its virt-launcher pod are seeded as
KubeVirt leaves them (tests/cluster), bound to their nodes (the pod labelled with the VMI's uid as the server
gave it). It has no virt-api either: there `vm start` and `vm stop` are checked where they have nothing to ask
(a running VM, a stopped one: exit 0, no write, as the audit log shows); the requests themselves, and the
capacity they free and take, run on the fake's simulated virt-controller. The policy is the chart v0.3.0's, as the real
server's CRD defaults any policy to: its resourceList names the resources (ATOM_PT for VMs, ATOM for pods).
"""

from __future__ import annotations

import json

from tests.fakes import objects as o
from tests.fakes.releases import V0_3_0

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
