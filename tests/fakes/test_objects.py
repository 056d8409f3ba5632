"""The object builders deserialise into the kubernetes client's models."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.fakes import objects as o


@pytest.mark.parametrize(("obj", "model"), [
    (o.node("n"), "V1Node"),
    (o.npu_node("n", mode="vm-passthrough", unschedulable=True), "V1Node"),
    (o.dra_only_container_node("n"), "V1Node"),
    (o.pod("ns", "p", node="n", owner_kind="DaemonSet", requests={"cpu": "1"}, limits={"cpu": "1"}), "V1Pod"),
    (o.pod("ns", "p", phase="Succeeded"), "V1Pod"),
    (o.virt_launcher("ns", "vm", "n", resources={"rebellions.ai/RBLN-CA22_PF": "1"}), "V1Pod"),
    (o.virt_launcher("ns", "vm", None, claims={"rbln-npu": "vm-rbln-npu-abcde"}), "V1Pod"),
    (o.failed_scheduling(o.virt_launcher("ns", "vm", None), "0/1 nodes are available: 1 Insufficient x."),
     "CoreV1Event"),
    (o.resource_claim_template("ns", "rbln-npu-2", npus=2), "V1ResourceClaimTemplate"),
    (o.resource_claim("ns", "c"), "ResourceV1ResourceClaim"),
    (o.resource_claim("ns", "c", allocated=[("n1", "vfio-0000-3b-00-0")], pod=o.virt_launcher("ns", "vm", "n1")),
     "ResourceV1ResourceClaim"),
    (o.namespace("ns"), "V1Namespace"),
    (o.daemonset("ns", "ds", node_selector={"a": "b"}, desired=2, ready=1), "V1DaemonSet"),
    (o.replicaset("ns", "rs"), "V1ReplicaSet"),
    (o.pdb("ns", "pdb", selector={"a": "b"}, max_unavailable="25%"), "V1PodDisruptionBudget"),
    (o.deviceclass("npu.rebellions.ai"), "V1DeviceClass"),
    (o.resource_slice("n"), "V1ResourceSlice"),
    (o.crd("kubevirts", "kubevirt.io", "KubeVirt"), "V1CustomResourceDefinition"),
    (o.event("ns", "e", involved=o.pod("ns", "p"), reason="Evicted", message="m"), "CoreV1Event"),
    (o.lease("ns", "l", holder="me"), "V1Lease"),
    (o.cluster_role("r", o.policy_rule(["get"], ["nodes"]), o.policy_rule(["get"], urls=["/version"])),
     "V1ClusterRole"),
    (o.role("ns", "r", o.policy_rule(["create"], ["pods/eviction"], names=["p"])), "V1Role"),
])
def test_builders_match_client_models(obj, model):
    """Built-in objects deserialise into the v37 models (required fields present, right types)."""
    parsed = getattr(client, model).from_dict(obj)
    assert parsed.metadata.name == obj["metadata"]["name"]
