"""Fixtures of the host pod tests: a connection, simulated host trees, and the fake kubelet that runs host pods."""

from __future__ import annotations

import pytest

from rblnctl.kube import KubeOptions, connect
from tests.fakes import objects as o
from tests.fakes import sysfs as ht
from tests.fakes.hostkubelet import HostKubelet


@pytest.fixture
def kube(apiserver):
    return connect(KubeOptions(server=apiserver.url))


@pytest.fixture
def healthy_root(tmp_path):
    """One healthy NPU host tree (Intel, VT-d, NPUs on vfio-pci) that nodes can share: it is only read."""
    return ht.build_host(tmp_path / "healthy", ht.intel_bare_metal()).root


@pytest.fixture
def kubelet(apiserver, healthy_root):
    """The fake kubelet for host pods, every node running on `healthy_root` unless a test says otherwise."""
    k = HostKubelet(apiserver, default=healthy_root).start()
    yield k
    k.stop()
    assert k.errors == []


def add_nodes(apiserver, count: int, prefix: str = "n") -> list[str]:
    """`count` plain nodes (the runner does not care whether they carry NPUs)."""
    names = [f"{prefix}{i}" for i in range(count)]
    apiserver.add(*(o.node(n) for n in names))
    return names
