"""HostPreflight (`preflight --local`) end to end: a healthy host, --strict, --method, a bad root, the real /."""

from __future__ import annotations

from pathlib import Path

import pytest

from rblnctl.errors import InvalidInput
from rblnctl.preflight.host import HostPreflight
from rblnctl.preflight.model import Status
from tests.fakes import sysfs as ht
from tests.preflight.host_support import HOST_IDS, by_id, run

def test_intel_bare_metal_all_pass(tmp_path):
    report = run(tmp_path, ht.intel_bare_metal())
    assert [c.id for c in report.checks] == HOST_IDS
    bad = [(c.id, c.status, c.evidence) for c in report.checks if c.status != Status.PASS]
    assert bad == []
    assert report.summary.ok and report.summary.passed == len(HOST_IDS) and report.target == "host"
    c = by_id(report)
    assert "DMAR" in c["host.iommu.firmware"].evidence
    assert "intel_iommu=on" in c["host.iommu.cmdline"].evidence and "iommu=pt set" in c["host.iommu.cmdline"].evidence
    assert "bare metal" in c["host.virt"].evidence and "Dell Inc." in c["host.virt"].evidence
    assert c["host.npu.present"].evidence == "2 RBLN NPUs: 2x CA22 PF"
    assert "0000:3b:00.0:42" in c["host.npu.iommu-group"].evidence
    assert all(r.remedy == "" for r in report.checks)


def test_strict_turns_warnings_into_failures(tmp_path):
    spec = ht.intel_bare_metal(dev_kvm=False)
    assert run(tmp_path / "a", spec).summary.ok
    strict = run(tmp_path / "b", spec, strict=True)
    assert not strict.summary.ok and strict.failed_ids() == ["host.kvm"]


def test_method_is_recorded(tmp_path):
    report = run(tmp_path, ht.intel_bare_metal(), method="dra")
    assert report.method == "dra" and "same for both" in report.method_note
    with pytest.raises(InvalidInput, match="unknown method 'vfio'"):
        HostPreflight(root=tmp_path, method="vfio")


def test_root_must_be_a_directory(tmp_path):
    with pytest.raises(InvalidInput, match="does not exist"):
        HostPreflight(root=tmp_path / "nope").run()
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput, match="is not a directory"):
        HostPreflight(root=tmp_path / "file").run()


def test_real_root_read_only():
    """This machine's real /proc and /sys: whatever it finds, the run completes and reports every check."""
    report = HostPreflight(root=Path("/")).run()
    assert [c.id for c in report.checks] == HOST_IDS
    assert all(isinstance(c.status, Status) and c.evidence for c in report.checks)
    assert all(c.remedy for c in report.checks if c.status in (Status.WARN, Status.FAIL))

