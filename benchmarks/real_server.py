#!/usr/bin/env python3
"""Time rblnctl beside kubectl on a real kube-apiserver (TLS, token auth, real serialisation).

Starts the suite's envtest control plane (tests/envtest: etcd + kube-apiserver from KUBEBUILDER_ASSETS,
the operator v0.3.0's, NFD's and KubeVirt's CRDs), seeds N NPU nodes (default 1,000, a quarter of them in
vm-passthrough mode), an RBLNClusterPolicy and a KubeVirt CR, then runs each pair as whole processes,
interleaved so that drift hits both alike, and prints the medians and the ratio to the kubectl anchor:

  rblnctl node list     vs  kubectl get nodes -l <the NFD label>
  rblnctl status        vs  kubectl get nodes,rblnclusterpolicies,kubevirts -A
  rblnctl preflight     vs  kubectl get nodes,nodefeatures,rblnclusterpolicies,kubevirts,daemonsets -A -o json

kubectl keeps its discovery cache in a temporary --cache-dir (warmed by the first run), as on a workstation.

    KUBEBUILDER_ASSETS=$(../shared/envtest/setup) python benchmarks/real_server.py [--nodes 1000] [--runs 7]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plane import NFD, Unavailable, control_plane, kubectl, seed_cluster  # noqa: E402
from _timing import installed_env, rblnctl_cmd, time_once  # noqa: E402

from tests.fakes import objects as o  # noqa: E402
from tests.fakes.releases import V0_3_0  # noqa: E402


def seed(api, nodes: int) -> None:
    seed_cluster(api, [])
    objs = [o.npu_node(f"npu-{i:04d}", mode="vm-passthrough" if i % 4 == 0 else "container", release=V0_3_0)
            for i in range(nodes)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(api.seed, objs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    try:
        kc_bin = kubectl()
        with tempfile.TemporaryDirectory() as tmp, control_plane(Path(tmp) / "cp") as (cp, api):
            return bench(args, tmp, cp, api, kc_bin)
    except Unavailable as e:
        print(f"real_server.py: {e}", file=sys.stderr)
        return 2


def bench(args: argparse.Namespace, tmp: str, cp, api, kubectl: str) -> int:
    seed(api, args.nodes)
    env = {**installed_env(), "KUBECONFIG": str(cp.kubeconfig), "HOME": tmp}
    kc = [kubectl, f"--cache-dir={tmp}/kube-cache"]
    pairs = {
        "node list": ([*rblnctl_cmd(), "node", "list"], [*kc, "get", "nodes", "-l", NFD]),
        "status": ([*rblnctl_cmd(), "status"], [*kc, "get", "nodes,rblnclusterpolicies,kubevirts", "-A"]),
        "preflight": ([*rblnctl_cmd(), "preflight"],
                      [*kc, "get", "nodes,nodefeatures,rblnclusterpolicies,kubevirts,daemonsets", "-A", "-o",
                       "json"]),
    }
    print(f"kube-apiserver {cp.version} on loopback (TLS, token auth), {args.nodes} NPU nodes, "
          f"{args.runs} runs each (median wall time)")
    for name, (ours, theirs) in pairs.items():
        ok = {0, 1} if name == "preflight" else {0}  # preflight exits 1: nothing installed for real here
        samples: dict[str, list[float]] = {"rblnctl": [], "kubectl": []}
        for argv in (ours, theirs):
            _run(argv, env, ok)
        for _ in range(args.runs):
            samples["rblnctl"].append(_run(ours, env, ok))
            samples["kubectl"].append(_run(theirs, env, {0}))
        med = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
        print(f"  {name:<10} rblnctl {med['rblnctl'] * 1e3:7.0f} ms   kubectl {med['kubectl'] * 1e3:7.0f} ms"
              f"   ratio {med['rblnctl'] / med['kubectl']:4.2f}x")
    return 0


def _run(argv: list[str], env: dict, ok: set[int]) -> float:
    if ok == {0}:
        return time_once(argv, env)
    import time

    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=300)
    if proc.returncode not in ok:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-300:]}")
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
