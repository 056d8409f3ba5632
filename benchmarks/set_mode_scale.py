#!/usr/bin/env python3
"""Time a whole `rblnctl node set-mode vm NODE --yes` of a node with many NPU pods beside `kubectl drain` of those pods.

One loopback FakeApiServer (tests/fakes) with graceful deletion (each pod terminates for --deletion
seconds) and the simulated RBLN operator (its pods become Ready --operator-delay seconds after they
are created). Each run gets fresh nodes with --pods NPU pods: rblnctl switches one (lock, cordon,
evict, relabel, wait for the operator, uncordon), kubectl drains the pods of another
(`kubectl drain NODE --pod-selector=... --force --ignore-daemonsets --delete-emptydir-data`), in the
same process run, alternating. Prints the median wall times, the ratio (target: at most 0.07x) and
the requests rblnctl sends during its waits with 50 and with --pods pods (they should not differ).

    python benchmarks/set_mode_scale.py [--pods 200] [--runs 3] [--deletion 0.5] [--operator-delay 0.2]

Needs kubectl on PATH for the comparison (without it only rblnctl is timed).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import installed_env, rblnctl_cmd, time_once  # noqa: E402

from tests.fakes import objects as o  # noqa: E402
from tests.fakes.apiserver import FakeApiServer  # noqa: E402
from tests.fakes.operator import SimulatedOperator  # noqa: E402

NPU = {"rebellions.ai/npu": "1"}
MODE = "rebellions.ai/npu.workload.config"


def seed_node(fake: FakeApiServer, node: str, pods: int, app: str) -> None:
    fake.add(o.npu_node(node), *(o.pod("default", f"{node}-p{i:03d}", node=node, owner_kind="ReplicaSet",
                                       owner_name="web", requests=NPU, labels={"app": app}) for i in range(pods)))


def wait_requests(fake: FakeApiServer, node: str) -> int:
    """Requests from the last eviction of `node`'s pods to its uncordon: the waits (pods leaving, the operator)."""
    reqs = list(fake.requests)
    start = max(i for i, r in enumerate(reqs) if r.path.endswith("/eviction")) + 1
    end = next(i for i in range(start, len(reqs)) if reqs[i].method == "PATCH" and reqs[i].path.endswith(
        f"/nodes/{node}") and ((reqs[i].body or {}).get("spec") or {}).get("unschedulable") is False)
    return end - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--deletion", type=float, default=0.5, help="seconds each pod takes to terminate")
    ap.add_argument("--operator-delay", type=float, default=0.2, help="seconds until an operator pod is Ready")
    args = ap.parse_args()

    fake = FakeApiServer(deletion_delay_s=args.deletion).start()
    op = SimulatedOperator(fake, ready_delay_s=args.operator_delay)
    times: dict[str, list[float]] = {"rblnctl": [], "kubectl": []}
    waits: dict[int, int] = {}
    try:
        fake.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True), o.replicaset("default", "web"))
        op.start()
        with tempfile.TemporaryDirectory() as tmp:
            kc = fake.write_kubeconfig(Path(tmp) / "kubeconfig")
            env = {**installed_env(), "KUBECONFIG": str(kc), "HOME": tmp}
            kubectl_bin = shutil.which("kubectl")

            def rblnctl(node: str) -> list[str]:
                return [*rblnctl_cmd(), "node", "set-mode", "vm", node, "--yes"]

            def kubectl(node: str) -> list[str]:
                return [kubectl_bin or "kubectl", f"--kubeconfig={kc}", f"--cache-dir={tmp}/kube-cache", "drain",
                        node, f"--pod-selector=app={node}", "--force", "--ignore-daemonsets",
                        "--delete-emptydir-data", "--timeout=600s"]

            # Warm-up (page cache, .pyc, kubectl's discovery cache), small.
            seed_node(fake, "warm-r", 5, "warm-r")
            seed_node(fake, "warm-k", 5, "warm-k")
            op.wait_idle(30)
            time_once(rblnctl("warm-r"), env)
            if kubectl_bin:
                time_once(kubectl("warm-k"), env)

            # The requests of the waits, at 50 pods and at --pods pods.
            for n in (50, args.pods):
                node = f"count-{n}"
                seed_node(fake, node, n, node)
                op.wait_idle(30)
                fake.clear_requests()
                time_once(rblnctl(node), env)
                waits[n] = wait_requests(fake, node)

            for i in range(args.runs):
                seed_node(fake, f"r{i}", args.pods, f"r{i}")
                seed_node(fake, f"k{i}", args.pods, f"k{i}")
                op.wait_idle(30)
                order = ["rblnctl", "kubectl"] if i % 2 == 0 else ["kubectl", "rblnctl"]
                for who in order:
                    if who == "rblnctl":
                        times["rblnctl"].append(time_once(rblnctl(f"r{i}"), env))
                        assert fake.get("Node", f"r{i}")["metadata"]["labels"][MODE] == "vm-passthrough"
                    elif kubectl_bin:
                        times["kubectl"].append(time_once(kubectl(f"k{i}"), env))
                        assert not [p for p in fake.list("Pod", "default") if p["spec"].get("nodeName") == f"k{i}"]
    finally:
        op.stop()
        fake.stop()

    med = {k: statistics.median(v) for k, v in times.items() if v}
    print(f"{args.pods} NPU pods per node, {args.deletion:g} s deletion, operator pods Ready after "
          f"{args.operator_delay:g} s; {args.runs} runs each (median wall time)")
    print(f"  rblnctl node set-mode vm NODE --yes   {med['rblnctl']:7.2f} s")
    if "kubectl" in med:
        print(f"  kubectl drain NODE (those pods)       {med['kubectl']:7.2f} s")
        print(f"  ratio                                 {med['rblnctl'] / med['kubectl']:7.3f}x (target: at most "
              "0.07x)")
    else:
        print("  kubectl not on PATH: no comparison")
    print("  requests during the waits (pods leaving, then the operator): "
          + ", ".join(f"{n} pods: {c}" for n, c in waits.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
