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
