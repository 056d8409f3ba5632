"""Time `rblnctl preflight -o json` beside `kubectl get nodes -o json` on one fake cluster of N NPU nodes.

Both commands run as subprocesses against the same loopback FakeApiServer (tests/fakes), seeded
with N NPU nodes, their NodeFeature objects, the operator, its policy and KubeVirt, in the same
process run, alternating so that drift hits both alike. Prints the median wall time of each, the
ratio (target: rblnctl within 3x of kubectl) and the API requests one preflight run sends.

    python benchmarks/preflight.py [--nodes 1000] [--runs 7] [--method sandbox|dra] [--json]

Needs kubectl on PATH for the comparison (without it only rblnctl is timed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.apiserver import FakeApiServer  # noqa: E402
from tests.preflight.cluster_support import seed  # noqa: E402


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    return time.perf_counter() - start, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--method", choices=("sandbox", "dra"), default="sandbox")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()

    fake = FakeApiServer().start()
    try:
        seed(fake, method=args.method, nodes=args.nodes)
        with tempfile.TemporaryDirectory() as tmp:
            empty = Path(tmp) / "kubeconfig"
            empty.write_text("")
            env = {**os.environ, "KUBECONFIG": str(empty), "PYTHONPATH": str(REPO)}
            rblnctl = [sys.executable, "-m", "rblnctl", "--server", fake.url, "preflight", "-o", "json"]
            kubectl_bin = shutil.which("kubectl")
            kubectl = [kubectl_bin, "--kubeconfig", str(empty), "--server", fake.url, "get", "nodes", "-o", "json"] \
                if kubectl_bin else None

            # Warm-up (page cache, .pyc) and correctness: both must succeed and see every node.
            fake.clear_requests()
            _, p = timed(rblnctl, env)
            report = json.loads(p.stdout)
            requests = len(fake.requests)
            if p.returncode != 0 or report["nodes"] != args.nodes:
                print(f"rblnctl preflight failed (exit {p.returncode}): {p.stderr}", file=sys.stderr)
                return 1
            if kubectl:
                _, k = timed(kubectl, env)
                if k.returncode != 0 or len(json.loads(k.stdout)["items"]) != args.nodes:
                    print(f"kubectl failed (exit {k.returncode}): {k.stderr}", file=sys.stderr)
                    return 1

            times: dict[str, list[float]] = {"rblnctl": [], "kubectl": []}
            for _ in range(args.runs):
                times["rblnctl"].append(timed(rblnctl, env)[0])
                if kubectl:
                    times["kubectl"].append(timed(kubectl, env)[0])
    finally:
        fake.stop()

    med = {k: statistics.median(v) for k, v in times.items() if v}
    result = {
        "nodes": args.nodes,
        "method": args.method,
        "runs": args.runs,
        "preflight_requests": requests,
        "preflight_checks": len(report["checks"]),
        "rblnctl_preflight_median_s": round(med["rblnctl"], 3),
        "kubectl_get_nodes_median_s": round(med["kubectl"], 3) if "kubectl" in med else None,
        "ratio": round(med["rblnctl"] / med["kubectl"], 2) if "kubectl" in med else None,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.nodes} NPU nodes, method {args.method}, {args.runs} runs each (median wall time)")
        print(f"  rblnctl preflight -o json   {med['rblnctl']:.3f} s   ({requests} API requests, "
              f"{len(report['checks'])} findings)")
        if "kubectl" in med:
            print(f"  kubectl get nodes -o json   {med['kubectl']:.3f} s")
            print(f"  ratio                       {result['ratio']:.2f}x (target: within 3x)")
        else:
            print("  kubectl not on PATH: no comparison")
    return 0


if __name__ == "__main__":
    sys.exit(main())
