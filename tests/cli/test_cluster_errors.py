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
    line = _one_error_line(r)
    assert "forbidden" in line and "list on nodes at cluster scope" in line


def test_global_options_after_the_subcommand(apiserver, kubeconfig):
    apiserver.add(o.npu_node("npu1", mode="vm-passthrough"), o.node("cpu1"))
    r = cli("node", "list", "-o", "json", "--kubeconfig", str(kubeconfig), "--context", "fake")
    assert r.exit_code == 0, r.stderr
    nodes = json.loads(r.stdout)["nodes"]
    assert [(n["name"], n["mode"]) for n in nodes] == [("npu1", "vm-passthrough")]


def test_verbose_shows_requests_on_stderr_only(apiserver):
    apiserver.add(o.npu_node("npu1"))
    r = cli("node", "list", "-o", "json", "-v", server=apiserver.url)
    assert r.exit_code == 0
    json.loads(r.stdout)
    assert "GET /api/v1/nodes" in r.stderr


def test_unexpected_bug_is_one_line_exit_70(apiserver, mocker):
    mocker.patch("rblnctl.node.inventory.npu_node_from", side_effect=KeyError("boom"))
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
