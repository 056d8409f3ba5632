#!/usr/bin/env python3
"""Time a pool switch of 20 nodes with --max-unavailable 5 beside 4 single-node switches in sequence.

One loopback FakeApiServer (tests/fakes) with graceful deletion (--deletion seconds per pod) and the
simulated RBLN operator (pods Ready after --operator-delay seconds). Every node carries --pods NPU
pods. The pool: `rblnctl node set-mode vm -l pool=bench --max-unavailable 5 --yes` over --nodes
nodes; the anchor: `rblnctl node set-mode vm NODE --yes` for --nodes/5 other nodes, one after the
other (whole processes). With five nodes at a time the pool should take about as long as those
(target: at most 1.3x). Between runs every node is put back in container mode with fresh pods.

    python benchmarks/pool_switch.py [--nodes 20] [--pods 10] [--runs 3] [--deletion 0.5] [--operator-delay 0.2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
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
MAX_UNAVAILABLE = 5


def add_pods(fake: FakeApiServer, node: str, pods: int, run: int) -> None:
    fake.add(*(o.pod("default", f"{node}-r{run}-p{i}", node=node, owner_kind="ReplicaSet", owner_name="web",
                     requests=NPU) for i in range(pods)))


def reset(fake: FakeApiServer, op: SimulatedOperator, nodes: list[str], pods: int, run: int) -> None:
    """Every node back in container mode (as the operator converges it), with fresh NPU pods."""
    for n in nodes:
        fake.mutate("Node", n, fn=lambda node: node["metadata"]["labels"].update({MODE: "container"}))
    op.wait_idle(60)
    for n in nodes:
        add_pods(fake, n, pods, run)
    op.wait_idle(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--pods", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--deletion", type=float, default=0.5, help="seconds each pod takes to terminate")
    ap.add_argument("--operator-delay", type=float, default=0.2, help="seconds until an operator pod is Ready")
    args = ap.parse_args()
    sequence = max(1, args.nodes // MAX_UNAVAILABLE)

    fake = FakeApiServer(deletion_delay_s=args.deletion).start()
    op = SimulatedOperator(fake, ready_delay_s=args.operator_delay)
    pool = [f"pool-{i:02d}" for i in range(args.nodes)]
    single = [f"single-{i}" for i in range(sequence)]
    times: dict[str, list[float]] = {"pool": [], "sequence": []}
    try:
        fake.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True), o.replicaset("default", "web"),
                 *(o.npu_node(n, labels={"pool": "bench"}) for n in pool), *(o.npu_node(n) for n in single))
        op.start()
        with tempfile.TemporaryDirectory() as tmp:
            kc = fake.write_kubeconfig(Path(tmp) / "kubeconfig")
            env = {**installed_env(), "KUBECONFIG": str(kc), "HOME": tmp}
            pool_cmd = [*rblnctl_cmd(), "node", "set-mode", "vm", "-l", "pool=bench", "--max-unavailable",
                        str(MAX_UNAVAILABLE), "--yes"]
            for run in range(args.runs + 1):  # the first run warms up (page cache, .pyc) and is not counted
                reset(fake, op, pool + single, args.pods, run)
                order = ["pool", "sequence"] if run % 2 == 0 else ["sequence", "pool"]
                for what in order:
                    if what == "pool":
                        elapsed = time_once(pool_cmd, env)
                    else:
                        started = time.perf_counter()
                        for n in single:
                            time_once([*rblnctl_cmd(), "node", "set-mode", "vm", n, "--yes"], env)
                        elapsed = time.perf_counter() - started
                    if run:
                        times[what].append(elapsed)
                modes = {fake.get("Node", n)["metadata"]["labels"][MODE] for n in pool + single}
                assert modes == {"vm-passthrough"}, "a switch did not finish"
    finally:
        op.stop()
        fake.stop()

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.nodes} nodes x {args.pods} NPU pods, {args.deletion:g} s deletion, operator pods Ready after "
          f"{args.operator_delay:g} s; {args.runs} runs each (median wall time)")
    print(f"  pool: set-mode vm -l ... --max-unavailable {MAX_UNAVAILABLE}   {med['pool']:6.2f} s")
    print(f"  {sequence} single-node switches in sequence       {med['sequence']:6.2f} s")
    print(f"  ratio                                       {med['pool'] / med['sequence']:6.2f}x (target: at most 1.3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
