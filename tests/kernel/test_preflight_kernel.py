"""`preflight --local` on a real kernel (and each scenario on the fake sysfs, one expectation): the IOMMU checks
PASS, the vfio modules are named until they are loaded, and a kernel booted with its IOMMU off FAILs with the remedy
that turns it on."""

from __future__ import annotations

from tests.kernel.guest import reboots


def _rows(out: str) -> dict[str, str]:
    """CHECK -> the table line (STATUS first)."""
    rows = {}
    for line in out.splitlines():
        for status in ("PASS", "FAIL", "WARN", "SKIP"):
            if line.startswith(status + " "):
                rows[line[len(status):].strip()] = status
    return rows


def _status(rows: dict[str, str], check: str) -> str:
    hits = [s for text, s in rows.items() if text.startswith(check)]
    assert len(hits) == 1, (check, rows)
    return hits[0]


def test_iommu_passes_and_the_vfio_modules_are_named_until_loaded(host):
    host.unload_vfio()
    rc, out = host.rblnctl("preflight", "--local")
    rows = _rows(out)
    assert rc == 1, out
    for check in ("IOMMU in firmware", "IOMMU enabled by the kernel", "IOMMU on the kernel command line",
                  "Bare metal, or VM with a vIOMMU", "NPUs in usable IOMMU groups"):
        assert _status(rows, check) == "PASS", out
    assert _status(rows, "VFIO kernel modules") == "FAIL"
    line = next(x for x in out.splitlines() if x.startswith("FAIL") and "VFIO kernel modules" in x)
    for module in ("vfio ", "vfio_pci", "vfio_iommu_type1"):
        assert module in line + " ", line
    assert "`modprobe vfio_pci`" in out  # the remedy

    host.load_vfio()
    rc, out = host.rblnctl("preflight", "--local")
    rows = _rows(out)
    assert _status(rows, "VFIO kernel modules") == "PASS", out
    assert _status(rows, "/dev/vfio/vfio present") == "PASS", out
    # what is still not ready in the guest (no /dev/kvm, virtio-pci instead of rebellions) is a WARN, not a FAIL
    assert rc == 0 and "FAIL" not in rows.values(), out


@reboots
def test_a_kernel_booted_with_the_iommu_off_fails_with_the_remedy(host):
    # kernelvm always passes intel_iommu=on; the parameter given last wins, as the kernel parses them in order.
    # The session's guest is powered off first (one QEMU at a time); the next test boots the default one again.
    host = host.use(append="intel_iommu=off")
    assert host.iommu_groups() == 0
    rc, out = host.rblnctl("preflight", "--local")
    rows = _rows(out)
    assert rc == 1, out
    assert _status(rows, "IOMMU in firmware") == "PASS", out  # the DMAR table is still there
    assert _status(rows, "IOMMU enabled by the kernel") == "FAIL", out
    assert _status(rows, "IOMMU on the kernel command line") == "FAIL", out
    assert "intel_iommu=on" in out.split("remedies:", 1)[1], out
