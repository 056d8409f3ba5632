#!/usr/bin/env python3
"""Fleet-scale read commands on the real kube-apiserver: each beside its kubectl anchor and the raw fetch it needs.

Starts the suite's envtest control plane (tests/envtest: etcd + kube-apiserver from KUBEBUILDER_ASSETS, TLS,
token auth; the operator v0.3.0's, NFD's and KubeVirt's CRDs installed as tests/envtest installs them), then seeds
a fleet of size N (default 5,000, the size of issue 31) concurrently with a pooled HTTP client:

* N NPU nodes, half in each mode (container / vm-passthrough), 8 NPUs each, v0.3.0's labels and resources,
  and 2 operator pods on each (the first two components of the node's mode: 2N pods in rbln-system);
* N VirtualMachines (1 NPU each, spread over 50 namespaces) with their Running VMIs on the vm-passthrough
  nodes and their virt-launcher pods (N pods);
* N inference pods asking for 1 NPU each on the container nodes (N pods).

That is 7N objects (35,000 at the default). Then each read command runs as a whole process, interleaved with
its anchors, median of --runs, and the table gives the medians, rblnctl's ratio to each, and rblnctl's peak RSS
(/usr/bin/time -f %M):

* kubectl: the anchor issue 31 names for the command (kubectl keeps its discovery cache in a temporary
  --cache-dir, warmed by the warm-up run, as on a workstation);
* raw: a minimal stdlib process (``_rawfetch``) that GETs exactly the collections the command read, as the
  apiserver's audit log recorded them for one run of the command (same paths, selectors, page size and
  resourceVersion), all at once, following ``continue``, reading every byte and decoding nothing. The floor:
  what the command must fetch, with no work done on it.

    KUBEBUILDER_ASSETS=$(../shared/envtest/setup) python benchmarks/fleet.py [--nodes 5000] [--runs 3]

Run it inside ``unshare -n sh -c 'ip link set lo up && exec ...'`` when others use the machine (free ports race).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plane import NFD, Unavailable, control_plane, kubectl, seed_cluster  # noqa: E402
from _timing import installed_env, rblnctl_cmd  # noqa: E402

NPUS = 8
PRODUCT = "RBLN-CA12"  # in both v0.3.0 resourceLists (ATOM, ATOM_PT)
VM_NAMESPACES = 50
MiB = 1024 * 1024


# ---- seeding ---------------------------------------------------------------------------------------------------

def fleet(nodes: int) -> tuple[list[dict], list[dict], list[dict], list[dict], list[str]]:
    """(nodes, VMs, VMIs, pods, namespaces) of a fleet of `nodes` NPU nodes, built by the fake's object helpers."""
    from tests.fakes import objects as o
    from tests.fakes.releases import V0_3_0

    policy = V0_3_0.policy(vfio_manager=True, sandbox=True)
    vm_res = V0_3_0.vm_resource(policy, PRODUCT)
    c_res = V0_3_0.container_resource(policy, PRODUCT)
    node_objs, pods = [], []
    vm_nodes, c_nodes = [], []
    for i in range(nodes):
        mode = "vm-passthrough" if i % 2 else "container"
        name = f"npu-{i:05d}"
        n = o.npu_node(name, mode=mode, npus=NPUS, product=PRODUCT, release=V0_3_0, policy=policy)
        node_objs.append(n)
        (vm_nodes if i % 2 else c_nodes).append(name)
        for comp in V0_3_0.components(mode)[:2]:
            ds = V0_3_0.daemonset_name(comp, node=n)
            pods.append(o.pod("rbln-system", f"{ds}-{i:05d}", node=name, owner_kind="DaemonSet", owner_name=ds,
                              labels=V0_3_0.pod_labels(comp, node=n)))
    vms, vmis = [], []
    namespaces = ["rbln-system", "kubevirt"]
    namespaces += [f"vms-{k:02d}" for k in range(VM_NAMESPACES)] + [f"inference-{k:02d}" for k in range(VM_NAMESPACES)]
    for j in range(nodes):
        ns, name = f"vms-{j % VM_NAMESPACES:02d}", f"vm-{j:05d}"
        node = vm_nodes[j % len(vm_nodes)] if vm_nodes else None
        vms.append(o.vm(ns, name, host_devices=[vm_res]))
        vmis.append(o.vmi(ns, name, node, host_devices=[vm_res]))
        pods.append(o.virt_launcher(ns, name, node, resources={vm_res: "1"}))
    for j in range(nodes):
        ns = f"inference-{j % VM_NAMESPACES:02d}"
        node = c_nodes[j % len(c_nodes)] if c_nodes else None
        pods.append(o.pod(ns, f"infer-{j:05d}", node=node, owner_kind="ReplicaSet", owner_name="infer",
                          requests={c_res: "1"}, labels={"app": "inference"}))
    return node_objs, vms, vmis, pods, namespaces


def seed(api, nodes: int, workers: int) -> float:
    """Seed the fleet concurrently (create, then status, as Api.seed does, but no owner look-ups); seconds taken."""
    import urllib3

    # one pooled connection per worker: no TLS handshake per object
    api._pool = urllib3.PoolManager(maxsize=workers, retries=False, cert_reqs="CERT_REQUIRED", ca_certs=api._ca)
    start = time.perf_counter()
    node_objs, vms, vmis, pods, namespaces = fleet(nodes)
    seed_cluster(api, namespaces)

    def one(obj: dict) -> None:
        refs = obj["metadata"].pop("ownerReferences", None)
        created = None
        status = obj.get("status")
        body = {k: v for k, v in obj.items() if k != "status"}
        body["metadata"] = {k: v for k, v in obj["metadata"].items()
                            if k not in ("resourceVersion", "uid", "creationTimestamp", "generation")}
        if refs:
            body["metadata"]["ownerReferences"] = refs
        created = api.create(body)
        k = api.kind(obj)
        if status and k.status:
            api.patch(k.kind, created["metadata"]["name"], {"status": status}, created["metadata"].get("namespace"),
                      sub="status")
        if k.kind == "Node" and created.get("spec", {}).get("taints"):
            # TaintNodesByCondition admission taints a new node not-ready; the fleet's nodes are Ready.
            api.patch("Node", created["metadata"]["name"], {"spec": {"taints": None}})

    with ThreadPoolExecutor(workers) as pool:
        for batch in (node_objs, vms, vmis, pods):
            list(pool.map(one, batch))
    return time.perf_counter() - start


# ---- timing ----------------------------------------------------------------------------------------------------

def run(argv: list[str], env: dict, ok: frozenset[int] = frozenset({0})) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one whole process.

    Peak RSS comes from /usr/bin/time -f %M (the rusage of a child of that small process): a child forked straight
    from this Python process would report this process's own RSS, copied at fork, as its peak.
    """
    with tempfile.NamedTemporaryFile("r") as rss:
        timed = ["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name, *argv] if os.path.exists("/usr/bin/time") else argv
        start = time.perf_counter()
        proc = subprocess.run(timed, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=600)
        elapsed = time.perf_counter() - start
        kib = rss.read().strip().splitlines()
    if proc.returncode not in ok:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-400:]}")
    return elapsed, int(kib[-1]) * 1024 if kib and kib[-1].isdigit() else 0


def reads_of(cp, argv: list[str], env: dict, ok: frozenset[int]) -> list[str]:
    """The GET URIs one run of `argv` sent, from the apiserver's audit log (rblnctl's user agent; pages folded)."""
    from tests.envtest.audit import AuditLog

    log = AuditLog(cp.audit_log)
    mark = log.mark()
    run(argv, env, ok)
    uris: list[str] = []
    for e in log.events(mark, user_agent="rblnctl"):
        if e.verb not in ("list", "get"):
            continue
        parts = urlsplit(e.uri)
        if "continue" in dict(parse_qsl(parts.query)):  # a later page of a list already counted: _rawfetch follows
            continue
        q = parse_qsl(parts.query)
        uri = parts.path + (f"?{urlencode(q)}" if q else "")
        if uri not in uris:
            uris.append(uri)
    return uris


def table(rows: list[tuple[str, dict[str, tuple[float, int]]]]) -> str:
    out = ["| command | rblnctl | peak RSS | kubectl anchor | ratio | raw fetch | ratio |",
           "|---|---|---|---|---|---|---|"]
    for name, med in rows:
        for mine in [k for k in med if k.startswith("rblnctl")]:
            ours, rss = med[mine]
            label = f"`{name}`" + (f" ({mine.partition('@')[2]})" if "@" in mine else "")
            cells = [label, f"{ours:.2f} s", f"{rss / MiB:.0f} MiB"]
            for k in ("kubectl", "raw"):
                if k in med:
                    cells += [f"{med[k][0]:.2f} s", f"{ours / med[k][0]:.2f}x"]
                else:
                    cells += ["-", "-"]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000, help="NPU nodes; also the number of VMs and inference pods")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=16, help="concurrent seeding requests")
    ap.add_argument("--only", action="append", default=[], help="time only this command (repeatable)")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=DIR",
                    help="also time rblnctl from another checkout (_tree.py DIR), e.g. before=/tmp/main (repeatable)")
    ap.add_argument("--serve", action="store_true", help="seed, print the KUBECONFIG, keep serving until stopped")
    ap.add_argument("--attach", metavar="DIR", type=Path,
                    help="time against the fleet a --serve run keeps serving (DIR: its control plane's folder, "
                         "the KUBECONFIG's); --nodes must say its size")
    args = ap.parse_args()
    try:
        kc_bin = kubectl()
        if args.attach:
            with tempfile.TemporaryDirectory() as tmp:
                return timing(args, tmp, Attached(args.attach), kc_bin)
        with tempfile.TemporaryDirectory() as tmp, control_plane(Path(tmp) / "cp") as (cp, api):
            return bench(args, tmp, cp, api, kc_bin)
    except Unavailable as e:
        print(f"fleet.py: {e}", file=sys.stderr)
        return 2


class Attached:
    """The control plane of a --serve run, from its folder: what timing() reads of a ControlPlane."""

    def __init__(self, folder: Path) -> None:
        import json
        import ssl
        import urllib.request

        self.kubeconfig = folder / "kubeconfig"
        self.audit_log = folder / "audit.log"
        self.ca = folder / "certs" / "ca.crt"
        self.admin_token = (folder / "certs" / "tokens.csv").read_text().split(",", 1)[0]
        self.url = next(line.split('"')[3] for line in self.kubeconfig.read_text().splitlines()
                        if '"server"' in line or "server:" in line) if '"server"' in self.kubeconfig.read_text() \
            else next(line.split("server:", 1)[1].strip() for line in self.kubeconfig.read_text().splitlines()
                      if "server:" in line)
        req = urllib.request.Request(self.url + "/version", headers={"Authorization": f"Bearer {self.admin_token}"})
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=str(self.ca))) as resp:
            self.version = json.loads(resp.read())["gitVersion"]


def bench(args: argparse.Namespace, tmp: str, cp, api, kubectl: str) -> int:
    took = seed(api, args.nodes, args.workers)
    print(f"kube-apiserver {cp.version} on loopback (TLS, token auth); seeded {7 * args.nodes} objects "
          f"({args.nodes} NPU nodes, {args.nodes} VMs+VMIs, {4 * args.nodes} pods) in {took:.0f} s "
          f"with {args.workers} workers", flush=True)
    if args.serve:  # a fleet to profile against: the kubeconfig, then wait to be stopped
        print(f"KUBECONFIG={cp.kubeconfig}", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # then stop the plane cleanly
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
        return 0
    return timing(args, tmp, cp, kubectl)


def timing(args: argparse.Namespace, tmp: str, cp, kubectl: str) -> int:
    """Each command beside its anchors on the fleet `cp` serves; the table."""
    env = {**installed_env(), "KUBECONFIG": str(cp.kubeconfig), "HOME": tmp}
    rbln = rblnctl_cmd()
    kc = [kubectl, f"--cache-dir={tmp}/kube-cache"]
    raw = [sys.executable, str(Path(__file__).resolve().parent / "_rawfetch.py")]
    # name: (rblnctl argv, exit codes that are a full run, kubectl anchor argv or None)
    commands: dict[str, tuple[list[str], frozenset[int], list[str] | None]] = {
        "node list": (["node", "list"], frozenset({0}), ["get", "nodes", "-l", NFD]),
        "node list -o json": (["node", "list", "-o", "json"], frozenset({0}),
                              ["get", "nodes", "-l", NFD, "-o", "json"]),
        "status": (["status"], frozenset({0, 1}), ["get", "nodes,rblnclusterpolicies,kubevirts", "-A"]),
        "vm list -A -o json": (["vm", "list", "-A", "-o", "json"], frozenset({0}),
                               ["get", "vms,vmis", "-A", "-o", "json"]),
        "vm fit --npus 2": (["vm", "fit", "--npus", "2"], frozenset({0, 1}),
                            ["get", "nodes,pods", "-A", "-o", "json"]),
        "preflight -o json": (["preflight", "-o", "json"], frozenset({0, 1}),
                              ["get", "nodes,nodefeatures,rblnclusterpolicies,kubevirts,daemonsets", "-A",
                               "-o", "json"]),
        "--help": (["--help"], frozenset({0}), None),
    }
    rows = []
    for name, (argv, ok, anchor) in commands.items():
        if args.only and name not in args.only:
            continue
        ours = [*rbln, *argv]
        trio: dict[str, tuple[list[str], frozenset[int], dict]] = {"rblnctl": (ours, ok, env)}
        for label, tree in (a.split("=", 1) for a in args.also):  # the same command from another checkout
            trio[f"rblnctl@{label}"] = ([sys.executable, str(Path(__file__).resolve().parent / "_tree.py"),
                                         str(Path(tree).resolve()), *argv], ok, env)
        if anchor:
            trio["kubectl"] = ([*kc, *anchor], frozenset({0}), env)
            uris = reads_of(cp, ours, env, ok)
            trio["raw"] = ([*raw, cp.url, str(cp.ca), cp.admin_token, *uris], frozenset({0}), env)
            print(f"{name}: reads {len(uris)} collections: {' '.join(uris)}", flush=True)
        else:
            trio["kubectl"] = ([kubectl, "version", "--client"], frozenset({0}), env)
        samples: dict[str, list[tuple[float, int]]] = {k: [] for k in trio}
        for argv_, ok_, env_ in trio.values():
            run(argv_, env_, ok_)  # warm-up: bytecode, kubectl's discovery cache
        for _ in range(args.runs):
            for k, (argv_, ok_, env_) in trio.items():
                samples[k].append(run(argv_, env_, ok_))
        med = {k: (statistics.median(t for t, _ in v), max(r for _, r in v)) for k, v in samples.items()}
        rows.append((name, med))
        print("\n".join(table([(name, med)]).splitlines()[2:]), flush=True)
    print()
    print(f"{args.nodes} NPU nodes, {7 * args.nodes} objects, median of {args.runs} (whole processes, interleaved)")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
