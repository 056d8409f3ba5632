"""`rblnctl vfio` on a host: bind, unbind and recover NPU PCI functions (the only sysfs writer), and their status.

model.py   the data (operations, statuses, plans, results, status rows)
writer.py  SysfsWriter, the seam every write goes through
state.py   StateFile, the locked record of original drivers
steps.py   the writes that move one function, per operation (pure)
checks.py  the safety checks that turn into blockers
status.py  vfio_status(), read-only
binder.py  VfioBinder: plan() reads, apply(plan) writes, verifies and rolls back
"""

from rblnctl.host.vfio.binder import VfioBinder
from rblnctl.host.vfio.model import (
    Action,
    DeviceBlocker,
    DevicePlan,
    DeviceResult,
    DeviceStatus,
    GroupMember,
    Mode,
    Operation,
    Status,
    VfioOutcome,
    VfioPlan,
    VfioStatus,
    Write,
)
from rblnctl.host.vfio.state import StateFile
from rblnctl.host.vfio.status import vfio_status
from rblnctl.host.vfio.writer import FileWriter, SysfsWriter

__all__ = [
    "Action", "DeviceBlocker", "DevicePlan", "DeviceResult", "DeviceStatus", "FileWriter", "GroupMember", "Mode",
    "Operation", "StateFile", "Status", "SysfsWriter", "VfioBinder", "VfioOutcome", "VfioPlan", "VfioStatus",
    "Write", "vfio_status",
]
