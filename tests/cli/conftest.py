"""The CLI tests' shared world."""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator


@pytest.fixture
def operated(apiserver):
    """One NPU node, a ClusterPolicy, a ReplicaSet and KubeVirt v1.9.0 with the simulated operator running and
    settled: the world of the `-o` documents' scenarios (test_output_schema, test_output_golden, test_hostile_text).
    Yields (apiserver, operator)."""
    apiserver.add(o.cluster_policy(), o.npu_node("n1"), o.replicaset("default", "web"),
                  o.kubevirt(feature_gates=["Snapshot"], version="v1.9.0"))
    op = SimulatedOperator(apiserver).start()
    assert op.wait_idle()
    yield apiserver, op
    op.stop()
