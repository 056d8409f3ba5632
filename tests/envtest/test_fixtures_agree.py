"""The objects the default tier seeds into the fake are objects a real server accepts and stores unchanged.

The fake stores bodies as sent; a real kube-apiserver validates them (built-in types, the CRDs' schemas and
CEL rules) and prunes fields a CRD does not declare. A fixture the real server rejects or rewrites would
make the default tier test rblnctl against a cluster that cannot exist. Each fixture here is created on the
real server (its status through the subresource) and read back: it must be accepted, and nothing of its
spec may be pruned.
"""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.fakes.releases import V0_3_0

CA22 = "rebellions.ai/RBLN-CA22_PF"
DRA_DEV = [o.dra_host_device("npu0")]
HELD = o.template_claim("rbln-npu", "rbln-npu-1")


def _fixtures() -> list[tuple[str, dict]]:
    launcher = o.virt_launcher("vms", "vm-dra", "n1", claims={"rbln-npu": "vm-dra-rbln-npu-x"})
    return [
        ("npu node (container)", o.npu_node("n1")),
        ("npu node (vm)", o.npu_node("n2", mode="vm-passthrough")),
        ("policy (objects.cluster_policy)", o.cluster_policy()),
        ("policy (chart v0.3.0, sandbox)", V0_3_0.policy(vfio_manager=True, sandbox=True)),
        ("KubeVirt CR", o.kubevirt(feature_gates=["HostDevices", "Snapshot"], version="v1.9.0")),
        ("VM (sandbox)", o.vm("vms", "vm-sb", host_devices=[CA22], running=False)),
        ("VM (dra)", o.vm("vms", "vm-dra", host_devices=DRA_DEV, resource_claims=[HELD])),
        ("VMI (sandbox)", o.vmi("vms", "vm-sb", "n2", [CA22])),
        ("VMI (dra)", o.vmi("vms", "vm-dra", "n1", DRA_DEV, resource_claims=[HELD])),
        ("VM (dra, rblnctl's layout)", o.dra_vm("vms", "vm-own", 2)),
        ("VMI (standalone, Scheduling)", o.dra_vmi("vms", "vmi-own", None, 2, phase="Scheduling", standalone=True)),
        ("npu node (container, DRA only)", o.dra_only_container_node("n3")),
        ("virt-launcher pod", launcher),
        ("NodeFeature", o.node_feature("n1")),
        ("DeviceClass", o.deviceclass("vfio-npu.rebellions.ai")),
        ("ResourceSlice", o.resource_slice("n1")),
        ("ResourceClaimTemplate", o.resource_claim_template("vms", "rbln-npu-1", npus=2)),
        ("ResourceClaim", o.resource_claim("vms", "vm-dra-rbln-npu-x", allocated=[("n1", "vfio-0000-3b-00-0")],
                                           pod=launcher)),
        ("Lease", o.lease("rbln-system", "rblnctl-node-n1", holder="someone")),
        ("PodDisruptionBudget", o.pdb("vms", "web", selector={"matchLabels": {"app": "web"}}, min_available=1)),
        ("DaemonSet", o.daemonset("rbln-system", "rbln-device-plugin")),
        ("ReplicaSet", o.replicaset("vms", "web")),
        ("pod", o.pod("vms", "web-1", node="n1", owner_kind="ReplicaSet", requests={"rebellions.ai/npu": "1"})),
    ]


def _pruned(sent, stored, path=""):
    """Paths present in `sent` but missing or different in `stored` (maps compared key by key)."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        out = []
        for k, v in sent.items():
            if k not in stored:
                out.append(f"{path}.{k}")
            else:
                out += _pruned(v, stored[k], f"{path}.{k}")
        return out
    if isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        return [p for i, (a, b) in enumerate(zip(sent, stored)) for p in _pruned(a, b, f"{path}[{i}]")]
    return [] if sent == stored else [path]


@pytest.mark.parametrize("index", range(len(_fixtures())), ids=lambda i: _fixtures()[i][0])
def test_the_real_server_accepts_the_fixture_and_keeps_its_spec(real, index):
    _, obj = _fixtures()[index]
    [stored] = real.api.seed(obj)
    for part in ("spec", "data", "rules", "roleRef"):
        if part in obj:
            assert _pruned(obj[part], stored.get(part)) == [], "the server dropped or changed these fields"
