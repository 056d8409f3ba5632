"""Issue 22's scenario, on the fake API server and on a real kube-apiserver (`backend`): a running VM whose
virt-launcher requests 2 of n1's 4 NPUs, an inference pod requesting 1 of n2's 4 (and a finished one that
held 2); `node list` says 2/2 and 1/3, and `vm fit` answers from the same numbers.

The real server has no virt-controller and no scheduler: the VMI and its virt-launcher pod are seeded as
KubeVirt leaves them (tests/cluster), bound to their nodes. The policy is the chart v0.3.0's, as the real
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
        o.vm(NS, "v1", host_devices=[VM_RES, VM_RES]), o.vmi(NS, "v1", "n1", [VM_RES, VM_RES]),
        o.virt_launcher(NS, "v1", "n1", resources={VM_RES: "2"}),
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
                                            "holders": [f"{NS}/virt-launcher-v1-abcde"]}]
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
    assert r.stdout.startswith(f"1 VM(s) of 2 POD_RES(s) ({VM_RES}): 1 fit now (1 could), on n1 (1)")
    assert backend.rblnctl("vm", "fit", "--npus", "3").exit_code == 1  # 2 free on n1: no 3-POD_RES VM fits
