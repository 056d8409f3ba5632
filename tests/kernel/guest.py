"""The kernel tier's host: one real Linux kernel in QEMU (../shared/kernel, `RBLNCTL_KERNEL`) running this checkout.

`KernelHost` wraps kernelvm.Guest: `rblnctl(...)` runs the real program in the guest (its venv is this test run's,
which the guest sees read-only at the same path), `sh(...)` a shell command as root, `functions()` reads every PCI
function's driver and driver_override from the guest's sysfs, `reset()` puts the NPU stand-ins back on virtio-pci
with shell writes (cheaper than an rblnctl run under TCG) and forgets the state file.

The stand-ins (README of the kernel bundle): NPU0 0000:00:06.0 (group 2) and NPU1 0000:01:00.0 (group 7) are
virtio-blk functions presented as CA22 PFs (1eff:1220), driven by virtio-pci (their disks /dev/vda, /dev/vdb);
OTHER 0000:00:05.0 is QEMU's edu device (not an NPU). 00:10.0 and 00:11.0 carry the guest's view of the host and
its request queue: nothing here ever writes them (every write names NPU0, NPU1 or OTHER).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rblnctl import constants as C

REPO = Path(__file__).resolve().parents[2]
BIN = os.path.dirname(sys.executable)  # this run's venv: the guest sees it at the same path
ENV = {"PATH": f"{BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NO_COLOR": "1",
       "COLUMNS": "200", "PYTHONDONTWRITEBYTECODE": "1"}
NPU0, NPU1, OTHER = "0000:00:06.0", "0000:01:00.0", "0000:00:05.0"
NPUS = (NPU0, NPU1)
GROUPS = {NPU0: "2", NPU1: "7"}
HOST_DRIVER = "virtio-pci"  # what the stand-ins' host driver is (no rebellions driver in the guest)
STATE = C.VFIO_STATE_FILE
SERVER = "/run/rblnctl-forkserver"  # the fork server's queue in the guest (not under /run/kt: reset() kills those)
NEVER = ("0000:00:10.0", "0000:00:11.0")  # the 9p transports

# Every PCI function: "<bdf> <driver or -> <driver_override>", one line each.
_FUNCTIONS = r"""for d in /sys/bus/pci/devices/*; do
  drv=-; [ -e "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
  echo "$(basename "$d") $drv $(cat "$d/driver_override")"
done"""

_RESET = r"""for b in {npus}; do
  d=/sys/bus/pci/devices/$b
  [ "$(cat $d/driver_override)" = "(null)" ] || echo > $d/driver_override
  drv=; [ -e $d/driver ] && drv=$(basename "$(readlink $d/driver)")
  if [ "$drv" != {host} ]; then
    [ -n "$drv" ] && echo $b > /sys/bus/pci/drivers/$drv/unbind
    echo $b > /sys/bus/pci/drivers/{host}/bind
  fi
done
rm -f {state} /run/kt/*.pid; mkdir -p /run/kt"""


def reboots(test: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a kernel-tier test that boots another machine or reboots the guest: it runs after the others."""
    test.reboots = True  # type: ignore[attr-defined]
    return test


def kernel_dir() -> str | None:
    """The kernel bundle's folder (`$(../shared/kernel/setup)`), or None: the tier is skipped."""
    return os.environ.get("RBLNCTL_KERNEL") or None


@dataclass
class KernelHost:
    """The session's guest and the commands the kernel tier runs in it; one QEMU at a time.

    `boot(**options)` returns a booted kernelvm.Guest. The guest boots on first use; `use(**options)` powers it off
    and boots one with other options (`append="intel_iommu=off"`) when they differ, `reboot()` boots a fresh one:
    the old one is always closed first, so two guests never run at once on this 2-core machine.
    """

    boot: Callable[..., Any]
    name = "kernel"
    options: dict[str, Any] = field(default_factory=dict)
    boots: list[float] = field(default_factory=list)  # each boot's seconds to ready
    _guest: Any = None
    _served: Any = None  # the guest whose fork server runs
    _n: int = 0

    @property
    def guest(self) -> Any:
        if self._guest is None or not self._guest.alive:
            self._guest = self.boot(**self.options)
            self.boots.append(self._guest.boot_s)
        return self._guest

    def use(self, **options: Any) -> KernelHost:
        if options != self.options:
            self.close()
            self.options = options
        return self

    def reboot(self) -> None:
        """Power the guest off and boot it again: the kernel's state is fresh, and so is the guest's tmpfs, except
        for the state file, which a real host keeps on disk: it is carried over."""
        kept = self.sh(f"cat {STATE} 2>/dev/null || true") if self._guest is not None else ""
        self.close()
        _ = self.guest
        if kept.strip():
            self.sh(f"mkdir -p {os.path.dirname(STATE)}; printf '%s' {shlex.quote(kept)} > {STATE}")

    def close(self) -> None:
        if self._guest is not None:
            self._guest.close()
            self._guest = None

    @property
    def io(self) -> str:
        return self.guest.io

    def run(self, cmd: str, *, timeout: float = 120) -> tuple[int, str]:
        return self.guest.run(cmd, timeout=timeout, cwd=str(REPO), env=ENV)

    def sh(self, cmd: str, *, timeout: float = 120) -> str:
        rc, out = self.run(cmd, timeout=timeout)
        assert rc == 0, f"{cmd!r} exited {rc}:\n{out}"
        return out

    def rblnctl(self, *args: str, crash_after: int | None = None, log: str | None = None, stdout_only: bool = False,
                timeout: float = 120) -> tuple[int, str]:
        """rblnctl's entry point run in the guest by tests/kernel/forkserver.py (a fresh child per command), through
        the write seam (tests/kernel/seam.py) when a write log or a crash is asked for; (exit status, output)."""
        self._serve()
        self._n += 1
        req = json.dumps({"argv": list(args), "log": log, "crash_after": crash_after, "merge": not stdout_only})
        q = f"{SERVER}/{self._n:06d}"
        return self.run(f"printf '%s' {shlex.quote(req)} > {q}.tmp && mv {q}.tmp {q}.req\n"
                        f"while [ ! -e {q}.rc ]; do sleep 0.02; done; cat {q}.out; exit $(cat {q}.rc)",
                        timeout=timeout)

    def _serve(self) -> None:
        """Start the fork server in this boot of the guest (once)."""
        if self._served is self.guest:
            return
        self.sh(f"mkdir -p {SERVER}; (exec python -m tests.kernel.forkserver {SERVER}) </dev/null "
                f">{SERVER}.log 2>&1 &\n"
                f"for i in $(seq 600); do [ -e {SERVER}/ready ] && break; sleep 0.05; done; "
                f"[ -e {SERVER}/ready ] || {{ cat {SERVER}.log; exit 1; }}")
        self._served = self.guest

    def json(self, *args: str) -> dict:
        rc, out = self.rblnctl(*args, "-o", "json", stdout_only=True)
        assert rc in (0, 1), out
        return json.loads(out)

    def functions(self) -> dict[str, tuple[str | None, str | None]]:
        """Every PCI function's (driver, driver_override) as the guest kernel shows them."""
        out = {}
        for line in self.sh(_FUNCTIONS).splitlines():
            bdf, drv, override = line.split(" ", 2)
            out[bdf] = (None if drv == "-" else drv, None if override == "(null)" else override)
        return out

    def on(self, bdf: str) -> tuple[str | None, str | None]:
        return self.functions()[bdf]

    def state(self) -> dict:
        out = self.sh(f"cat {STATE} 2>/dev/null || true")
        return json.loads(out)["devices"] if out.strip() else {}

    def reset(self) -> None:
        """Both NPUs on virtio-pci without an override, no state file, no holders started by a test left."""
        self.sh("for f in /run/kt/*.pid; do [ -e \"$f\" ] && kill -9 $(cat \"$f\") 2>/dev/null; done; true")
        self.sh(_RESET.format(npus=" ".join(NPUS), host=HOST_DRIVER, state=STATE))
        fns = self.functions()
        assert all(fns[b] == (HOST_DRIVER, None) for b in NPUS), fns

    def write_log(self, name: str) -> str:
        """A fresh file for the seam's write log (tests/kernel/seam.py), in the io folder the host reads too."""
        path = os.path.join(self.io, f"{name}.writes")
        self.sh(f"rm -f {path}")
        return path

    def writes(self, log: str) -> list[tuple[str, str]]:
        """The seam's log: (path, value) per write rblnctl completed, as the guest wrote it."""
        out = self.sh(f"cat {log} 2>/dev/null || true")
        return [(w["path"], w["value"]) for w in map(json.loads, out.splitlines())]

    def vfio_nodes(self) -> list[str]:
        """The names under /dev/vfio."""
        return sorted(self.sh("ls /dev/vfio 2>/dev/null || true").split())

    def modules(self) -> set[str]:
        """Loaded modules (/proc/modules)."""
        return {line.split()[0] for line in self.sh("cat /proc/modules").splitlines() if line.strip()}

    def set_override(self, bdf: str, driver: str | None) -> None:
        """Write driver_override directly (what a crashed tool leaves)."""
        self.sh(f"echo {driver or ''} > /sys/bus/pci/devices/{bdf}/driver_override")

    def vfio_user(self, bdf: str) -> int:
        """A VFIO user holding `bdf` through /dev/vfio/<group> (tests/kernel/vfio_holder.py)."""
        return vfio_holder(self, bdf)

    def let_go(self, pid: int) -> None:
        """The holder exits (and the kernel finishes an unbind it blocked)."""
        self.sh(f"kill {pid}; while [ -e /proc/{pid} ]; do sleep 0.1; done")

    def load_vfio(self) -> None:
        self.sh("modprobe vfio-pci")

    def unload_vfio(self) -> None:
        """vfio-pci, vfio_iommu_type1 and vfio out of the kernel (no NPU may be on vfio-pci: reset() first)."""
        self.sh("modprobe -r vfio_pci vfio_pci_core vfio_iommu_type1 vfio 2>/dev/null; true")
        mods = self.sh("cat /proc/modules")
        assert "vfio" not in mods, mods


def start_holder(host: KernelHost, name: str, command: str) -> int:
    """Start `command` in the background in the guest (its pid in /run/kt/<name>.pid, killed by reset()); wait until
    it wrote /run/kt/<name>.ready (the command's job) and return its pid."""
    host.sh(f"mkdir -p /run/kt; rm -f /run/kt/{name}.ready; ({command}) </dev/null >/run/kt/{name}.log 2>&1 & "
            f"echo $! > /run/kt/{name}.pid")
    out = host.sh(f"for i in $(seq 300); do [ -s /run/kt/{name}.ready ] && break; sleep 0.1; done; "
                  f"cat /run/kt/{name}.ready || cat /run/kt/{name}.log; cat /run/kt/{name}.pid")
    assert out.count("\n") >= 2, out
    return int(out.split()[-1])


def vfio_holder(host: KernelHost, bdf: str, node: str | None = None) -> int:
    """A VFIO user holding `bdf` (bound to vfio-pci) through its group node (or `node`, another name for it)."""
    node = node or f"/dev/vfio/{GROUPS[bdf]}"
    return start_holder(host, "vfio", f"exec python -m tests.kernel.vfio_holder {bdf} {node} /run/kt/vfio.ready")
