"""HolderFinder: which processes hold a PCI function open (its /dev nodes, its VFIO group, its sysfs files)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rblnctl import constants as C
from rblnctl.errors import InvalidInput
from rblnctl.host import pci, procfs
from rblnctl.host.pci import PciFunction
from rblnctl.host.procfs import Holder, ProcessTable
from rblnctl.host.root import HostRoot

OVERRIDE = "driver_override"  # the attribute a blocked reader or writer has open (not a holder: HolderFinder)


@dataclass(kw_only=True)
class HolderFinder:
    """Map PCI functions to the processes that pin them, from one scan of `<proc>` (rblnctl.host.procfs).

    Found from the function itself, not from names: every device number under its sysfs subtree (the `dev`
    attribute of each class device: a disk, its partitions, an rbln node, its VFIO device cdev) and of its VFIO
    group node `/dev/vfio/<group>`, matched against what each open fd is (stat of `/proc/<pid>/fd/<n>`, kind and
    st_rdev), so a node named anything, anywhere, counts. Besides that, by path, a function is held when a process
    has open: one of its device nodes (`/dev/rbln*`, `/dev/rsd*`:
    class devices under the function's sysfs directory, or character devices whose
    `/sys/dev/char/<major>:<minor>` resolves under it), its VFIO group node `/dev/vfio/<group>` or its
    VFIO device cdev `/dev/vfio/devices/vfioN` (a running VM; an iommufd VMM opens the cdev only, see
    pci.vfio_cdev_names), or a file under its sysfs directory (`config`, `resourceN`).
    fd link targets are the paths as the host sees them, so both `/dev/x` and `<root>/dev/x` match.

    Two holders no open path shows: a file under the function's sysfs directory mapped into a process
    (`/proc/<pid>/maps`: a BAR mapped through `resourceN` by a user-space driver, its fd closed since, as DPDK's
    uio path does), and a VFIO device fd (`anon_inode:[vfio-device]`) whose group fd the user closed after
    VFIO_GROUP_GET_DEVICE_FD: the kernel still blocks an unbind until that fd is closed. Its fdinfo names the
    device from Linux 6.18 on (procfs.VFIO_DEVICE_FD); before, such an fd counts against every function on
    vfio-pci that is enabled (an open vfio-pci device is: vfio_pci_core_enable calls pci_enable_device, and
    vfio_pci_core_disable pci_disable_device, torvalds/linux v6.1 drivers/vfio/pci/vfio_pci_core.c), and the
    holder says the kernel does not tell which device it is. A process that holds a VFIO group node
    (`/dev/vfio/<group>`) or device cdev open says which devices it uses: its unattributed device fds count only
    against the functions of those groups and cdevs (so one VM is never listed on another VM's NPU). Only a process
    holding none counts against every enabled function, and that holder is not `certain`.

    Not a holder: a process with a function's `driver_override` open. Reading or writing the attribute does not
    hold the device (no reference a driver's remove waits for); such a process is a reader or writer blocked in
    the kernel on the device lock an unbind in progress holds (drivers/pci/pci-sysfs.c driver_override_show(),
    torvalds/linux v6.1), rblnctl's own bounded reader (rblnctl.host.bounded) among them, and it goes when the
    unbind ends. Listing it would name rblnctl itself as the holder; `override_busy()` reports those functions.
    """

    sysfs: Path
    dev: Path
    table: ProcessTable
    _claimed: set[str] = field(default_factory=set, init=False)
    _char_cache: dict[str, set[str]] | None = field(default=None, init=False)
    _nodes_cache: dict[int, set[str]] | None = field(default=None, init=False)

    @classmethod
    def scan(cls, root: HostRoot) -> HolderFinder:
        """Scan the processes under `root` once and return a finder for its functions."""
        return cls(sysfs=root.sys, dev=root.dev, table=procfs.scan(root.proc))

    @property
    def incomplete(self) -> int:
        """How many processes' open files could not be read (not root); non-zero means holders may be missed."""
        return self.table.unreadable

    def holders(self, f: PciFunction) -> list[Holder]:
        """Every process holding `f` open, by pid then path."""
        names = set(pci.device_node_names(self.sysfs, f.bdf)) | self._char_nodes().get(f.bdf, set())
        self._claimed.update(names)
        exact = [p for n in sorted(names) for p in (f"/dev/{n}", str(self.dev / n))]
        if f.iommu_group:
            exact += [f"/dev/vfio/{f.iommu_group}", str(self.dev / "vfio" / f.iommu_group)]
        for n in pci.vfio_cdev_names(self.sysfs, f.bdf):
            exact += [f"/dev/vfio/devices/{n}", str(self.dev / "vfio" / "devices" / n)]
        found = self.table.holders(exact)
        seen = {(h.pid, h.path) for h in found}
        found += [h for h in self.table.holders_of_devices(self._numbers(f)) if (h.pid, h.path) not in seen]
        prefixes = self._sysfs_prefixes(f.bdf)
        if prefixes:

            def under(path: str) -> bool:
                for pre in prefixes:
                    if path.startswith(pre):
                        rest = path[len(pre):]
                        # a file of a function behind this one (a bridge's child) is not this function's, and its
                        # driver_override open does not hold it (a reader blocked on the device lock: class docstring)
                        return rest != OVERRIDE and not pci.is_bdf_name(rest.split("/", 1)[0])
                return False

            seen = {(h.pid, h.path) for h in found}
            found += [h for h in self.table.holders_where(under) if (h.pid, h.path) not in seen]
            found += [h for h in self.table.holders_mapping(under) if (h.pid, h.path) not in seen]
        found += self._vfio_fds(f, found, prefixes)
        return sorted(found, key=lambda h: (h.pid, h.path))

    def _vfio_fds(self, f: PciFunction, found: list[Holder], prefixes: tuple[str, ...]) -> list[Holder]:
        """The VFIO device fds that hold `f`: those whose fdinfo names it, and, when `f` is on vfio-pci and open
        (enabled), those the kernel does not attribute, of processes not already listed for `f`."""
        fds = self.table.vfio_device_holders()
        if not fds:
            return []
        mine = {p.rstrip("/") for p in prefixes}
        out = [h for h in fds if h.path in mine]
        if f.driver == C.VFIO_DRIVER and _enable_count(self.sysfs, f.bdf) != "0":
            pids = {h.pid for h in found} | {h.pid for h in out}
            names = self._vfio_nodes()
            # a process holding a group or device node of its own uses those devices: this function's would have
            # listed it above (pids); only one holding none may hold any function, so it is not certain
            out += [replace(h, certain=False) for h in fds
                    if h.path == procfs.VFIO_DEVICE_FD and h.pid not in pids and not names.get(h.pid)]
        return out

    def _vfio_nodes(self) -> dict[int, set[str]]:
        """pid -> the VFIO group nodes (`/dev/vfio/<group>`) and device cdevs (`/dev/vfio/devices/vfioN`) it holds
        open, by path as the host or the root sees them (the container `/dev/vfio/vfio` is not one)."""
        if self._nodes_cache is None:
            dirs = ("/dev/vfio/", str(self.dev / "vfio") + "/")
            self._nodes_cache = {p.pid: {t for t in p.open_paths if _is_vfio_node(t, dirs)}
                                 for p in self.table.processes}
        return self._nodes_cache

    def override_busy(self) -> dict[str, str]:
        """{bdf: why} of the functions some process has the `driver_override` of open: a reader or writer blocked
        in the kernel on the device lock (class docstring). Reading that override would block as long, and leave
        one more process blocked: pci.read_function's `held`."""
        out: dict[str, str] = {}
        for p in self.table.processes:
            for path in p.open_paths:
                head, _, name = path.rpartition("/")
                bdf = head.rpartition("/")[2]
                if name == OVERRIDE and pci.is_bdf_name(bdf):
                    out.setdefault(bdf, f"{pci.OVERRIDE_UNKNOWN}; pid {p.pid} is blocked reading or writing its "
                                        "driver_override")
        return out

    def _numbers(self, f: PciFunction) -> set[tuple[str, int]]:
        """The function's device numbers: every `dev` under its sysfs subtree, and its VFIO group's node."""
        numbers = pci.device_numbers(self.sysfs, f.bdf)
        if f.iommu_group:
            group = pci.char_device_number(self.dev / "vfio" / f.iommu_group)
            if group is not None:
                numbers.add(("c", group))
        return numbers

    def unattributed(self, bdfs: Sequence[str]) -> list[Holder]:
        """Holders of /dev/rbln*|rsd* nodes that none of `bdfs` claims (so nobody can tell whose they are)."""
        claimed = set(self._claimed)
        for b in bdfs:
            claimed.update(pci.device_node_names(self.sysfs, b))
            claimed.update(self._char_nodes().get(b, set()))
        dev_dirs = {"/dev", str(self.dev)}

        def stray(path: str) -> bool:
            head, _, name = path.rpartition("/")
            return head in dev_dirs and name not in claimed and pci.is_device_node_name(name)

        return self.table.holders_where(stray)

    def _sysfs_prefixes(self, bdf: str) -> tuple[str, ...]:
        try:
            real = os.path.realpath(pci.device_dir(self.sysfs, bdf))
            rel = os.path.relpath(real, os.path.realpath(self.sysfs))
        except OSError:
            return ()
        return tuple(dict.fromkeys((real + "/", f"/sys/{rel}/")))

    def _char_nodes(self) -> dict[str, set[str]]:
        """BDF -> names of the rbln*/rsd* character devices whose sysfs device lies under that function."""
        if self._char_cache is not None:
            return self._char_cache
        out: dict[str, set[str]] = {}
        try:
            entries = list(os.scandir(self.dev))
        except OSError:
            entries = []
        for e in entries:
            if not pci.is_device_node_name(e.name):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISCHR(st.st_mode):
                continue
            link = Path(self.sysfs) / "dev" / "char" / f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            real = os.path.realpath(link)
            for part in reversed(Path(real).parts):
                try:
                    bdf = pci.normalize_bdf(part)
                except InvalidInput:
                    continue
                out.setdefault(bdf, set()).add(e.name)
                break
        self._char_cache = out
        return out


def _enable_count(sysfs: Path, bdf: str) -> str | None:
    """The function's `enable` attribute (pci_dev enable_cnt), None when unreadable (then it may be open)."""
    try:
        return (pci.device_dir(sysfs, bdf) / "enable").read_text().strip()
    except OSError:
        return None


def _is_vfio_node(path: str, dirs: tuple[str, ...]) -> bool:
    """Whether an open path is a VFIO group node (`<dir><group number>`) or device cdev (`<dir>devices/vfioN`)."""
    for d in dirs:
        if path.startswith(d):
            rest = path[len(d):]
            return rest.isdigit() or (rest.startswith("devices/vfio") and rest[len("devices/vfio"):].isdigit())
    return False
