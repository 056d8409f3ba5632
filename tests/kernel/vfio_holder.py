"""A VFIO user for the kernel tier: `python -m tests.kernel.vfio_holder BDF GROUP_NODE READY_FILE [--close-group]
[--request]`, and a user-space driver's BAR mapping: `python -m tests.kernel.vfio_holder --map RESOURCE READY_FILE`.

Does what a VMM does before it runs a guest on the function: opens the container /dev/vfio/vfio and the group node
(GROUP_NODE: /dev/vfio/<group>, or a node of another name with the same device number), VFIO_GROUP_SET_CONTAINER,
VFIO_SET_IOMMU (TYPE1), VFIO_GROUP_GET_DEVICE_FD; then writes READY_FILE (`pid device-fd`) and sleeps holding the
device. The kernel then blocks an unbind of the function until this process exits (vfio_unregister_group_dev:
"blocked until released by user"). Ioctl numbers: include/uapi/linux/vfio.h (VFIO_TYPE ';', VFIO_BASE 100).

`--close-group` closes the group fd once it has the device fd (keeping the device fd and the container): the unbind
still blocks, and /proc/<pid>/fd shows only `anon_inode:[vfio-device]` and /dev/vfio/vfio.
`--request` registers an eventfd as the device's request channel (VFIO_DEVICE_SET_IRQS, VFIO_PCI_REQ_IRQ_INDEX,
DATA_EVENTFD|ACTION_TRIGGER), as QEMU does; each time the kernel signals it (vfio_pci_core_request, while an unbind
waits) the count read is appended to READY_FILE.requests. The process does not let go: it only records the request.
`--map RESOURCE` mmaps one page of a sysfs `resourceN` file and closes the fd (DPDK's uio path): the mapping shows
in /proc/<pid>/maps only. sysfs refuses the mmap (EINVAL) while a driver holds the BAR busy (virtio-pci: iomem_is_
exclusive with CONFIG_IO_STRICT_DEVMEM, drivers/pci/pci-sysfs.c pci_mmap_resource); a function without a driver, or
on vfio-pci with no user, maps.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import select
import struct
import sys
import time

VFIO_SET_IOMMU = 0x3B66  # _IO(';', 102)
VFIO_GROUP_SET_CONTAINER = 0x3B68  # _IO(';', 104)
VFIO_GROUP_GET_DEVICE_FD = 0x3B6A  # _IO(';', 106)
VFIO_DEVICE_SET_IRQS = 0x3B6E  # _IO(';', 110)
VFIO_TYPE1_IOMMU = 1
VFIO_PCI_REQ_IRQ_INDEX = 4  # INTX, MSI, MSIX, ERR, REQ
VFIO_IRQ_SET_DATA_EVENTFD = 1 << 2
VFIO_IRQ_SET_ACTION_TRIGGER = 1 << 5


def main(bdf: str, group_node: str, ready: str, *options: str) -> None:
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
    if "--close-group" in options:
        os.close(group)
    request = None
    if "--request" in options:
        request = os.eventfd(0)
        # struct vfio_irq_set { u32 argsz, flags, index, start, count; u8 data[] }: one s32 eventfd
        irq_set = ctypes.create_string_buffer(struct.pack(
            "=IIIIIi", 24, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_PCI_REQ_IRQ_INDEX, 0, 1,
            request))
        ioctl(device, VFIO_DEVICE_SET_IRQS, irq_set)
    with open(ready, "w") as f:
        f.write(f"{os.getpid()} {device}\n")
    while True:
        if request is None:
            time.sleep(3600)
            continue
        select.select([request], [], [])
        with open(ready + ".requests", "a") as f:
            f.write(f"{os.eventfd_read(request)}\n")


def map_resource(path: str, ready: str) -> None:
    # libc's mmap, not Python's: mmap.mmap keeps a dup of the fd open, and the point is a mapping without one
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    fd = os.open(path, os.O_RDWR | os.O_SYNC)
    addr = libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap {path}: {os.strerror(err)}")
    os.close(fd)
    with open(ready, "w") as f:
        f.write(f"{os.getpid()} mapped\n")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    if sys.argv[1] == "--map":
        map_resource(*sys.argv[2:4])
    else:
        main(*sys.argv[1:])
