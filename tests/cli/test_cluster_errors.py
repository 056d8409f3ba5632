"""Cluster failures reach the user as one line and the documented exit code (docs/exit-codes.md)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.fakes import objects as o
from tests.helpers import cli


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr and result.stdout == ""
    return lines[0]


def test_unreachable_cluster_exit_3_names_the_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = cli("node", "list", server=f"http://127.0.0.1:{port}")
    assert r.exit_code == 3
    assert f"127.0.0.1:{port}" in _one_error_line(r)


def test_bad_kubeconfig_exit_2(tmp_path):
    bad = tmp_path / "kc"
    bad.write_text("{not yaml: [")
    r = cli("node", "list", "--kubeconfig", str(bad))
    assert r.exit_code == 2
    assert "invalid kubeconfig" in _one_error_line(r)


def test_unknown_context_exit_2(kubeconfig):
    r = cli("--kubeconfig", str(kubeconfig), "node", "list", "--context", "prod")
    assert r.exit_code == 2
    assert 'context "prod" not found' in _one_error_line(r)


def test_forbidden_exit_4_names_verb_and_resource(apiserver, kubeconfig):
    apiserver.forbid("list", "nodes")
    r = cli("node", "list", "--kubeconfig", str(kubeconfig))
    assert r.exit_code == 4
    line, rules = r.stderr.splitlines()  # the error, then (indented) the rules the command needs (issue 30)
    assert line.startswith("error: ") and "forbidden" in line and "list on nodes at cluster scope" in line
    assert rules.startswith("  the rules rblnctl needs: `rblnctl rbac --role read")


def test_global_options_after_the_subcommand(apiserver, kubeconfig):
    apiserver.add(o.npu_node("npu1", mode="vm-passthrough"), o.node("cpu1"))
    r = cli("node", "list", "-o", "json", "--kubeconfig", str(kubeconfig), "--context", "fake")
    assert r.exit_code == 0, r.stderr
    nodes = json.loads(r.stdout)["items"]
    assert [(n["name"], n["mode"]) for n in nodes] == [("npu1", "vm-passthrough")]


def test_verbose_shows_requests_on_stderr_only(apiserver):
    apiserver.add(o.npu_node("npu1"))
    r = cli("node", "list", "-o", "json", "-v=6", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert [n["name"] for n in json.loads(r.stdout)["items"]] == ["npu1"]  # stdout is the JSON alone
    # issue 21: full URLs, as kubectl -v=6 logs them (round_trippers: `GET https://... 200 OK in 5 milliseconds`)
    assert f"GET {apiserver.url}/api/v1/nodes?" in r.stderr and " 200 OK in " in r.stderr
    assert "GET /api" not in r.stdout and "milliseconds" not in r.stdout


def test_unexpected_bug_is_one_line_exit_70(apiserver, mocker):
    mocker.patch("rblnctl.node.inventory.npu_node", side_effect=KeyError("boom"))
    apiserver.add(o.npu_node("npu1"))
    r = cli("node", "list", server=apiserver.url)
    assert r.exit_code == 70
    assert "rerun with -v" in _one_error_line(r)


def test_unauthorized_exit_4(apiserver):
    apiserver.require_token = True
    r = cli("node", "list", server=apiserver.url)  # --server sends no credentials
    assert r.exit_code == 4
    assert "unauthorized" in _one_error_line(r)


def test_kubectl_plugin_entry_point_is_the_same_app():
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts") if ep.value.startswith("rblnctl")}
    assert scripts["rblnctl"] == scripts["kubectl-rbln"] == "rblnctl.cli.app:main"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")
def test_kubectl_runs_rblnctl_as_a_plugin():
    bindir = os.path.dirname(sys.executable)
    if not os.path.exists(os.path.join(bindir, "kubectl-rbln")):
        pytest.skip("kubectl-rbln is not installed next to this interpreter")
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"])
    out = subprocess.run(["kubectl", "rbln", "node", "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Usage: kubectl rbln node" in out.stdout


def _rblnctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real entry point in a fresh process (warnings and logging as a user sees them)."""
    return subprocess.run([sys.executable, "-m", "rblnctl", *args], capture_output=True, text=True, timeout=timeout)


def test_untrusted_tls_certificate_exit_3_one_line(tls_apiserver, tmp_path):
    kc = tls_apiserver.write_kubeconfig(tmp_path / "kc")
    out = _rblnctl("status", "--kubeconfig", str(kc), "--request-timeout", "5")
    assert out.returncode == 3, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and tls_apiserver.url in lines[0], out.stderr
    assert "signed by an unknown authority" in lines[0], out.stderr


def test_insecure_skip_tls_verify_keeps_stderr_clean(tls_apiserver, tmp_path):
    tls_apiserver.add(o.npu_node("npu1"))
    kc = tls_apiserver.write_kubeconfig(tmp_path / "kc", insecure=True)
    out = _rblnctl("node", "list", "-o", "json", "--kubeconfig", str(kc))
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and json.loads(out.stdout)["items"][0]["name"] == "npu1"


def test_failing_exec_plugin_is_one_line_exit_4(apiserver, tmp_path):
    kc = tmp_path / "kc"
    kc.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster: {{server: '{apiserver.url}'}}\n"
        "contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"
        "users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
        f"      command: {sys.executable}\n"
        "      args: ['-c', 'import sys; sys.exit(\"token expired: log in again\")']\n"
    )
    out = _rblnctl("node", "list", "--kubeconfig", str(kc))
    assert out.returncode == 4, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "token expired: log in again" in lines[0], out.stderr


def test_vm_start_is_served_by_virt_api_which_406s_an_accept_without_any_type(apiserver):
    """Issue 27: virt-api's start route declares no Produces; rblnctl's old `Accept: application/json` got 406 and
    exit 3 ("not the Kubernetes API"). It now sends client-go's `application/json, */*`."""
    apiserver.add(o.vm("vms", "v1", running=False))
    r = cli("vm", "start", "v1", "-n", "vms", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert apiserver.get("VirtualMachine", "v1", "vms")["spec"]["runStrategy"] == "Always"
    [put] = apiserver.requests_matching("PUT")
    assert put.status == 202 and put.headers["accept"] == "application/json, */*"


def test_an_unreachable_virt_api_is_named_with_its_apiservice_exit_1_not_a_wrong_server_url(apiserver, monkeypatch):
    from rblnctl.clock import SYSTEM_CLOCK

    monkeypatch.setattr(SYSTEM_CLOCK, "sleep", lambda seconds, stop=None: False)  # vm start retries a 503 a while
    apiserver.add(o.vm("vms", "v1", running=False))
    apiserver.virt_api_available = False
    r = cli("vm", "start", "v1", "-n", "vms", server=apiserver.url)
    assert r.exit_code == 1 and r.stdout == "" and "Traceback" not in r.stderr
    [line] = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith("error: the aggregated API subresources.kubevirt.io/v1 (APIService "
                           "v1.subresources.kubevirt.io, Service kubevirt/virt-api) answered PUT ")
    assert "with 503 Service Unavailable" in line and "kubectl get apiservice v1.subresources.kubevirt.io" in line
    assert "server URL" not in line and "not the Kubernetes API" not in line


def test_rbac_forbidding_offers_the_rules_of_the_role_the_command_needs(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node("n1"))
    apiserver.forbid("list", "nodes")
    r = cli("node", "list", server=apiserver.url)
    assert r.exit_code == 4
    assert "`rblnctl rbac --role read | kubectl apply -f -`" in r.stderr and "rblnctl-read" in r.stderr
    apiserver.allow_all()
    apiserver.forbid("patch", "nodes")
    r = cli("node", "set-mode", "vm", "n1", "--yes", server=apiserver.url)
    assert r.exit_code == 4, r.stderr
    assert "`rblnctl rbac --role operate | kubectl apply -f -`" in r.stderr
