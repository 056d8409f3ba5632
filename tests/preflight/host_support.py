"""Helpers the host preflight tests share: run HostPreflight on a simulated host tree, findings by id."""

from __future__ import annotations

from pathlib import Path

from rblnctl.preflight.host import HostPreflight
from tests.fakes import sysfs as ht

HOST_IDS = [
    "host.iommu.firmware", "host.iommu.kernel", "host.iommu.cmdline", "host.virt", "host.vfio.modules",
    "host.vfio.device", "host.kvm", "host.npu.present", "host.npu.driver", "host.npu.iommu-group", "host.npu.in-use",
]


def run(tmp_path: Path, spec: ht.HostSpec, **kw):
    from tests.preflight.spelt import spelt

    k = ht.build_host(tmp_path / "host", spec)
    return spelt(HostPreflight(root=k.root, **kw).run())  # remedies as `rblnctl` says them


def by_id(report) -> dict:
    out = {c.id: c for c in report.checks}
    assert len(out) == len(report.checks), "host check ids are unique"
    return out


def check(tmp_path, spec, check_id):
    return by_id(run(tmp_path, spec))[check_id]

