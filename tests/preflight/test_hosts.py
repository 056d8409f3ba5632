"""`preflight --hosts`: the host checks of every NPU node, run in host pods by the fake kubelet, merged per node."""

from __future__ import annotations

import json

import pytest

from rblnctl.hostpods.runner import HostPodRun, PodOutcome, PodState
from rblnctl.preflight.hosts import HostChecks, outcome_findings, parse_host_report
from rblnctl.preflight.model import Findings, Status
from tests.fakes import sysfs as ht
from tests.fakes.clock import FakeClock
from tests.fakes.hostkubelet import HostKubelet
from tests.preflight.cluster_support import CLUSTER_IDS, NODE_IDS, cluster, per_node, run, seed
from tests.preflight.host_support import HOST_IDS
from rblnctl.constants import HOST_POD_LABEL as LABEL

IMAGE = "registry.local/rblnctl:test"


@pytest.fixture
def trees(tmp_path):
    """Three host shapes: healthy, AMD with the IOMMU off in the kernel, a VM worker without a vIOMMU."""
    return {
        "ok": ht.build_host(tmp_path / "ok", ht.intel_bare_metal()).root,
        "amd-off": ht.build_host(tmp_path / "amd", ht.amd_iommu_off()).root,
        "vm": ht.build_host(tmp_path / "vm", ht.vm_without_viommu()).root,
    }


@pytest.fixture
def kubelet(apiserver, trees):
    k = HostKubelet(apiserver, default=trees["ok"]).start()
    yield k
    k.stop()
    assert k.errors == []


def hosts(**kw) -> HostChecks:
    return HostChecks(**({"image": IMAGE, "clock": FakeClock()} | kw))


def host_pods(apiserver) -> list[str]:
    return [p["metadata"]["name"] for p in apiserver.list("Pod") if LABEL in (p["metadata"].get("labels") or {})]


def test_healthy_run_merges_one_row_per_node_per_host_check(apiserver, kube, kubelet, trees):
    names = seed(apiserver, nodes=3)
    kubelet.hosts = {names[1]: trees["amd-off"], names[2]: trees["vm"]}
    report = run(kube, hosts=hosts())
    assert report.target == "cluster" and report.nodes == 3
    assert [c.id for c in report.checks if c.scope == "cluster"] == [*CLUSTER_IDS, "hosts.pods"]
    c = cluster(report)["hosts.pods"]
    assert c.status == Status.PASS and c.evidence == (f"3 NPU nodes checked by host pods (image {IMAGE}, namespace "
                                                      "rbln-system)")
    for id_ in HOST_IDS:
        assert set(per_node(report, id_)) == set(names)  # the node name is the scope of each row
    assert len(report.checks) == len(CLUSTER_IDS) + 1 + 3 * (len(NODE_IDS) + len(HOST_IDS))
    kernel = per_node(report, "host.iommu.kernel")
    assert kernel[names[0]].status == Status.PASS and kernel[names[1]].status == Status.FAIL
    assert per_node(report, "host.virt")[names[2]].status == Status.FAIL
    assert "remove `amd_iommu=off`" in per_node(report, "host.iommu.cmdline")[names[1]].remedy
    # cluster-wide findings first, then per node
    scopes = [c.scope for c in report.checks]
    assert scopes.index(names[0]) > max(i for i, s in enumerate(scopes) if s == "cluster")
    assert host_pods(apiserver) == [] and {n for n, _ in kubelet.runs} == set(names)


def test_unschedulable_and_image_pull_nodes_are_findings(apiserver, kube, kubelet):
    names = seed(apiserver, nodes=3)
    kubelet.unschedulable[names[0]] = "0/3 nodes are available: 3 node(s) had untolerated taint."
    kubelet.image_pull[names[2]] = "ErrImagePull"
    report = run(kube, hosts=hosts())
    pod = per_node(report, "host.pod")
    assert set(pod) == {names[0], names[2]}
    assert pod[names[0]].status == Status.FAIL
    assert "cannot be scheduled: 0/3 nodes are available" in pod[names[0]].evidence
    assert pod[names[0]].remedy_command == f"kubectl describe node {names[0]}"
    assert pod[names[2]].status == Status.FAIL and f"image {IMAGE} cannot be pulled" in pod[names[2]].evidence
    assert "ErrImagePull" in pod[names[2]].evidence and "--image" in pod[names[2]].remedy
    assert set(per_node(report, "host.npu.present")) == {names[1]}  # the node that ran has its host rows
    summary = cluster(report)["hosts.pods"]
    assert summary.status == Status.FAIL and summary.evidence.startswith(
        "1 of 3 NPU nodes checked, 2 not (1 unschedulable, 1 image-pull; see host.pod)")
    assert not report.summary.ok and host_pods(apiserver) == []


def test_interrupt_during_host_checks_deletes_every_pod(apiserver, kube, kubelet):
    names = seed(apiserver, nodes=5)
    kubelet.hang.update(names)
    seen: list[str] = []

    def on_started(node: str, pod: str) -> None:
        seen.append(pod)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(kube, hosts=hosts(on_started=on_started))
    assert host_pods(apiserver) == [] and len(kubelet.created) == 2


def test_keep_says_how_to_remove_the_pods(apiserver, kube, kubelet):
    seed(apiserver, nodes=2)
    report = run(kube, hosts=hosts(keep=True))
    s = cluster(report)["hosts.pods"]
    assert s.status == Status.PASS and "pods kept (--keep)" in s.evidence
    assert "kubectl delete pods -n rbln-system -l rebellions.ai/rblnctl.run=" in s.evidence
    assert len(host_pods(apiserver)) == 2


def test_bad_pod_options_are_refused_before_any_request(apiserver, kube):
    from rblnctl.errors import InvalidInput
    from rblnctl.preflight.cluster import ClusterPreflight

    with pytest.raises(InvalidInput, match="--max-parallel must be at least 1"):
        ClusterPreflight(kube=kube, hosts=hosts(max_parallel=0))
    with pytest.raises(InvalidInput, match="invalid namespace name"):
        ClusterPreflight(kube=kube, hosts=hosts(namespace="Not_A_Namespace"))
    assert apiserver.requests == []


def test_no_npu_nodes_runs_no_pod(apiserver, kube, kubelet):
    seed(apiserver, nodes=0)
    report = run(kube, hosts=hosts())
    assert cluster(report)["hosts.pods"].status == Status.SKIP and kubelet.created == []


def test_hosts_follow_the_node_and_selector(apiserver, kube, kubelet):
    names = seed(apiserver, nodes=3)
    run(kube, node=names[1], hosts=hosts())
    assert [n for n, _ in kubelet.runs] == [names[1]]


def requests_for(nodes: int, root) -> dict[str, int]:
    """`preflight --hosts --max-parallel 20` on a fresh fake cluster of `nodes` NPU nodes: requests by kind."""
    from rblnctl.kube import KubeOptions, connect
    from tests.fakes.apiserver import FakeApiServer

    fake = FakeApiServer().start()
    kubelet = HostKubelet(fake, default=root).start()
    try:
        seed(fake, nodes=nodes)
        fake.clear_requests()
        report = run(connect(KubeOptions(server=fake.url)), hosts=hosts(max_parallel=20))
        assert report.nodes == nodes and cluster(report)["hosts.pods"].status == Status.PASS
        assert kubelet.errors == [] and kubelet.max_alive <= 20 and host_pods(fake) == []
        return {"total": len(fake.requests),
                "create": len(fake.requests_matching("POST", r"/pods$")),
                "log": len(fake.requests_matching("GET", r"/log$")),
                "delete": len(fake.requests_matching("DELETE", r"/pods/")),
                "list": len(fake.requests_matching("GET", r"/namespaces/rbln-system/pods$"))}
    finally:
        kubelet.stop()
        fake.stop()


def test_requests_grow_linearly_with_nodes(trees):
    """100 nodes at --max-parallel 20 cost about twice what 50 do: a fixed set of cluster reads, then
    per node one create, one log read and one delete, and per round one list of the run's pods."""
    small, large = requests_for(50, trees["ok"]), requests_for(100, trees["ok"])
    assert (small["create"], small["log"], small["delete"]) == (50, 50, 50)
    assert (large["create"], large["log"], large["delete"]) == (100, 100, 100)
    assert small["list"] <= 2 * 3 and large["list"] <= 2 * 5  # rounds of 20 pods, not polls per pod
    fixed = small["total"] - 3 * 50 - small["list"]  # the cluster reads: the same whatever the size
    assert fixed == large["total"] - 3 * 100 - large["list"] and fixed < 20
    assert large["total"] <= 2 * small["total"]
    print(f"preflight --hosts requests: 50 nodes {small}, 100 nodes {large}")


# -- reading a pod's report -----------------------------------------------------------------------


def host_json(tmp_path, spec=None) -> str:
    from tests.helpers import cli

    root = ht.build_host(tmp_path / "h", spec or ht.intel_bare_metal()).root
    r = cli("preflight", "--local", "--root", str(root), "-o", "json")
    return r.stdout + r.stderr  # a container log holds both streams


def test_parse_host_report_reads_the_findings_and_scopes_them(tmp_path):
    text = host_json(tmp_path, ht.no_npus())
    assert "error: preflight:" in text  # a FAIL prints its error line after the report
    checks = parse_host_report("warning: something first\n" + text, node="npu-9")
    assert [c.id for c in checks] == HOST_IDS and {c.scope for c in checks} == {"npu-9"}
    assert {c.id: c.status for c in checks}["host.npu.present"] == Status.FAIL


@pytest.mark.parametrize("log, says", [
    ("", "no JSON report"),
    ("exec /usr/local/bin/rblnctl: exec format error\n", "no JSON report"),
    ('{"target": "cluster", "checks": []}\n', "not a host preflight report"),
    ('{"target": "host", "checks": [{"id": "x"}]}\n', "malformed"),
])
def test_parse_host_report_refuses_what_is_not_one(log, says):
    with pytest.raises(ValueError, match=says):
        parse_host_report(log, node="n")


def run_of(outcome: PodOutcome) -> HostPodRun:
    return HostPodRun(namespace="rbln-system", image=IMAGE, run_id="r1", outcomes=(outcome,))


@pytest.mark.parametrize("outcome, says", [
    (PodOutcome(node="n", pod="p", state=PodState.COMPLETED, exit_code=2, log="error: bad root\n"),
     "ran but gave no report (exited 2: error: bad root)"),
    (PodOutcome(node="n", pod="p", state=PodState.COMPLETED, exit_code=0, log="not json"),
     "ran but gave no report (no JSON report in the log: not json)"),
    (PodOutcome(node="n", pod="p", state=PodState.REJECTED, reason="OutOfcpu", message="no cpu"),
     "the kubelet rejected pod rbln-system/p: OutOfcpu: no cpu"),
    (PodOutcome(node="n", pod="p", state=PodState.TIMED_OUT, message="not finished after 5s (Pending)"),
     "pod rbln-system/p not finished after 5s (Pending)"),
    (PodOutcome(node="n", pod="p", state=PodState.VANISHED, message="the pod was deleted before it finished"),
     "the pod was deleted before it finished"),
])
def test_every_pod_failure_is_one_fail_for_its_node(outcome, says):
    out = Findings()
    assert outcome_findings(outcome, run_of(outcome), out) is False
    [f] = out.items
    assert (f.id, f.scope, f.status) == ("host.pod", "n", Status.FAIL) and says in f.evidence and f.remedy


def test_a_completed_report_is_checked_even_when_checks_fail(tmp_path):
    text = host_json(tmp_path, ht.no_npus())
    o = PodOutcome(node="n", pod="p", state=PodState.COMPLETED, exit_code=1, log=text)
    out = Findings()
    assert outcome_findings(o, run_of(o), out) is True and len(out.items) == len(HOST_IDS)
    assert json.loads(text[: text.index("\nerror:")])["target"] == "host"


PODS = r"/api/v1/namespaces/rbln-system/pods$"


def test_a_transient_pod_create_failure_is_retried_and_every_node_checked(apiserver, kube, kubelet):
    """Before: one 503 on a create ended the run with no report."""
    names = seed(apiserver, nodes=3)
    apiserver.inject_fault(method="POST", path=PODS, status=503, times=2)
    report = run(kube, hosts=hosts())
    assert cluster(report)["hosts.pods"].status == Status.PASS
    assert set(per_node(report, "host.npu.present")) == set(names)
    assert [r.status for r in apiserver.requests_matching("POST", PODS)] == [503, 503, 201, 201, 201]


def test_a_create_that_keeps_failing_fails_that_node_and_the_others_are_checked(apiserver, kube, kubelet):
    names = seed(apiserver, nodes=3)
    apiserver.inject_fault(method="POST", path=PODS, status=500, times=5)  # the first node's every try
    report = run(kube, hosts=hosts())
    pod = per_node(report, "host.pod")
    assert set(pod) == {names[0]} and "could not be created" in pod[names[0]].evidence
    assert set(per_node(report, "host.npu.present")) == set(names[1:])
    assert cluster(report)["hosts.pods"].evidence.startswith("2 of 3 NPU nodes checked, 1 not (1 create-failed")
    assert host_pods(apiserver) == []


def test_a_resource_quota_refusal_is_named_as_such_not_as_rbac(apiserver, kube, kubelet):
    names = seed(apiserver, nodes=2)
    apiserver.inject_fault(method="POST", path=PODS, status=403, reason="Forbidden", times=1,
                           message='pods "x" is forbidden: exceeded quota: host-pods, requested: pods=1, used: pods=4, '
                                   "limited: pods=4")
    report = run(kube, hosts=hosts())
    pod = per_node(report, "host.pod")[names[0]]
    assert "exceeded quota: host-pods" in pod.evidence and "admission refused" in pod.evidence
    assert "RBAC" not in pod.evidence and "ResourceQuota" in pod.remedy
    assert set(per_node(report, "host.npu.present")) == {names[1]}
