"""A component pod stuck in an init container, as operator v0.3.0 leaves its sandbox device plugin on a vm-passthrough
node (`driver-ready` waits for a marker only the driver pod writes): set-mode, node list, status and preflight name
the pod, the init container, its state, kubectl's `Init:0/2` and its last log line, and preflight never calls such a
node ready (issue 27, finding 7). The operator's Deployment is absent, as on ../shared/stack: its version is unknown,
so set-mode goes ahead as it did there."""

from __future__ import annotations

import json

import pytest

from tests.fakes.operator import stack_v030
from tests.helpers import cli
from rblnctl.constants import OPERATOR_NAMESPACE as OPS

LOG = "waiting for rbln driver container to be ready"


@pytest.fixture
def stuck(apiserver):
    """n1 (RBLN-CA12: covered by v0.3.0's sandbox resourceList) switched to vm by set-mode, which timed out with the
    sandbox plugin in Init; returns the set-mode result."""
    op = stack_v030(apiserver, ("n1", "n2"))
    r = cli("node", "set-mode", "vm", "n1", "--yes", "--timeout", "2", server=apiserver.url)
    assert r.exit_code == 5, r.stderr
    assert op.stuck_in_init
    yield r
    op.stop()
    assert op.errors == []


def sandbox_pod(apiserver) -> dict:
    (pod,) = [p for p in apiserver.list("Pod", OPS) if p["metadata"]["name"].startswith("rbln-sandbox-device-plugin")]
    return pod


def test_set_mode_names_the_pod_its_init_container_and_what_it_waits_for(apiserver, stuck):
    pod = sandbox_pod(apiserver)["metadata"]["name"]
    missing = [line for line in stuck.stderr.splitlines() if "still missing" in line and pod in line]
    assert len(missing) == 1, stuck.stderr
    assert (f"pod {OPS}/{pod} (sandbox-device-plugin) is stuck in its init container driver-ready (running for"
            in missing[0]) and "Init:0/2" in missing[0] and ".driver-ctr-ready" in missing[0]
    waits = [line for line in stuck.stderr.splitlines() if line.startswith("waiting ")]
    assert "left: Init:0/2, stuck in init container driver-ready: it waits for " in \
        waits[-1]  # the wait's progress said so too, reason first (issue 30), as the known pattern (issue 39)
    assert not [line for line in stuck.stderr.splitlines() if "still missing" in line and "not Running" in line]
    # the resumed switch times out again, now with the init container's last log line
    apiserver.set_pod_log(OPS, pod, f"{LOG}\n{LOG}\n", container="driver-ready")
    apiserver.clear_requests()
    r = cli("node", "set-mode", "vm", "n1", "--yes", "--timeout", "1", server=apiserver.url)
    assert r.exit_code == 5, r.stderr
    assert f"last log line: '{LOG}'" in r.stderr
    # read once by the wait, not again for its timeout's message
    assert len([q for q in apiserver.requests if q.path.endswith(f"/pods/{pod}/log")]) == 1


def test_node_list_and_status_name_the_stuck_pod(apiserver, stuck):
    pod = sandbox_pod(apiserver)["metadata"]["name"]
    apiserver.set_pod_log(OPS, pod, LOG + "\n", container="driver-ready")
    for args in (("node", "list"), ("status",)):
        r = cli(*args, server=apiserver.url)
        assert r.exit_code == 0, r.stderr
        note = [line for line in r.stderr.splitlines() if line.startswith("note: node n1: pod")]
        assert note and f"pod {OPS}/{pod} (sandbox-device-plugin) is stuck in its init container driver-ready" \
            in note[0] and "Init:0/2" in note[0] and LOG in note[0], r.stderr
    wide = cli("node", "list", "-o", "wide", server=apiserver.url).stdout
    assert "sandbox-device-plugin(Init:0/2)" in wide
    items = json.loads(cli("node", "list", "-o", "json", server=apiserver.url).stdout)["items"]
    held = {n["name"]: n["initHeld"] for n in items}
    assert held["n2"] == []
    (h,) = held["n1"]
    assert (h["pod"], h["component"], h["initContainer"], h["state"], h["status"], h["stuck"], h["lastLogLine"]) == (
        pod, "sandbox-device-plugin", "driver-ready", "running", "Init:0/2", True, LOG)


def test_preflight_never_calls_a_cordoned_vm_node_that_offers_nothing_ready(apiserver, stuck):
    """Before, preflight passed `nodes.vm-mode` ("1 of 2 NPU nodes in vm-passthrough mode") and exited 0 with n1
    cordoned and advertising no NPU."""
    r = cli("preflight", "-o", "json", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    checks = json.loads(r.stdout)["checks"]
    by = {(c["id"], c["scope"]): c for c in checks}
    assert by[("nodes.vm-mode", "cluster")]["status"] == "FAIL"
    vm = by[("node.vm-npus", "n1")]
    assert vm["status"] == "FAIL" and "cordoned" in vm["evidence"] and "driver-ready" in vm["evidence"]
    assert "Init:0/2" in vm["evidence"] and "rebellions.ai/ATOM_PT" in vm["evidence"]
    assert "upgrade the operator to >= 0.4.4" in vm["remedy"]
    assert by[("node.vm-npus", "n2")]["status"] == "SKIP"
