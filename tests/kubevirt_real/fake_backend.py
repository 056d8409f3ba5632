"""One KubeVirt scenario, two backends: the fake API server's simulated virt-api and virt-controller
(tests/fakes/apiserver/kubevirt.py, ``simulate_kubevirt``) and real KubeVirt v1.9.0 (the ``kv`` fixture), behind the
KvBackend interface (tests/kubevirt_real/backend.py), as tests/envtest/fixtures.py ``backend`` does for the apiserver.

``FakeKvBackend`` builds on the fake the world the kubevirt stack starts with (KubeVirt CR v1.9.0 with no gate, the
two vm-passthrough NPU nodes, npu-node-1 advertising 4 rebellions.ai/RBLN-CA22_PF) and a namespace of the test's
own. ``kvbackend`` is parametrised ``fake`` then ``real-kubevirt`` (marked ``kubevirt``); a scenario creates its
objects with ``create()``: through the API on both (the fake's virt-controller starts a VM created with a running
run strategy, as virt-controller does), on the fake with the node the real scheduler would pick written where the
simulation reads it (annotation ``fake.rblnctl.io/node``: the fake has no scheduler).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.backend import FakeBackend
from tests.cluster.client import Api
from tests.fakes import objects as o
from tests.fakes.apiserver.config import VM_NODE_ANNOTATION
from tests.kubevirt_real.backend import KvBackend

NODES = ("npu-node-1", "npu-node-2")
KUBEVIRT_NODE_LABELS = {"kubevirt.io/schedulable": "true", "machine-type.node.kubevirt.io/q35": "true"}


class FakeKvBackend(FakeBackend):
    """The fake API server with KubeVirt simulated, set up as the kubevirt stack starts."""

    name = "fake"

    def __init__(self, fake: Any, workdir: Path) -> None:
        super().__init__(fake, workdir)
        fake.simulate_kubevirt = True
        fake.add(o.kubevirt(feature_gates=[]),
                 o.npu_node(NODES[0], mode="vm-passthrough", npus=4, labels=KUBEVIRT_NODE_LABELS),
                 o.npu_node(NODES[1], mode="vm-passthrough", npus=4, labels=KUBEVIRT_NODE_LABELS, dra=True))
        self.namespace = "kv-fake"
        fake.add(o.namespace(self.namespace))
        self.mark()

    # What a test reads and waits for: KvBackend's, on this backend's api and namespace.
    kubevirt_cr = KvBackend.kubevirt_cr
    set_gates = KvBackend.set_gates
    vm = KvBackend.vm
    vmi = KvBackend.vmi
    launcher_pods = KvBackend.launcher_pods
    wait_vmi_phase = KvBackend.wait_vmi_phase
    wait_no_vmi = KvBackend.wait_no_vmi


def _node_for(vm: dict) -> str:
    """Where the real scheduler puts the VM's launcher on the kubevirt stack: npu-node-1 is the only node with the
    sandbox resource, npu-node-2 the one the tests give DRA devices; a VM without NPUs fits either (npu-node-1)."""
    devices = vm["spec"]["template"]["spec"]["domain"].get("devices", {}).get("hostDevices") or []
    if any(d.get("claimName") for d in devices):
        return NODES[1]
    return NODES[0]


USER_CLIENT = "kubectl/v1.36.2 (linux/amd64) kubernetes/unknown"  # a user's client: the fake starts what it creates


def create(b: Any, *objs: dict) -> list[dict]:
    """Create the objects through the API, as a user's kubectl apply would, on either backend."""
    api = b.api
    if b.name == "fake":  # the fake takes what the harness's own client seeds for a world already reconciled
        api = Api(b.api.url, token=b.api.token, user_agent=USER_CLIENT)
    out = []
    for obj in objs:
        if b.name == "fake" and obj["kind"] == "VirtualMachine":
            obj = copy.deepcopy(obj)
            obj["metadata"].setdefault("annotations", {})[VM_NODE_ANNOTATION] = _node_for(obj)
        out += api.seed(obj)
    return out


def settled(b: Any, name: str, *, running: bool, timeout_s: float | None = None) -> dict:
    """The VM once KubeVirt is done with it: no state change request pending, and its VMI Running and the VM
    Running (`running`), or no VMI left (not `running`). Returns the VM."""
    def done() -> dict | None:
        vm = b.vm(name)
        st = (vm or {}).get("status") or {}
        if vm is None or st.get("stateChangeRequests"):
            return None
        vmi = b.vmi(name)
        if running:
            phase = ((vmi or {}).get("status") or {}).get("phase")
            return vm if phase == "Running" and st.get("printableStatus") == "Running" else None
        # virt-controller writes a new VM's status a moment after it is created: no VMI yet is not settled yet
        return vm if vmi is None and st.get("printableStatus") not in (None, "Stopping") else None
    # The fake settles before its reply (its simulation reacts synchronously); real KubeVirt within seconds.
    timeout_s = timeout_s or (5 if b.name == "fake" else 60)
    return b.api.wait_for(done, timeout_s=timeout_s, interval_s=0.1, message=f"VM {b.namespace}/{name} settled")


@pytest.fixture(params=["fake", pytest.param("real-kubevirt", marks=pytest.mark.kubevirt)])
def kvbackend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The same KubeVirt scenario on the fake's simulated KubeVirt, then on real KubeVirt v1.9.0."""
    if request.param == "real-kubevirt":
        yield request.getfixturevalue("kv")
        return
    b = FakeKvBackend(request.getfixturevalue("apiserver"), tmp_path)
    try:
        yield b
    finally:
        b.close()

