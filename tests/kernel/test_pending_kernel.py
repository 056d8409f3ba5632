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

import pytest

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

    if host.name == "fake":
        host.keep_stuck_readers()  # as the kernel does: a reader blocked on the override stays until the unbind ends

    rc, out = host.rblnctl("vfio", "status", timeout=ANSWER_S)
    assert rc == 0 and f"{NPU0}: {UNKNOWN}" in out and NPU1 in out, out
    first = stuck_readers(host, NPU0)
    assert len(first) == 1, first  # the one bounded read it gave up on, blocked in the kernel
    # later runs see that reader in the one procfs scan: NPU0 is unknown at once (no read forked to block beside
    # it), and the reader, which does not hold the device, is never listed as its holder
    rc, out = host.rblnctl("vfio", "status", timeout=ANSWER_S)
    # (which pid it names: the lowest blocked on it; on the kernel tier the fork server's snapshot thread, 3 s
    # bounded, tests/kernel/forkserver.py, blocks on it too)
    assert rc == 0 and f"{NPU0}: {UNKNOWN}" in out and "is blocked reading or writing its driver_override" in out, out
    doc = host.json("vfio", "status")
    assert stuck_readers(host, NPU0) == first
    holders = {h["pid"] for d in doc["devices"] for h in d["holders"]}
    assert pid in holders and not holders & set(first), doc["devices"]
    if host.name == "fake":
        host.release_stuck_readers()
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", timeout=ANSWER_S)
    assert rc == 1 and f"{NPU0}: {UNKNOWN}" in out and "nothing was changed" in out, out

    host.let_go(pid)  # the other tool's unbind finishes; the override it left is vfio-pci
    assert host.on(NPU0) == (None, "vfio-pci")
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", timeout=ANSWER_S)
    assert rc == 0 and host.on(NPU0) == (HOST_DRIVER, None), out


def stuck_readers(host, bdf: str) -> list[int]:
    """The processes blocked reading (or writing) `bdf`'s driver_override: on the kernel those in state D (waiting on
    the device lock, /proc/<pid>/stat) with the attribute open; on the fake the readers it keeps (FakeHost)."""
    if host.name == "fake":
        return host.stuck_readers()
    out = host.sh(f"for d in /proc/[0-9]*; do ls -l $d/fd 2>/dev/null | grep -q '{bdf}/driver_override' && "
                  "echo ${d#/proc/} $(sed 's/.*) //' $d/stat | cut -d' ' -f1); done; true")
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return sorted(int(p) for p, state in rows if state == "D")


def unbind_by_another_tool(host, bdf: str) -> None:
    """`echo <bdf> > .../vfio-pci/unbind` from a shell, left blocked in the kernel by the device's VFIO user."""
    if host.name == "fake":
        host.unbind_blocked(bdf)
        return
    pid = start_holder(host, "unbind", f"exec sh -c 'echo x > /run/kt/unbind.ready; echo {bdf} > "
                       "/sys/bus/pci/drivers/vfio-pci/unbind'")
    # until it sleeps in its write(2) (syscall 1 on x86-64), holding the device lock: the wait is interruptible
    # (state S) until a first signal, then uninterruptible (drivers/vfio/vfio_main.c vfio_unregister_group_dev())
    host.sh(f"for i in $(seq 100); do read n rest < /proc/{pid}/syscall; [ \"$n\" = 1 ] && break; sleep 0.1; done; "
            f"read n rest < /proc/{pid}/syscall; [ \"$n\" = 1 ]")


# --- the binder's side, on the simulator alone (no machine: what only its seams show) ---------------------------


def test_an_interrupt_names_the_holders_found_at_plan_time_and_notes_the_child(tmp_path):
    from rblnctl.host.vfio.state import PendingFile
    from tests.fakes.sysfs import npu_node
    from tests.host.vfio.common import A, make

    k = npu_node(tmp_path, 1)
    make(k).apply(make(k).plan("bind", [A]))
    k.add_process(3100, "qemu-kvm", ["/dev/vfio/20"], cmdline=["qemu-kvm", "-name", "vm1"])
    k.add_process(3200, "rblnctl")  # the child the interrupted write leaves waiting in the kernel
    (k.proc / "3200" / "stat").write_text("3200 (rblnctl) D 1 3200 3200 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n")

    class Interrupted:
        def write(self, path, value, *, bound_s=None):
            if bound_s is None:
                return k.writer.write(path, value)
            e = KeyboardInterrupt()
            e.blocked_pid = 3200  # what rblnctl.host.bounded.run_bounded attaches
            raise e

    events: list[str] = []
    b = make(k, force=True, writer=Interrupted(), on_event=events.append)
    with pytest.raises(KeyboardInterrupt):
        b.apply(b.plan("unbind", [A]))
    said = " ".join(events)
    assert "interrupted while unbind from vfio-pci" in said and "pid 3100 (qemu-kvm -name vm1) has /dev/vfio/20" \
        in said and "kill 3100" in said and "vfio status" not in said, said
    (rec,) = PendingFile.of(k.root).live(k.proc).values()
    assert (rec.bdf, rec.pid, rec.start, rec.holders) == (A, 3200, 777, "pid 3100 (qemu-kvm -name vm1)")
    # a reused pid (another start time) is not the child: the record is ignored, and the next run drops it
    (k.proc / "3200" / "stat").write_text("3200 (bash) S 1 3200 3200 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 999 0 0\n")
    assert PendingFile.of(k.root).live(k.proc) == {}


def test_forcing_past_a_holder_of_the_host_driver_bounds_its_unbind_too(tmp_path):
    from tests.fakes.sysfs import npu_node
    from tests.host.vfio.common import A, B, make

    k = npu_node(tmp_path, 2)
    k.add_process(4242, "rbln-smi", ["/dev/rbln0"])
    plan = make(k, force=True).plan("bind", [A, B])
    unbinds = {w.bdf: w.may_block for w in plan.writes if w.path.endswith("/unbind")}
    assert unbinds == {A: True, B: False}, unbinds  # B has no holder: its host driver's unbind never waits on one


def test_a_bounded_read_gives_up_at_its_bound_and_its_child_keeps_nothing_of_the_run(tmp_path):
    import fcntl
    import os

    from rblnctl.host.bounded import StillBlocked, run_bounded

    fifo = tmp_path / "driver_override"
    os.mkfifo(fifo)  # a read that blocks, as one of a function whose unbind is blocked does
    lock = tmp_path / "vfio-state.json.lock"
    held = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    with pytest.raises(StillBlocked) as e:
        run_bounded(fifo.read_bytes, 0.3)
    child = e.value.pid
    try:
        os.close(held)
        again = os.open(lock, os.O_RDWR)
        fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the child left waiting does not hold the state's lock
        os.close(again)
        assert len(os.listdir(f"/proc/{child}/fd")) <= 4  # 0-2 on /dev/null and the pipe of its answer
    finally:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # let it go
        os.close(fd)
        os.waitpid(child, 0)
    assert run_bounded(lambda: b"vfio-pci\n", 5) == b"vfio-pci\n"


# --- where the pending record lives, and what preflight --local says of such a function ----------------------------


def test_preflight_names_a_pending_unbind_and_the_unbind_that_finishes_it_not_recover(host):
    """A blocked unbind removes the driver link first: preflight --local showed the function as `bound to no driver`
    and sent the user to `vfio recover`, which refuses it while the unbind is pending. It says what waits, and the
    command that finishes it once the holder stops: the same unbind."""
    host.load_vfio()
    assert host.rblnctl("vfio", "bind", NPU0, "--yes")[0] == 0
    pid = host.vfio_user(NPU0)
    holder = f"pid {pid} (python -m tests.kernel.vfio_holder"
    assert host.rblnctl("vfio", "unbind", NPU0, "--yes", "--force", "--timeout", "3s")[0] == 1

    rc, out = host.rblnctl("preflight", "--local", timeout=ANSWER_S)
    assert rc != 124 and f"{NPU0} CA22 PF unbind pending (pid " in out and holder in out, out
    assert "vfio recover" not in out and "bound to no driver" not in out, out
    assert f"then run the same command again: `rblnctl vfio unbind {NPU0}`" in out, out

    host.let_go(pid)
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", timeout=ANSWER_S)  # the command preflight named
    assert rc == 0 and host.on(NPU0) == (HOST_DRIVER, None), out


def test_a_pending_unbind_made_with_a_state_file_elsewhere_is_seen_by_status_and_preflight(host):
    """The record was beside --state-file, where vfio status and preflight --local (no --state-file) never looked:
    they fell back to the bounded read (`unknown`). It lives in one place under the host root now."""
    elsewhere = str(host.tmp / "elsewhere" / "state.json") if host.name == "fake" else "/tmp/elsewhere/state.json"
    host.load_vfio()
    assert host.rblnctl("vfio", "bind", NPU0, "--yes", "--state-file", elsewhere)[0] == 0
    pid = host.vfio_user(NPU0)
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", "--force", "--timeout", "3s", "--state-file", elsewhere)
    assert rc == 1 and "pending" in out, out

    rc, out = host.rblnctl("vfio", "status", timeout=ANSWER_S)
    assert rc == 0 and f"{NPU0}: unbind pending (pid " in out and UNKNOWN not in out, out
    rc, out = host.rblnctl("preflight", "--local", timeout=ANSWER_S)
    assert f"{NPU0} CA22 PF unbind pending (pid " in out and UNKNOWN not in out, out
    said = " ".join(out.split())  # the remedy may wrap
    assert f"`rblnctl vfio unbind {NPU0} --state-file {elsewhere}`" in said, out

    host.let_go(pid)
    rc, out = host.rblnctl("vfio", "unbind", NPU0, "--yes", "--state-file", elsewhere, timeout=ANSWER_S)
    assert rc == 0 and host.on(NPU0) == (HOST_DRIVER, None), out
