"""Host facts and the one host command rblnctl runs: effective uid, kernel modules, modprobe, VFIO Manager signs."""

from __future__ import annotations

import enum
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Collection
from pathlib import Path

from rblnctl import constants as C
from rblnctl.errors import HostError, InvalidInput
from rblnctl.host.procfs import ProcessTable

log = logging.getLogger(__name__)

# The operator's VFIO Manager runs vfio-manage.sh (older builds: a vfio-manager binary).
VFIO_MANAGER_NEEDLE = "vfio-manage"
_MODULE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_root() -> bool:
    """Whether this process runs with effective uid 0."""
    return os.geteuid() == 0


class ModuleState(enum.StrEnum):
    """Whether the kernel has a module."""

    LOADED = "loaded"  # a loadable module, loaded now
    BUILTIN = "built-in"  # compiled into the kernel
    MISSING = "missing"


def module_state(sysfs: Path, module: str, builtin: Collection[str] | None = None) -> ModuleState:
    """Whether a kernel module is loaded, built in or missing (dashes read as underscores).

    Only a loadable module has `<sysfs>/module/<name>/initstate`; a built-in one has the directory
    only when it has parameters, so `builtin` (names from modules.builtin, see
    read_builtin_modules) is what tells the rest apart from missing ones.
    """
    if not _MODULE.fullmatch(module or ""):
        raise InvalidInput(f"invalid kernel module name {module!r}")
    name = module.replace("-", "_")
    d = Path(sysfs) / "module" / name
    if (d / "initstate").exists():
        return ModuleState.LOADED
    if d.is_dir() or (builtin is not None and name in builtin):
        return ModuleState.BUILTIN
    return ModuleState.MISSING


def read_builtin_modules(root: Path, release: str | None) -> tuple[set[str] | None, str | None]:
    """Module names in `<root>/lib/modules/<release>/modules.builtin` (`-` folded to `_`), and the path read.

    (None, None) when the release is unknown or no list is readable: built-in cannot then be told
    apart from missing.
    """
    if not release or "/" in release or release in (".", ".."):
        return None, None
    for lib in ("lib", "usr/lib"):
        path = Path(root) / lib / "modules" / release / "modules.builtin"
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            continue
        except OSError as e:  # EACCES, EIO on a half-captured tree: unknown, not fatal
            log.debug("cannot read %s: %s", path, e)
            continue
        names = {
            os.path.basename(line.strip())[: -len(".ko")].replace("-", "_")
            for line in text.splitlines()
            if line.strip().endswith(".ko")
        }
        return names, str(path)
    return None, None


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
    """Evidence that the operator's VFIO Manager manages this node: its validation marker or its process.

    `run_root` is the host's /run (`HostRoot.run`).
    """
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


def vfio_manager_warnings(run_root: Path, processes: ProcessTable) -> list[str]:
    """One warning when the operator's VFIO Manager manages this node (it may undo manual changes), else none."""
    signs = vfio_manager_signs(run_root, processes)
    if not signs:
        return []
    return [f"the RBLN NPU Operator's VFIO Manager manages this node ({'; '.join(signs)}): it may undo manual "
            "changes; prefer switching the node's mode with node set-mode, or disable the operator's vfioManager first"]
