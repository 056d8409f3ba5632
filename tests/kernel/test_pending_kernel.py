"""After an unbind is left pending in the kernel, every later run answers: issue 40's host half, finding 1.

An unbind from vfio-pci waits until every VFIO user lets go, holding the device lock all that time, and reading that
function's driver_override takes the device lock (torvalds/linux v6.1 drivers/vfio/vfio_main.c
vfio_unregister_group_dev(); drivers/pci/pci-sysfs.c driver_override_show()). So a run that reads the override of
such a function waits, uninterruptibly, as long as the unbind: before rblnctl noted the pending child
(rblnctl/host/vfio/state.py PendingFile) and bounded its override reads (rblnctl/host/bounded.py), each run below hung
and showed as its request's timeout. The fake blocks such a read too (its driver_override is a FIFO without a writer,
tests/fakes/sysfs.py), so the [fake] variant catches the same regression.
"""

from __future__ import annotations

from tests.kernel.guest import HOST_DRIVER, NPU0, NPU1, start_holder

ANSWER_S = 60  # each run's own timeout: a run that hangs shows as a timeout (rc 124 on the fake), never asserted time
UNKNOWN = "unknown: the kernel holds the device (an unbind or probe in progress?)"


def test_every_run_answers_while_an_unbind_is_pending_and_the_same_command_finishes_it(host):
    host.load_vfio()
    assert host.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    pid = host.vfio_user(NPU0)
    holder = f"pid {pid} (python -m tests.kernel.vfio_holder"
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", "--force", "--timeout", "3s")
    assert rc == 1 and "pending" in out and holder in out, out

    rc, out = host.rblnctl("vfio", "status", timeout=ANSWER_S)
    assert rc == 0 and f"{NPU0}: unbind pending (pid " in out, out
    assert f"the kernel finishes the unbind when {holder}" in out and NPU1 in out, out
    rc, out = host.rblnctl("vfio", "status", NPU0, timeout=ANSWER_S)
    assert rc == 0 and f"{NPU0}: unbind pending (pid " in out, out
    rc, out = host.rblnctl("vfio", "bind", "--all", "--dry-run", timeout=ANSWER_S)
    assert rc == 0 and f"{NPU0}: unbind pending" in out and "left out of this run" in out, out
    assert "would write:" in out and f"{NPU1}" in out, out  # the other NPU goes ahead
    rc, out = host.rblnctl("preflight", "--local", timeout=ANSWER_S)
    assert rc != 124 and "Traceback" not in out and NPU0 in out, out
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", timeout=ANSWER_S)
    assert rc == 1 and f"{NPU0}: unbind pending (pid " in out and holder in out, out
    assert "nothing was changed" in out, out

    host.let_go(pid)  # the kernel finishes the unbind: the device has no driver; the record is no longer live
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", timeout=ANSWER_S)  # the same command finishes it
    assert rc == 0 and host.on(NPU0) == (HOST_DRIVER, None) and NPU0 not in host.state(), out


def test_an_unbind_another_tool_left_blocked_is_unknown_not_waited_for(host):
    host.load_vfio()
    assert host.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    pid = host.vfio_user(NPU0)
    unbind_by_another_tool(host, NPU0)

    rc, out = host.rblnctl("vfio", "status", timeout=ANSWER_S)
    assert rc == 0 and f"{NPU0}: {UNKNOWN}" in out and NPU1 in out, out
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", timeout=ANSWER_S)
    assert rc == 1 and f"{NPU0}: {UNKNOWN}" in out and "nothing was changed" in out, out

    host.let_go(pid)  # the other tool's unbind finishes; the override it left is vfio-pci
    assert host.on(NPU0) == (None, "vfio-pci")
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", timeout=ANSWER_S)
    assert rc == 0 and host.on(NPU0) == (HOST_DRIVER, None), out


def unbind_by_another_tool(host, bdf: str) -> None:
    """`echo <bdf> > .../vfio-pci/unbind` from a shell, left blocked in the kernel by the device's VFIO user."""
    if host.name == "fake":
        host.unbind_blocked(bdf)
        return
    pid = start_holder(host, "unbind", f"exec sh -c 'echo x > /run/kt/unbind.ready; echo {bdf} > "
                       "/sys/bus/pci/drivers/vfio-pci/unbind'")
    # until its write sleeps in the kernel (state D), holding the device lock
    host.sh(f"for i in $(seq 100); do grep -q '^State:.D' /proc/{pid}/status && break; sleep 0.1; done; "
            f"grep '^State:.D' /proc/{pid}/status")
