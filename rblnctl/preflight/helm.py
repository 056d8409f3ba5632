"""The local helm client's version (`helm version --short`), behind a runner seam: tests need no helm binary."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rblnctl import constants as C


@dataclass(frozen=True, kw_only=True)
class HelmInfo:
    """The local helm client: where it is and what `helm version --short` printed."""

    path: str | None
    output: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    """What one finished command returned."""

    returncode: int
    stdout: str
    stderr: str


def run_command(argv: Sequence[str], timeout_s: float) -> CommandResult:
    """Run argv (a list, never a shell) and capture its output.

    Raises TimeoutError when it does not finish within timeout_s, OSError when it cannot start: the
    runner contract HelmClient relies on, so an injected runner raises the same two.
    """
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        raise TimeoutError(f"{argv[0]} did not finish within {timeout_s:g}s") from e
    return CommandResult(returncode=out.returncode, stdout=out.stdout or "", stderr=out.stderr or "")


@dataclass(frozen=True, kw_only=True)
class HelmClient:
    """Ask the helm binary on PATH for its version; `which` and `run` are the seams tests replace."""

    which: Callable[[str], str | None] = shutil.which
    run: Callable[[Sequence[str], float], CommandResult] = run_command
    timeout_s: float = C.HELM_TIMEOUT_S

    def version(self) -> HelmInfo:
        """Run `helm version --short` when helm is on PATH; every failure is data on the HelmInfo."""
        path = self.which("helm")
        if path is None:
            return HelmInfo(path=None)
        try:
            out = self.run([path, "version", "--short"], self.timeout_s)
        except TimeoutError:
            return HelmInfo(path=path, error=f"`helm version --short` did not finish within {self.timeout_s:g}s")
        except OSError as e:
            return HelmInfo(path=path, error=f"cannot run {path}: {e.strerror or e}")
        if out.returncode != 0:
            lines = (out.stderr or out.stdout).strip().splitlines()
            return HelmInfo(path=path, error=f"`helm version --short` exited {out.returncode}: "
                            f"{lines[-1] if lines else 'no output'}")
        return HelmInfo(path=path, output=out.stdout.strip())
