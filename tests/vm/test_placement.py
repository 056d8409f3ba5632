"""Placement: the scheduler's node affinity and taint rules, as far as NPU placement needs them."""

from __future__ import annotations

import pytest

from rblnctl.vm.placement import placement_of, tolerates, why_not
from tests.fakes import objects as o


SCHEDULABLE = {"kubevirt.io/schedulable": "true"}  # what virt-handler keeps on the node it runs on


def _node(labels=None, taints=None, unschedulable=False):
    return o.node("n1", labels={**SCHEDULABLE, **(labels or {})}, taints=taints, unschedulable=unschedulable)


def _expr(key, op, *values):
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


def _affinity(*terms):
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def test_no_constraints_fit_any_schedulable_node():
    assert why_not(_node(), placement_of({})) is None


def test_node_selector():
    p = placement_of({"nodeSelector": {"rack": "a"}})
    assert why_not(_node({"rack": "a"}), p) is None
    assert why_not(_node({"rack": "b"}), p) == "nodeSelector rack=a (node has rack=b)"


@pytest.mark.parametrize(("expr", "labels", "fits"), [
    (_expr("zone", "In", "x", "y"), {"zone": "y"}, True),
    (_expr("zone", "In", "x"), {}, False),
    (_expr("zone", "NotIn", "x"), {}, True),
    (_expr("zone", "NotIn", "x"), {"zone": "x"}, False),
    (_expr("gpu", "Exists"), {"gpu": ""}, True),
    (_expr("gpu", "DoesNotExist"), {"gpu": ""}, False),
    (_expr("cores", "Gt", "8"), {"cores": "16"}, True),
    (_expr("cores", "Lt", "8"), {"cores": "16"}, False),
    (_expr("cores", "Gt", "8"), {"cores": "many"}, False),
    (_expr("cores", "Gt", "8"), {"cores": "+16"}, True),  # strconv.ParseInt(v, 10, 64) takes a sign
    (_expr("cores", "Gt", "8"), {"cores": "1_6"}, False),  # ... but no digit separators (Python's int() does)
    (_expr("cores", "Gt", "8"), {"cores": "9" * 20}, False),  # ... nor a value beyond int64
])
def test_required_node_affinity_expressions(expr, labels, fits):
    p = placement_of(_affinity({"matchExpressions": [expr]}))
    assert (why_not(_node(labels), p) is None) is fits


def test_terms_are_ored_and_an_empty_term_matches_nothing():
    p = placement_of(_affinity({"matchExpressions": [_expr("a", "Exists")]},
                               {"matchFields": [_expr("metadata.name", "In", "n1")]}))
    assert why_not(_node(), p) is None
    assert why_not(_node(), placement_of(_affinity({}))) == "required node affinity"


def test_taints_need_tolerations():
    taint = {"key": "dedicated", "value": "vm", "effect": "NoSchedule"}
    node = _node(taints=[taint])
    assert why_not(node, placement_of({})) == "untolerated taint dedicated=vm:NoSchedule"
    ok = placement_of({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "vm",
                                        "effect": "NoSchedule"}]})
    assert why_not(node, ok) is None
    assert why_not(_node(taints=[{"key": "x", "effect": "PreferNoSchedule"}]), placement_of({})) is None


def test_a_cordoned_node_is_tainted_unschedulable():
    assert why_not(_node(unschedulable=True), placement_of({})) == \
        "untolerated taint node.kubernetes.io/unschedulable:NoSchedule"


@pytest.mark.parametrize(("toleration", "tolerated"), [
    ({"operator": "Exists"}, True),
    ({"key": "k", "operator": "Exists"}, True),
    ({"key": "k", "value": "v"}, True),
    ({"key": "k", "value": "w"}, False),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "other", "operator": "Exists"}, False),
])
def test_tolerates(toleration, tolerated):
    assert tolerates(toleration, {"key": "k", "value": "v", "effect": "NoSchedule"}) is tolerated
