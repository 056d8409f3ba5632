"""On the stack as operator v0.3.0 is (`kv_stack_stuck`): NODE switched to vm-passthrough, its sandbox device plugin
held in the `driver-ready` init container; the fixture `stuck_switch` sets that up and switches the node back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rblnctl.constants import DEPLOY_LABEL_PREFIX, OPERATOR_NAMESPACE as OPS

NODE = "npu-node-1"
# The user's opt-out of the driver on NODE while the fixture holds it (the operator fills deploy labels only where
# they are missing: RBLN-SW/rbln-npu-operator@v0.3.0 internal/scope/cluster_policy.go)
NO_DRIVER = {DEPLOY_LABEL_PREFIX + "driver": "false"}


def sandbox_in_driver_ready(kv: Any) -> dict | None:
    """The sandbox plugin pod on NODE once the kubelet reports it running driver-ready (None until then)."""
    for p in kv.api.list("Pod", OPS):
        if p["metadata"]["name"].startswith("rbln-sandbox-device-plugin") and p["spec"].get("nodeName") == NODE:
            statuses = (p.get("status") or {}).get("initContainerStatuses") or []
            if statuses and "running" in (statuses[0].get("state") or {}):
                return p
    return None


def _sandbox_pods(kv: Any) -> list[dict]:
    return [p for p in kv.api.list("Pod", OPS) if p["metadata"]["name"].startswith("rbln-sandbox-device-plugin")
            and p["spec"].get("nodeName") == NODE]


def _driver_pods(kv: Any) -> list[dict]:
    return [p for p in kv.api.list("Pod", OPS, labels="app.kubernetes.io/component=rbln-driver")
            if p["spec"].get("nodeName") == NODE]


@dataclass
class StuckSwitch:
    kv: Any  # the KvBackend
    pod: str  # the sandbox plugin pod held in driver-ready
    reversed: bool = False

    def reverse(self) -> None:
        """Switch NODE back to container (--reverse), once."""
        if not self.reversed:
            self.reversed = True
            r = self.kv.rblnctl("node", "set-mode", "container", NODE, "--yes", "--reverse", "--timeout", "60s")
            assert r.exit_code == 0, r.stderr


@pytest.fixture
def stuck_switch(kv_stack_stuck: Any) -> Iterator[StuckSwitch]:
    """`rblnctl node set-mode vm NODE` timed out (exit 5) and the sandbox plugin is seen in driver-ready; after the
    test, NODE is switched back (unless the test did it itself: `reverse()`)."""
    kv = kv_stack_stuck
    # No driver pod on NODE before the switch: the stand-in kubelet lets a sandbox plugin pod out of driver-ready
    # while the node has a Ready driver pod, and at the switch the container mode's driver pod is still Ready for
    # a moment (its DaemonSet's delete and the sandbox DaemonSet's create race; on a real v0.3.0 node the marker
    # file is there until the driver's preStop removes it). Once in CI the stand-in saw the new sandbox pod first
    # and the switch converged (exit 0). With the driver opted out first, the pod is held on every run.
    kv.api.patch("Node", NODE, {"metadata": {"labels": NO_DRIVER}})
    kv.api.wait_for(lambda: not _driver_pods(kv), timeout_s=60, interval_s=0.2,
                    message="no driver pod left on the node")
    # A sandbox plugin pod an earlier test's switch left on NODE (being deleted) must be gone first: the new switch
    # is judged on the pod the operator makes for it (once in CI this switch converged: exit 0, and the pods are
    # in the message below for the next time)
    kv.api.wait_for(lambda: not _sandbox_pods(kv), timeout_s=60, interval_s=0.2,
                    message="no sandbox plugin pod left on the node")
    r = kv.rblnctl("node", "set-mode", "vm", NODE, "--yes", "--timeout", "5s")
    assert r.exit_code == 5, r.stderr + "\n" + "\n".join(
        f"{p['metadata']['name']}: {(p.get('status') or {}).get('phase')} "
        f"{(p.get('status') or {}).get('initContainerStatuses')}" for p in _sandbox_pods(kv))
    stuck = StuckSwitch(kv=kv, pod="")
    try:
        stuck.pod = kv.api.wait_for(lambda: sandbox_in_driver_ready(kv), timeout_s=60, interval_s=0.2,
                                    message="the sandbox plugin pod in driver-ready")["metadata"]["name"]
        yield stuck
    finally:
        try:
            stuck.reverse()
        finally:
            kv.api.patch("Node", NODE, {"metadata": {"labels": {k: None for k in NO_DRIVER}}})
