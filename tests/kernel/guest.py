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
import time
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
SERVER = "/run/rblnctl-forkserver"  # its log (its queue is in the io folder)
NEVER = ("0000:00:10.0", "0000:00:11.0")  # the 9p transports



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
    _snap: Any = None  # the fork server's snapshot after the last request (None: read again)
    _logs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # write log -> its writes

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

    def iommu_groups(self) -> int:
        """How many IOMMU groups the kernel made (after checking it was booted as `use()` asked)."""
        cmdline, groups = self.sh("cat /proc/cmdline; ls /sys/kernel/iommu_groups | wc -l").splitlines()
        assert self.options.get("append", "") in cmdline, cmdline
        return int(groups)

    def reboot(self) -> None:
        """Power the guest off and boot it again: the kernel's state is fresh, and so is the guest's tmpfs, except
        for the state file, which a real host keeps on disk: it is carried over."""
        kept = self.sh(f"cat {STATE} 2>/dev/null || true") if self._guest is not None else ""
        self.close()
        _ = self.guest
        if kept.strip():
            self.sh(f"mkdir -p {os.path.dirname(STATE)}; printf '%s' {shlex.quote(kept)} > {STATE}")

    def close(self) -> None:
        self._snap = None
        if self._guest is not None:
            self._guest.close()
            self._guest = None

    @property
    def io(self) -> str:
        return self.guest.io

    def run(self, cmd: str, *, timeout: float = 120) -> tuple[int, str]:
        self._snap = None
        return self.guest.run(cmd, timeout=timeout, cwd=str(REPO), env=ENV)

    def sh(self, cmd: str, *, timeout: float = 120) -> str:
        rc, out = self.run(cmd, timeout=timeout)
        assert rc == 0, f"{cmd!r} exited {rc}:\n{out}"
        return out

    def rblnctl(self, *args: str, crash_after: int | None = None, log: str | None = None, stdout_only: bool = False,
                timeout: float = 120) -> tuple[int, str]:
        """rblnctl's entry point run in the guest by tests/kernel/forkserver.py (a fresh child per command), through
        the write seam (tests/kernel/seam.py) when a write log or a crash is asked for; (exit status, output)."""
        return self._request({"argv": list(args), "log": log, "crash_after": crash_after, "merge": not stdout_only},
                             timeout=timeout)

    def _request(self, req: dict, *, timeout: float = 120) -> tuple[int, str]:
        """One request to the fork server: its status and output; the snapshot it took after is kept for the reads
        that follow (`functions`, `state`, ...) until the next request or shell command.

        The server's queue is in the guest's io folder, which the host sees at the same path: the request goes
        straight to it (no shell in the guest per request: under TCG each fork there costs tens of ms)."""
        q = self._serve()
        self._n += 1
        base = os.path.join(q, f"{self._n:06d}")
        with open(base + ".tmp", "w") as f:
            json.dump(req, f)
        os.rename(base + ".tmp", base + ".req")
        deadline = time.monotonic() + timeout
        while not os.path.exists(base + ".rc"):
            assert self.guest.alive, f"the guest died during {req}:\n{self.guest.console_tail()}"
            assert time.monotonic() < deadline, f"no answer to {req} within {timeout} s"
            time.sleep(0.02)
        with open(base + ".rc") as f:
            rc = int(f.read())
        with open(base + ".out", errors="replace") as f:
            out = f.read()
        with open(base + ".snap") as f:
            self._snap = json.load(f)
        if req.get("log"):
            self._logs[req["log"]] = [(w["path"], w["value"]) for w in self._snap["writes"]]
        return rc, out

    def snap(self) -> dict:
        """The machine as the last request left it (one more request when a shell command ran since)."""
        if self._snap is None:
            self._request({})
        return self._snap

    def _serve(self) -> str:
        """Start the fork server in this boot of the guest (once); its queue folder."""
        q = os.path.join(self.io, "forkserver")
        if self._served is self.guest:
            return q
        self.sh(f"mkdir -p {q}; (exec python -m tests.kernel.forkserver {q}) </dev/null >{SERVER}.log 2>&1 &\n"
                f"for i in $(seq 600); do [ -e {q}/ready ] && break; sleep 0.05; done; "
                f"[ -e {q}/ready ] || {{ cat {SERVER}.log; exit 1; }}")
        self._served = self.guest
        return q

    def json(self, *args: str) -> dict:
        rc, out = self.rblnctl(*args, "-o", "json", stdout_only=True)
        assert rc in (0, 1), out
        return json.loads(out)

    def functions(self) -> dict[str, tuple[str | None, str | None]]:
        """Every PCI function's (driver, driver_override) as the guest kernel shows them."""
        return {bdf: (drv, ov) for bdf, (drv, ov) in self.snap()["functions"].items()}

    def on(self, bdf: str) -> tuple[str | None, str | None]:
        return self.functions()[bdf]

    def state(self) -> dict:
        text = self.snap()["state"]
        return json.loads(text)["devices"] if text and text.strip() else {}

    def reset(self, *, vfio: bool | None = None, override: dict[str, str | None] | None = None) -> None:
        """Both NPUs on virtio-pci without an override, no state file, no holders started by a test left; then vfio
        loaded (True) or unloaded (False) and `override` written, all in one request."""
        rc, out = self._request({"reset": True, "npus": list(NPUS), "host": HOST_DRIVER, "vfio": vfio,
                                 "override": override})
        assert rc == 0, out
        fns = self.functions()
        assert all(fns[b] == (HOST_DRIVER, (override or {}).get(b)) for b in NPUS), fns

    def load_vfio(self) -> None:
        if self._snap is not None and "vfio_pci" in self._snap["modules"]:
            return  # the last request's snapshot shows it loaded: no request for nothing
        rc, out = self._request({"vfio": True})
        assert rc == 0 and "vfio_pci" in self.modules(), out

    def unload_vfio(self) -> None:
        """vfio-pci, vfio_iommu_type1 and vfio out of the kernel (no NPU may be on vfio-pci: reset() first)."""
        self._request({"vfio": False})
        assert not {m for m in self.modules() if m.startswith("vfio")}, self.modules()

    def write_log(self, name: str) -> str:
        """A fresh file (in the guest) for the seam's write log (tests/kernel/seam.py)."""
        return f"/run/{name}-{self._n + 1}.writes"

    def writes(self, log: str) -> list[tuple[str, str]]:
        """The seam's log: (path, value) per write rblnctl completed, as the guest wrote it."""
        if log not in self._logs:
            self._request({"log": log})
            self._logs[log] = [(w["path"], w["value"]) for w in self.snap()["writes"]]
        return self._logs[log]

    def vfio_nodes(self) -> list[str]:
        """The names under /dev/vfio."""
        return list(self.snap()["vfio"])

    def modules(self) -> set[str]:
        """Loaded modules (/proc/modules)."""
        return set(self.snap()["modules"])

    def set_override(self, bdf: str, driver: str | None) -> None:
        """Write driver_override directly (what a crashed tool leaves)."""
        rc, out = self._request({"override": {bdf: driver}})
        assert rc == 0, out

    def raw(self, writes: list[tuple[str, str]], watch: str) -> list[tuple[str, tuple[str | None, str | None]]]:
        """Each write of a value (as it is: "" is a write of nothing) to a sysfs file, as any program makes it, in one
        request: per write, "ok" or the errno's name the kernel answered (EBUSY, ENODEV, ...), and the (driver,
        driver_override) of `watch` after it."""
        assert not any(b in p or b in v for p, v in writes for b in NEVER), writes
        rc, out = self._request({"write": [list(w) for w in writes], "watch": watch})
        assert rc == 0, out
        return [(how, (drv, ov)) for how, drv, ov in json.loads(out.splitlines()[-1])]

    def vfio_user(self, bdf: str) -> int:
        """A VFIO user holding `bdf` through /dev/vfio/<group> (tests/kernel/vfio_holder.py)."""
        return vfio_holder(self, bdf)

    def let_go(self, pid: int) -> None:
        """The holder exits (and the kernel finishes an unbind it blocked)."""
        self.sh(f"kill {pid}; while [ -e /proc/{pid} ]; do sleep 0.1; done")


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
