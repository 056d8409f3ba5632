"""Issue 41: the release lines (rblnctl.operator.lines), the partition line's objects, and the release matrix in
docs/operator.md generated from the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from rblnctl.operator import lines as L
from rblnctl.operator.components import deploy_labels, init_hold
from rblnctl.operator.partition import partition_state
from rblnctl.operator.release import release_of
from tests.fakes import partition as P
from tests.fakes.releases import NEWER, V0_3_0

DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


def test_the_release_matrix_in_the_docs_is_the_table_in_code():
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(L.MATRIX_BEGIN), text.index(L.MATRIX_END) + len(L.MATRIX_END)
    assert text[start:end] == L.render_matrix(), "docs/operator.md: run `python -m rblnctl.operator.lines`"
    for line in L.OPERATOR_LINES:  # every line's verdicts are in the doc, in words
        assert f"**{line.title}**" in text and line.sandbox[1] in text and line.dra[1] in text


@pytest.mark.parametrize("labels, partitioned, invalid", [
    (P.PARTITIONED_BY_INDEX, True, ()), (P.PARTITIONED_ALL, True, ()), (P.NOT_PARTITIONED, False, ()),
    ({}, False, ()), (P.INVALID_VALUE, False, ("rebellions.ai/npu.partition=vf2",)),
    (P.INVALID_INDEX, False, ("rebellions.ai/npu.partition.x=vf1",)),
], ids=["index-override", "all-vf4", "none", "unlabelled", "bad-value", "bad-index"])
def test_partition_labels_read_as_the_gate_reads_them(labels, partitioned, invalid):
    """op@74c5b08 cmd/rbln-validator/gate.go nodeIsPartitioned (and gate_test.go's cases)."""
    assert partition_state(labels) == L.partition_state(labels)
    s = partition_state(labels)
    assert (s.partitioned, s.invalid) == (partitioned, invalid)


def test_a_pod_held_in_the_gate_is_explained_whatever_the_init_containers_name():
    """The device plugin waits for partition-ready on a partitioned node, the metrics exporter does not
    (componentWaitsForPartition); on a vm-passthrough node toolkit-ready never comes (the DRA plugin is stuck);
    invalid labels keep every gate waiting until fixed. Before: "still in its init container" with no reason."""
    dp = init_hold("device-plugin", P.gated_pod("device-plugin", "n1"), vm_node=False,
                   node_labels=P.PARTITIONED_BY_INDEX)
    assert dp is not None and not dp.stuck and dp.container == P.GATE_INIT_NAME
    assert "partition-ready" in (dp.waits_for or "") and "partition-manager" in (dp.waits_for or "")
    me = init_hold("metrics-exporter", P.gated_pod("metrics-exporter", "n1"), vm_node=False,
                   node_labels=P.PARTITIONED_BY_INDEX)
    assert me is not None and "toolkit-ready" in (me.waits_for or "") and "partition-ready" not in (me.waits_for or "")
    dra = init_hold("dra-kubelet-plugin", P.gated_pod("dra-kubelet-plugin", "n2"), vm_node=True, node_labels={})
    assert dra is not None and dra.stuck and "container mode only" in (dra.waits_for or "")
    bad = init_hold("device-plugin", P.gated_pod("device-plugin", "n1"), vm_node=False, node_labels=P.INVALID_VALUE)
    assert bad is not None and bad.stuck and "fix the node labels" in (bad.waits_for or "")


def test_a_preinstalled_driver_is_told_apart():
    d = deploy_labels(P.PREINSTALLED_NODE_LABELS)
    assert d.driver_preinstalled and not d.is_set("driver") and not d.opted_out("driver")
    assert not deploy_labels({"rebellions.ai/npu.deploy.driver": "true"}).driver_preinstalled


def node(name: str, labels: dict) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def test_each_line_is_told_apart_by_what_the_cluster_declares():
    v030 = release_of([V0_3_0.operator_deployment()]).version
    newer = release_of([NEWER.operator_deployment()]).version
    assert L.identify(v030).line is L.LINES_BY_KEY["v0.3.0"]
    assert L.identify((0, 2, 2)).line is L.LINES_BY_KEY["v0.1-v0.2"]
    assert L.identify(newer).line is L.LINES_BY_KEY["vfio-dra"]
    assert L.identify(None).line is None
    assert L.identify(newer, daemonsets=[P.partition_manager_daemonset()]).line is L.LINES_BY_KEY["partition"]
    assert L.identify(None, nodes=[node("n1", P.PREINSTALLED_NODE_LABELS)]).line is L.LINES_BY_KEY["partition"]
    assert L.identify(None, policy_obj={"spec": {"partitionManager": {"enabled": False}}}).line \
        is L.LINES_BY_KEY["partition"]
    dra_ready = {"metadata": {"name": "rbln-dra-kubelet-plugin", "namespace": "rbln-system"},
                 "spec": {"template": {"spec": {"initContainers": [{"name": "dra-ready"}]}}}}
    assert L.identify(None, daemonsets=[dra_ready]).line is L.LINES_BY_KEY["vfio-dra"]


def test_dra_on_the_vfio_line_is_decided_by_the_driver():
    found = L.identify((0, 6, 0))
    assert L.verdicts(found)["dra"][0] == L.DEPENDS
    assert L.verdicts(found, (0, 1, 2))["dra"][0] == L.NO
    assert L.verdicts(found, (0, 2, 1))["dra"][0] == L.WORKS
    for verdict, text in L.verdicts(found, (0, 1, 0)).values():
        assert "\n" not in text
