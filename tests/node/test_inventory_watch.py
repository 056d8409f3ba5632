"""watch_npu_nodes and the changes between two looks: what `node list --watch` and `status --watch` show."""

from __future__ import annotations

import threading
import time

import pytest

from rblnctl.clock import Stop
from rblnctl.errors import InvalidInput
from rblnctl.node.inventory import Change, node_changes, policy_changes, watch_npu_nodes
from rblnctl.status import status_changes, watch_cluster_status
from tests.fakes import objects as o
from rblnctl.constants import WORKLOAD_LABEL as MODE

WATCHES = 5  # nodes, policies, and for capacity: unfinished pods, ResourceSlices, ResourceClaims


def _wait_for(predicate, what):
    deadline = time.monotonic() + 5  # a bound for a slow machine, not the expected time
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _collect(iterator, stop, until):
    got = []

    def run():
        for item in iterator:
            got.append(item)
            if until(got):
                stop.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return got, t


def test_watch_yields_the_nodes_then_each_change_and_survives_a_closed_stream(apiserver, kube):
    apiserver.add(o.cluster_policy(workload_type="container"), o.npu_node("n1", mode="container"), o.node("cpu"))
    stop = Stop()
    got, t = _collect(watch_npu_nodes(kube, stop=stop), stop, until=lambda got: len(got) == 4)
    _wait_for(lambda: apiserver.open_watches == WATCHES, "the watches to open")
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "vm-passthrough"}))
    _wait_for(lambda: len(got) == 2, "the relabel")
    apiserver.mutate("Node", "cpu", fn=lambda n: n["metadata"].setdefault("annotations", {}).update(a="1"))
    assert apiserver.close_watches() == WATCHES  # the server ends the streams: the watch goes on
    _wait_for(lambda: apiserver.open_watches == WATCHES, "the watches to open again")
    apiserver.add(o.npu_node("n2", mode=None))  # unlabelled: the policy's workloadType
    _wait_for(lambda: len(got) == 3, "the new node")
    apiserver.mutate("RBLNClusterPolicy", "rbln-cluster-policy",
                     fn=lambda p: p["spec"].update(workloadType="vm-passthrough"))
    t.join(5)
    assert not t.is_alive()
    assert [[(n.name, n.mode) for n in snap.nodes] for snap in got] == [
        [("n1", "container")],
        [("n1", "vm-passthrough")],  # a change to the non-NPU node is no update
        [("n1", "vm-passthrough"), ("n2", "container")],
        [("n1", "vm-passthrough"), ("n2", "vm-passthrough")],  # the policy decides an unlabelled node's mode
    ]
    assert node_changes(got[0].nodes, got[1].nodes) == [
        Change(subject="node/n1", what="mode", old="container", new="vm-passthrough")]
    assert node_changes(got[1].nodes, got[2].nodes) == [Change(subject="node/n2", what="added", new="container")]
    assert policy_changes(got[2].policy, got[3].policy) == [
        Change(subject="rblnclusterpolicy/rbln-cluster-policy", what="workloadType", old="container",
               new="vm-passthrough")]


def test_a_bad_selector_is_invalid_input(kube):
    with pytest.raises(InvalidInput, match="bad label selector"):
        next(watch_npu_nodes(kube, selector="a in (", timeout_s=5))


def test_cluster_status_watch_keeps_kubevirt_and_follows_nodes(apiserver, kube):
    apiserver.add(o.cluster_policy(), o.kubevirt(feature_gates=["HostDevices"]), o.npu_node("n1"))
    stop = Stop()
    got, t = _collect(watch_cluster_status(kube, stop=stop), stop, until=lambda got: len(got) == 2)
    _wait_for(lambda: apiserver.open_watches == WATCHES, "the watches to open")
    apiserver.mutate("Node", "n1", fn=lambda n: n["spec"].update(unschedulable=True))
    t.join(5)
    assert not t.is_alive()
    first, second = got
    assert second.kubevirt == first.kubevirt and second.server_version == first.server_version
    assert [c for c in status_changes(first, second)] == [
        Change(subject="node/n1", what="schedulable", old="yes", new="no")]


def test_the_watch_follows_what_pods_hold(apiserver, kube):
    """node list --watch keeps ALLOCATED and FREE current: a pod that starts holding NPUs, then finishes."""
    apiserver.add(o.cluster_policy(), o.npu_node("n1", npus=4))
    stop = Stop()
    got, t = _collect(watch_npu_nodes(kube, stop=stop), stop, until=lambda got: len(got) == 3)
    _wait_for(lambda: apiserver.open_watches == WATCHES, "the watches to open")
    apiserver.add(o.pod("default", "app", node="n1", requests={"rebellions.ai/npu": "3"}))
    _wait_for(lambda: len(got) == 2, "the pod")
    apiserver.set_pod_phase("default", "app", "Succeeded")
    t.join(5)
    assert not t.is_alive()
    assert [(s.nodes[0].capacity.allocated, s.nodes[0].capacity.free) for s in got] == [(0, 4), (3, 1), (0, 4)]
    assert node_changes(got[0].nodes, got[1].nodes) == [
        Change(subject="node/n1", what="npus", old="4 allocatable, 0 allocated, 4 free",
               new="4 allocatable, 3 allocated, 1 free")]


def test_a_watch_without_rights_to_list_pods_leaves_capacity_unknown(apiserver, kube):
    apiserver.add(o.cluster_policy(), o.npu_node("n1", npus=4))
    apiserver.inject_fault(method="GET", path="^/api/v1/pods$", status=403, reason="Forbidden",
                           message='pods is forbidden: User "u" cannot list resource "pods"', times=100)
    snap = next(watch_npu_nodes(kube, timeout_s=5))
    c = snap.nodes[0].capacity
    assert (c.allocatable, c.allocated, c.known) == (4, None, False) and "cannot list pods" in c.problem


def test_a_watch_without_rights_to_list_resourceslices_leaves_dra_capacity_unknown(apiserver, kube):
    """Under a DRA policy the NPUs are ResourceSlice devices: a watch that may not list them cannot count them."""
    apiserver.add(o.cluster_policy(workload_type="vm-passthrough", sandbox=False, dra=True, device_plugin=False),
                  o.npu_node("n1", mode="vm-passthrough", dra=True))
    apiserver.inject_fault(method="GET", path="^/apis/resource.k8s.io/v1/resourceslices$", status=403,
                           reason="Forbidden", message='resourceslices is forbidden: User "u" cannot list', times=100)
    snap = next(watch_npu_nodes(kube, timeout_s=5))
    c = snap.nodes[0].capacity
    assert (c.allocated, c.known) == (None, False) and "cannot list resourceslices" in c.problem


def test_a_sandbox_watch_without_rights_to_list_resourceslices_still_counts(apiserver, kube):
    """Without DRA in the policy no NPU is a ResourceSlice device: refused slices do not make the count unknown."""
    apiserver.add(o.cluster_policy(), o.npu_node("n1", npus=4))
    apiserver.inject_fault(method="GET", path="^/apis/resource.k8s.io/v1/resourceslices$", status=403,
                           reason="Forbidden", message='resourceslices is forbidden: User "u" cannot list', times=100)
    snap = next(watch_npu_nodes(kube, timeout_s=5))
    assert (snap.nodes[0].capacity.allocated, snap.nodes[0].capacity.free) == (0, 4)
