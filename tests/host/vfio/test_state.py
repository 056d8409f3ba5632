"""rblnctl.host.vfio.state: the record of original drivers is atomic, locked, and distrusted when damaged."""

from __future__ import annotations

import json
import os

import pytest

from rblnctl.errors import HostError
from rblnctl.host.vfio import StateFile
from tests.host.vfio.common import A, B


def test_state_file_with_traversal_in_a_driver_name_is_damaged(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"version": 1, "devices": {A: {"driver": "../../x"}}}))
    with pytest.raises(HostError, match="damaged"):
        StateFile(path=p).load()

def test_state_file_save_is_atomic_and_leaves_no_temp(tmp_path):
    p = tmp_path / "var" / "lib" / "rblnctl" / "vfio-state.json"
    s = StateFile(path=p)
    s.save({A: {"driver": "rebellions", "driver_override": None}})
    s.save({B: {"driver": "rebellions", "driver_override": None}})
    assert list(s.load()) == [B]
    assert sorted(os.listdir(p.parent)) == ["vfio-state.json"]

def test_two_runs_cannot_hold_the_state_lock(tmp_path):
    s = StateFile(path=tmp_path / "s.json")
    with s.locked(), pytest.raises(HostError, match="another rblnctl"), s.locked():
        pass

@pytest.mark.parametrize("doc", [
    {"version": 1, "devices": {A: {"driver": "vfio-pci", "driver_override": None}}},  # not an original driver
    {"version": 1, "devices": [A]},  # devices is not an object
    {"version": 1, "devices": {"3b:00.0": {"driver": "rebellions"}}},  # not the sysfs spelling of a BDF
    {"version": 1, "devices": {A: "rebellions"}},  # entry is not an object
    {"version": 1},  # no devices at all
    {"version": 2, "devices": {A: {"driver": "rebellions", "driver_override": None}}},  # another format
    {"devices": {A: {"driver": "rebellions", "driver_override": None}}},  # no version: not ours
])
def test_foreign_state_file_is_damaged(tmp_path, doc):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(HostError, match="damaged"):
        StateFile(path=p).load()

def test_state_file_that_cannot_be_read_is_a_host_error(tmp_path):
    p = tmp_path / "state.json"
    p.mkdir()  # EISDIR: unreadable, and not "absent"
    with pytest.raises(HostError, match="cannot read state file"):
        StateFile(path=p).load()

def test_state_file_that_cannot_be_written_is_a_host_error_and_leaves_no_temp(tmp_path):
    parent = tmp_path / "state"
    parent.mkdir()
    p = parent / "s.json"
    p.mkdir()  # os.replace() of a file onto a directory fails
    with pytest.raises(HostError, match="cannot write state file"):
        StateFile(path=p).save({A: {"driver": "rebellions", "driver_override": None}})
    assert sorted(os.listdir(parent)) == ["s.json"]

def test_lock_file_that_cannot_be_created_is_a_host_error(tmp_path):
    blocker = tmp_path / "var"
    blocker.write_text("a file where the state directory should be")
    with pytest.raises(HostError, match="cannot open lock file"), StateFile(path=blocker / "s.json").locked():
        pass

@pytest.mark.parametrize(("content", "why"), [
    (b"\xff\xfe\x00\x01binary\x80", "not UTF-8 text"),
    (b'{"version": 1, "devices": {"0000:3b:00.0": {"driver": "rebel', "Unterminated string"),  # truncated
    (b"", "Expecting value"),  # truncated to nothing
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (json.dumps({"version": 1, "devices": {A: {"driver": "rebellions", "ids": 7}}}).encode(), "ids is not a string"),
])
def test_damaged_state_files_are_host_errors(tmp_path, content, why):
    p = tmp_path / "s.json"
    p.write_bytes(content)
    with pytest.raises(HostError, match=rf"state file .*s\.json is damaged \(.*{why}"):
        StateFile(path=p).load()

def test_oversized_state_file_is_damaged_without_reading_it_all(tmp_path):
    from rblnctl.host.vfio.state import MAX_STATE_BYTES

    p = tmp_path / "s.json"
    p.write_bytes(b" " * (MAX_STATE_BYTES + 10))
    with pytest.raises(HostError, match="damaged .larger than"):
        StateFile(path=p).load()

def test_a_fifo_as_state_file_is_damaged_and_never_blocks(tmp_path):
    import threading

    p = tmp_path / "s.json"
    os.mkfifo(p)
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            StateFile(path=p).load()
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            outcome.append(e)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # blocked opening the FIFO: release it with a writer, then fail
        os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
        pytest.fail("loading a FIFO state file blocked waiting for a writer")
    [err] = outcome
    assert isinstance(err, HostError) and "damaged (not a regular file" in str(err)


# --- the pending record: one place under the host root, whatever --state-file said ---------------------------------


def _alive(root, pid: int, start: int) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(f"{pid} (rblnctl) D 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n")


def test_the_pending_record_lives_under_the_root_run_dir_and_the_old_one_is_read_then_moved(tmp_path):
    from rblnctl import constants as C
    from rblnctl.host.vfio.state import PendingFile, PendingUnbind, pending_unbinds

    p = PendingFile.of(tmp_path)
    assert p.path == tmp_path / "run" / "rblnctl" / "vfio-pending.json" and C.VFIO_PENDING_FILE.startswith("/run/")
    # what the release before wrote beside the default state file: still honoured (its child may still wait)
    assert p.legacy is not None
    p.legacy.parent.mkdir(parents=True)
    p.legacy.write_text(json.dumps({"version": 1, "pending": {A: {"pid": 70, "start": 7, "since": "t0"}}}))
    _alive(tmp_path, 70, 7)
    assert [(r.bdf, r.pid, r.state_file) for r in pending_unbinds(tmp_path).values()] == [(A, 70, "")]
    with p.locked():
        kept = p.live(tmp_path / "proc")
        kept[B] = PendingUnbind(bdf=B, pid=80, start=8, since="t1", state_file="/x/state.json")
        p.save(kept)
    _alive(tmp_path, 80, 8)
    assert not p.legacy.exists()  # moved: one record from now on
    assert {b: (r.pid, r.state_file) for b, r in pending_unbinds(tmp_path).items()} == {
        A: (70, ""), B: (80, "/x/state.json")}
    assert sorted(os.listdir(p.path.parent)) == ["vfio-pending.json", "vfio-pending.json.lock"]
    with p.locked():
        p.save({})
    assert not p.path.exists() and pending_unbinds(tmp_path) == {}


def test_the_pending_record_has_its_own_lock_whatever_state_file_a_run_locks(tmp_path):
    import fcntl

    from rblnctl.host.vfio import state
    from rblnctl.host.vfio.state import PendingFile

    p = PendingFile.of(tmp_path)
    with StateFile(path=tmp_path / "a" / "state.json").locked(), p.locked():
        pass  # another state file's lock does not keep a run from the record
    p.path.parent.mkdir(parents=True, exist_ok=True)
    held = os.open(p.path.with_name(p.path.name + ".lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        old, state.PENDING_LOCK_WAIT_S = state.PENDING_LOCK_WAIT_S, 0.05
        with pytest.raises(HostError, match="locked"), p.locked():
            pass
    finally:
        state.PENDING_LOCK_WAIT_S = old
        os.close(held)
    with p.locked():
        pass
