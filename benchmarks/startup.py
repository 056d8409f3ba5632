#!/usr/bin/env python3
"""Startup benchmark: median whole-process wall time of rblnctl --help/--version beside `kubectl version --client`.

Usage: python benchmarks/startup.py [--runs N]. Prints medians and the ratio to kubectl (target: --help within 4x).
Also prints the ten slowest imports of `import rblnctl.cli.app` from `python -X importtime`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import medians, rblnctl_cmd, report  # noqa: E402


def slowest_imports(n: int = 10) -> list[str]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import rblnctl.cli.app"],
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in out.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m and len(m.group(3)) in (1, 3):  # the app and what it imports directly
            rows.append((int(m.group(2)), m.group(4)))
    rows.sort(reverse=True)
    return [f"  {us / 1e3:7.1f} ms  {name}" for us, name in rows[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    rbln = rblnctl_cmd()
    commands = {
        "rblnctl --help": [*rbln, "--help"],
        "rblnctl --version": [*rbln, "--version"],
        "rblnctl vfio status --all-vendors": [*rbln, "vfio", "status", "--all-vendors", "-o", "json"],
        "rblnctl preflight --local": [*rbln, "preflight", "--local", "-o", "json"],
        "python -c pass": [sys.executable, "-c", "pass"],
    }
    anchor = "kubectl version --client"
    if shutil.which("kubectl"):
        commands[anchor] = ["kubectl", "version", "--client"]
    # Commands that are not built yet (or that fail on this host for a reason of their own) are left out, said so.
    usable = {}
    for name, argv in commands.items():
        rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        if rc in (0, 1):  # preflight exits 1 on a host that fails checks; that is still a full run
            usable[name] = argv
        else:
            print(f"skipped (exit {rc}): {name}")
    # A preflight that finds FAILs exits 1; time it through a wrapper that ignores that code.
    timed = {k: (v if "preflight" not in k else ["sh", "-c", " ".join(v) + " >/dev/null; true"])
             for k, v in usable.items()}
    results = medians(timed, args.runs)
    print(f"median of {args.runs} runs (whole process, wall clock)")
    print(report(results, anchor if anchor in results else "python -c pass"))
    print("slowest imports under rblnctl.cli.app:")
    print("\n".join(slowest_imports()))


if __name__ == "__main__":
    main()
