"""A cluster before KubeVirt, Node Feature Discovery and the operator: the first thing rblnctl meets.

A real kube-apiserver answers every request under an API group it does not serve with its mux's plain-text
404, not a Status (tests/envtest/controlplane.py's server, no CRD installed). Each command must read that as
"not installed": a finding with its remedy in preflight, a note in status, an empty list for VMs.
"""

from __future__ import annotations

import json

from tests.fakes import objects as o


def seed_npu_nodes(backend, n: int = 2) -> list[str]:
    names = [f"npu-{i}" for i in range(n)]
    backend.api.seed(*[o.npu_node(name, deploy=False) for name in names])
    return names


def test_preflight_names_what_to_install(bare):
    seed_npu_nodes(bare)
    r = bare.rblnctl("preflight", "-o", "json")
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    results = {c["id"]: c for c in doc["checks"]}
    assert results["kubevirt.installed"]["status"] == "FAIL"
    assert "kubevirts.kubevirt.io CRD is not installed" in results["kubevirt.installed"]["evidence"]
    assert "install KubeVirt" in results["kubevirt.installed"]["remedy"]
    assert results["operator.version"]["status"] == "FAIL" and "helm" in results["operator.version"]["remedy"]
    assert "not the Kubernetes API" not in r.stderr


def test_status_node_list_and_version_work(bare):
    names = seed_npu_nodes(bare)
    r = bare.rblnctl("status")
    assert r.exit_code == 0, r.stderr
    assert "RBLNClusterPolicy CRD not found" in r.stderr and "KubeVirt" in r.stderr
    assert all(n in r.stdout for n in names)
    r = bare.rblnctl("node", "list", "-o", "name")
    assert r.exit_code == 0, r.stderr
    assert sorted(r.stdout.split()) == [f"node/{n}" for n in names]
    r = bare.rblnctl("version", "-o", "json")
    assert r.exit_code == 0, r.stderr
    server = json.loads(r.stdout)["server"]
    assert server["kubernetes"]["version"] == bare.control_plane.version
    assert server["kubevirt"]["version"] is None and server["kubevirt"]["note"].startswith("not installed")


def test_vm_list_is_empty_and_kubevirt_status_says_not_installed(bare):
    seed_npu_nodes(bare, 1)
    r = bare.rblnctl("vm", "list", "-A", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["items"] == []
    r = bare.rblnctl("kubevirt", "status")
    assert r.exit_code == 1 and "kubevirts.kubevirt.io CRD is not installed" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_set_mode_guard_and_drain_see_no_vms_rather_than_failing(bare):
    [node] = seed_npu_nodes(bare, 1)
    r = bare.rblnctl("node", "drain", node, "--dry-run")
    assert r.exit_code == 0, r.stderr
    r = bare.rblnctl("node", "set-mode", "vm", node, "--dry-run")
    assert r.exit_code == 1 and "RBLNClusterPolicy CRD is not installed" in r.stderr
    assert bare.writes() == []
