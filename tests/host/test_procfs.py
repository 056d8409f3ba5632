"""rblnctl.host.procfs: one scan of <proc>/*/fd tells who holds what open."""

from __future__ import annotations

import os
from pathlib import Path

from rblnctl.host import procfs
from tests.fakes.sysfs import SimKernel


def test_holders_of_exact_paths_with_pid_and_command(tmp_path):
    k = SimKernel(tmp_path)
    k.add_process(4242, "rbln-smi", ["/dev/rbln0", "/etc/hosts"], cmdline=["rbln-smi", "--watch"])
    k.add_process(77, "qemu-kvm", ["/dev/vfio/20", "/dev/vfio/vfio"])
    k.add_process(5, "kthreadd", cmdline=[])
    table = procfs.scan(k.proc)
    assert [p.pid for p in table.processes] == [5, 77, 4242]
    assert table.holders(["/dev/rbln0"]) == [procfs.Holder(pid=4242, command="rbln-smi --watch", path="/dev/rbln0")]
    assert [h.pid for h in table.holders(["/dev/vfio/20", "/dev/rbln0"])] == [77, 4242]
    assert table.holders(["/dev/rbln1"]) == []
    assert [h.path for h in table.holders_where(lambda p: p.startswith("/dev/vfio/"))] == ["/dev/vfio/20",
                                                                                          "/dev/vfio/vfio"]
    assert table.processes[0].command == "[kthreadd]"


def test_matching_looks_at_comm_and_cmdline(tmp_path):
    k = SimKernel(tmp_path)
    k.add_process(10, "bash", cmdline=["/bin/bash", "/usr/bin/vfio-manage.sh", "bind", "--all"])
    k.add_process(11, "vfio-manager")
    k.add_process(12, "sshd")
    assert [p.pid for p in procfs.scan(k.proc).matching("vfio-manage")] == [10, 11]


def test_missing_proc_root_is_an_empty_table(tmp_path):
    assert procfs.scan(tmp_path / "nope").processes == ()


def test_unreadable_fd_directories_are_counted_not_fatal(tmp_path, monkeypatch):
    k = SimKernel(tmp_path)
    k.add_process(1, "init", ["/dev/rbln0"])
    k.add_process(2, "other", ["/dev/rbln1"])
    real_listdir = os.listdir

    def listdir(path):  # what a non-root scan meets for another user's process
        if str(path) == str(k.proc / "2" / "fd"):
            raise PermissionError(13, "Permission denied")
        return real_listdir(path)

    monkeypatch.setattr(procfs.os, "listdir", listdir)
    table = procfs.scan(k.proc)
    assert table.unreadable == 1
    assert [h.pid for h in table.holders(["/dev/rbln0", "/dev/rbln1"])] == [1]


def test_scan_of_the_real_proc_sees_this_process():
    """Read-only: our own pid is there with an open fd."""
    with open(__file__) as f:  # noqa: F841 - keep one fd open to a known path
        table = procfs.scan(Path("/proc"))
        me = [p for p in table.processes if p.pid == os.getpid()]
        assert me and os.path.realpath(__file__) in me[0].open_paths
