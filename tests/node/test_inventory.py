"""NPU node discovery: bounded requests, every NPU node once, nothing else."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.kube import KubeOptions, connect
from rblnctl.node.inventory import list_npu_node_objects, list_npu_nodes
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
    nodes = list_npu_nodes(connect(KubeOptions(server=apiserver.url)), selector="zone=x")
    assert [(n.name, n.mode) for n in nodes] == [("a", "vm-passthrough")]
    assert "vfio-manager" in nodes[0].components
