"""The real operator v0.3.0 as it is (../shared/stack, DRIVER_READY=0): on a vm-passthrough node its sandbox device
plugin stays in its `driver-ready` init container (Init:0/2), waiting for a marker only the driver pod writes.
set-mode, node list, status and preflight name that pod as such, and preflight never calls the cluster ready with
that node cordoned and advertising nothing (issue 27, finding 7). Before, set-mode said only "not Running and Ready
yet" and preflight exited 0 ("NPU nodes in vm-passthrough mode 1 of 3")."""

from __future__ import annotations

import json

from tests.kubevirt_real.stuck import NODE, OPS, stuck_switch  # noqa: F401  (the fixture)


def test_set_mode_list_status_and_preflight_name_the_plugin_stuck_in_driver_ready(stuck_switch):  # noqa: F811
    kv, pod = stuck_switch.kv, stuck_switch.pod
    ref = f"{OPS}/{pod} (sandbox-device-plugin) is stuck in its init container driver-ready"
    # the resumed switch: its progress and its timeout error name the pod, the container, its state, Init:0/2
    r = kv.rblnctl("node", "set-mode", "vm", NODE, "--yes", "--timeout", "3s")
    assert r.exit_code == 5, r.stderr
    missing = [line for line in r.stderr.splitlines() if "still missing" in line and pod in line]
    assert missing and ref + " (running for" in missing[0] and "Init:0/2" in missing[0], r.stderr
    assert ".driver-ctr-ready" in missing[0]
    # issue 30, as the known pattern since issue 39 (finding 11), and the timeout says a longer wait does not help
    assert "left: Init:0/2, stuck in init container driver-ready: it waits for " in r.stderr, r.stderr
    assert "waiting longer does not help: sandbox-device-plugin cannot start" in " ".join(r.stderr.split())

    for args in (("node", "list"), ("status",)):
        r = kv.rblnctl(*args)
        assert r.exit_code == 0, r.stderr
        assert any(line.startswith(f"note: node {NODE}: pod {ref}") and "Init:0/2" in line
                   for line in r.stderr.splitlines()), r.stderr
        (row,) = [line for line in r.stdout.splitlines() if line.startswith(f"{NODE} ")]
        assert any(cell.endswith(",Init:0/2") for cell in row.split()), r.stdout  # the table says it too
    (n1,) = [n for n in json.loads(kv.rblnctl("node", "list", "-o", "json").stdout)["items"] if n["name"] == NODE]
    (held,) = n1["initHeld"]
    assert (held["pod"], held["initContainer"], held["status"], held["stuck"]) == (pod, "driver-ready",
                                                                                  "Init:0/2", True)
    # no kubelet answers here, so the API server cannot read the log: the line is left out, nothing fails
    assert held["lastLogLine"] is None

    kv.rblnctl("kubevirt", "enable-gates", "--yes")
    r = kv.rblnctl("preflight", "-o", "json")
    assert r.exit_code == 1, r.stderr
    checks = {(c["id"], c["scope"]): c for c in json.loads(r.stdout)["checks"]}
    assert checks[("nodes.vm-mode", "cluster")]["status"] == "FAIL"
    vm = checks[("node.vm-npus", NODE)]
    assert vm["status"] == "FAIL" and "cordoned" in vm["evidence"] and ref in vm["evidence"], vm
    assert "rebellions.ai/ATOM_PT" in vm["evidence"] and "Init:0/2" in vm["evidence"]
    r = kv.rblnctl("preflight")
    assert r.stdout.rstrip().splitlines()[-1].endswith("-> NOT ready"), r.stdout
