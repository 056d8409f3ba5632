"""Shared timing helpers for the benchmark scripts: whole-process medians, interleaved with the anchor."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence


def rblnctl_cmd() -> list[str]:
    """The installed `rblnctl` script, or `python -m rblnctl` from this interpreter."""
    exe = shutil.which("rblnctl", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return [exe] if exe else [sys.executable, "-m", "rblnctl"]


def time_once(argv: Sequence[str], env: dict | None = None) -> float:
    """Wall time of one whole process, in seconds; raises if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=300)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-300:]}")
    return elapsed


def installed_env() -> dict:
    """The environment of an installed package: bytecode cached (in a temp dir), whatever this shell says.

    Some shells here set PYTHONDONTWRITEBYTECODE=1, which would make every run recompile rblnctl and
    measure the compiler instead of the CLI.
    """
    import tempfile

    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "rblnctl-bench-pycache")
    return env


def medians(commands: dict[str, Sequence[str]], runs: int, env: dict | None = None) -> dict[str, float]:
    """Run every command `runs` times, interleaved (so drift hits all alike), after one warm-up each."""
    env = env if env is not None else installed_env()
    samples: dict[str, list[float]] = {k: [] for k in commands}
    for argv in commands.values():
        time_once(argv, env)
    for _ in range(runs):
        for name, argv in commands.items():
            samples[name].append(time_once(argv, env))
    return {k: statistics.median(v) for k, v in samples.items()}


def report(results: dict[str, float], anchor: str) -> str:
    """Lines of `name  median  ratio-to-anchor`."""
    base = results.get(anchor)
    width = max(len(k) for k in results)
    lines = []
    for name, med in results.items():
        ratio = f"{med / base:5.2f}x {anchor}" if base else ""
        lines.append(f"{name:<{width}}  {med * 1e3:8.1f} ms  {ratio}")
    return "\n".join(lines)
