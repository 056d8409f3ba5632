"""rblnctl.operator.resources: every release's resource names, and the PCI IDs behind them."""

from __future__ import annotations

import pytest

from rblnctl.errors import InvalidInput
from rblnctl.operator import resources as R
from rblnctl.operator.policy import parse_policy
from tests.fakes.releases import V0_3_0


@pytest.mark.parametrize(("name", "mode"), [
    ("rebellions.ai/npu", "container"), ("rebellions.ai/npu-vf1", "container"), ("rebellions.ai/npu-vf4", "container"),
    ("rebellions.ai/ATOM", "container"), ("rebellions.ai/REBEL", "container"),
    ("rebellions.ai/RBLN-CA22_PF", "vm-passthrough"), ("rebellions.ai/RBLN-CR13_VF", "vm-passthrough"),
    ("rebellions.ai/ATOM_PT", "vm-passthrough"), ("rebellions.ai/ATOM_MAX_PT", "vm-passthrough"),
    ("rebellions.ai/REBEL_PT", "vm-passthrough"), ("rebellions.ai/ATOM_CA22_PT", "vm-passthrough"),
    ("rebellions.ai/npu-vfx", None), ("nvidia.com/gpu", None), ("rebellions.ai/other", None),
])
def test_generic_classification(name, mode):
    assert R.classify_generic(name) == mode


def test_a_resource_list_is_exact():
    p = parse_policy(V0_3_0.policy())
    assert p.container_resources.matches("rebellions.ai/ATOM")
    assert not p.container_resources.matches("rebellions.ai/npu")  # v0.3.0 never advertises it
    assert not p.vm_resources.matches("rebellions.ai/RBLN-CA22_PF")
    assert p.vm_resources.products_of("rebellions.ai/ATOM_MAX_PT") == ("RBLN-CA25",)
    assert p.vm_resources.covers("RBLN-CR03") and p.vm_resources.covers("ca25") and not p.vm_resources.covers("CA22")
    assert R.ResourceNames(mode="vm-passthrough").covers("RBLN-CA22") is None  # named by the plugin itself


def test_device_ids_come_from_pci_ids():
    assert R.product_device_ids("RBLN-CA12") == [0x1120, 0x1121]
    assert R.product_device_ids("CR23") == [0x2230, 0x2231]
    assert R.sandbox_resource(0x2131) == "rebellions.ai/RBLN-CR13_VF" and R.sandbox_resource(0x9999) is None
    assert R.device_id_for("rebellions.ai/RBLN-CA2_VF") == 0x1021
    with pytest.raises(InvalidInput, match="unknown NPU model CA99"):
        R.device_id_for("rebellions.ai/RBLN-CA99_PF")


def test_advertised_counts_only_positive_quantities():
    nodes = [{"metadata": {"name": "a"}, "status": {"allocatable": {"rebellions.ai/RBLN-CA22_PF": "2",
                                                                   "rebellions.ai/npu": "4"}}},
             {"metadata": {"name": "b"}, "status": {"allocatable": {"rebellions.ai/RBLN-CA22_PF": "0"}}}]
    assert R.advertised(nodes, R.ResourceNames(mode="vm-passthrough")) == {"rebellions.ai/RBLN-CA22_PF": ["a"]}
    assert [R.positive(q) for q in ("1", "0", "0k", "-1", "2k", "", "x")] == [True, False, False, False, True, False,
                                                                              False]
