"""Display commands read their independent collections at once (rblnctl.kube.parallel), each collection once, and
fail as the reads one by one did (issue 31)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from rblnctl.errors import Forbidden
from rblnctl.kube import KubeOptions, connect
from rblnctl.kube.parallel import start
from rblnctl.operator.nodes import list_npu_node_objects
from rblnctl.status import cluster_status
from tests.fakes import objects as o


def _seed(apiserver):
    apiserver.add(
        o.cluster_policy(workload_type="container", vfio_manager=True, sandbox=True),
        o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"),
        o.npu_node("n1", mode="container"),
        o.npu_node("n2", mode="vm-passthrough"),
        o.vm("ns", "vm1"),
    )


def _overlap(apiserver, path: str) -> threading.Event:
    """Set when a second request under `path` arrives while the first is held (held up to 5 s): reads one by one
    never set it."""
    arrived = threading.Semaphore(0)
    overlapped = threading.Event()
    first = threading.Lock()

    def held(req):
        if not req.path.startswith(path):
            return
        arrived.release()
        if first.acquire(blocking=False):  # the first request waits here for a second one
            if arrived.acquire(timeout=5) and arrived.acquire(timeout=5):
                overlapped.set()

    apiserver.on_request(held)
    return overlapped


def test_the_node_lists_are_read_at_once(apiserver):
    _seed(apiserver)
    overlapped = _overlap(apiserver, "/api/v1/nodes")
    names = [n["metadata"]["name"] for n in list_npu_node_objects(connect(KubeOptions(server=apiserver.url)))]
    assert names == ["n1", "n2"]
    assert overlapped.is_set()


def test_status_reads_each_collection_once(apiserver):
    _seed(apiserver)
    kube = connect(KubeOptions(server=apiserver.url))
    kube.list_from_cache = True
    st = cluster_status(kube)
    assert [n.name for n in st.nodes] == ["n1", "n2"]
    reads = Counter((r.path, tuple(r.query.get("labelSelector", ())), tuple(r.query.get("fieldSelector", ())))
                    for r in apiserver.requests)
    assert reads and max(reads.values()) == 1, reads
    paths = {r.path for r in apiserver.requests}
    assert {"/version", "/api/v1/pods", "/apis/kubevirt.io/v1/virtualmachines",
            "/apis/kubevirt.io/v1/virtualmachineinstances"} <= paths


def test_status_reads_overlap(apiserver):
    _seed(apiserver)
    overlapped = _overlap(apiserver, "/")
    cluster_status(connect(KubeOptions(server=apiserver.url)))
    assert overlapped.is_set()


def test_status_fails_with_the_first_error_of_the_reads_one_by_one(apiserver):
    _seed(apiserver)
    apiserver.forbid("list", "rblnclusterpolicies")
    apiserver.forbid("list", "nodes")
    with pytest.raises(Forbidden, match="rblnclusterpolicies"):  # read_operator came before the node lists
        cluster_status(connect(KubeOptions(server=apiserver.url)))


def test_started_hands_back_value_and_error():
    assert start(lambda: 7).result() == 7

    def boom():
        raise ValueError("x")

    with pytest.raises(ValueError, match="x"):
        start(boom).result()
