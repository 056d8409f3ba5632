"""`vm list`, `vm diagnose` and `node list` over what real KubeVirt v1.9.0 made: VMIs and virt-launcher pods from
virt-controller (sandbox NPUs as requests of the compute container), placed by the real kube-scheduler, and DRA
claims the resourceclaim controller made and the scheduler allocated from a hand-made ResourceSlice."""

from __future__ import annotations

import json


from tests.kubevirt_real.helpers import DRA_NODE, SANDBOX_NODE, dra_vm, dra_world, operator_crds, sandbox_ready
from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm


def running(kv, *objs):
    """Create the objects (VMs that run), and wait until each VM's VMI is Running."""
    kv.api.seed(*objs)
    return {o["metadata"]["name"]: kv.wait_vmi_phase(o["metadata"]["name"], "Running")
            for o in objs if o["kind"] == "VirtualMachine" and o["spec"]["runStrategy"] == "Always"}


def links(kv, name):
    r = kv.rblnctl("vm", "diagnose", name, "-n", kv.namespace, "-o", "json")
    return r, {link["name"]: link for link in json.loads(r.stdout)["links"]}


def node_doc(kv, node):
    r = kv.rblnctl("node", "list", node, "-o", "json")
    assert r.exit_code == 0, r.stderr
    (item,) = json.loads(r.stdout)["items"]
    return item


def test_vm_list_shows_each_vm_as_virt_controller_runs_it(kv):
    sandbox_ready(kv)
    dra_world(kv)
    ns = kv.namespace
    running(kv, vm(ns, "sb", run_strategy="Always", host_devices=[SANDBOX_RESOURCE] * 2),
            vm(ns, "off", host_devices=[SANDBOX_RESOURCE]), *dra_vm(ns, "dr", 2))
    doc = json.loads(kv.rblnctl("vm", "list", "-A", "-o", "json").stdout)
    got = {i["name"]: (i["namespace"], i["status"], i["node"], i["method"], i["npus"], i["runningNpus"])
           for i in doc["items"]}
    assert got == {"sb": (ns, "Running", SANDBOX_NODE, "sandbox", 2, 2),
                   "off": (ns, "Stopped", None, "sandbox", 1, None),
                   "dr": (ns, "Running", DRA_NODE, "dra", 2, 2)}
    table = kv.rblnctl("vm", "list", "-A").stdout.splitlines()
    assert table[0].split()[:7] == ["NAMESPACE", "NAME", "STATUS", "NODE", "NPUS", "METHOD", "DEVICES"]
    rows = {line.split()[1]: line.split() for line in table[1:]}
    assert rows["dr"] == [ns, "dr", "Running", DRA_NODE, "2", "dra", "2x", "claim/rbln-npu"]
    assert rows["off"] == [ns, "off", "Stopped", "<none>", "1", "sandbox", "1x", "RBLN-CA22_PF"]


def test_vm_diagnose_walks_a_running_sandbox_vm_up_to_the_missing_operator(kv):
    sandbox_ready(kv)
    running(kv, vm(kv.namespace, "sb", run_strategy="Always", host_devices=[SANDBOX_RESOURCE] * 2))
    (pod,) = kv.launcher_pods("sb")
    r, got = links(kv, "sb")
    assert r.exit_code == 1, r.stderr
    assert [n for n, link in got.items() if link["status"] == "PASS"] == [
        "VirtualMachine", "NpuRequest", "FeatureGates", "VmModeNodes", "PermittedHostDevice", "Advertised",
        "KubeVirtSchedulable", "FreeCapacity", "Instance", "Scheduling"]
    assert f"virt-launcher pod {pod['metadata']['name']} is on {SANDBOX_NODE}" in got["Scheduling"]["evidence"]
    # The kubevirt stack runs no RBLN operator: the chain stops there, and says so.
    node = got["NodeComponents"]
    assert (node["status"], node["evidence"]) == ("FAIL", [f"{SANDBOX_NODE}: no RBLNClusterPolicy"])
    assert "helm upgrade --install rbln-npu-operator" in node["remedy"]


def test_vm_diagnose_reads_the_claim_the_real_scheduler_allocated(kv):
    sandbox_ready(kv)
    dra_world(kv)
    running(kv, *dra_vm(kv.namespace, "dr", 2))
    (claim,) = kv.api.list("ResourceClaim", kv.namespace)
    devices = sorted(f"{DRA_NODE}/{x['device']}" for x in claim["status"]["allocation"]["devices"]["results"])
    r, got = links(kv, "dr")
    assert [got[n]["status"] for n in ("DeviceClass", "ResourceSlices", "Instance", "ClaimAllocated", "Scheduling",
                                       "ClaimName")] == ["PASS"] * 6, r.stdout
    msg = " ".join(got["ClaimAllocated"]["evidence"])
    assert f"ResourceClaim {kv.namespace}/{claim['metadata']['name']} (rbln-npu) allocated" in msg
    assert all(d in msg for d in devices)


def test_node_list_free_follows_the_launcher_pod_virt_controller_made_and_removed(kv):
    sandbox_ready(kv)
    assert (node_doc(kv, SANDBOX_NODE)["npuAllocated"], node_doc(kv, SANDBOX_NODE)["npuFree"]) == (0, 4)
    running(kv, vm(kv.namespace, "sb", run_strategy="Always", host_devices=[SANDBOX_RESOURCE] * 3))
    item = node_doc(kv, SANDBOX_NODE)
    assert (item["npuAllocatable"], item["npuAllocated"], item["npuFree"]) == (4, 3, 1)

    r = kv.rblnctl("vm", "stop", "sb", "-n", kv.namespace, "--wait", "-y")
    assert r.exit_code == 0, r.stderr
    assert kv.launcher_pods("sb") == []
    assert node_doc(kv, SANDBOX_NODE)["npuFree"] == 4


def test_node_list_counts_the_dra_devices_the_scheduler_allocated(kv):
    sandbox_ready(kv)
    dra_world(kv)
    with operator_crds(kv):
        # A policy that runs the DRA plugin: only then do a node's ResourceSlices count (rblnctl.operator.capacity).
        from tests.fakes.releases import V0_3_0

        policy = V0_3_0.policy(workload_type="vm-passthrough", vfio_manager=True, dra=True, device_plugin=False)
        kv.api.seed({**policy, "metadata": {"name": policy["metadata"]["name"]}})
        running(kv, *dra_vm(kv.namespace, "dr", 3))
        item = node_doc(kv, DRA_NODE)
        assert (item["npuAllocatable"], item["npuAllocated"], item["npuFree"]) == (4, 3, 1)


def test_vm_start_wait_names_no_condition_every_npu_vm_has(kv):
    sandbox_ready(kv)
    kv.api.seed(vm(kv.namespace, "sb", host_devices=[SANDBOX_RESOURCE]))
    r = kv.rblnctl("vm", "start", "sb", "-n", kv.namespace, "--wait")
    assert r.exit_code == 0, r.stderr
    vmi = kv.vmi("sb")
    assert any(c["type"] == "LiveMigratable" and c["status"] == "False" for c in vmi["status"]["conditions"])
    assert "LiveMigratable" not in r.stderr
