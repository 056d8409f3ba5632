"""rblnctl.host.vfio.writer: the real writer writes existing attributes only, once, never through a symlink."""

from __future__ import annotations

import os

import pytest

from rblnctl.host.vfio import FileWriter, writer

REAL_DEFAULT_WRITER = writer.default_writer  # captured before the guard replaces it


def test_file_writer_writes_existing_files_only(tmp_path):
    target = tmp_path / "driver_override"
    target.write_text("(null)\n")
    FileWriter().write(target, "vfio-pci")
    assert target.read_text() == "vfio-pci"
    with pytest.raises(FileNotFoundError):
        FileWriter().write(tmp_path / "no-such-attribute", "x")
    assert not (tmp_path / "no-such-attribute").exists()
    os.symlink(target, tmp_path / "link")
    with pytest.raises(OSError):
        FileWriter().write(tmp_path / "link", "x")

def test_default_writer_is_the_real_one():
    assert isinstance(REAL_DEFAULT_WRITER(), FileWriter)
