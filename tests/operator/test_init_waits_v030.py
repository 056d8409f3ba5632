"""What each operator v0.3.0 component's init containers wait for (constants.INIT_WAITS), as init_hold names it.

RBLN-SW/rbln-npu-operator@v0.3.0 internal/scope/patch/*.go: device-plugin, metrics-exporter, npu-feature-discovery
and rbln-daemon start with `toolkit-validation` (until toolkit-ready exists); operator-validator with
`driver-validation` then `toolkit-validation` (rbln-validator driver --with-wait, rbln-validator toolkit);
container-toolkit with `driver-validation`. All of them are container-mode components
(internal/scope/cluster_policy.go rblnComponentLabels), so on a vm-passthrough node their wait never ends.
"""

from __future__ import annotations

import pytest

from rblnctl import constants as C
from rblnctl.operator.components import init_hold

RUN = {"running": {"startedAt": "2026-12-04T07:00:00Z"}}
DONE = {"terminated": {"exitCode": 0, "reason": "Completed"}}


def held(*states: tuple[str, dict]) -> dict:
    return {"metadata": {"namespace": "rbln-system", "name": "rbln-x-abcde"},
            "spec": {"initContainers": [{"name": n} for n, _ in states], "containers": [{"name": "main"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": n, "state": s, "ready": False, "restartCount": 0} for n, s in states]}}


@pytest.mark.parametrize("component", [C.COMP_DEVICE_PLUGIN, C.COMP_METRICS, C.COMP_NFD, C.COMP_DAEMON])
def test_toolkit_validation_waits_for_toolkit_ready(component):
    hold = init_hold(component, held(("toolkit-validation", RUN)), vm_node=False)
    assert hold is not None and "toolkit-ready" in (hold.waits_for or "")
    assert not hold.stuck  # on a container node the validator writes it
    assert init_hold(component, held(("toolkit-validation", RUN)), vm_node=True).stuck


def test_validator_and_toolkit_wait_for_the_driver():
    for component in (C.COMP_VALIDATOR, C.COMP_TOOLKIT):
        hold = init_hold(component, held(("driver-validation", RUN)), vm_node=False)
        assert hold is not None and "driver" in (hold.waits_for or "") and not hold.stuck
    hold = init_hold(C.COMP_VALIDATOR, held(("driver-validation", DONE), ("toolkit-validation", RUN)), vm_node=False)
    assert hold.container == "toolkit-validation" and "CDI spec" in (hold.waits_for or "")


def test_an_init_container_no_source_names_has_no_reason():
    hold = init_hold(C.COMP_DEVICE_PLUGIN, held(("something-else", RUN)), vm_node=True)
    assert hold is not None and hold.waits_for is None and not hold.stuck
