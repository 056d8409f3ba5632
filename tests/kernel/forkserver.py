"""rblnctl runs for the kernel tier without paying Python's start-up under TCG each time.

`python -m tests.kernel.forkserver DIR` (started in the guest, in the background, once per boot) imports rblnctl's
command layer and everything `vfio` and `preflight --local` import, writes DIR/ready, then serves requests one at a
time: DIR/<id>.req is JSON `{"argv": [...], "log": FILE|null, "crash_after": N|null, "merge": bool}`. For each it
forks; the child resets SIGINT to Python's default (a background job has it ignored), points stdout (and stderr,
or /dev/null) at DIR/<id>.out, installs the write seam (tests/kernel/seam.py) when asked, and runs rblnctl's own
entry point (rblnctl.cli.app.main) with argv, exactly as the `rblnctl` script does; the parent waits and writes
DIR/<id>.rc (128 + signal for a killed child, like a shell). Each command runs in a fresh child that ran nothing
before it; only the imports are shared. Under TCG that takes a command from 4-6 s to about 1 s.

A request without `argv` is a setup step done by the server itself (`machine`: reset the NPUs, load or unload vfio,
write an override, raw writes), and after every request the server writes DIR/<id>.snap: what the tests read next
(`snapshot`: every function's driver and override, the state file, modules, /dev/vfio, the seam's log). So a step of a
test is one request to the guest, not one per shell command (each costs 0.3-0.7 s under TCG, more on a busy machine).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from rblnctl import constants as C


def serve(queue: str) -> None:
    import rblnctl.cli.app  # noqa: F401  (the imports every command pays)
    import rblnctl.cli.preflight  # noqa: F401
    import rblnctl.cli.vfio  # noqa: F401
    import rblnctl.host.vfio  # noqa: F401
    import rblnctl.preflight.host  # noqa: F401
    from tests.kernel import seam  # noqa: F401

    with open(os.path.join(queue, "ready"), "w") as f:
        f.write(f"{os.getpid()}\n")
    while True:
        reqs = sorted(n for n in os.listdir(queue) if n.endswith(".req"))
        if not reqs:
            time.sleep(0.05)  # a listing of the 9p io folder costs the one-core guest: not too often
            continue
        base = os.path.join(queue, reqs[0][:-4])
        with open(base + ".req") as f:
            req = json.load(f)
        os.unlink(base + ".req")
        if "argv" in req:
            pid = os.fork()
            if pid == 0:
                child(req, base + ".out")
            _, status = os.waitpid(pid, 0)
            rc = shell_status(status)
        else:
            try:
                rc = machine(req, base + ".out")
            except Exception as e:  # a setup step the kernel refused: the test says what it was
                with open(base + ".out", "a") as f:
                    f.write(f"{type(e).__name__}: {e}\n")
                rc = 1
        with open(base + ".snap", "w") as f:
            json.dump(snapshot(req.get("log")), f)
        with open(base + ".tmp", "w") as f:
            f.write(f"{rc}\n")
        os.rename(base + ".tmp", base + ".rc")


# Every PCI function, the stand-ins' host driver, the tier's own holders (tests/kernel/guest.py)
PCI = "/sys/bus/pci"
HOLDERS = "/run/kt"
STATE = C.VFIO_STATE_FILE


BLOCKED = "<blocked>"  # a driver_override that did not answer within 3 s


def snapshot(log: str | None) -> dict:
    """What the tests read after a command, in one go: every PCI function's (driver, driver_override), the state
    file's text, loaded modules, /dev/vfio, the seam's log. While the kernel blocks an unbind, reading that function's
    driver_override blocks too: each is read in a thread of its own, and one that has not answered within 3 s is
    BLOCKED (its thread is left to finish when the kernel lets go)."""
    overrides: dict[str, str] = {}

    def read(bdf: str) -> None:
        with open(f"{PCI}/devices/{bdf}/driver_override") as f:
            overrides[bdf] = f.read().strip()

    bdfs = sorted(os.listdir(f"{PCI}/devices"))
    threads = [threading.Thread(target=read, args=(bdf,), daemon=True) for bdf in bdfs]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 3
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    fns = {}
    for bdf in bdfs:
        d = f"{PCI}/devices/{bdf}"
        drv = os.path.basename(os.readlink(f"{d}/driver")) if os.path.islink(f"{d}/driver") else None
        ov = overrides.get(bdf, BLOCKED)
        fns[bdf] = [drv, None if ov == "(null)" else ov]
    return {
        "functions": fns,
        "state": _text(STATE),
        "modules": sorted(line.split()[0] for line in (_text("/proc/modules") or "").splitlines() if line),
        "vfio": sorted(os.listdir("/dev/vfio")) if os.path.isdir("/dev/vfio") else [],
        "writes": [json.loads(line) for line in (_text(log) or "").splitlines()] if log else [],
    }


def _text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def machine(req: dict, out_path: str) -> int:
    """A setup request, done here in Python (a shell's forks are slow under TCG): `reset` kills the tier's holders,
    puts the NPUs (`npus`) back on `host` without an override and removes the state file; `vfio` true loads
    vfio-pci (modprobe), false unloads vfio; `override` {bdf: driver} writes driver_overrides; `write` [[path, value],
    ...] writes each value as it is and says how each went and where the function `watch` names was then (the
    agreement tests' raw writes)."""
    import subprocess

    log = []
    if req.get("reset"):
        for name in os.listdir(HOLDERS) if os.path.isdir(HOLDERS) else ():
            if name.endswith(".pid"):
                try:
                    os.kill(int(_text(f"{HOLDERS}/{name}") or "0"), signal.SIGKILL)
                except (ValueError, ProcessLookupError):
                    pass
                os.unlink(f"{HOLDERS}/{name}")
        os.makedirs(HOLDERS, exist_ok=True)
        host = req["host"]
        for bdf in req["npus"]:
            d = f"{PCI}/devices/{bdf}"
            if _text(f"{d}/driver_override").strip() != "(null)":
                _write(f"{d}/driver_override", "\n")
            drv = os.path.basename(os.readlink(f"{d}/driver")) if os.path.islink(f"{d}/driver") else None
            if drv != host:
                if drv:
                    _write(f"{PCI}/drivers/{drv}/unbind", bdf)
                _write(f"{PCI}/drivers/{host}/bind", bdf)
        if os.path.exists(STATE):
            os.unlink(STATE)
    if req.get("vfio") is True and not os.path.isdir("/sys/module/vfio_pci"):
        log.append(subprocess.run(["modprobe", "vfio-pci"], capture_output=True, text=True).stderr)
    if req.get("vfio") is False:
        log.append(subprocess.run(["modprobe", "-r", "vfio_pci", "vfio_pci_core", "vfio_iommu_type1", "vfio"],
                                  capture_output=True, text=True).stderr)
    for bdf, driver in (req.get("override") or {}).items():
        _write(f"{PCI}/devices/{bdf}/driver_override", f"{driver}\n" if driver else "\n")
    if req.get("write"):
        # raw writes, as given (an empty one too): after each, how it went ("ok" or the errno's name) and the driver
        # and driver_override of the function `watch` names then; one JSON line
        import errno

        said = []
        d = f"{PCI}/devices/{req['watch']}"
        for path, value in req["write"]:
            try:
                _write(path, value)
                how = "ok"
            except OSError as e:
                how = errno.errorcode.get(e.errno or 0, str(e.errno))
            drv = os.path.basename(os.readlink(f"{d}/driver")) if os.path.islink(f"{d}/driver") else None
            ov = (_text(f"{d}/driver_override") or "").strip()
            said.append([how, drv, None if ov == "(null)" else ov])
        log.append(json.dumps(said) + "\n")
    with open(out_path, "w") as f:
        f.write("".join(log))
    return 0


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def shell_status(status: int) -> int:
    """A waitpid status as a shell reports it: the exit code, or 128 + the signal that killed the process."""
    rc = os.waitstatus_to_exitcode(status)
    return 128 - rc if rc < 0 else rc


def child(req: dict, out_path: str, prepare: Callable[[], None] | None = None) -> NoReturn:
    """In a forked child: run rblnctl's entry point with `req` (the queue's JSON request) writing to `out_path`, then
    exit with its status. `prepare` runs first (the fake backend points the program at its tree there)."""
    code = 70
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = out if req.get("merge", True) else os.open(os.devnull, os.O_WRONLY)
        os.dup2(out, 1)
        os.dup2(err, 2)
        # under pytest sys.stdout/stderr are its capture objects, not fds 1 and 2
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        if prepare is not None:
            prepare()
        if req.get("log") or req.get("crash_after") is not None:
            from tests.kernel import seam

            seam.observe(req.get("log"), req.get("crash_after"))
        from rblnctl.cli.app import main

        sys.argv = ["rblnctl", *req["argv"]]
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1])
