"""The kernel tier's machine on the fake sysfs (tests/fakes/sysfs.py): the same scenarios, one expectation.

`FakeHost` has KernelHost's test API (tests/kernel/guest.py: `rblnctl`, `json`, `functions`, `on`, `state`,
`reset`, `load_vfio`, `unload_vfio`, `raw`, `vfio_user`, `let_go`, `reboot`, `write_log`) over a SimKernel laid out like
the guest: NPU0 0000:00:06.0 (group 2) and NPU1 0000:01:00.0 (group 7) presented as CA22 PFs on virtio-pci, OTHER
0000:00:05.0 (QEMU's edu device, 1234:11e8 class 00ff00, no driver), an Intel vIOMMU (DMAR, dmar0) with
intel_iommu=on, the vfio modules not loaded, no /dev/kvm and no rebellions driver.

Each command is rblnctl's own entry point in a forked child (tests/kernel/forkserver.py `child`, as in the guest),
pointed at the tree with `--root` (and the tree taken as the live `/`, so `--load-modules` runs the fake's modprobe),
writing through the SimKernel's writer and, when asked, the write seam (tests/kernel/seam.py: its log, SIGKILL after
the N-th write). After each write the child saves the SimKernel, so the parent sees exactly what the kernel would
have after a kill. Output paths under the tree are shown as the kernel tier shows them (`/sys/...`).
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path

from rblnctl import constants as C

from rblnctl.host.vfio.writer import WriteStillBlocked

from tests.fakes.sysfs import HostSpec, build_host
from tests.kernel.forkserver import child, shell_status
from tests.kernel.guest import HOST_DRIVER, NPU0, NPU1, NPUS, OTHER

GROUPS = {NPU0: "2", NPU1: "7", OTHER: "3"}
GUEST = HostSpec(
    cpu_vendor="AuthenticAMD", hypervisor=True, dmi=("QEMU", "Standard PC (Q35 + ICH9, 2009)"),
    acpi_tables=("APIC", "DMAR", "FACP", "HPET", "MCFG", "WAET"), iommu_units=("dmar0",), extra_groups=("0", "1"),
    cmdline="console=ttyS0 quiet loglevel=3 panic=-1 intel_iommu=on kernelvm.npu_id=1eff:1220",
    release="6.1.0-50-amd64", loaded=(), builtin=(), dev_vfio=False, dev_kvm=False,
    procs=())


class FakeHost:
    """One fake guest in `tmp`; `reboot()` builds it again (drivers as at boot, the state file kept: it is on disk)."""

    name = "fake"

    def __init__(self, tmp: Path) -> None:
        self.tmp = Path(tmp)
        self._n = 0
        self._pid = 4000
        self._stuck: dict[int, str] | None = None  # keep_stuck_readers(): reader pid -> the function it waits on
        self._not_readers: set[int] = set()  # keep_stuck_readers(): this process's children before it
        self.append = ""
        self.boot()

    # ---- the machine ----

    def boot(self) -> None:
        root = self.tmp / "host"
        state = root / C.VFIO_STATE_FILE.lstrip("/")
        kept = state.read_bytes() if state.exists() else None
        if root.exists():
            shutil.rmtree(root)
        k = build_host(root, replace(GUEST, cmdline=f"{GUEST.cmdline} {self.append}".strip()))
        k.vfio_cdev = False  # 6.1 has no VFIO device cdev (CONFIG_VFIO_DEVICE_CDEV came with 6.6)
        k.add_driver(HOST_DRIVER, claims=((0x1EFF, 0x1220),), module="virtio_pci")
        for bdf in NPUS:
            k.add_pci_function(bdf, driver=HOST_DRIVER, iommu_group=GROUPS[bdf])
        k.add_pci_function(OTHER, vendor=0x1234, device=0x11E8, class_code=0x00FF00, driver=None,
                           iommu_group=GROUPS[OTHER])
        if "intel_iommu=off" in self.append:
            k.set_iommu(False)
        if kept is not None:
            state.parent.mkdir(parents=True, exist_ok=True)
            state.write_bytes(kept)
        self.k = k

    def reboot(self) -> None:
        self.boot()

    def use(self, *, append: str = "") -> FakeHost:
        """Boot with `append` added to the kernel command line (`intel_iommu=off`: the kernel makes no groups)."""
        self.append = append
        self.boot()
        return self

    def iommu_groups(self) -> int:
        return len(list((self.k.sys / "kernel/iommu_groups").iterdir()))

    @property
    def root(self) -> Path:
        return self.k.root

    # ---- running rblnctl ----

    def rblnctl(self, *args: str, crash_after: int | None = None, log: str | None = None, stdout_only: bool = False,
                timeout: float = 120) -> tuple[int, str]:
        """rblnctl in a forked child against the tree (see the module's docstring); (exit status, output)."""
        self._n += 1
        out = self.tmp / f"{self._n:06d}.out"
        saved = self.tmp / "kernel.pickle"
        argv = [*args, "--root", str(self.root)]
        req = {"argv": argv, "log": log, "crash_after": crash_after, "merge": not stdout_only}
        k = self.k

        def save() -> None:
            with open(saved, "wb") as f:
                pickle.dump(k, f)

        def prepare() -> None:
            import rblnctl.host.system as system
            import rblnctl.host.vfio.writer as writers

            os.environ.update({"NO_COLOR": "1", "COLUMNS": "200"})
            os.geteuid = lambda: 0  # the guest's commands run as root
            C.HOST_ROOT = str(k.root)  # the tree is this machine's `/`: --load-modules may run modprobe

            class Saving:
                def write(self, path: Path, value: str, *, bound_s: float | None = None) -> None:
                    try:
                        k.writer.write(path, value, bound_s=bound_s)
                    finally:
                        save()

            def modprobe(module: str, **_: object) -> None:
                k.modprobe(module)
                save()

            writers.default_writer = Saving  # type: ignore[assignment]
            system.modprobe = modprobe  # type: ignore[assignment]

        saved.unlink(missing_ok=True)
        pid = os.fork()
        if pid == 0:
            child(req, str(out), prepare)
        # as the kernel tier's request does: a command that hangs (a read blocked on a driver_override the fake
        # blocks, as the kernel does) shows as a timeout, exit status 124, never as a test that hangs
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                with open(out, "a") as f:
                    f.write(f"\n[fake] no answer within {timeout:g} s: killed\n")
                status = 124 << 8
                break
            time.sleep(0.02)
        if saved.exists():
            with open(saved, "rb") as f:
                self.k.__dict__.update(pickle.load(f).__dict__)
        if self._stuck is None:
            self.k.release_readers()  # readers a bounded read left waiting (the kernel's finish with the unbind)
        else:
            self._show_stuck_readers(args)
        text = out.read_text().replace(f" --root {self.root}", "").replace(str(self.root), "")
        return shell_status(status), text

    def json(self, *args: str) -> dict:
        rc, out = self.rblnctl(*args, "-o", "json", stdout_only=True)
        assert rc in (0, 1), out
        return json.loads(out)

    def write_log(self, name: str) -> str:
        """A fresh file for the seam's write log."""
        path = self.tmp / f"{name}.writes"
        path.unlink(missing_ok=True)
        return str(path)

    def writes(self, log: str) -> list[tuple[str, str]]:
        """The seam's log: (path as the kernel shows it, value) per completed write."""
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return [(w["path"].replace(str(self.root), ""), w["value"]) for w in map(json.loads, f)]

    # ---- reading the machine ----

    def functions(self) -> dict[str, tuple[str | None, str | None]]:
        return {bdf: (self.k.driver_of(bdf), self.k.override_of(bdf)) for bdf in sorted(self.k.devices)}

    def on(self, bdf: str) -> tuple[str | None, str | None]:
        return self.functions()[bdf]

    def state(self) -> dict:
        path = self.root / C.VFIO_STATE_FILE.lstrip("/")
        return json.loads(path.read_text())["devices"] if path.exists() else {}

    def vfio_nodes(self) -> list[str]:
        """The names under /dev/vfio."""
        d = self.k.dev / "vfio"
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

    def modules(self) -> set[str]:
        return {p.name for p in (self.k.sys / "module").iterdir() if (p / "initstate").exists()}

    # ---- changing it as a test's setup does ----

    def reset(self, *, vfio: bool | None = None, override: dict[str, str | None] | None = None) -> None:
        """NPUs back on virtio-pci, vfio not loaded, no state file (what `linux` gives a kernel test); then vfio
        loaded (True) and `override` written, as KernelHost.reset does."""
        (self.root / C.VFIO_STATE_FILE.lstrip("/")).unlink(missing_ok=True)
        self.boot()
        if vfio:
            self.load_vfio()
        for bdf, driver in (override or {}).items():
            self.set_override(bdf, driver)

    def load_vfio(self) -> None:
        self.k.load_module("vfio_pci")

    def unload_vfio(self) -> None:
        for m in ("vfio_pci", "vfio_pci_core", "vfio_iommu_type1", "vfio"):
            self.k.unload_module(m)
        shutil.rmtree(self.k.dev / "vfio", ignore_errors=True)

    def set_override(self, bdf: str, driver: str | None) -> None:
        self.k.set_override(bdf, driver)

    def raw(self, writes: list[tuple[str, str]], watch: str) -> list[tuple[str, tuple[str | None, str | None]]]:
        """Each write through the SimKernel's writer (what KernelHost.raw does in the guest): "ok" or the errno's name,
        and `watch`'s (driver, driver_override) after it."""
        said = []
        for path, value in writes:
            try:
                self.k.writer.write(self.root / path.lstrip("/"), value)
                how = "ok"
            except OSError as e:
                how = errno.errorcode.get(e.errno or 0, str(e.errno))
            said.append((how, self.on(watch)))
        return said

    def vfio_user(self, bdf: str) -> int:
        """A VFIO user holding `bdf` through /dev/vfio/<group> (tests/kernel/vfio_holder.py in the guest)."""
        self._pid += 1
        node = f"/dev/vfio/{GROUPS[bdf]}"
        self.k.add_process(self._pid, "python", [node, "/dev/vfio/vfio"],
                           cmdline=["python", "-m", "tests.kernel.vfio_holder", bdf, node, "/run/kt/vfio.ready"])
        return self._pid

    def unbind_blocked(self, bdf: str) -> None:
        """Another tool's `echo <bdf> > /sys/bus/pci/drivers/vfio-pci/unbind`, blocked in the kernel by a VFIO user
        (no rblnctl record of it)."""
        try:
            self.k.handle_write(self.k.sys / "bus/pci/drivers" / C.VFIO_DRIVER / "unbind", bdf, bound_s=0)
        except WriteStillBlocked:
            return
        raise AssertionError(f"the unbind of {bdf} did not block: no VFIO user holds it")

    def let_go(self, pid: int) -> None:
        """The holder exits: the kernel finishes an unbind it blocked."""
        self.k.exit_process(pid)
        self._prune_stuck_readers()

    # ---- readers left blocked in the kernel ----

    def keep_stuck_readers(self) -> None:
        """From now on leave the readers a bounded read gave up on blocked between commands, as the kernel does until
        the unbind ends (rblnctl() lets them go after each command otherwise), and show each under proc/ with the
        function's driver_override open, as the kernel's /proc shows such a reader (blocked in read(2) with the file
        open; the fake's blocks in open(2) of a FIFO, so the fake adds what /proc would show). They are found as
        this process's children: it becomes their child subreaper (prctl PR_SET_CHILD_SUBREAPER, linux
        kernel/sys.c), so a reader whose rblnctl exited is reparented here, not to init."""
        import ctypes

        assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        self._stuck = {}
        # this process's children now are not readers: an xdist worker's earlier fixtures (an envtest apiserver, its
        # etcd) are its children too (CI: six "stuck readers" where one was)
        self._not_readers = set(self._children())

    def stuck_readers(self) -> list[int]:
        """The readers still blocked on a driver_override (keep_stuck_readers)."""
        self._prune_stuck_readers()
        return sorted(self._stuck or {})

    def release_stuck_readers(self) -> None:
        """Let every stuck reader go (end of file), reap it, and stop keeping them."""
        import ctypes

        self.k.release_readers()
        self._prune_stuck_readers(wait=True)
        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)
        self._stuck = None

    @staticmethod
    def _children() -> list[int]:
        """This process's live children (ppid this pid, not a zombie): a reader reparented here, still waiting."""
        me, out = str(os.getpid()), []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                out.append(int(entry))
        return out

    def _show_stuck_readers(self, args: tuple[str, ...]) -> None:
        assert self._stuck is not None
        for pid in self._children():
            if pid in self._stuck or pid in self._not_readers:
                continue
            entry = str(pid)
            [bdf] = self.k.blocked  # the one function whose override blocks: the scenario blocks one
            assert not (self.k.proc / entry).exists(), f"pid {entry} is a simulated process already"
            rel = os.path.relpath(os.path.realpath(self.k.pci_root / bdf), os.path.realpath(self.k.sys))
            self.k.add_process(int(entry), "rblnctl", [f"/sys/{rel}/driver_override"],
                               cmdline=["/usr/local/bin/rblnctl", *args])
            self._stuck[int(entry)] = bdf

    def _prune_stuck_readers(self, *, wait: bool = False) -> None:
        """Forget (and reap) the stuck readers that ended: an unbind finished, or release_stuck_readers()."""
        for pid in list(self._stuck or {}):
            try:
                done, _ = os.waitpid(pid, 0 if wait or self._stuck[pid] not in self.k.blocked else os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                del self._stuck[pid]
                shutil.rmtree(self.k.proc / str(pid), ignore_errors=True)
