"""A VFIO user for the kernel tier: `python -m tests.kernel.vfio_holder BDF GROUP_NODE READY_FILE`.

Does what a VMM does before it runs a guest on the function: opens the container /dev/vfio/vfio and the group node
(GROUP_NODE: /dev/vfio/<group>, or a node of another name with the same device number), VFIO_GROUP_SET_CONTAINER,
VFIO_SET_IOMMU (TYPE1), VFIO_GROUP_GET_DEVICE_FD; then writes READY_FILE and sleeps holding the device. The kernel
then blocks an unbind of the function until this process exits (vfio_unregister_group_dev: "blocked until
released by user"). Ioctl numbers: include/uapi/linux/vfio.h (VFIO_TYPE ';', VFIO_BASE 100).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

VFIO_SET_IOMMU = 0x3B66  # _IO(';', 102)
VFIO_GROUP_SET_CONTAINER = 0x3B68  # _IO(';', 104)
VFIO_GROUP_GET_DEVICE_FD = 0x3B6A  # _IO(';', 106)
VFIO_TYPE1_IOMMU = 1


def main(bdf: str, group_node: str, ready: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    container = os.open("/dev/vfio/vfio", os.O_RDWR)
    group = os.open(group_node, os.O_RDWR)

    def ioctl(fd: int, request: int, arg: object) -> int:
        rc = libc.ioctl(fd, ctypes.c_ulong(request), arg)
        if rc < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"ioctl {request:#x}: {os.strerror(err)}")
        return rc

    ioctl(group, VFIO_GROUP_SET_CONTAINER, ctypes.byref(ctypes.c_int(container)))
    ioctl(container, VFIO_SET_IOMMU, ctypes.c_ulong(VFIO_TYPE1_IOMMU))
    device = ioctl(group, VFIO_GROUP_GET_DEVICE_FD, ctypes.c_char_p(bdf.encode()))
    with open(ready, "w") as f:
        f.write(f"{os.getpid()} {device}\n")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(*sys.argv[1:4])
