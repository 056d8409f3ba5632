#!/usr/bin/env python3
"""Time `rblnctl node list` beside `kubectl get nodes` on a small fake cluster (4 NPU nodes by default).

Both run as whole processes against the same loopback FakeApiServer (tests/fakes), with the same
kubeconfig (a bearer token), interleaved so that drift hits both alike. Prints the medians, the
ratio (target: at most 5x), the requests one `node list` sends, and the slowest imports of that
run (`python -X importtime`): a cluster command pays its imports on every call.

    python benchmarks/node_list.py [--nodes 4] [--runs 15]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import installed_env, medians, rblnctl_cmd, report  # noqa: E402

from tests.fakes import objects as o  # noqa: E402
from tests.fakes.apiserver import FakeApiServer  # noqa: E402


def slowest_imports(argv: list[str], env: dict, n: int = 8) -> list[str]:
    """The slowest top-level imports of one run of `python -m rblnctl ARGS` (cumulative)."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "rblnctl", *argv], capture_output=True, text=True,
                         env=env).stderr
    rows = []
    for line in out.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m and len(m.group(3)) == 1:
            rows.append((int(m.group(2)), m.group(4)))
    rows.sort(reverse=True)
    return [f"    {us / 1e3:7.1f} ms  {name}" for us, name in rows[:n]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()

    fake = FakeApiServer().start()
    try:
        fake.add(o.cluster_policy(), *(o.npu_node(f"n{i}") for i in range(args.nodes)))
        with tempfile.TemporaryDirectory() as tmp:
            kc = fake.write_kubeconfig(Path(tmp) / "kubeconfig")
            env = {**installed_env(), "KUBECONFIG": str(kc), "HOME": tmp}
            commands = {"rblnctl node list": [*rblnctl_cmd(), "node", "list"]}
            kubectl = shutil.which("kubectl")
            if kubectl:
                commands["kubectl get nodes"] = [kubectl, f"--kubeconfig={kc}", f"--cache-dir={tmp}/kube-cache",
                                                 "get", "nodes"]
            fake.clear_requests()
            listed = subprocess.run(commands["rblnctl node list"], capture_output=True, text=True, env=env)
            if listed.returncode != 0 or listed.stdout.count("\n") != args.nodes + 1:
                print(f"rblnctl node list failed ({listed.returncode}): {listed.stderr}", file=sys.stderr)
                return 1
            requests = len(fake.requests)
            results = medians(commands, args.runs, env)
            imports = slowest_imports(["node", "list"], env)
    finally:
        fake.stop()
    print(f"{args.nodes} NPU nodes, {args.runs} runs each (median wall time)")
    print(report(results, "kubectl get nodes" if kubectl else "rblnctl node list"))
    if kubectl:
        print("target: rblnctl node list at most 5x kubectl get nodes")
    print(f"requests per node list: {requests}")
    print("slowest imports of one node list:")
    print("\n".join(imports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
