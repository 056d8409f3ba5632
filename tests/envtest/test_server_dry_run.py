"""`--dry-run=server` on a real API server: every write is sent with dryRun=All, and nothing is stored.

The fake honours dryRun=All by not committing; a real kube-apiserver runs admission and validation (the CRDs'
schemas included) and stores nothing, except where the request says it differently: a DELETE with a body
takes its options from the body alone (rblnctl once deleted a ResourceClaimTemplate for real under
`vm detach --dry-run=server`). Each mutating command runs against a world in which it has something to do,
and the audit log says what rblnctl sent: at least one write (the server really was asked), every write dry,
and every object the command could change as it was.
"""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.fakes.releases import NEWER, V0_3_0

CA22 = "rebellions.ai/RBLN-CA22_PF"
OLD = "rebellions.ai/ATOM_CA22_PT"
VFIO = [{"name": f"vfio-0000-3b-0{i}-0",
         "attributes": {"type": {"string": "vfio"}, "resource.kubernetes.io/pciBusID": {"string": f"0000:3b:0{i}.0"},
                        "productName": {"string": "RBLN-CA22"}}} for i in range(2)]


def v030_world(real) -> None:
    """Chart v0.3.0 as installed here: its policy (CRD defaults applied), a container and a vm node."""
    real.api.seed(o.npu_node("n1", release=V0_3_0), o.npu_node("n2", mode="vm-passthrough", release=V0_3_0),
                  V0_3_0.policy(vfio_manager=True, sandbox=True), V0_3_0.operator_deployment(),
                  o.replicaset("default", "web"),
                  o.pod("default", "web-1", node="n1", owner_kind="ReplicaSet", owner_name="web",
                        requests={"rebellions.ai/ATOM": "1"}),
                  o.kubevirt(feature_gates=["Snapshot"], version="v1.9.0", permitted_pci=[("1EFF:1220", OLD)]),
                  o.vm("vms", "old-names", host_devices=[OLD], running=False))


def later_world(real, *, dra: bool = False) -> None:
    """A later operator serving VMs (sandbox, or DRA with its class and vfio devices), KubeVirt ready for it."""
    gates = ["HostDevices", "HostDevicesWithDRA"] if dra else ["HostDevices"]
    real.api.seed(o.npu_node("n1", mode="vm-passthrough", dra=dra), o.npu_node("n2", mode="vm-passthrough", dra=dra),
                  o.node_feature("n1"), o.node_feature("n2"),
                  NEWER.policy(vfio_manager=True, sandbox=not dra, dra=dra, device_plugin=not dra),
                  NEWER.operator_deployment(),
                  o.kubevirt(feature_gates=gates, version="v1.9.0", permitted_pci=[("1EFF:1220", CA22)]),
                  o.vm("vms", "fresh", running=False))
    if dra:
        real.api.seed(o.deviceclass("vfio-npu.rebellions.ai"), o.resource_slice("n2", devices=VFIO),
                      o.resource_claim_template("vms", "rbln-npu-1"),
                      o.vm("vms", "dra-vm", running=False, host_devices=[o.dra_host_device("npu0")],
                           resource_claims=[o.template_claim("rbln-npu", "rbln-npu-1")]))


def container_world(real) -> None:
    """A later operator with a container node the policy could move to vm mode."""
    real.api.seed(o.npu_node("n1"), o.node_feature("n1"), NEWER.policy(vfio_manager=True, sandbox=True),
                  NEWER.operator_deployment(), o.replicaset("default", "web"),
                  o.pod("default", "web-1", node="n1", owner_kind="ReplicaSet", owner_name="web",
                        requests={"rebellions.ai/npu": "1"}))


V030_CASES = [
    ("node", "drain", "n1", "--yes"),
    ("node", "set-mode", "container", "n2", "--yes"),
    ("kubevirt", "enable-gates"),
    ("kubevirt", "disable-gates", "Snapshot"),
    ("kubevirt", "migrate-resources", "--map", f"{OLD}={CA22}", "--yes"),
]
LATER_CASES = [
    (container_world, ("node", "set-mode", "vm", "n1", "--yes")),
    (later_world, ("kubevirt", "permit-devices", "--resource-name", "RBLN-CA25_PF")),
    (later_world, ("vm", "attach", "fresh", "-n", "vms", "--npus", "1")),
    (lambda r: later_world(r, dra=True), ("vm", "attach", "fresh", "-n", "vms", "--method", "dra", "--npus", "2")),
    (lambda r: later_world(r, dra=True), ("vm", "detach", "dra-vm", "-n", "vms")),
    (later_world, ("policy", "set-method", "dra", "--yes")),
]


def snapshot(real) -> dict:
    """Every object a command could touch (outside kube-system), by kind/namespace/name -> resourceVersion."""
    out = {}
    for kind in ("Node", "Pod", "RBLNClusterPolicy", "KubeVirt", "VirtualMachine", "ResourceClaimTemplate", "Lease"):
        for obj in real.api.list(kind):
            md = obj["metadata"]
            if md.get("namespace") not in ("kube-system", "kube-node-lease"):
                out[(kind, md.get("namespace"), md["name"])] = md["resourceVersion"]
    return out


def dry_run_on_the_server(real, world, args) -> None:
    world(real)
    before = snapshot(real)
    real.mark()
    r = real.rblnctl(*args, "--dry-run=server")
    assert r.exit_code == 0, r.stdout + r.stderr
    writes = real.writes()
    assert writes, "nothing was sent: a server-side dry run must ask the server"
    assert [w for w in writes if not w.dry_run] == []
    assert snapshot(real) == before


@pytest.mark.parametrize("args", V030_CASES, ids=lambda a: " ".join(a[:3]))
def test_chart_v030_cluster(real, args):
    dry_run_on_the_server(real, v030_world, args)


@pytest.mark.parametrize("case", range(len(LATER_CASES)), ids=lambda i: " ".join(LATER_CASES[i][1][:3]))
def test_later_operator_cluster(later_policy_crd_installed, real, case):
    world, args = LATER_CASES[case]
    dry_run_on_the_server(real, world, args)
