"""Fixtures of the real KubeVirt tier (tests/conftest.py re-exports them; docs/testing.md "The KubeVirt tier").

* ``kv``: real KubeVirt v1.9.0 (virt-api, virt-controller, virt-operator's webhooks) on a real kube-apiserver with
  the scheduler, the resourceclaim, garbage-collector, namespace and disruption controllers, two NPU nodes and
  virt-handler's status writes (``FAKE_VIRT_HANDLER=1``); a namespace of the test's own (``kv.namespace``), and the
  cluster put back after the test (KvBackend.reset).
* ``kv_stack`` / ``kv_stack_stuck``: the operator v0.3.0 + KubeVirt stack on one apiserver, with the sandbox
  plugin's ``driver-ready`` init container finishing (``DRIVER_READY=1``: a node whose driver marker exists) or
  stuck as on v0.3.0 without a driver (``DRIVER_READY=0``); a namespace of the test's own.

Each starts its stack once and keeps it while the next test wants the same one (one per machine: the order of
the test files keeps the restarts to one per stack). Unset variables skip them with one line.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kubevirt_real.backend import KvBackend
from tests.kubevirt_real.stack import StackUnavailable, ensure, scripts

KUBEVIRT_FIXTURES = frozenset({"kv", "kv_stack", "kv_stack_stuck"})
# The kubevirt stack's kube-controller-manager runs what a VM's pods and a test's namespace need.
KUBEVIRT_ENV = {"FAKE_VIRT_HANDLER": "1",
                "KCM_CONTROLLERS": "resourceclaim-controller,garbage-collector-controller,namespace-controller,"
                                   "disruption-controller"}


def _backend(which: str, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvBackend]:
    try:
        scripts(which)
    except StackUnavailable as e:
        pytest.skip(str(e))
    stack = ensure(which, env, tmp_path_factory.mktemp(f"{which}-stack"))
    b = KvBackend(stack, tmp_path_factory.mktemp("kv"))
    b.begin()
    try:
        yield b
    finally:
        b.reset()
        if not stack.alive():
            raise AssertionError(f"the {which} stack died during the test:\n{stack.log('start', 20)}")


@pytest.fixture
def kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvBackend]:
    """Real KubeVirt v1.9.0 with two NPU nodes; the test's own namespace (``kv.namespace``)."""
    yield from _backend("kubevirt", KUBEVIRT_ENV, tmp_path_factory)


@pytest.fixture
def kv_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvBackend]:
    """The real operator v0.3.0 and real KubeVirt v1.9.0 on one apiserver, the sandbox plugin able to start."""
    yield from _backend("stack", {"DRIVER_READY": "1", "FAKE_VIRT_HANDLER": "1"}, tmp_path_factory)


@pytest.fixture
def kv_stack_stuck(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvBackend]:
    """The same stack with the operator as v0.3.0 is: the sandbox plugin stuck in its driver-ready init container."""
    yield from _backend("stack", {"DRIVER_READY": "0", "FAKE_VIRT_HANDLER": "1"}, tmp_path_factory)
