"""`rblnctl preflight`: flag wiring, exit codes, table vs -o json|yaml, stdout vs stderr, no kubernetes for --local."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fakes import objects as o
from tests.helpers import cli, closed_port_url
from tests.fakes import sysfs as ht
from tests.preflight.cluster_support import nfd_features, seed
from rblnctl.constants import HOST_POD_LABEL as HOST_LABEL

REPO = Path(__file__).resolve().parents[2]
CHECK_KEYS = ["id", "title", "scope", "status", "evidence", "remedy", "remedyCommand"]
SUMMARY_KEYS = ["total", "passed", "warned", "failed", "skipped", "method", "strict", "ok"]


@pytest.fixture(autouse=True)
def no_helm(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))


def tree(tmp_path: Path, spec: ht.HostSpec) -> str:
    return str(ht.build_host(tmp_path / "host", spec).root)


def assert_schema(data: dict) -> None:
    assert list(data) == ["apiVersion", "kind", "target", "method", "methodNote", "checks", "summary", "nodes"]
    assert data["apiVersion"] == "rblnctl.rebellions.ai/v1alpha1" and data["kind"] == "PreflightReport"
    assert list(data["summary"]) == SUMMARY_KEYS
    for c in data["checks"]:
        assert list(c) == CHECK_KEYS
        assert c["status"] in ("PASS", "WARN", "FAIL", "SKIP")
        assert isinstance(c["evidence"], str) and c["evidence"]
        assert (c["remedy"] != "") == (c["status"] in ("WARN", "FAIL"))
        assert c["remedyCommand"] == "" or c["status"] in ("WARN", "FAIL")
    s = data["summary"]
    assert s["total"] == len(data["checks"]) == s["passed"] + s["warned"] + s["failed"] + s["skipped"]
    assert s["failed"] == sum(c["status"] == "FAIL" for c in data["checks"])


# -- --local -------------------------------------------------------------------------------------


def test_local_json_all_pass(tmp_path):
    r = cli("preflight", "--local", "--root", tree(tmp_path, ht.intel_bare_metal()), "-o", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert_schema(data)
    assert data["target"] == "host" and data["method"] == "auto" and data["summary"]["ok"] is True
    assert {c["status"] for c in data["checks"]} == {"PASS"} and {c["scope"] for c in data["checks"]} == {"host"}
    assert r.stderr == ""


def test_local_failure_exit_1_table_and_stderr(tmp_path):
    r = cli("preflight", "--local", "--root", tree(tmp_path, ht.vm_without_viommu()))
    assert r.exit_code == 1
    out = r.stdout
    assert "FAIL" in out and "Bare metal, or VM with a vIOMMU" in out and "FAIL host.virt: give this VM a vIOMMU" in out
    assert out.rstrip().splitlines()[-1].startswith("11 checks:") and out.rstrip().endswith("NOT ready")
    assert "host.virt" in r.stderr and "error: preflight:" in r.stderr
    assert "\x1b[" not in out  # no colour when not a TTY


def test_local_yaml(tmp_path):
    r = cli("preflight", "--local", "--root", tree(tmp_path, ht.no_npus()), "-o", "yaml")
    assert r.exit_code == 1
    data = yaml.safe_load(r.stdout)
    assert_schema(data)
    assert {c["id"]: c["status"] for c in data["checks"]}["host.npu.present"] == "FAIL"


def test_local_strict(tmp_path):
    root = tree(tmp_path, ht.intel_bare_metal(dev_kvm=False))
    assert cli("preflight", "--local", "--root", root).exit_code == 0
    r = cli("preflight", "--local", "--root", root, "--strict", "-o", "json")
    assert r.exit_code == 1 and "host.kvm" in r.stderr and "warned" in r.stderr
    assert json.loads(r.stdout)["summary"]["strict"] is True


def test_local_method_recorded(tmp_path):
    r = cli("preflight", "--local", "--root", tree(tmp_path, ht.intel_bare_metal()), "--method", "dra", "-o", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["method"] == "dra"


@pytest.mark.parametrize("args", [["--local", "--node", "n1"], ["--local", "-l", "a=b"], ["--root", "/"]])
def test_conflicting_flags_are_usage_errors(args):
    r = cli("preflight", *args)
    assert r.exit_code == 2 and r.stdout == ""


def test_local_bad_root(tmp_path):
    r = cli("preflight", "--local", "--root", str(tmp_path / "missing"))
    assert r.exit_code == 2 and "does not exist" in r.stderr


def test_local_on_this_machine():
    """The real /proc and /sys, read-only: any verdict, but a complete, valid report."""
    r = cli("preflight", "--local", "-o", "json")
    assert r.exit_code in (0, 1), r.stderr
    data = json.loads(r.stdout)
    assert_schema(data)
    assert len(data["checks"]) == 11


def test_local_never_imports_kubernetes(tmp_path):
    root = tree(tmp_path, ht.amd_iommu_off())
    code = (
        "import sys, json\n"
        "from rblnctl.cli.app import main\n"
        f"sys.argv = ['rblnctl', 'preflight', '--local', '--root', {root!r}, '-o', 'json']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code\n"
        "sys.stderr.write('\\nRESULT ' + json.dumps({'rc': rc, 'k8s': sorted(m for m in sys.modules "
        "if m == 'kubernetes' or m.startswith('kubernetes.'))}) + '\\n')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    result = json.loads(p.stderr.rsplit("RESULT ", 1)[1])
    assert result == {"rc": 1, "k8s": []}
    assert json.loads(p.stdout)["target"] == "host"


# -- cluster -------------------------------------------------------------------------------------


def test_cluster_healthy_one_screen(apiserver):
    seed(apiserver, nodes=3)
    r = cli("preflight", server=apiserver.url)
    assert r.exit_code == 0, r.stdout + r.stderr
    lines = r.stdout.rstrip().splitlines()
    assert len(lines) <= 45, r.stdout  # one screen
    assert lines[0].startswith(
        "method sandbox: auto: RBLNClusterPolicy rbln-cluster-policy enables sandboxDevicePlugin")
    assert "all-3" in r.stdout and "IOMMU enabled" in r.stdout
    assert lines[-1].startswith("35 checks: ") and lines[-1].endswith("-> ready")
    assert not [ln for ln in lines[:-1] if ln.lstrip().startswith(("FAIL", "WARN"))] and r.stderr == ""


def test_cluster_json_schema_and_failure(apiserver):
    seed(apiserver, nodes=2)
    apiserver.set_version("v1.33.0")
    r = cli("preflight", "--method", "dra", "-o", "json", server=apiserver.url)
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert_schema(data)
    assert data["target"] == "cluster" and data["method"] == "dra" and data["nodes"] == 2
    scopes = {c["scope"] for c in data["checks"]}
    assert scopes == {"cluster", "npu-0000", "npu-0001"}
    by = {(c["id"], c["scope"]): c for c in data["checks"]}
    assert by[("kubernetes.version", "cluster")]["status"] == "FAIL"
    assert by[("node.iommu", "npu-0001")]["status"] == "PASS"
    assert "kubernetes.version" in r.stderr


def test_cluster_table_groups_per_node_results(apiserver):
    seed(apiserver, nodes=5)
    for name in ("npu-0001", "npu-0003"):
        apiserver.mutate("Node", name, fn=lambda n: n["metadata"]["labels"].update(
            {"rebellions.ai/npu.workload.config": "vm"}))
    r = cli("preflight", server=apiserver.url)
    assert r.exit_code == 1
    rows = [ln for ln in r.stdout.splitlines() if "Workload mode label valid" in ln]
    assert len(rows) == 2
    assert "FAIL" in rows[0] and "npu-0001,npu-0003" in rows[0]
    assert "PASS" in rows[1] and "npu-0000,npu-0002,npu-0004" in rows[1]
    assert "node.mode-label" in r.stdout and " node set-mode vm --selector " in r.stdout
    assert r.stdout.count("IOMMU enabled") == 1  # five identical results, one row


def test_cluster_strict(apiserver):
    seed(apiserver, method="dra", kubevirt=o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"))
    assert cli("preflight", server=apiserver.url).exit_code == 0
    r = cli("preflight", "--strict", server=apiserver.url)
    assert r.exit_code == 1 and "kubevirt.gates" in r.stderr


def test_cluster_forbidden_list_is_reported_not_fatal(apiserver):
    seed(apiserver, nodes=1)
    apiserver.forbid("list", "kubevirts")
    r = cli("preflight", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr  # a WARN, not an exit-4 crash
    k = {c["id"]: c for c in json.loads(r.stdout)["checks"]}["kubevirt.installed"]
    assert k["status"] == "WARN" and "kubevirts.kubevirt.io" in k["remedy"]


def test_cluster_node_and_selector(apiserver):
    seed(apiserver, nodes=2)
    apiserver.add(o.npu_node("other", mode="vm-passthrough", labels={"pool": "b"}), nfd_features("other"))
    r = cli("preflight", "--node", "npu-0001", "-o", "json", server=apiserver.url)
    assert {c["scope"] for c in json.loads(r.stdout)["checks"]} == {"cluster", "npu-0001"}
    r = cli("preflight", "-l", "pool=b", "-o", "json", server=apiserver.url)
    assert {c["scope"] for c in json.loads(r.stdout)["checks"]} == {"cluster", "other"}


def test_cluster_unreachable_exit_3():
    url = closed_port_url()
    r = cli("preflight", "--request-timeout", "2", server=url)
    assert r.exit_code == 3 and "cannot reach" in r.stderr and url in r.stderr and r.stdout == ""


def test_cluster_bad_selector_is_a_usage_error_not_a_pass(apiserver):
    seed(apiserver, nodes=1)
    r = cli("preflight", "-l", "bad selector!!", "-o", "json", server=apiserver.url)
    assert r.exit_code == 2, r.stdout + r.stderr  # was exit 0 with a WARN: a CI gate passed on a typo
    assert r.stdout == "" and "bad label selector" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_local_root_that_is_not_a_host_tree_is_bad_input(tmp_path):
    r = cli("preflight", "--local", "--root", str(tmp_path))
    assert r.exit_code == 2
    assert "neither proc/ nor sys/" in r.stderr and r.stdout == ""


# -- --hosts ---------------------------------------------------------------------------------------


@pytest.fixture
def host_kubelet(apiserver, tmp_path):
    from tests.fakes.hostkubelet import HostKubelet

    k = HostKubelet(apiserver, default=ht.build_host(tmp_path / "node-host", ht.intel_bare_metal()).root).start()
    yield k
    k.stop()
    assert k.errors == []


def host_pods(apiserver) -> list[dict]:
    return [p for p in apiserver.list("Pod") if HOST_LABEL in (p["metadata"].get("labels") or {})]


def test_hosts_json_merges_host_rows_per_node_and_leaves_no_pod(apiserver, host_kubelet):
    seed(apiserver, nodes=2)
    r = cli("preflight", "--hosts", "--image", "registry.local/rblnctl:ci", "--max-parallel", "1", "-o", "json",
            server=apiserver.url)
    assert r.exit_code == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert_schema(data)
    rows = [(c["id"], c["scope"]) for c in data["checks"] if c["id"].startswith("host.")]
    assert len(rows) == 2 * 11 and {s for _, s in rows} == {"npu-0000", "npu-0001"}
    assert {c["id"]: c["status"] for c in data["checks"]}["hosts.pods"] == "PASS"
    [created] = {r.body["spec"]["containers"][0]["image"] for r in apiserver.requests_matching("POST", r"/pods$")}
    assert created == "registry.local/rblnctl:ci"
    assert host_pods(apiserver) == [] and host_kubelet.max_alive == 1


def test_hosts_namespace_flag_and_keep(apiserver, host_kubelet):
    seed(apiserver, nodes=1)
    r = cli("preflight", "--hosts", "-n", "npu-checks", "--keep", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    [pod] = host_pods(apiserver)
    assert pod["metadata"]["namespace"] == "npu-checks"
    assert "pods kept (--keep)" in r.stdout and "kubectl delete pods -n npu-checks -l rebellions.ai/rblnctl.run=" in \
        r.stdout


def test_hosts_says_each_retry_of_the_host_pods_watch_on_stderr_and_goes_on(apiserver, host_kubelet):
    """The host pods' LIST answers 500 twice past the client's own read retries: each retry of the wait is a
    `retrying: <error>` line on stderr (not a silent spinner), and every node is still checked."""
    from rblnctl.kube.client import READ_RETRIES

    seed(apiserver, nodes=2)
    apiserver.inject_fault(method="GET", path=r"/namespaces/npu-checks/pods$", watch=False, status=500,
                           message="etcdserver: leader changed", times=2 * (READ_RETRIES + 1))
    r = cli("preflight", "--hosts", "-n", "npu-checks", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stdout + r.stderr
    retried = [ln for ln in r.stderr.splitlines() if "retrying:" in ln]
    assert len(retried) == 2 and all("500" in ln and "leader changed" in ln for ln in retried), r.stderr
    assert {c["id"]: c["status"] for c in json.loads(r.stdout)["checks"]}["hosts.pods"] == "PASS"
    assert host_pods(apiserver) == []


def test_hosts_says_a_host_pod_create_sent_again_after_a_503_on_stderr(apiserver, host_kubelet):
    """A host pod's create answered 503 is read back and sent again (rblnctl.kube.writes): that retry is a
    `retrying: <why>` line on stderr like the watch's, not a silent pause; every node is still checked."""
    seed(apiserver, nodes=2)
    apiserver.inject_fault(method="POST", path=r"/namespaces/npu-checks/pods$", status=503,
                           message="etcdserver: request timed out", times=1)
    r = cli("preflight", "--hosts", "-n", "npu-checks", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stdout + r.stderr
    [retried] = [ln for ln in r.stderr.splitlines() if "retrying:" in ln]
    assert "the create was answered 503" in retried and "request timed out" in retried, r.stderr
    assert {c["id"]: c["status"] for c in json.loads(r.stdout)["checks"]}["hosts.pods"] == "PASS"
    assert len(apiserver.requests_matching("POST", r"/namespaces/npu-checks/pods$")) == 3
    assert host_pods(apiserver) == []


def test_hosts_image_pull_failure_fails_the_run_with_the_reason(apiserver, host_kubelet):
    seed(apiserver, nodes=2)
    host_kubelet.image_pull["npu-0001"] = "ImagePullBackOff"
    r = cli("preflight", "--hosts", server=apiserver.url)
    assert r.exit_code == 1 and "host.pod" in r.stderr and "hosts.pods" in r.stderr
    assert "ImagePullBackOff" in r.stdout and host_pods(apiserver) == []


def test_hosts_with_a_node_not_checked_says_how_to_rerun_with_every_flag(apiserver, host_kubelet):
    seed(apiserver, nodes=2)
    apiserver.inject_fault(method="POST", path=r"/pods$", status=403, reason="Forbidden", times=1,
                           message='pods "x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, '
                                   "limited: pods=1")  # npu-0000's create; no pod of the run holds the quota yet
    r = cli("preflight", "--hosts", "--max-parallel", "1", "-n", "rbln-system", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    assert "1 of 2 NPU nodes checked, 1 not (1 create-failed" in r.stdout
    assert f"rerun (every node again): rblnctl --server {apiserver.url} --namespace rbln-system preflight --hosts " \
           "--max-parallel 1" in r.stderr


@pytest.mark.parametrize("signum, code", [(None, 130), (15, 143)], ids=["ctrl-c", "sigterm"])
def test_hosts_interrupted_deletes_every_pod(apiserver, host_kubelet, signum, code):
    import _thread
    import signal

    from rblnctl.cli.errors import install_signal_handlers

    names = seed(apiserver, nodes=4)
    host_kubelet.hang.update(names)

    def interrupt_on_third_create(req) -> None:
        if req.method == "POST" and req.path.endswith("/pods") and \
                len(apiserver.requests_matching("POST", r"/pods$")) == 3:
            _thread.interrupt_main() if signum is None else _thread.interrupt_main(signum)

    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    install_signal_handlers()
    unsubscribe = apiserver.on_request(interrupt_on_third_create)
    try:
        r = cli("preflight", "--hosts", server=apiserver.url)
    finally:
        unsubscribe()
        for s, h in old.items():
            signal.signal(s, h)
    assert r.exit_code == code, r.stdout + r.stderr
    assert len(host_kubelet.created) == 3 and host_pods(apiserver) == []


@pytest.mark.parametrize("args, says", [
    (["--keep"], "--keep only apply to --hosts"),
    (["--image", "x", "--max-parallel", "3"], "--image, --max-parallel only apply to --hosts"),
    (["--hosts", "--local"], "--local checks the host it runs on"),
    (["--hosts", "--max-parallel", "0"], "--max-parallel must be at least 1"),
    (["--hosts", "--timeout", "soon"], "--timeout"),
])
def test_hosts_flag_misuse_is_a_usage_error(apiserver, args, says):
    seed(apiserver, nodes=1)
    r = cli("preflight", *args, server=apiserver.url)
    assert r.exit_code == 2 and says in r.stderr and r.stdout == ""
    assert host_pods(apiserver) == []


# -- -o junit --------------------------------------------------------------------------------------


def test_junit_has_a_testcase_per_check_and_the_exit_code_of_the_run(apiserver):
    import xml.etree.ElementTree as ET

    seed(apiserver, nodes=2)
    apiserver.set_version("v1.33.0")
    r = cli("preflight", "--method", "dra", "-o", "junit", server=apiserver.url)
    assert r.exit_code == 1
    root = ET.fromstring(r.stdout)
    data = json.loads(cli("preflight", "--method", "dra", "-o", "json", server=apiserver.url).stdout)
    assert int(root.get("tests")) == data["summary"]["total"] == len(root.findall(".//testcase"))
    assert int(root.get("failures")) == data["summary"]["failed"]
    [k8s] = [c for c in root.iter("testcase") if c.get("name") == "kubernetes.version"]
    assert "upgrade Kubernetes to 1.34.0" in k8s.find("failure").text


def test_junit_for_local(tmp_path):
    import xml.etree.ElementTree as ET

    r = cli("preflight", "--local", "--root", tree(tmp_path, ht.intel_bare_metal(dev_kvm=False)), "-o", "junit")
    assert r.exit_code == 0
    root = ET.fromstring(r.stdout)
    assert [s.get("name") for s in root.findall("testsuite")] == ["host"] and root.get("skipped") == "1"
