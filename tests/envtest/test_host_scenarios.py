"""rblnctl's host pods (preflight --hosts, vfio status --node) on the fake and on a real kube-apiserver alike.

A host pod runs rblnctl's own command on its node. The simulated kubelet of those pods (tests/fakes/hostkubelet.py)
runs it on a simulated host tree, reports the pod's status through pods/status and serves its log from an HTTPS
kubelet endpoint (tests/cluster/kubelet_endpoint.py) that the node's status points at: a real kube-apiserver answers
``GET pods/NAME/log`` by asking the node's kubelet, and so does the fake for such a node. The first test pins what
the two servers relay, word for word; the others run the commands on both.
"""

from __future__ import annotations

import json

import pytest

from tests.cluster.client import ApiFailure
from tests.cluster.kubelet_endpoint import KubeletEndpoint
from tests.fakes import objects as o
from tests.fakes import sysfs as ht
from tests.fakes.releases import V0_3_0
from tests.preflight.cluster_support import nfd_features
from rblnctl.constants import HOST_POD_LABEL as HOST_LABEL
from rblnctl.constants import HOST_POD_RUN_LABEL as HOST_RUN_LABEL

NS = "team-b"


def log_of(backend, pod: str, **query) -> tuple[int, str]:
    try:
        return 200, backend.api.request("GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log", query=query)
    except ApiFailure as e:
        return e.status, e.body


def test_a_pod_log_is_what_the_nodes_kubelet_answers(backend):
    """Found on kube-apiserver v1.36.2 and now done the same by the fake for a node whose address is loopback: the
    log is asked of the node's kubelet; its text is relayed, its refusals become a Status of its code and words,
    a kubelet that does not answer is a 500 naming the URL, a pod on no node has an empty log."""
    kubelet = KubeletEndpoint().start()
    try:
        backend.api.seed(o.node("n1"))
        kubelet.register(backend.api, "n1")
        backend.api.seed(*[o.pod(NS, name, node="n1") for name in ("done", "waiting", "unknown")],
                         o.pod(NS, "nowhere"))
        kubelet.set_log(NS, "done", "one\ntwo\n")
        kubelet.set_waiting(NS, "waiting", "main", "ErrImagePull")
        assert log_of(backend, "done") == (200, "one\ntwo\n")
        assert log_of(backend, "done", tailLines=1) == (200, "two\n")
        assert log_of(backend, "nowhere") == (200, None)  # empty
        code, status = log_of(backend, "waiting")
        assert (code, status["reason"], status["message"]) == (
            400, "BadRequest", 'container "main" in pod "waiting" is waiting to start: image can\'t be pulled')
        code, status = log_of(backend, "unknown")
        assert (code, status["reason"], status["message"], status["details"]) == (
            404, "NotFound", "the server could not find the requested resource ( pods/log unknown)",
            {"name": "unknown", "kind": "pods/log"})
        assert kubelet.requests == [f"/containerLogs/{NS}/{p}/main" for p in ("done", "done", "waiting", "unknown")]
        code, status = log_of(backend, "done", container="sidecar")
        assert (code, status["message"]) == (400, "container sidecar is not valid for pod done")
    finally:
        kubelet.stop()
    code, status = log_of(backend, "done")
    assert code == 500 and "reason" not in status
    assert status["message"] == (f'Get "https://127.0.0.1:{kubelet.port}/containerLogs/{NS}/done/main": '
                                 f"dial tcp 127.0.0.1:{kubelet.port}: connect: connection refused")


def seed_npu_cluster(backend, nodes: int) -> list[str]:
    """Chart v0.3.0's operator and policy, KubeVirt with HostDevices, and `nodes` vm-passthrough NPU nodes with their
    NFD features, seeded as a client does."""
    names = [f"npu-{i:04d}" for i in range(nodes)]
    # Chart v0.3.0 throughout, as the real server's CRD is v0.3.0's: its policy with the CRD defaults (resourceList),
    # the nodes advertising what its sandbox plugin names under that policy, KubeVirt permitting that name. (A generic
    # policy got v0.3.0's defaults on the real server while the nodes advertised a later release's RBLN-CA22_PF, and
    # preflight's node.vm-npus rightly found them offering none of the policy's names.)
    policy = V0_3_0.policy(vfio_manager=True, sandbox=True)
    resource = V0_3_0.vm_resource(policy, "RBLN-CA25")
    backend.api.seed(policy, V0_3_0.operator_deployment(),
                     o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0",
                                permitted_pci=[("1EFF:1220", resource)]),
                     *[o.npu_node(n, mode="vm-passthrough", release=V0_3_0, policy=policy, product="RBLN-CA25")
                       for n in names],
                     *[nfd_features(n) for n in names])
    return names


def host_pods(backend) -> list[dict]:
    return backend.api.list("Pod", labels=HOST_LABEL)


def test_preflight_hosts_runs_one_host_pod_per_node(backend, tmp_path):
    names = seed_npu_cluster(backend, 2)
    kubelet = backend.host_kubelet(default=ht.build_host(tmp_path / "host", ht.intel_bare_metal()).root)
    r = backend.rblnctl("preflight", "--hosts", "--image", "registry.local/rblnctl:ci", "--max-parallel", "1",
                        "-n", NS, "-o", "json")
    checks = json.loads(r.stdout)["checks"]
    # the one cluster check that fails is the release's (chart v0.3.0's sandbox plugin never starts on a
    # vm-passthrough node), on both backends alike; the host side, which this test is about, passes
    failed = {c["id"] for c in checks if c["status"] == "FAIL"}
    assert (r.exit_code, failed) == (1, {"operator.version"}), r.stdout + r.stderr
    rows = [(c["id"], c["scope"]) for c in checks if c["id"].startswith("host.")]
    assert {n for _, n in rows} == set(names) and len(rows) == 2 * 11
    assert {c["id"]: c["status"] for c in checks}["hosts.pods"] == "PASS"
    assert sorted(n for n, _ in kubelet.runs) == names and kubelet.max_alive == 1
    assert len(kubelet.endpoint.requests) == 2  # each report read from its node's kubelet
    assert host_pods(backend) == [] and kubelet.errors == []
    # The run's pods are watched, not polled: one LIST, then one stream from its resourceVersion, for both pods
    # (on the real server, its audit log says so).
    runs = [r for r in backend.reads("pods") if HOST_RUN_LABEL in (r.query.get("labelSelector") or [""])[0]]
    assert [r.verb for r in runs] == ["list", "watch"], runs
    assert runs[1].query["resourceVersion"] != [""]


def test_vfio_status_of_a_node_reads_it_through_a_host_pod(backend, tmp_path):
    backend.api.seed(o.node("gpu-a01"))
    kubelet = backend.host_kubelet(default=ht.build_host(tmp_path / "node", ht.npu_on_vfio()).root)
    r = backend.rblnctl("vfio", "status", "--node", "gpu-a01", "-n", NS, "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "VfioStatus" and doc["searched"] == "/sys/bus/pci/devices"
    assert [(d["bdf"], d["driver"], d["vfioDevice"]) for d in doc["devices"]] == [
        ("0000:3b:00.0", "vfio-pci", "/dev/vfio/42"), ("0000:5e:00.0", "vfio-pci", "/dev/vfio/43")]
    assert kubelet.runs[0][0] == "gpu-a01" and host_pods(backend) == [] and kubelet.errors == []


@pytest.mark.parametrize("failure", ["unschedulable", "image pull"])
def test_vfio_status_of_a_node_whose_pod_cannot_run(backend, tmp_path, failure):
    backend.api.seed(o.node("gpu-a01"))
    kubelet = backend.host_kubelet(default=ht.build_host(tmp_path / "node", ht.npu_on_vfio()).root)
    if failure == "unschedulable":
        kubelet.unschedulable["gpu-a01"] = "0/1 nodes are available: 1 node(s) were unschedulable."
        says = "cannot be scheduled: 0/1 nodes are available"
    else:
        kubelet.image_pull["gpu-a01"] = "ErrImagePull"
        says = "ErrImagePull"
    r = backend.rblnctl("vfio", "status", "--node", "gpu-a01", "-n", NS)
    assert r.exit_code == 1 and says in r.stderr and r.stdout == "", r.stderr
    # rblnctl deleted its pod; never started, on a node, its deletion is graceful: the kubelet confirms it
    backend.api.wait_for(lambda: host_pods(backend) == [], message="the host pod to go")
    assert kubelet.errors == []
