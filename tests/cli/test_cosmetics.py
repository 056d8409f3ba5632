"""Issue 21 item 7's cosmetics that have no better home: the single-node set-mode result fits 80 columns.

(The others are tested where they live: permit-devices' refusal in tests/kubevirt/test_devices.py,
preflight's remedy order in tests/preflight/checks/test_remedy_commands.py, -v=6 URLs in
tests/cli/test_cluster_errors.py, `(failed): None` in tests/preflight/checks/test_kubernetes.py.)
"""

from __future__ import annotations

from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.helpers import cli


def test_single_node_result_does_not_wrap_at_80_columns(apiserver):
    """The header read `... CORDONED UNCORDONED` and wrapped (`UNCORDONE`/`D`) for an ordinary node name."""
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True),
                  o.npu_node("npu-worker-a01"))
    op = SimulatedOperator(apiserver).start()
    try:
        assert op.wait_idle()
        r = cli("node", "set-mode", "vm", "npu-worker-a01", "--yes", server=apiserver.url)
    finally:
        op.stop()
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NODE", "FROM", "TO", "RESULT", "DURATION", "EVICTED"]  # as the pool's table
    assert lines[1].split()[:4] == ["npu-worker-a01", "container", "vm-passthrough", "done"]
    assert max(len(line) for line in lines) <= 80, lines
