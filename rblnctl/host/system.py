"""Host facts and the one host command rblnctl runs: effective uid, kernel modules, modprobe, VFIO Manager signs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from rblnctl import constants as C
from rblnctl.errors import HostError, InvalidInput
from rblnctl.host.procfs import ProcessTable

DEFAULT_RUN = Path("/run")
# The operator's VFIO Manager runs vfio-manage.sh (older builds: a vfio-manager binary).
VFIO_MANAGER_NEEDLE = "vfio-manage"
_MODULE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_root() -> bool:
    """Whether this process runs with effective uid 0."""
    return os.geteuid() == 0


def module_loaded(sysfs: Path, module: str) -> bool:
    """Whether a kernel module is loaded or built in (`<sysfs>/module/<name>`, dashes read as underscores)."""
    if not _MODULE.fullmatch(module):
        raise InvalidInput(f"invalid kernel module name {module!r}")
    return (Path(sysfs) / "module" / module.replace("-", "_")).is_dir()


def modprobe(module: str, *, timeout_s: float = 60.0) -> None:
    """Load a kernel module with the host's modprobe (argument list, no shell); raise HostError on failure.

    This changes the running kernel whatever sysfs root the caller reads.
    """
    if not _MODULE.fullmatch(module):
        raise InvalidInput(f"invalid kernel module name {module!r}")
    exe = shutil.which("modprobe") or next(
        (p for p in ("/usr/sbin/modprobe", "/sbin/modprobe") if os.access(p, os.X_OK)), None
    )
    if exe is None:
        raise HostError(f"cannot load {module}: modprobe not found on PATH")
    try:
        out = subprocess.run([exe, "--", module], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HostError(f"modprobe {module} failed: {e}") from e
    if out.returncode != 0:
        detail = (out.stderr or out.stdout).strip().splitlines()
        raise HostError(f"modprobe {module} exited {out.returncode}: {detail[-1] if detail else 'no output'}")


def vfio_manager_signs(run_root: Path, processes: ProcessTable) -> list[str]:
    """Evidence that the operator's VFIO Manager manages this node: its validation marker or its process."""
    signs = []
    validations = Path(run_root) / Path(C.VALIDATIONS_DIR).relative_to("/run")
    marker = validations / C.VFIO_READY_MARKER
    if marker.exists():
        signs.append(f"marker {marker} exists")
    elif validations.is_dir():
        signs.append(f"directory {validations} exists")
    for p in processes.matching(VFIO_MANAGER_NEEDLE):
        signs.append(f"process {p.pid} ({p.command}) is running")
    return signs
