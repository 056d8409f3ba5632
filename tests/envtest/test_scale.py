"""rblnctl on a real API server at size: 1,000 NPU nodes, and more VMs than one list page holds.

A real server pages lists with continue tokens (and may answer a continue with 410 once etcd compacted the
snapshot); rblnctl must read every page, and its request count must not grow with the number of objects.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from tests.fakes import objects as o
from tests.fakes.releases import NEWER

OLD = "rebellions.ai/ATOM_CA22_PT"
NEW = "rebellions.ai/RBLN-CA22_PF"


def seed_many(real, objs: list[dict]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda ob: real.api.seed(ob), objs))


def reads(real) -> list:
    return [e for e in real.audit.events(real._mark, user_agent="rblnctl/") if e.verb in ("get", "list")]


def test_status_node_list_and_preflight_at_1000_nodes(later_policy_crd_installed, real):
    n = 1000
    seed_many(real, [o.npu_node(f"npu-{i:04d}", mode="vm-passthrough" if i % 4 == 0 else "container")
                     for i in range(n)])
    real.api.seed(NEWER.policy(vfio_manager=True, sandbox=True), NEWER.operator_deployment(),
                  o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"))
    real.mark()
    r = real.rblnctl("node", "list", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["items"]) == n
    node_lists = [e for e in reads(real) if e.resource == "nodes" and e.verb == "list"]
    # A display command lists from the watch cache (resourceVersion=0): the real server answers every one of the
    # 1,000 nodes in one reply, ignoring limit=500: one request per NFD label, no continue.
    assert len(node_lists) <= 3, [e.uri for e in node_lists]
    assert all("resourceVersion=0" in e.uri and "continue=" not in e.uri for e in node_lists), \
        [e.uri for e in node_lists]
    real.mark()
    r = real.rblnctl("status", "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert sum(doc["modes"].values()) == n and doc["modes"]["vm-passthrough"] == n // 4
    assert len(reads(real)) < 30  # a fixed set of reads, whatever the number of nodes
    real.mark()
    r = real.rblnctl("preflight", "-o", "json")
    doc = json.loads(r.stdout)
    # no permittedHostDevices at all: KubeVirt checks no name then (virt-controller renderresources.go
    # validatePermittedHostDevices), so it is a WARN, not a FAIL, and warnings pass
    assert r.exit_code == 0, r.stderr
    assert next(c for c in doc["checks"] if c["id"] == "kubevirt.permitted-devices")["status"] == "WARN"
    nodes_check = next(c for c in doc["checks"] if c["id"] == "nfd.npu-nodes")
    assert str(n) in nodes_check["evidence"]
    assert len(reads(real)) < 40


def test_migrate_resources_reads_every_page_of_vms(later_policy_crd_installed, real):
    real.api.seed(NEWER.policy(vfio_manager=True, sandbox=True), NEWER.operator_deployment(),
                  o.npu_node("v1", mode="vm-passthrough"),
                  o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0", permitted_pci=[("1EFF:1220", OLD)]))
    names = [(f"team-{'ab'[i % 2]}", f"vm-{i:04d}") for i in range(60)]
    seed_many(real, [o.vm(ns, name, host_devices=[OLD], running=False) for ns, name in names])
    real.mark()
    r = real.rblnctl("kubevirt", "migrate-resources", "--map", f"{OLD}={NEW}", "--yes", "--chunk-size", "25")
    assert r.exit_code == 0, r.stderr
    vm_lists = [e for e in reads(real) if e.resource == "virtualmachines" and e.verb == "list"]
    assert any("continue=" in e.uri for e in vm_lists), [e.uri for e in vm_lists]
    # a write decides on these reads: consistent (paged from etcd's snapshot), never the watch cache
    assert not any("resourceVersion=" in e.uri for e in vm_lists), [e.uri for e in vm_lists]
    left = [v["metadata"]["name"] for v in real.api.list("VirtualMachine")
            if OLD in json.dumps(v["spec"])]
    assert left == []
    kv = real.api.get("KubeVirt", "kubevirt", "kubevirt")
    assert [d["resourceName"] for d in kv["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]] == [NEW]
