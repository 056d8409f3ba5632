"""Fixtures of the host pod tests: simulated host trees, and the fake kubelet that runs host pods."""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.fakes import sysfs as ht
from tests.fakes.hostkubelet import HostKubelet



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


def failing_create(apiserver, *, nth: int = 2, how: str = "unknown", namespace: str = "rbln-system") -> list[str]:
    """The `nth` host-pod create of a run is applied by the API server, and fails in rblnctl's hands:

    * ``"unknown"``: its reply is lost, and every read of the pod that would settle it fails (the connection
      drops): the create raises OutcomeUnknown while the pod exists, and runs;
    * ``"interrupt"``: Ctrl-C reaches rblnctl while it waits for the reply (KeyboardInterrupt out of the create).

    Returns a list that receives the name of the pod whose create failed, once it was sent.
    """
    import _thread
    import re

    if how not in ("unknown", "interrupt"):
        raise ValueError(f"how: unknown or interrupt, not {how!r}")
    creates = rf"^/api/v1/namespaces/{namespace}/pods$"
    seen: list[object] = []
    failed: list[str] = []

    def hook(req) -> None:  # before the server handles the request, and before it takes a fault
        if req.method != "POST" or not re.search(creates, req.path):
            return
        seen.append(req)
        if len(seen) != nth:
            return
        name = req.body["metadata"]["name"]
        failed.append(name)
        if how == "unknown":
            apiserver.inject_fault(method="POST", path=creates, lose_reply=True, times=1)
            apiserver.inject_fault(method="GET", path=rf"^/api/v1/namespaces/{namespace}/pods/{name}$", drop=True,
                                   times=1000)
        else:
            _thread.interrupt_main()

    apiserver.on_request(hook)
    return failed
