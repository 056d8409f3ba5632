"""Issue 39 on the fake and on a real kube-apiserver alike (the ``backend`` fixture): the shared stack's three NPU
products under chart v0.3.0's policy (the real v0.3.0 CRD on the real server), and the remedies `vm fit` prints
there run as the user would run them. Each scenario: the hint names only the switches `node set-mode` accepts
(its dry run passes on the server), a cluster of two products in vm mode gets an answer per product and one
line naming `--product`, and a missing node name is only the not-found error."""

from __future__ import annotations

import re

import yaml

from tests.fakes import objects as o
from tests.fakes.releases import V0_3_0

STACK = (("npu-node-1", "RBLN-CA12", 4), ("npu-node-2", "RBLN-CA25", 4), ("npu-node-3", "RBLN-CA22", 2))
HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}


def seed(backend, modes=("container",) * 3, *, deployment: bool = False) -> None:
    """The stack's nodes and policy; `deployment`: the operator's Deployment too, which tells its version (v0.3.0:
    its sandbox plugin never serves a vm-passthrough node, so set-mode refuses every switch to vm)."""
    policy = V0_3_0.policy(**HYBRID)
    backend.api.seed(*([V0_3_0.operator_deployment()] if deployment else []), policy,
                     *[o.npu_node(n, product=p, npus=k, mode=m, release=V0_3_0, policy=policy)
                       for (n, p, k), m in zip(STACK, modes, strict=True)])


def run(backend, *args):
    r = backend.rblnctl(*args)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def test_vm_fit_hints_are_switches_set_mode_accepts(backend):
    seed(backend)
    r = run(backend, "vm", "fit", "--npus", "2", "--product", "RBLN-CA12")
    assert r.exit_code == 1, r.stderr
    named = re.findall(r"node set-mode vm (npu-node-\d)`", r.stdout)
    assert named == ["npu-node-1"], r.stdout  # not CA25's npu-node-2, not CA22's npu-node-3 (no v0.3.0 resource)
    assert run(backend, "node", "set-mode", "vm", "npu-node-1", "--dry-run").exit_code == 0
    refused = run(backend, "node", "set-mode", "vm", "npu-node-3", "--dry-run")
    assert refused.exit_code == 1 and "none of them for RBLN-CA22" in refused.stderr
    missing = run(backend, "node", "list", "npu-node-9")
    assert missing.exit_code == 1 and "No NPU nodes found" not in missing.stderr


def test_a_known_v030_operator_gets_no_switch_hint_since_set_mode_refuses_every_one(backend):
    seed(backend, deployment=True)
    r = run(backend, "vm", "fit", "--npus", "2")
    assert re.findall(r"node set-mode vm (npu-node-\d)`", r.stdout) == [], r.stdout
    assert r.stdout.count("`node set-mode vm` refuses it") == 3
    assert run(backend, "node", "set-mode", "vm", "npu-node-1", "--dry-run").exit_code == 1  # as the rows say


def test_two_products_in_vm_mode_name_the_product_and_fit_per_product(backend):
    seed(backend, ("vm-passthrough", "vm-passthrough", "container"))
    r = run(backend, "vm", "manifest", "my-vm", "-n", "vms", "--npus", "2")
    assert r.exit_code == 2 and "(pass --product)" in r.stderr and "RBLN-CA12 (rebellions.ai/ATOM_PT" in r.stderr
    assert run(backend, "vm", "manifest", "my-vm", "-n", "vms", "--npus", "2", "--product", "RBLN-CA25"
               ).exit_code == 0
    doc = yaml.safe_load(run(backend, "vm", "fit", "--npus", "2", "-o", "yaml").stdout)
    assert doc["kind"] == "VmFitList"
    assert {i["resource"]: i["fits"] for i in doc["items"]} == {"rebellions.ai/ATOM_MAX_PT": 2,
                                                               "rebellions.ai/ATOM_PT": 2}


def test_diagnose_of_a_stuck_plugin_names_the_vm_node_and_no_other_products_resource(backend):
    """Issue 39 (3) on both servers: npu-node-1 (RBLN-CA12) in vm mode advertising nothing (its sandbox plugin
    stuck, as tests/envtest/test_remedies_run_real.py makes it with the real operator), npu-node-2 (RBLN-CA25) in vm
    mode advertising ATOM_MAX_PT, a VM asking for ATOM_PT. Before: "switch a node with that product to vm mode" for
    npu-node-1, already in vm mode, and "did you mean rebellions.ai/ATOM_MAX_PT?", another product's resource."""
    seed(backend, ("vm-passthrough", "vm-passthrough", "container"))
    backend.api.mutate("Node", "npu-node-1", None, lambda n: n["status"]["allocatable"].pop("rebellions.ai/ATOM_PT"),
                       sub="status")
    # the card's product label as NPU feature discovery left it (the real operator stack's nodes keep it in vm
    # mode: tests/envtest/operator_stack.py NpuNodeSpec.node); the fake's npu_node drops it in vm mode
    backend.api.patch("Node", "npu-node-1", {"metadata": {"labels": {o.NPU_PRODUCT_LABEL: "RBLN-CA12"}}})
    backend.api.seed(o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"),
                     o.vm("vms", "v1", running=False, host_devices=["rebellions.ai/ATOM_PT"]))
    assert "rebellions.ai/ATOM_MAX_PT" in backend.api.get("Node", "npu-node-2")["status"]["allocatable"]
    r = run(backend, "vm", "diagnose", "v1", "-n", "vms")
    said = " ".join((r.stdout + r.stderr).split())
    assert "did you mean" not in said and "switch a node with that product" not in said, said
    assert "npu-node-1 is in vm mode with that product" in said, said
    assert "node list npu-node-1 --output wide`" in said, said
    assert run(backend, "node", "list", "npu-node-1", "--output", "wide").exit_code == 0
