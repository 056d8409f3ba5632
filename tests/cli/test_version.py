"""`rblnctl version`: the client without a cluster, and the versions a cluster reports."""

from __future__ import annotations

import json

from tests.fakes import objects as o
from tests.helpers import cli, closed_port_url
from tests.preflight.cluster_support import dra_daemonset, operator_deployment


def test_client_needs_no_cluster():
    r = cli("version", "--client", "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "Version" and doc["server"] is None
    from rblnctl import __version__

    assert doc["client"]["version"] == __version__
    assert cli("version", "--client").stdout.startswith(f"Client Version: {__version__}")


def test_the_cluster_versions_and_where_they_were_read(apiserver):
    apiserver.add(o.kubevirt(version="v1.9.0"), operator_deployment("0.6.0"), dra_daemonset("v0.2.1"))
    r = cli("version", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1:] == ["Kubernetes Version: v1.34.1", "KubeVirt Version: v1.9.0", "RBLN NPU Operator Version: 0.6.0",
                         "RBLN DRA driver Version: v0.2.1"]
    server = json.loads(cli("version", "-o", "json", server=apiserver.url).stdout)["server"]
    assert server["operator"]["source"].startswith("Deployment rbln-system/rbln-npu-operator: label")
    assert server["draDriver"]["source"].endswith("rbln-k8s-dra-driver:v0.2.1")


def test_missing_parts_and_refused_reads_say_why(apiserver):
    apiserver.forbid("list", "daemonsets")
    r = cli("version", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    server = json.loads(r.stdout)["server"]
    assert server["kubevirt"] == {"version": None, "source": None, "note": "not installed (no KubeVirt CR)"}
    assert server["operator"]["version"] is None and "rbln-npu-operator" in server["operator"]["note"]
    assert server["draDriver"]["version"] is None and "forbidden" in server["draDriver"]["note"]
    assert "RBLN DRA driver Version: <unknown: " in cli("version", server=apiserver.url).stdout


def test_an_unreachable_cluster_still_prints_the_client_then_exits_3():
    r = cli("version", server=closed_port_url())
    assert r.exit_code == 3 and r.stdout.startswith("Client Version: ") and "cannot reach" in r.stderr
