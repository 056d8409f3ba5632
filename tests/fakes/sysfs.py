"""The one simulated host: a whole host tree in a temp dir plus the kernel effects of driver-binding writes.

SimKernel builds everything host code reads under its root: sys/ (PCI functions with their config header,
drivers, IOMMU groups and units, modules, ACPI tables, DMI), proc/ (cpuinfo, cmdline, osrelease, processes and
their open files), dev/ (rbln*, vfio/*, kvm), run/ and lib/modules/<release>/modules.builtin.
`npu_node()` is a bare NPU host for the binder; `build_host(root, HostSpec)` writes a described
host (CPU vendor, VM or bare metal, IOMMU shape, modules, NPUs, other functions, processes) and the
scenario functions at the end name the shapes preflight and vfio tests share.

A temp dir is not sysfs: writing a file there runs no kernel callback. So rblnctl's VfioBinder
writes through a `SysfsWriter` seam, and `SimKernel.writer` is a writer that checks the path and
the value the way the PCI core does, then performs the effect on the tree:

- Any write of zero bytes changes nothing (the kernel never calls the attribute's store for it).
- `devices/<bdf>/driver_override`: sets (or, with a newline, clears) the override.
- `drivers/<d>/unbind`: ENODEV unless the function is bound to <d>; else detaches it. An unbind from vfio-pci
  while a process holds the function's `dev/vfio/<group>` open blocks in the kernel until it lets go: here a
  bounded write raises WriteStillBlocked at once (naming the blocked writer, a process under proc/ with a `stat`)
  and an unbounded one fails the test (it would hang). While it waits the function has no `driver` link (the
  kernel removes it before the driver's remove runs). Until the unbind finishes, the function's `driver_override`
  is a FIFO with no writer: reading it blocks, as the kernel's read waits for the device lock the unbind holds
  (torvalds/linux v6.1 drivers/pci/pci-sysfs.c driver_override_show()); `release_readers()` lets a test's leftover
  readers go.
- `drivers/<d>/bind`: ENODEV for an unknown function or one <d> does not match (an override names
  another driver, or <d> has no matching ID), even a bound one; else EBUSY when it already has a driver; else
  probes <d>.
- `bus/pci/drivers_probe`: ENODEV for an unknown function; otherwise probes the override driver, or
  the first registered driver that claims the IDs; like the kernel it succeeds even if nothing binds.
- Any other path: EACCES (read-only attribute) or ENOENT (no such file), so typos surface.

Effects a bind has, as on a real host: the `driver` link and `drivers/<d>/<bdf>` link appear;
`rebellions` creates `<bdf>/rbln/rblnN` (class device) and `dev/rblnN`; vfio-pci creates
`dev/vfio/<group>` when the first function of the group binds (the kernel creates the group's
character device when the first member registers with vfio) and removes it when the last leaves;
each vfio-pci function also gets `<bdf>/vfio-dev/vfioN` and, with `vfio_cdev` (CONFIG_VFIO_DEVICE_CDEV),
`dev/vfio/devices/vfioN`; vfio-pci refuses a function without an IOMMU group (EINVAL). Detaching undoes each
of these.

Modules: a loadable module that is loaded has `sys/module/<m>/initstate`; a built-in one is listed
in modules.builtin (`set_builtin_modules`) and has the directory without initstate.

Failure injection: `inject(op, bdf, errno)` makes one kind of write fail (op: override, unbind,
bind, probe); `refuse_probe(driver, bdf)` makes a driver's probe fail (bind write -> ENODEV,
drivers_probe -> silently no driver); `missing_modules` makes `modprobe` fail; `vfio_nodes=False`
stops /dev/vfio/<group> from appearing.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from rblnctl.errors import HostError
from rblnctl.host.vfio.writer import WriteStillBlocked

INTEL_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss "
               "ht syscall nx pdpe1gb rdtscp lm constant_tsc vmx smx est tm2 ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic")
AMD_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
             "syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good svm extapic cr8_legacy abm sse4a")
HOST_DRIVER = "rebellions"
VFIO = "vfio-pci"
# module name -> (drivers it registers, extra modules it pulls in)
MODULES = {
    "vfio_pci": ((VFIO,), ("vfio", "vfio_pci_core", "vfio_iommu_type1")),
    "rebellions": ((HOST_DRIVER,), ()),
}


@dataclass
class SimDevice:
    bdf: str
    vendor: int
    device: int
    class_code: int
    group: str | None
    numa_node: int
    driver: str | None = None
    override: str | None = None
    minor: int = 0


@dataclass
class SimDriver:
    name: str
    claims: tuple[tuple[int, int | None], ...] = ()  # (vendor, device or None for any)
    module: str | None = None


@dataclass
class SimKernel:
    """A host tree (sysfs, procfs, /dev, /run, /lib/modules) under `root`, with the PCI core's bind/unbind behaviour."""

    root: Path
    vfio_nodes: bool = True
    vfio_cdev: bool = True  # CONFIG_VFIO_DEVICE_CDEV: a vfio-pci bind also creates dev/vfio/devices/vfioN
    release: str = "6.8.0-45-generic"
    builtin: set[str] = field(default_factory=set)  # built-in module names (modules.builtin)
    devices: dict[str, SimDevice] = field(default_factory=dict)
    drivers: dict[str, SimDriver] = field(default_factory=dict)
    writes: list[tuple[str, str]] = field(default_factory=list)  # (path relative to root, value), in order
    blocked: list[str] = field(default_factory=list)  # functions whose unbind a VFIO user blocked
    blocked_writers: dict[str, int] = field(default_factory=dict)  # bdf -> pid of the process waiting in the unbind
    missing_modules: set[str] = field(default_factory=set)
    _failures: dict[tuple[str, str], tuple[int, int | None]] = field(default_factory=dict)
    _refused: set[tuple[str, str]] = field(default_factory=set)
    _next_group: int = 10
    _next_minor: int = 0
    _next_vfio_index: int = 0

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.sys = self.root / "sys"
        self.proc = self.root / "proc"
        self.dev = self.root / "dev"
        self.run = self.root / "run"
        for d in (self.pci_root, self.sys / "bus/pci/devices", self.sys / "bus/pci/drivers",
                  self.sys / "kernel/iommu_groups", self.sys / "class/iommu", self.sys / "module", self.proc,
                  self.dev, self.run):
            d.mkdir(parents=True, exist_ok=True)
        for f in ("drivers_probe", "rescan", "drivers_autoprobe"):
            (self.sys / "bus/pci" / f).touch()
        _write(self.proc / "sys/kernel/osrelease", self.release + "\n")

    # ---- building the tree ----

    @property
    def pci_root(self) -> Path:
        return self.sys / "devices" / "pci0000:00"

    def add_driver(self, name: str, *, claims: tuple[tuple[int, int | None], ...] = (),
                   module: str | None = None) -> None:
        """Register a PCI driver (creates `drivers/<name>/{bind,unbind,new_id,remove_id}` and its module)."""
        if name == HOST_DRIVER and not claims:
            claims = ((0x1EFF, None),)
        self.drivers[name] = SimDriver(name=name, claims=claims, module=module or name.replace("-", "_"))
        d = self.sys / "bus/pci/drivers" / name
        d.mkdir(parents=True, exist_ok=True)
        for f in ("bind", "unbind", "new_id", "remove_id", "uevent"):
            (d / f).touch()
        self._module_dir(self.drivers[name].module)

    def remove_driver(self, name: str) -> None:
        """Unregister a driver: its functions lose it, its directory and module go."""
        for dev in self.devices.values():
            if dev.driver == name:
                self._detach(dev)
        drv = self.drivers.pop(name)
        shutil.rmtree(self.sys / "bus/pci/drivers" / name)
        shutil.rmtree(self.sys / "module" / drv.module, ignore_errors=True)

    def load_module(self, module: str) -> None:
        """What loading a kernel module does here: vfio_pci registers vfio-pci (and /dev/vfio/vfio)."""
        module = module.replace("-", "_")
        drivers, extra = MODULES.get(module, ((), ()))
        for m in (module, *extra):
            self._module_dir(m)
        for name in drivers:
            if name not in self.drivers:
                self.add_driver(name, module=module)
        if module == "vfio_pci":
            (self.dev / "vfio").mkdir(exist_ok=True)
            (self.dev / "vfio" / "vfio").touch()

    def unload_module(self, module: str) -> None:
        """Remove a module and the drivers it registered."""
        module = module.replace("-", "_")
        for name, drv in list(self.drivers.items()):
            if drv.module == module:
                self.remove_driver(name)
        shutil.rmtree(self.sys / "module" / module, ignore_errors=True)

    def modprobe(self, module: str) -> None:
        """Stand-in for the host's modprobe (VfioBinder.load_module): fails for `missing_modules`."""
        if module.replace("-", "_") in {m.replace("-", "_") for m in self.missing_modules}:
            raise HostError(f"modprobe {module} exited 1: modprobe: FATAL: Module {module} not found")
        self.load_module(module)

    def mark_loaded(self, *modules: str) -> None:
        """Only the module side of loading (`sys/module/<m>/initstate`): no drivers, no /dev/vfio/vfio."""
        for m in modules:
            self._module_dir(m.replace("-", "_"))

    def set_builtin_modules(self, lines: tuple[str, ...] | list[str] | None) -> None:
        """Write `lib/modules/<release>/modules.builtin` (None: no such file, as on a host without it)."""
        path = self.root / "lib/modules" / self.release / "modules.builtin"
        if lines is None:
            path.unlink(missing_ok=True)
            self.builtin = set()
            return
        _write(path, "\n".join(lines) + "\n")
        self.builtin = {os.path.basename(x)[: -len(".ko")].replace("-", "_") for x in lines if x.endswith(".ko")}

    def _module_dir(self, module: str) -> None:
        d = self.sys / "module" / module
        d.mkdir(parents=True, exist_ok=True)
        if module not in self.builtin:
            (d / "initstate").write_text("live\n")

    # ---- building the rest of the host ----

    def set_cpu(self, vendor_id: str = "GenuineIntel", *, hypervisor: bool = False, flags: str | None = None,
                cpus: int = 2) -> None:
        """Write `proc/cpuinfo`: `cpus` blocks with vendor_id and a flags line (`flags` "" : no flags line)."""
        if flags is None:
            flags = INTEL_FLAGS if vendor_id == "GenuineIntel" else AMD_FLAGS
            flags += " hypervisor" if hypervisor else ""
        block = "processor\t: {n}\nvendor_id\t: {v}\ncpu family\t: 6\nmodel name\t: test CPU\n"
        block += "flags\t\t: {f}\n\n" if flags else "\n"
        _write(self.proc / "cpuinfo", "".join(block.format(n=n, v=vendor_id, f=flags) for n in range(cpus)))

    def set_arm64_cpu(self, *, cpus: int = 2) -> None:
        """Write an arm64 `proc/cpuinfo`: no vendor_id and no flags line, `CPU implementer` and `Features` instead."""
        block = ("processor\t: {n}\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n"
                 "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\n"
                 "CPU revision\t: 1\n\n")
        _write(self.proc / "cpuinfo", "".join(block.format(n=n) for n in range(cpus)))

    def set_arch(self, machine: str) -> None:
        """Write `proc/sys/kernel/arch` (`uname -m`; Linux >= 6.1)."""
        _write(self.proc / "sys/kernel/arch", machine + "\n")

    def add_dt_node(self, path: str, compatible: str, *, status: str | None = None) -> None:
        """Add a device-tree node under `sys/firmware/devicetree/base` with a NUL-terminated `compatible`."""
        node = self.sys / "firmware/devicetree/base" / path
        node.mkdir(parents=True, exist_ok=True)
        (node / "compatible").write_bytes(compatible.encode() + b"\0")
        if status is not None:
            (node / "status").write_bytes(status.encode() + b"\0")

    def set_cmdline(self, cmdline: str) -> None:
        """Write `proc/cmdline`."""
        _write(self.proc / "cmdline", cmdline + "\n")

    def set_dmi(self, vendor: str, product: str) -> None:
        """Write `sys/class/dmi/id/{sys_vendor,product_name}`."""
        _write(self.sys / "class/dmi/id/sys_vendor", vendor + "\n")
        _write(self.sys / "class/dmi/id/product_name", product + "\n")

    def add_acpi_tables(self, *names: str) -> None:
        """Add `sys/firmware/acpi/tables/<name>` (DMAR: Intel VT-d, IVRS: AMD-Vi, VIOT: virtio-iommu)."""
        for t in names:
            _write(self.sys / "firmware/acpi/tables" / t, "table")

    def add_iommu_units(self, *names: str) -> None:
        """Add IOMMU hardware units, `sys/class/iommu/<name>` (dmar0, ivhd0, ...)."""
        for u in names:
            (self.sys / "class/iommu" / u).mkdir(parents=True, exist_ok=True)

    def add_iommu_group(self, group: str | int) -> None:
        """Add an IOMMU group with no function in this tree (another device's)."""
        (self.sys / "kernel/iommu_groups" / str(group) / "devices").mkdir(parents=True, exist_ok=True)

    def add_dev(self, *names: str) -> None:
        """Create device files under dev/ (`kvm`, `vfio/vfio`)."""
        for n in names:
            _write(self.dev / n, "")

    def add_pci_function(self, bdf: str, *, vendor: int = 0x1EFF, device: int = 0x1220, class_code: int = 0x120000,
                         driver: str | None = HOST_DRIVER, iommu_group: int | str | None = -1,
                         numa_node: int = 0) -> SimDevice:
        """Add a function (iommu_group -1: a fresh group of its own; None: no group) and bind `driver`."""
        if iommu_group == -1:
            iommu_group = self._next_group
            self._next_group += 1
        dev = SimDevice(bdf=bdf, vendor=vendor, device=device, class_code=class_code,
                        group=None if iommu_group is None else str(iommu_group), numa_node=numa_node)
        self.devices[bdf] = dev
        d = self.pci_root / bdf
        d.mkdir(parents=True)
        (d / "vendor").write_text(f"0x{vendor:04x}\n")
        (d / "device").write_text(f"0x{device:04x}\n")
        (d / "class").write_text(f"0x{class_code:06x}\n")
        (d / "numa_node").write_text(f"{numa_node}\n")
        (d / "driver_override").write_text("(null)\n")
        (d / "config").write_bytes(config_space(vendor, device, class_code))
        for f in ("resource0", "remove", "reset", "uevent"):
            (d / f).touch()
        os.symlink(f"../../../devices/pci0000:00/{bdf}", self.sys / "bus/pci/devices" / bdf)
        if dev.group is not None:
            self._link_group(dev)
        if vendor == 0x1EFF:
            self._next_minor += 1
            dev.minor = self._next_minor - 1
        if driver is not None:
            if driver not in self.drivers:
                self.add_driver(driver, claims=((vendor, device),) if driver != HOST_DRIVER else ())
                if driver == VFIO:
                    self.load_module("vfio_pci")
            self._attach(dev, driver)
        return dev

    def remove_pci_function(self, bdf: str) -> None:
        """Hot-unplug a function (what `echo 1 > remove` or a surprise removal does): driver detached, gone."""
        dev = self.devices[bdf]
        if dev.driver is not None:
            self._detach(dev)
        del self.devices[bdf]
        if dev.group is not None:
            (self.sys / "kernel/iommu_groups" / dev.group / "devices" / bdf).unlink(missing_ok=True)
        (self.sys / "bus/pci/devices" / bdf).unlink()
        shutil.rmtree(self.pci_root / bdf)

    def set_iommu(self, enabled: bool) -> None:
        """Turn the IOMMU off (no groups at all) or back on (each function's group restored)."""
        groups = self.sys / "kernel/iommu_groups"
        if not enabled:
            shutil.rmtree(groups)
            groups.mkdir()
            for dev in self.devices.values():
                (self.pci_root / dev.bdf / "iommu_group").unlink(missing_ok=True)
            return
        for dev in self.devices.values():
            if dev.group is not None and not (self.pci_root / dev.bdf / "iommu_group").is_symlink():
                self._link_group(dev)

    def add_process(self, pid: int, comm: str, open_paths: tuple[str, ...] | list[str] = (),
                    cmdline: list[str] | None = None, *, mapped: tuple[str, ...] | list[str] = (),
                    vfio_devices: tuple[str | None, ...] | list[str | None] = ()) -> None:
        """Add `proc/<pid>` with comm, cmdline and one `fd/<n>` link per open path (targets as the host sees them), a
        `maps` with a shared mapping of each `mapped` path (a BAR mapped through sysfs resourceN) among a library's,
        and per `vfio_devices` entry a VFIO device fd (`anon_inode:[vfio-device]`) whose `fdinfo` names that sysfs
        path as Linux 6.18+ does (`vfio-device-syspath:`), or only pos/flags/mnt_id/ino as 6.1 does (None)."""
        p = self.proc / str(pid)
        (p / "fd").mkdir(parents=True)
        (p / "fdinfo").mkdir()
        (p / "comm").write_text(comm + "\n")
        argv = [comm] if cmdline is None else cmdline  # [] is a kernel thread: empty cmdline
        (p / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
        info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t9633\n"  # a VFIO device fd's on 6.1 (the kernel tier)
        fds = [(t, None) for t in ["/dev/null", *open_paths]] + [("anon_inode:[vfio-device]", d) for d in vfio_devices]
        for i, (target, syspath) in enumerate(fds):
            os.symlink(target, p / "fd" / str(i))
            (p / "fdinfo" / str(i)).write_text(info + (f"vfio-device-syspath: {syspath}\n" if syspath else ""))
        lines = ["55d0c0a00000-55d0c0a21000 r-xp 00000000 fd:01 1835 /usr/lib/x86_64-linux-gnu/libc.so.6"]
        lines += [f"7fbe402f{i:x}000-7fbe402f{i + 1:x}000 rw-s fe800000 00:14 {11426 + i:<26}{path}"
                  for i, path in enumerate(mapped)]
        (p / "maps").write_text("".join(line + "\n" for line in lines))

    def exit_process(self, pid: int) -> None:
        """Process `pid` exits: its fds close, and an unbind a VFIO user blocked (`blocked`) completes once no user
        of the function's group is left, as the kernel's does (the function ends without a driver)."""
        shutil.rmtree(self.proc / str(pid))
        for bdf in list(self.blocked):
            dev = self.devices.get(bdf)
            if dev is None or dev.group is None or self._vfio_user(dev.group):
                continue
            self.blocked.remove(bdf)
            if dev.driver == VFIO:
                self._detach(dev)
            self._unblock_override(dev)
            writer = self.blocked_writers.pop(bdf, None)
            if writer is not None:
                shutil.rmtree(self.proc / str(writer), ignore_errors=True)  # its write returned: it exits

    def release_readers(self) -> None:
        """Let every reader still blocked on a blocked function's driver_override go (it reads end of file): the
        readers a bounded read gave up on, which the kernel would let go once the unbind finishes."""
        for bdf in self.blocked:
            _release(self.pci_root / bdf / "driver_override", b"")

    def _block_override(self, dev: SimDevice) -> None:
        path = self.pci_root / dev.bdf / "driver_override"
        if not stat.S_ISFIFO(os.lstat(path).st_mode):
            path.unlink()
            os.mkfifo(path)

    def _unblock_override(self, dev: SimDevice) -> None:
        path = self.pci_root / dev.bdf / "driver_override"
        text = f"{dev.override or '(null)'}\n"
        if stat.S_ISFIFO(os.lstat(path).st_mode):
            _release(path, text.encode())
            path.unlink()
        path.write_text(text)

    def set_override(self, bdf: str, driver: str | None) -> None:
        """Set driver_override directly (what a crashed tool leaves), without the write log or failure injection."""
        dev = self.devices[bdf]
        dev.override = driver
        (self.pci_root / bdf / "driver_override").write_text(f"{driver or '(null)'}\n")

    def inject(self, op: str, bdf: str, err: int = errno.EBUSY, *, times: int | None = None) -> None:
        """Make writes of kind `op` (override, unbind, bind, probe) for `bdf` fail with `err` (`times` None: always)."""
        assert op in ("override", "unbind", "bind", "probe"), op
        self._failures[(op, bdf)] = (err, times)

    def refuse_probe(self, driver: str, bdf: str) -> None:
        """Make `driver`'s probe of `bdf` fail: its bind write returns ENODEV, drivers_probe binds nothing."""
        self._refused.add((driver, bdf))

    def allow_probe(self, driver: str, bdf: str) -> None:
        self._refused.discard((driver, bdf))

    # ---- observing ----

    @property
    def writer(self) -> "SimWriter":
        return SimWriter(self)

    def driver_of(self, bdf: str) -> str | None:
        link = self.pci_root / bdf / "driver"
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None

    def override_of(self, bdf: str) -> str | None:
        if bdf in self.blocked:  # the file would block: what the kernel holds
            return self.devices[bdf].override
        text = (self.pci_root / bdf / "driver_override").read_text().strip()
        return None if text == "(null)" else text

    def vfio_node(self, group: str | int) -> Path:
        return self.dev / "vfio" / str(group)

    def checksum(self) -> str:
        """sha256 over every path, kind, link target and file content under root (excluding nothing)."""
        h = hashlib.sha256()
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                p = os.path.join(dirpath, name)
                rel = os.path.relpath(p, self.root)
                if os.path.islink(p):
                    h.update(f"L {rel} -> {os.readlink(p)}\n".encode())
                elif stat.S_ISFIFO(os.lstat(p).st_mode):
                    h.update(f"P {rel}\n".encode())
                elif os.path.isdir(p):
                    h.update(f"D {rel}\n".encode())
                else:
                    st = os.stat(p)
                    h.update(f"F {rel} {st.st_mode:o}\n".encode())
                    with open(p, "rb") as f:
                        h.update(f.read())
        return h.hexdigest()

    # ---- the kernel side of a write ----

    def handle_write(self, path: Path, value: str, bound_s: float | None = None) -> None:
        """Apply one write as the kernel would, or raise OSError as the kernel would refuse it."""
        given = Path(path)
        self.writes.append((os.path.relpath(given, self.root), value))
        if not given.exists():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(given))
        if value == "":
            return  # write(2) of nothing: sysfs never calls the store
        real = Path(os.path.realpath(given))
        try:
            rel = real.relative_to(os.path.realpath(self.sys))
        except ValueError:
            raise PermissionError(errno.EACCES, "write outside the simulated sysfs", str(given)) from None
        parts = rel.parts
        text = value.split("\n", 1)[0].rstrip("\0")
        if parts[:2] == ("devices", "pci0000:00") and len(parts) == 4 and parts[3] == "driver_override":
            dev = self.devices[parts[2]]
            self._maybe_fail("override", dev.bdf)
            dev.override = text or None
            (self.pci_root / dev.bdf / "driver_override").write_text(f"{dev.override or '(null)'}\n")
            return
        if parts[:3] == ("bus", "pci", "drivers") and len(parts) == 5 and parts[4] in ("bind", "unbind"):
            drv, op = parts[3], parts[4]
            dev = self.devices.get(text)
            if dev is None:
                raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
            self._maybe_fail(op, dev.bdf)
            if op == "unbind":
                if dev.driver != drv:
                    raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
                if drv == VFIO and dev.group is not None and self._vfio_user(dev.group):
                    # vfio_unregister_group_dev(): "blocked until released by user"
                    assert bound_s is not None, f"unbind of {dev.bdf} would block forever: a VFIO user holds it"
                    self.blocked.append(dev.bdf)
                    self._block_override(dev)
                    # the kernel drops the driver links before the driver's remove runs (drivers/base/dd.c
                    # __device_release_driver(): driver_sysfs_remove() before device_remove()): while the unbind
                    # waits the function shows no driver
                    (self.pci_root / dev.bdf / "driver").unlink()
                    (self.sys / "bus/pci/drivers" / drv / dev.bdf).unlink()
                    pid = 30000 + len(self.writes)
                    self.add_process(pid, "rblnctl")
                    _write(self.proc / str(pid) / "stat", f"{pid} (rblnctl) D 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 "
                           f"0 0 20 0 1 0 {pid * 7} 0 0\n")
                    self.blocked_writers[dev.bdf] = pid
                    raise WriteStillBlocked(f"still blocked in the kernel after {bound_s:g} s", pid=pid)
                self._detach(dev)
                return
            # drivers/base/bus.c bind_store: no match is ENODEV before a bound function is EBUSY (dd.c
            # __driver_probe_device); tests/kernel/test_agreement_kernel.py holds both machines to it
            if not self._matches(drv, dev):
                raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
            if dev.driver is not None:
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
            err = self._probe_error(drv, dev)
            if err:
                raise OSError(err, os.strerror(err))
            self._attach(dev, drv)
            return
        if rel == Path("bus/pci/drivers_probe"):
            dev = self.devices.get(text)
            if dev is None:
                raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
            self._maybe_fail("probe", dev.bdf)
            if dev.driver is not None:
                return
            if dev.override:
                candidates = [dev.override] if dev.override in self.drivers else []
            else:
                candidates = [d for d in self.drivers if self._matches(d, dev)]
            for drv in candidates:
                if not self._probe_error(drv, dev):
                    self._attach(dev, drv)
                    return
            return
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(given))

    def _vfio_user(self, group: str) -> bool:
        """Whether a process under proc/ has the group's node open (by the path its fd link names)."""
        wanted = {f"/dev/vfio/{group}", str(self.vfio_node(group))}
        for fd in self.proc.glob("[0-9]*/fd/*"):
            if os.readlink(fd) in wanted:
                return True
        return False

    def _maybe_fail(self, op: str, bdf: str) -> None:
        hit = self._failures.get((op, bdf))
        if not hit:
            return
        err, times = hit
        if times is not None:
            if times <= 1:
                del self._failures[(op, bdf)]
            else:
                self._failures[(op, bdf)] = (err, times - 1)
        raise OSError(err, os.strerror(err))

    def _matches(self, drv: str, dev: SimDevice) -> bool:
        if dev.override:
            return dev.override == drv
        d = self.drivers.get(drv)
        return bool(d) and any(v == dev.vendor and (p is None or p == dev.device) for v, p in d.claims)

    def _probe_error(self, drv: str, dev: SimDevice) -> int:
        if (drv, dev.bdf) in self._refused:
            return errno.ENODEV
        if drv == VFIO and dev.group is None:
            return errno.EINVAL  # vfio-pci: "No IOMMU group"
        return 0

    def _link_group(self, dev: SimDevice) -> None:
        g = self.sys / "kernel/iommu_groups" / dev.group / "devices"
        g.mkdir(parents=True, exist_ok=True)
        link = g / dev.bdf
        if not link.is_symlink():
            os.symlink(f"../../../../devices/pci0000:00/{dev.bdf}", link)
        os.symlink(f"../../../kernel/iommu_groups/{dev.group}", self.pci_root / dev.bdf / "iommu_group")

    def _attach(self, dev: SimDevice, drv: str) -> None:
        d = self.pci_root / dev.bdf
        os.symlink(f"../../../bus/pci/drivers/{drv}", d / "driver")
        os.symlink(f"../../../../devices/pci0000:00/{dev.bdf}", self.sys / "bus/pci/drivers" / drv / dev.bdf)
        dev.driver = drv
        if drv == HOST_DRIVER:
            node = d / "rbln" / f"rbln{dev.minor}"
            node.mkdir(parents=True)
            (node / "dev").write_text(f"240:{dev.minor}\n")
            (self.dev / f"rbln{dev.minor}").touch()
        if drv == VFIO and self.vfio_nodes and dev.group is not None:
            (self.dev / "vfio").mkdir(exist_ok=True)
            self.vfio_node(dev.group).touch()
        if drv == VFIO and dev.group is not None:
            # vfio_main.c: every registered vfio_device is `vfio-dev/vfioN` under its parent, N from an IDA
            name = f"vfio{self._next_vfio_index}"
            self._next_vfio_index += 1
            _write(d / "vfio-dev" / name / "dev", f"511:{name[4:]}\n")
            if self.vfio_cdev:
                _write(self.dev / "vfio" / "devices" / name, "")

    def _detach(self, dev: SimDevice) -> None:
        d = self.pci_root / dev.bdf
        drv = dev.driver
        (d / "driver").unlink(missing_ok=True)  # gone already when an unbind was blocked
        (self.sys / "bus/pci/drivers" / drv / dev.bdf).unlink(missing_ok=True)
        dev.driver = None
        if drv == HOST_DRIVER:
            shutil.rmtree(d / "rbln", ignore_errors=True)
            (self.dev / f"rbln{dev.minor}").unlink(missing_ok=True)
        if drv == VFIO and dev.group is not None:
            if not any(o.group == dev.group and o.driver == VFIO for o in self.devices.values()):
                self.vfio_node(dev.group).unlink(missing_ok=True)
            for cdev in (d / "vfio-dev").glob("vfio*"):
                (self.dev / "vfio" / "devices" / cdev.name).unlink(missing_ok=True)
            shutil.rmtree(d / "vfio-dev", ignore_errors=True)


def _release(fifo: Path, data: bytes) -> None:
    """Open `fifo` for writing if a reader waits on it (its open returns), hand it `data`, close (end of file)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader; ENOENT: gone
        return
    try:
        if data:
            os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


class SimWriter:
    """The simulator's SysfsWriter: performs the write and its kernel effect (never touches anything outside root)."""

    def __init__(self, kernel: SimKernel) -> None:
        self.kernel = kernel

    def write(self, path: Path, value: str, *, bound_s: float | None = None) -> None:
        self.kernel.handle_write(path, value, bound_s)


class HostWriteGuard:
    """A writer that fails any test that would write through the real writer (it must inject the simulator's)."""

    def write(self, path: Path, value: str, *, bound_s: float | None = None) -> None:
        raise AssertionError(f"test tried a real sysfs write: {value!r} > {path}")


def guard_real_host(monkeypatch) -> None:
    """Make the real writer and the real modprobe unreachable for the rest of a test."""
    import rblnctl.host.system as system
    import rblnctl.host.vfio.writer as writer

    monkeypatch.setattr(writer, "default_writer", lambda: HostWriteGuard())

    def no_modprobe(module: str, **_: object) -> None:
        raise AssertionError(f"test tried to run the real modprobe {module}")

    monkeypatch.setattr(system, "modprobe", no_modprobe)


def npu_node(root: Path, count: int = 2, *, shared_group: bool = False) -> SimKernel:
    """A host with `count` CA22 PFs on rebellions, each in its own IOMMU group (or one shared), vfio-pci loaded."""
    k = SimKernel(root)
    k.load_module("vfio_pci")
    for i in range(count):
        k.add_pci_function(f"0000:{0x3b + i:02x}:00.0", iommu_group=7 if shared_group else 20 + i, numa_node=i % 2)
    return k


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def config_space(vendor: int, device: int, class_code: int) -> bytes:
    """The 64 bytes of standard header an unprivileged read of `config` returns: IDs at 0x00, class code at
    0x09..0x0b, header type at 0x0e (1 for a PCI-to-PCI bridge, class 0x0604 or 0x0609; 0 for everything else,
    host and ISA bridges included)."""
    header = bytearray(64)
    header[0:4] = vendor.to_bytes(2, "little") + device.to_bytes(2, "little")
    header[0x09:0x0C] = class_code.to_bytes(3, "little")
    header[0x0E] = 1 if class_code >> 8 in (0x0604, 0x0609) else 0
    return bytes(header)


# --- whole hosts, described ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Npu:
    """One RBLN PCI function (CA22 PF by default); `group` None: no IOMMU group."""

    bdf: str
    device: int = 0x1220
    driver: str | None = HOST_DRIVER
    group: str | None = "42"
    override: str | None = None  # driver_override left behind (set after the driver bound)


@dataclass(frozen=True)
class PciDev:
    """Any other PCI function (a bridge, a NIC in a shared IOMMU group)."""

    bdf: str
    vendor: int
    device: int
    class_code: int
    group: str | None
    driver: str | None = None


@dataclass(frozen=True)
class Proc:
    """A process and the paths its fds point at."""

    pid: int
    comm: str
    cmdline: str
    paths: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class HostSpec:
    """A host as `preflight --local` and `vfio` see it; build_host() writes it."""

    cpu_vendor: str = "GenuineIntel"  # "ARM": an arm64 cpuinfo (no vendor_id)
    arch: str | None = None  # proc/sys/kernel/arch (None: not written, as on kernels before 6.1)
    dt_nodes: tuple[tuple[str, str, str | None], ...] = ()  # device-tree (path, compatible, status)
    hypervisor: bool = False
    cpu_flags: bool = True  # False: /proc/cpuinfo has no flags line (some architectures)
    dmi: tuple[str, str] | None = ("Dell Inc.", "PowerEdge R760xa")
    acpi_tables: tuple[str, ...] = ("APIC", "DMAR", "DSDT", "FACP", "MCFG")
    iommu_units: tuple[str, ...] = ("dmar0", "dmar1")
    extra_groups: tuple[str, ...] = ("0", "1", "2")  # IOMMU groups of other devices
    cmdline: str | None = "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=1b2c ro quiet intel_iommu=on iommu=pt"
    release: str = "6.8.0-45-generic"
    loaded: tuple[str, ...] = ("vfio", "vfio_pci", "vfio_pci_core", "vfio_iommu_type1", "kvm", "kvm_intel")
    builtin: tuple[str, ...] = ("kernel/drivers/usb/host/xhci-hcd.ko",)  # lines of modules.builtin
    write_builtin: bool = True
    dev_vfio: bool = True
    dev_kvm: bool = True
    npus: tuple[Npu, ...] = ()
    others: tuple[PciDev, ...] = ()
    procs: tuple[Proc, ...] = (Proc(1, "systemd", "/sbin/init", ("/dev/null",)),)


def build_host(root: Path, spec: HostSpec) -> SimKernel:
    """Write the host described by `spec` under root; return its SimKernel (whose writer binds and unbinds)."""
    k = SimKernel(Path(root), release=spec.release)
    if spec.cpu_vendor == "ARM":
        k.set_arm64_cpu()
    else:
        k.set_cpu(spec.cpu_vendor, hypervisor=spec.hypervisor, flags=None if spec.cpu_flags else "")
    if spec.arch:
        k.set_arch(spec.arch)
    for path, compatible, status in spec.dt_nodes:
        k.add_dt_node(path, compatible, status=status)
    if spec.cmdline is not None:
        k.set_cmdline(spec.cmdline)
    for p in spec.procs:
        k.add_process(p.pid, p.comm, p.paths, cmdline=p.cmdline.split())
    if spec.dmi:
        k.set_dmi(*spec.dmi)
    k.add_acpi_tables(*spec.acpi_tables)
    k.add_iommu_units(*spec.iommu_units)
    for g in spec.extra_groups:
        k.add_iommu_group(g)
    k.set_builtin_modules(spec.builtin if spec.write_builtin else None)
    k.mark_loaded(*spec.loaded)
    # Drivers the modules there register (vfio_pci: vfio-pci, rebellions: rebellions), without loading the
    # rest of VFIO; a function's driver counts as there too (its module loaded unless listed as built in).
    present = {*spec.loaded, *k.builtin}
    if any(f.driver == VFIO for f in (*spec.npus, *spec.others)):
        present.add("vfio_pci")
    for module, (drivers, _) in MODULES.items():
        if module in present:
            for name in drivers:
                k.add_driver(name, module=module)
    # A host bridge and a NIC, so the NPU scan has other vendors to skip.
    groups = list(spec.extra_groups)
    k.add_pci_function("0000:00:00.0", vendor=0x8086, device=0x09A2, class_code=0x060000, driver=None,
                       iommu_group=groups[0] if groups else None)
    k.add_pci_function("0000:17:00.0", vendor=0x15B3, device=0x101D, class_code=0x020000, driver="mlx5_core",
                       iommu_group=groups[1] if len(groups) > 1 else None)
    for o in spec.others:
        k.add_pci_function(o.bdf, vendor=o.vendor, device=o.device, class_code=o.class_code, driver=o.driver,
                           iommu_group=o.group)
    for n in spec.npus:
        k.add_pci_function(n.bdf, device=n.device, driver=n.driver, iommu_group=n.group)
        if n.override is not None:
            k.set_override(n.bdf, n.override)
    if spec.dev_vfio:
        k.add_dev("vfio/vfio")
    if spec.dev_kvm:
        k.add_dev("kvm")
    return k


# -- scenarios ------------------------------------------------------------------------------------

TWO_NPUS_VFIO = (Npu("0000:3b:00.0", driver=VFIO, group="42"), Npu("0000:5e:00.0", driver=VFIO, group="43"))
TWO_NPUS_HOST = (Npu("0000:3b:00.0", driver=HOST_DRIVER, group="42"),
                 Npu("0000:5e:00.0", driver=HOST_DRIVER, group="43"))
PCIE_BRIDGE = PciDev("0000:3a:00.0", 0x10B5, 0x8747, 0x060400, "42", driver="pcieport")  # a switch port
NIC_IN_GROUP_42 = PciDev("0000:3b:00.1", 0x8086, 0x1572, 0x020000, "42", driver="i40e")


def intel_bare_metal(**changes) -> HostSpec:
    """Intel server, VT-d on, intel_iommu=on iommu=pt, VFIO loaded, two CA22 NPUs on vfio-pci: all PASS."""
    return replace(HostSpec(npus=TWO_NPUS_VFIO), **changes)


def amd_iommu_off(**changes) -> HostSpec:
    """AMD server whose firmware has IVRS but whose kernel runs with amd_iommu=off: no groups anywhere."""
    spec = HostSpec(
        cpu_vendor="AuthenticAMD", dmi=("Supermicro", "AS-4125GS-TNRT"),
        acpi_tables=("APIC", "DSDT", "FACP", "IVRS", "MCFG"), iommu_units=(), extra_groups=(),
        cmdline="BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=1b2c ro amd_iommu=off",
        loaded=("vfio", "vfio_pci", "vfio_iommu_type1", "kvm", "kvm_amd"),
        npus=(Npu("0000:c1:00.0", driver=HOST_DRIVER, group=None),),
    )
    return replace(spec, **changes)


def vm_without_viommu(**changes) -> HostSpec:
    """A KVM guest used as a worker, NPU passed through to it, but the VM has no vIOMMU."""
    spec = HostSpec(
        hypervisor=True, dmi=("QEMU", "Standard PC (Q35 + ICH9, 2009)"),
        acpi_tables=("APIC", "DSDT", "FACP", "MCFG"), iommu_units=(), extra_groups=(),
        cmdline="BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=/dev/vda1 ro console=ttyS0",
        npus=(Npu("0000:06:00.0", driver=HOST_DRIVER, group=None),),
    )
    return replace(spec, **changes)


def vm_with_viommu(**changes) -> HostSpec:
    """The same guest with a QEMU intel-iommu vIOMMU and intel_iommu=on."""
    spec = vm_without_viommu(
        acpi_tables=("APIC", "DMAR", "DSDT", "FACP", "MCFG"), iommu_units=("dmar0",), extra_groups=("0", "1", "2"),
        cmdline="BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=/dev/vda1 ro console=ttyS0 intel_iommu=on",
        npus=(Npu("0000:06:00.0", driver=VFIO, group="7"),),
    )
    return replace(spec, **changes)


def modules_missing(**changes) -> HostSpec:
    """Intel bare metal with IOMMU on, but no VFIO module loaded or built in (and so no /dev/vfio/vfio)."""
    spec = intel_bare_metal(loaded=("kvm", "kvm_intel", "rebellions"), dev_vfio=False, npus=TWO_NPUS_HOST)
    return replace(spec, **changes)


def no_npus(**changes) -> HostSpec:
    """Intel bare metal, everything ready, but no Rebellions device."""
    return replace(intel_bare_metal(npus=()), **changes)


def npu_on_rebellions(**changes) -> HostSpec:
    """NPUs on the host driver; a process (a container workload) holds /dev/rbln0 open."""
    procs = (Proc(1, "systemd", "/sbin/init", ("/dev/null",)),
             Proc(4242, "python3", "python3 serve.py --npu 0", ("/dev/rbln0", "/dev/null")))
    return replace(intel_bare_metal(npus=TWO_NPUS_HOST, procs=procs), **changes)


def npu_on_vfio(**changes) -> HostSpec:
    """NPUs on vfio-pci; QEMU (a KubeVirt VM) holds /dev/vfio/42 open."""
    procs = (Proc(1, "systemd", "/sbin/init", ("/dev/null",)),
             Proc(5151, "qemu-kvm", "/usr/libexec/qemu-kvm -name guest=default_vm1",
                  ("/dev/vfio/vfio", "/dev/vfio/42")))
    return replace(intel_bare_metal(procs=procs), **changes)


# In-between IOMMU shapes (issue 15): states a clean simulator never produces.


def groups_without_units(**changes) -> HostSpec:
    """IOMMU groups exist but /sys/class/iommu is empty (units not registered in sysfs, e.g. an old kernel)."""
    return replace(intel_bare_metal(iommu_units=()), **changes)


def units_without_groups(**changes) -> HostSpec:
    """IOMMU units registered (dmar0, dmar1) but no groups: the hardware is known, no device sits behind it."""
    npus = (Npu("0000:3b:00.0", driver=HOST_DRIVER, group=None), Npu("0000:5e:00.0", driver=HOST_DRIVER, group=None))
    return replace(intel_bare_metal(extra_groups=(), npus=npus), **changes)


def group_with_bridge_and_host_device(**changes) -> HostSpec:
    """NPU 0000:3b:00.0 shares IOMMU group 42 with a PCIe switch port (harmless) and a NIC on i40e (not)."""
    return replace(intel_bare_metal(npus=TWO_NPUS_HOST, others=(PCIE_BRIDGE, NIC_IN_GROUP_42)), **changes)


def group_with_bridge_only(**changes) -> HostSpec:
    """NPU 0000:3b:00.0 shares IOMMU group 42 only with a PCIe switch port: still a viable group."""
    return replace(intel_bare_metal(npus=TWO_NPUS_HOST, others=(PCIE_BRIDGE,)), **changes)


def arm64_server(**changes) -> HostSpec:
    """An arm64 (Ampere-class) ACPI server: IORT, one SMMUv3 unit, no IOMMU kernel parameter, NPUs on vfio-pci."""
    spec = HostSpec(
        cpu_vendor="ARM", arch="aarch64", dmi=("GIGABYTE", "R272-P30-JG"),
        acpi_tables=("APIC", "DSDT", "FACP", "GTDT", "IORT", "MCFG", "SPCR"),
        iommu_units=("smmu3.0x0000000011000000",),
        cmdline="BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=1b2c ro quiet",
        loaded=("vfio", "vfio_pci", "vfio_pci_core", "vfio_iommu_type1", "arm_smmu_v3"),
        npus=TWO_NPUS_VFIO,
    )
    return replace(spec, **changes)


def arm64_smmu_off(**changes) -> HostSpec:
    """The same server with the SMMU disabled in firmware: IORT still there (it also describes the GIC ITS), no
    SMMU unit, no IOMMU groups."""
    npus = (Npu("0000:3b:00.0", driver=HOST_DRIVER, group=None), Npu("0000:5e:00.0", driver=HOST_DRIVER, group=None))
    return replace(arm64_server(iommu_units=(), extra_groups=(), npus=npus), **changes)


def arm64_device_tree(**changes) -> HostSpec:
    """An arm64 device-tree board (no ACPI tables, no /proc/sys/kernel/arch): an enabled SMMUv3 node in the DT."""
    return replace(arm64_server(arch=None, acpi_tables=(), dmi=None,
                                dt_nodes=(("iommu@2b400000", "arm,smmu-v3", "okay"),
                                          ("soc/iommu@5000000", "arm,mmu-500", "disabled"))), **changes)


def iommufd_container(**changes) -> HostSpec:
    """Intel host whose kernel has CONFIG_IOMMUFD_VFIO_CONTAINER: iommufd serves /dev/vfio/vfio, no vfio_iommu_type1."""
    spec = intel_bare_metal(loaded=("vfio", "vfio_pci", "vfio_pci_core", "iommufd", "kvm", "kvm_intel"))
    return replace(spec, **changes)


def leftovers(**changes) -> HostSpec:
    """What some operator releases leave after a vm -> container switch: NPUs without a driver, stale overrides.

    3b: no driver, driver_override vfio-pci (the vfio-manager unbound it without re-probing);
    5e: on rebellions with driver_override vfio-pci left behind; 86: healthy on rebellions.
    """
    npus = (Npu("0000:3b:00.0", driver=None, group="42", override=VFIO),
            Npu("0000:5e:00.0", driver=HOST_DRIVER, group="43", override=VFIO),
            Npu("0000:86:00.0", driver=HOST_DRIVER, group="44"))
    return replace(intel_bare_metal(npus=npus), **changes)
