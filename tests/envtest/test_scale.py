"""rblnctl on a real API server at size: 1,000 NPU nodes, and more VMs than one list page holds.

A real server pages lists with continue tokens (and may answer a continue with 410 once etcd compacted the
snapshot); rblnctl must read every page, and its request count must not grow with the number of objects.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.envtest.audit import AuditLog
from tests.envtest.fixtures import _start
from tests.fakes import objects as o
from tests.fakes.releases import NEWER

OLD = "rebellions.ai/ATOM_CA22_PT"
NEW = "rebellions.ai/RBLN-CA22_PF"


def seed_many(real, objs: list[dict]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda ob: real.api.seed(ob), objs))


def reads(real) -> list:
    return [e for e in real.audit.events(real._mark, user_agent="rblnctl/") if e.verb in ("get", "list")]


def cache_lists(real, resource: str) -> int:
    """How many lists of `resource` kube-apiserver has served from its watch cache (its own metric)."""
    text = real.api.request("GET", "/metrics")
    return sum(int(float(line.rpartition(" ")[2])) for line in text.splitlines()
               if line.startswith("apiserver_cache_list_total{") and f'resource="{resource}"' in line)


def etcd_compact(etcd_url: str) -> None:
    """Compact etcd at its current revision (its gRPC gateway), as kube-apiserver does every five minutes."""
    import json as _json
    import urllib.request

    def call(path: str, body: dict) -> dict:
        req = urllib.request.Request(etcd_url + path, data=_json.dumps(body).encode(),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return _json.loads(resp.read())

    revision = call("/v3/kv/range", {"key": "AA==", "limit": 1, "count_only": True})["header"]["revision"]
    call("/v3/kv/compaction", {"revision": revision, "physical": True})


@pytest.fixture(scope="module")
def uncached(tmp_path_factory):
    """A control plane whose lists all come from etcd (no watch cache) and which never compacts etcd itself: a
    continue token then expires exactly when a test compacts etcd. (With the cache, v1.36.2 answers a continue
    from its snapshots, which it drops later: measured 410 Expired on 5,000 nodes left quiet for 30 minutes.)"""
    cp = _start(tmp_path_factory, "envtest-uncached", controllers=(),
                apiserver_args=("--watch-cache=false", "--etcd-compaction-interval=0"))
    try:
        yield cp
    finally:
        cp.stop()


def test_a_display_list_reads_on_past_an_expired_continue_token(uncached):
    """kube-apiserver's 410 for a continue token etcd compacted away carries the token that reads the rest as it
    is now (rblnctl.errors.ContinueExpired.inconsistent_continue). A display list reads on with it, every object
    once; a consistent list raises. The fake answers the same (tests/cli/test_cache_reads.py)."""
    from rblnctl.errors import ContinueExpired
    from rblnctl.kube import NODES, KubeOptions, connect
    from tests.cluster.client import Api

    api = Api(uncached.url, token=uncached.admin_token, ca=str(uncached.ca))
    for i in range(5):
        api.create(o.node(f"expiry-{i}"))
    kube = connect(KubeOptions(kubeconfig=str(uncached.kubeconfig)))
    for from_cache in (True, False):
        kube.list_from_cache = from_cache
        pages = kube.iter_list(NODES, page_size=2)
        first = [next(pages)["metadata"]["name"] for _ in range(2)]
        api.create({"kind": "Namespace", "metadata": {"name": f"expiry-{from_cache}".lower()}})  # a later write
        etcd_compact(uncached.etcd_url)
        if from_cache:
            assert first + [n["metadata"]["name"] for n in pages] == [f"expiry-{i}" for i in range(5)]
        else:
            with pytest.raises(ContinueExpired, match="410 Expired The provided continue parameter is too old"):
                list(pages)
    expired = [e for e in AuditLog(uncached.audit_log).events(0, user_agent="rblnctl/") if e.code == 410]
    assert len(expired) == 2, [e.uri for e in expired]


def test_status_node_list_and_preflight_at_1000_nodes(later_policy_crd_installed, real):
    n = 1000
    seed_many(real, [o.npu_node(f"npu-{i:04d}", mode="vm-passthrough" if i % 4 == 0 else "container")
                     for i in range(n)])
    real.api.seed(NEWER.policy(vfio_manager=True, sandbox=True), NEWER.operator_deployment(),
                  o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"))
    real.mark()
    served = cache_lists(real, "nodes")
    r = real.rblnctl("node", "list", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["items"]) == n
    node_lists = [e for e in reads(real) if e.resource == "nodes" and e.verb == "list"]
    # A display command lists from the watch cache, page by page: resourceVersionMatch=NotOlderThan on each first
    # page, the token alone on the pages after it (1,000 nodes, 500 a page). The server's own metric says every
    # page came from the cache, none from etcd.
    firsts = [e for e in node_lists if "continue=" not in e.uri]
    assert firsts and all("resourceVersion=1&resourceVersionMatch=NotOlderThan" in e.uri for e in firsts), \
        [e.uri for e in node_lists]
    assert any("continue=" in e.uri for e in node_lists)
    assert not any("resourceVersionMatch" in e.uri for e in node_lists if "continue=" in e.uri)
    assert cache_lists(real, "nodes") - served == len(node_lists), [e.uri for e in node_lists]
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
