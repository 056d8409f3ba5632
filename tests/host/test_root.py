"""rblnctl.host.root: a host root is checked before anything is read from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rblnctl import constants as C
from rblnctl.errors import InvalidInput
from rblnctl.host.root import HostRoot
from tests.fakes.sysfs import SimKernel


def test_paths_under_the_root(tmp_path):
    h = HostRoot(tmp_path)
    assert (h.sys, h.proc, h.dev, h.run) == (tmp_path / "sys", tmp_path / "proc", tmp_path / "dev", tmp_path / "run")
    assert h.under(C.VFIO_STATE_FILE) == tmp_path / "var/lib/rblnctl/vfio-state.json"
    assert HostRoot().path == Path(C.HOST_ROOT) and HostRoot().sys == Path("/sys")
    assert HostRoot.of(h) is h and HostRoot.of(str(tmp_path)) == h


def test_only_the_running_systems_root_is_live(tmp_path):
    assert HostRoot().is_live and HostRoot(Path("/proc/..")).is_live
    assert not HostRoot(tmp_path).is_live


def test_a_simulated_host_is_a_host_tree(tmp_path):
    k = SimKernel(tmp_path / "h")
    assert HostRoot(k.root).checked().path == k.root


@pytest.mark.parametrize("keep", ["proc", "sys"])
def test_a_capture_with_only_proc_or_only_sys_is_accepted(tmp_path, keep):
    (tmp_path / keep).mkdir()
    assert HostRoot(tmp_path).checked()


def test_missing_root(tmp_path):
    with pytest.raises(InvalidInput, match=r"host root .*/nope does not exist$"):
        HostRoot(tmp_path / "nope").checked()


def test_root_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidInput, match="is not a directory"):
        HostRoot(tmp_path / "f").checked()


def test_empty_directory_is_not_a_host(tmp_path):
    with pytest.raises(InvalidInput, match="neither proc/ nor sys/"):
        HostRoot(tmp_path).checked()


@pytest.mark.parametrize("sub", ["proc", "sys", "dev", "run"])
def test_a_tree_whose_subdirectory_is_a_file_is_not_a_host(tmp_path, sub):
    for d in ("proc", "sys"):
        if d != sub:
            (tmp_path / d).mkdir()
    (tmp_path / sub).write_text("not a directory")
    with pytest.raises(InvalidInput, match=f"{sub} is not a directory"):
        HostRoot(tmp_path).checked()


def test_unreadable_root_is_bad_input_not_a_crash(tmp_path):
    long = tmp_path / ("x" * 300)  # ENAMETOOLONG
    with pytest.raises(InvalidInput, match="host root"):
        HostRoot(long).checked()
