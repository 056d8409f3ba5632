"""NPU node discovery: bounded requests, every NPU node once, nothing else."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.kube import KubeOptions, connect
from rblnctl.node.inventory import list_npu_node_objects, list_npu_nodes
from rblnctl.operator.policy import parse_policy
from tests.fakes import objects as o


def test_each_npu_node_crosses_the_wire_once(apiserver):
    both = o.npu_node("both")  # carries both NFD markers and npu.present
    both["metadata"]["labels"][C.NFD_NPU_LABELS[0]] = "true"
    only_old = o.node("old", labels={C.NFD_NPU_LABELS[0]: "true"})
    only_operator = o.node("op", labels={C.NPU_PRESENT_LABEL: "true"})
    apiserver.add(both, only_old, only_operator, o.node("cpu"))
    kube = connect(KubeOptions(server=apiserver.url))
    seen: list[str] = []
    real = kube.iter_list

    def counting(*args, **kwargs):
        for item in real(*args, **kwargs):
            seen.append(item["metadata"]["name"])
            yield item

    kube.iter_list = counting  # type: ignore[method-assign]
    names = [n["metadata"]["name"] for n in list_npu_node_objects(kube)]
    assert names == ["both", "old", "op"]
    assert sorted(seen) == names  # no duplicates transferred
    assert kube.request_count == 3


def test_selector_narrows_and_mode_is_read(apiserver):
    apiserver.add(o.npu_node("a", mode="vm-passthrough", labels={"zone": "x"}), o.npu_node("b", labels={"zone": "y"}))
    nodes = list_npu_nodes(connect(KubeOptions(server=apiserver.url)), None, selector="zone=x")
    assert [(n.name, n.mode) for n in nodes] == [("a", "vm-passthrough")]
    assert "vfio-manager" in nodes[0].components


def test_an_unlabelled_node_takes_the_policys_workload_type(apiserver):
    """The operator falls back to spec.workloadType for a node without a valid mode label."""
    policy = parse_policy(o.cluster_policy(workload_type="vm-passthrough"))
    apiserver.add(o.npu_node("plain", mode=None), o.npu_node("odd", mode=None, labels={C.WORKLOAD_LABEL: "vm"}),
                  o.npu_node("ct", mode="container"))
    nodes = {n.name: n for n in list_npu_nodes(connect(KubeOptions(server=apiserver.url)), policy)}
    assert nodes["plain"].mode == "vm-passthrough" and nodes["plain"].mode_label is None
    assert nodes["odd"].mode == "vm-passthrough" and not nodes["odd"].mode_label_valid
    assert nodes["ct"].mode == "container"
    assert nodes["ct"].resources == {"rebellions.ai/npu": 2} and nodes["ct"].count == 2
