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
