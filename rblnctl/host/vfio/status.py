"""vfio_status(): what `rblnctl vfio status` reports for each function; read-only, no root needed."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rblnctl.host import pci, system
from rblnctl.host.holders import HolderFinder
from rblnctl.host.pci import PciFunction
from rblnctl.host.root import HostRoot
from rblnctl.host.vfio.model import DeviceStatus, GroupMember, VfioStatus
from rblnctl.host.vfio.state import held_functions

# The host directories vfio_status() reads, relative to the root (a host pod mounts exactly these,
# read-only): sys/ (PCI functions, IOMMU groups), proc/ and dev/ (who holds a device open), run/ (the
# VFIO Manager's validation markers).
VFIO_STATUS_PATHS = ("sys", "proc", "dev", "run")


def vfio_status(*, root: Path | HostRoot = HostRoot(), bdfs: Sequence[str] = (), all_vendors: bool = False
                ) -> VfioStatus:
    """Describe RBLN NPUs (every function with all_vendors, or the named BDFs) for VFIO under a host root.

    Raises InvalidInput for a bad BDF or a root that is not a host tree, NotFound for a named BDF
    that does not exist.
    """
    host = HostRoot.of(root).checked()
    sysfs = host.sys
    wanted = pci.normalize_bdfs(bdfs)
    finder = HolderFinder.scan(host)
    # never read the override of a function an earlier run left an unbind pending on, or that a process is blocked
    # reading or writing (HolderFinder.override_busy): the read waits as long, one more process stuck each run
    held = held_functions(host, finder)
    fns = (pci.read_functions(sysfs, wanted, held=held) if wanted
           else pci.list_functions(sysfs, all_vendors=all_vendors, held=held))
    warnings = system.vfio_manager_warnings(host.run, finder.table)
    if finder.incomplete:
        warnings.append(f"could not read the open files of {finder.incomplete} processes (not root): "
                        "holders may be incomplete")
    cache: dict[str, PciFunction] = {f.bdf: f for f in fns}
    for f in fns:
        if f.override_unknown:
            warnings.append(f"{f.bdf}: {f.override_unknown}")
    out = []
    for f in fns:
        members = []
        if f.iommu_group:
            for m in pci.iommu_group_members(sysfs, f.iommu_group):
                if m == f.bdf:
                    continue
                mf = cache.get(m) or cache.setdefault(m, pci.read_function(sysfs, m, held=held))
                members.append(GroupMember(bdf=m, ids=mf.ids, driver=mf.driver, bridge=mf.is_bridge,
                                           blocks_group=pci.group_member_blocker(mf)))
        node = str(host.dev / "vfio" / f.iommu_group) if f.iommu_group else None
        out.append(DeviceStatus(
            bdf=f.bdf, ids=f.ids, model=f.model, function=f.function, driver=f.driver,
            driver_override=f.driver_override, driver_override_known=f.override_unknown is None,
            iommu_group=f.iommu_group, group_members=tuple(members),
            numa_node=f.numa_node, vfio_device=node, vfio_device_present=bool(node and os.path.exists(node)),
            holders=tuple(finder.holders(f)),
        ))
    stray = finder.unattributed(sorted(set(pci.npu_bdfs(sysfs)) | set(cache)))
    for h in stray:
        warnings.append(f"{h.text}; no RBLN function under {sysfs} claims it")
    return VfioStatus(devices=tuple(out), warnings=tuple(warnings), searched=str(pci.devices_dir(sysfs)))
