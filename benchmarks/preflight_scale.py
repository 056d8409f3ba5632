#!/usr/bin/env python3
"""Scale benchmark: `rblnctl preflight -o json` beside `kubectl get nodes -o json` on a fake 1,000-NPU-node cluster.

Both run as whole processes, alternating (benchmarks/_timing.py), against the same loopback
FakeApiServer (tests/fakes) seeded with N NPU nodes, their NodeFeature objects, the operator, its
policy and KubeVirt, each through the same kubeconfig (so both pay for loading credentials, as a
user does). Prints the median wall time of each, their ratio (target: rblnctl within 2x), the API
requests one preflight run sends (target: fewer than 20), and, measured in this process, what
building and writing the report costs.

    python benchmarks/preflight_scale.py [--nodes 1000] [--runs 7] [--method sandbox|dra] [--json]

Benchmarks print; tests never assert times. Needs kubectl on PATH for the comparison.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import installed_env, medians, rblnctl_cmd, report  # noqa: E402

from tests.fakes.apiserver import FakeApiServer  # noqa: E402
from tests.preflight.cluster_support import seed  # noqa: E402


def serialisation_ms(fake: FakeApiServer, method: str) -> dict[str, float]:
    """In this process: the checks' report, its document body (to_dict) and its JSON text, in milliseconds."""
    from rblnctl.cli.output import Format, document, dump
    from rblnctl.kube import KubeOptions, connect
    from rblnctl.preflight.cluster import ClusterPreflight
    from tests.preflight.cluster_support import NO_HELM

    rep = ClusterPreflight(kube=connect(KubeOptions(server=fake.url)), method=method, helm=NO_HELM).run()
    t0 = time.perf_counter()
    doc = document("PreflightReport", rep)
    t1 = time.perf_counter()
    text = dump(doc, Format.json)
    t2 = time.perf_counter()
    return {"to_dict_ms": round((t1 - t0) * 1e3, 1), "json_ms": round((t2 - t1) * 1e3, 1), "bytes": len(text)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--method", choices=("sandbox", "dra"), default="sandbox")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()

    kubectl = shutil.which("kubectl")
    fake = FakeApiServer().start()
    try:
        seed(fake, method=args.method, nodes=args.nodes)
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = fake.write_kubeconfig(Path(tmp) / "kubeconfig")
            env = installed_env()
            env["KUBECONFIG"] = str(kubeconfig)
            env["PATH"] = tmp  # no helm: only the API server's answers are timed
            rbln = [*rblnctl_cmd(), "--kubeconfig", str(kubeconfig), "preflight", "--method", args.method,
                    "-o", "json"]
            commands = {"rblnctl preflight -o json": rbln}
            if kubectl:
                commands["kubectl get nodes -o json"] = [kubectl, "--kubeconfig", str(kubeconfig), "get", "nodes",
                                                         "-o", "json"]

            # Correctness first: both succeed and see every node; count one preflight run's requests.
            fake.clear_requests()
            p = subprocess.run(rbln, capture_output=True, text=True, env=env, timeout=300)
            requests = len(fake.requests)
            if p.returncode not in (0, 1) or json.loads(p.stdout)["nodes"] != args.nodes:
                print(f"rblnctl preflight failed (exit {p.returncode}): {p.stderr[-400:]}", file=sys.stderr)
                return 1
            if kubectl:
                k = subprocess.run(commands["kubectl get nodes -o json"], capture_output=True, text=True, env=env,
                                   timeout=300)
                if k.returncode != 0 or len(json.loads(k.stdout)["items"]) != args.nodes:
                    print(f"kubectl failed (exit {k.returncode}): {k.stderr[-400:]}", file=sys.stderr)
                    return 1
            # time_once() refuses a non-zero exit; a healthy seeded cluster exits 0.
            if p.returncode != 0:
                print(f"preflight found failures on the seeded cluster: {p.stderr[-400:]}", file=sys.stderr)
                return 1
            med = medians(commands, args.runs, env)
        cost = serialisation_ms(fake, args.method)
    finally:
        fake.stop()

    base = med.get("kubectl get nodes -o json")
    ratio = med["rblnctl preflight -o json"] / base if base else None
    result = {"nodes": args.nodes, "method": args.method, "runs": args.runs, "preflight_requests": requests,
              "medians_s": {k: round(v, 3) for k, v in med.items()},
              "ratio": round(ratio, 2) if ratio else None, **cost}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.nodes} NPU nodes, method {args.method}, {args.runs} runs each, median wall time:")
    print(report(med, "kubectl get nodes -o json") if base else report(med, "rblnctl preflight -o json"))
    if ratio:
        print(f"ratio {ratio:.2f}x (target: at most 2x)")
    else:
        print("kubectl not on PATH: no comparison")
    print(f"preflight API requests: {requests} (target: fewer than 20)")
    print(f"report ({cost['bytes'] / 1e6:.2f} MB): document body {cost['to_dict_ms']} ms, JSON text "
          f"{cost['json_ms']} ms (in-process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
