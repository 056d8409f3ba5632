#!/usr/bin/env python3
"""VFIO benchmark: bind and recover 16 NPUs on the simulated kernel; `vfio status` startup beside kubectl's.

Usage: python benchmarks/vfio_bind.py [--runs N] [--devices N]

1. In-process: median wall time of VfioBinder.plan("bind") + apply (unbind, recover) for N devices on a fresh
   simulated tree (tests/fakes/sysfs.py) each run. The simulator's own work (creating links and
   files for every kernel effect) is inside that time, so rblnctl's own share is smaller still.
2. Whole process: median wall time of `rblnctl vfio status` (simulated tree and this host's /sys with
   --all-vendors) and `rblnctl vfio bind --all --dry-run` (simulated tree) next to
   `kubectl version --client`, with ratios; and whether the kubernetes package was imported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _timing import medians, rblnctl_cmd, report  # noqa: E402

from rblnctl.host.vfio import VfioBinder  # noqa: E402
from tests.fakes.sysfs import npu_node  # noqa: E402


def _binder(k, state: Path) -> VfioBinder:
    return VfioBinder(root=k.root, state_file=state, writer=k.writer, is_root=lambda: True)


def time_bind(devices: int, runs: int) -> dict[str, float]:
    """Median seconds for plan, apply, and unbind (plan + apply) of `devices` functions on a fresh tree per run."""
    plans, runs_s, unbinds = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            k = npu_node(Path(tmp), devices)
            for i in range(40):  # a host has processes; give the /proc scan something to read
                k.add_process(1000 + i, f"proc{i}", ["/etc/hosts", "/dev/null", f"/tmp/file{i}"])
            b = _binder(k, Path(tmp) / "state.json")
            t0 = time.perf_counter()
            plan = b.plan("bind", all_devices=True)
            t1 = time.perf_counter()
            out = b.apply(plan)
            t2 = time.perf_counter()
            assert out.ok and len(out.results) == devices, out
            assert all(k.driver_of(d.bdf) == "vfio-pci" for d in plan.devices)
            t3 = time.perf_counter()
            back = b.apply(b.plan("unbind", all_devices=True))
            t4 = time.perf_counter()
            assert back.ok and all(k.driver_of(d.bdf) == "rebellions" for d in plan.devices)
            plans.append(t1 - t0)
            runs_s.append(t2 - t1)
            unbinds.append(t4 - t3)
    return {"plan(bind)": statistics.median(plans), "apply(bind)": statistics.median(runs_s),
            "plan+apply(bind)": statistics.median(p + r for p, r in zip(plans, runs_s, strict=True)),
            "plan+apply(unbind)": statistics.median(unbinds)}


def time_recover(devices: int, runs: int) -> dict[str, float]:
    """Median seconds for recover (plan + apply) of `devices` functions a vfio-manager left without a driver."""
    out = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            k = npu_node(Path(tmp), devices)
            for bdf in list(k.devices):  # what the vfio-manager leaves: override vfio-pci, no driver
                k.set_override(bdf, "vfio-pci")
                k.handle_write(k.sys / "bus/pci/drivers/rebellions/unbind", bdf)
            b = _binder(k, Path(tmp) / "state.json")
            t0 = time.perf_counter()
            res = b.apply(b.plan("recover", all_devices=True))
            out.append(time.perf_counter() - t0)
            assert res.ok and all(k.driver_of(bdf) == "rebellions" for bdf in k.devices)
    return {"plan+apply(recover)": statistics.median(out)}


def kubernetes_imported(argv: list[str]) -> str:
    code = ("import sys; from typer.testing import CliRunner; from rblnctl.cli.app import app; "
            "r = CliRunner().invoke(app, sys.argv[1:]); "
            "print(r.exit_code, any(m == 'kubernetes' or m.startswith('kubernetes.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    return out.stdout.strip() or out.stderr.strip()[-200:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--devices", type=int, default=16)
    args = ap.parse_args()

    res = time_bind(args.devices, args.runs) | time_recover(args.devices, args.runs)
    print(f"in-process, {args.devices} devices on the simulated kernel, median of {args.runs} runs:")
    for name, sec in res.items():
        print(f"  {name:<20} {sec * 1e3:8.1f} ms")

    with tempfile.TemporaryDirectory() as tmp:
        k = npu_node(Path(tmp), args.devices)
        roots = ["--root", str(k.root)]
        rbln = rblnctl_cmd()
        commands = {
            "rblnctl vfio status (sim)": [*rbln, "vfio", "status", "-o", "json", *roots],
            "rblnctl vfio status --all-vendors (/sys)": [*rbln, "vfio", "status", "--all-vendors", "-o", "json"],
            "rblnctl vfio bind --all --dry-run (sim)": [*rbln, "vfio", "bind", "--all", "--dry-run", "-o", "json",
                                                        *roots, "--state-file", str(Path(tmp) / "s.json")],
            "python -c pass": [sys.executable, "-c", "pass"],
        }
        anchor = "kubectl version --client"
        if shutil.which("kubectl"):
            commands[anchor] = ["kubectl", "version", "--client"]
        # An installed package has .pyc files; this checkout may run with PYTHONDONTWRITEBYTECODE=1, which
        # would recompile every rblnctl module on every start. Cache bytecode outside the tree instead.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "rblnctl-bench-pycache")
        results = medians(commands, args.runs, env=env)
        print(f"\nwhole process, median of {args.runs} runs (wall clock, bytecode cached):")
        print(report(results, anchor if anchor in results else "python -c pass"))
        print("\nexit code, kubernetes imported?")
        print(f"  vfio status --all-vendors:  {kubernetes_imported(['vfio', 'status', '--all-vendors', '-o', 'json'])}")
        dry = ["vfio", "bind", "--all", "--dry-run", *roots, "--state-file", str(Path(tmp) / "s.json")]
        print(f"  vfio bind --all --dry-run:  {kubernetes_imported(dry)}")


if __name__ == "__main__":
    main()
