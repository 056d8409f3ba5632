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


def test_a_vm_node_counts_and_names_its_npus_from_the_vm_resources_it_advertises(apiserver):
    """NPU feature discovery (npu.count, npu.product) is a container-mode component: a vm-passthrough node
    has neither label, so its count and product come from its VM resources, as the NPUS column counts them."""
    from tests.fakes.releases import V0_3_0, V03_SANDBOX_RESOURCES

    v03 = o.cluster_policy()
    v03["spec"]["sandboxDevicePlugin"] = {"resourceList": V03_SANDBOX_RESOURCES}
    apiserver.add(o.npu_node("vm", mode="vm-passthrough", npus=2),
                  o.npu_node("mixed", mode="vm-passthrough", npus=1,
                             allocatable={"rebellions.ai/RBLN-CA25_PF": "3"}),
                  o.npu_node("alias", mode="vm-passthrough", npus=1, product="RBLN-CA25",
                             labels={C.NPU_PRODUCT_LABEL: "RBLN-CA25"}),
                  o.npu_node("old", mode="vm-passthrough", npus=4, product="RBLN-CA12", release=V0_3_0, policy=v03),
                  o.npu_node("idle", mode="vm-passthrough", allocatable={"rebellions.ai/RBLN-CA22_PF": "0"}))
    kube = connect(KubeOptions(server=apiserver.url))
    nodes = {n.name: n for n in list_npu_nodes(kube, parse_policy(v03))}
    assert (nodes["vm"].product, nodes["vm"].count) == ("RBLN-CA22", 2)
    assert (nodes["mixed"].product, nodes["mixed"].count) == (None, 4)  # two products: none is the node's
    assert (nodes["alias"].product, nodes["alias"].count) == ("RBLN-CA25", 1)  # the label wins
    assert (nodes["old"].product, nodes["old"].count) == ("RBLN-CA12", 4)  # resourceList ATOM_PT -> RBLN-CA12
    assert (nodes["idle"].product, nodes["idle"].count) == (None, None)  # nothing advertised: unknown
