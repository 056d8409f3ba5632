"""`rblnctl status` and `rblnctl node list` against the fake API server."""

from __future__ import annotations

import json

import yaml

from tests.fakes import objects as o
from tests.helpers import cli


def _seed(apiserver):
    apiserver.add(
        o.cluster_policy(workload_type="container", vfio_manager=True, sandbox=True),
        o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"),
        o.npu_node("n1", mode="container"),
        o.npu_node("n2", mode="vm-passthrough"),
        o.npu_node("n3", mode="vm-passthrough"),
        o.node("cpu-only"),
    )


def test_status_json(apiserver):
    _seed(apiserver)
    r = cli("status", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["modes"] == {"container": 1, "vm-passthrough": 2}
    assert st["policy"]["enabled"]["sandboxDevicePlugin"] is True
    assert st["apiVersion"] == "rblnctl.rebellions.ai/v1alpha1" and st["kind"] == "ClusterStatus"
    assert st["kubevirt"][0]["featureGates"] == ["HostDevices"]
    assert [n["name"] for n in st["nodes"]] == ["n1", "n2", "n3"]


def test_status_counts_unlabelled_nodes_in_the_policys_workload_type(apiserver):
    """The operator gives a node without a mode label the policy's workloadType: status counts it there."""
    apiserver.add(o.cluster_policy(workload_type="vm-passthrough"), o.npu_node("n1", mode=None),
                  o.npu_node("n2", mode="container"))
    st = json.loads(cli("status", "-o", "json", server=apiserver.url).stdout)
    assert st["modes"] == {"container": 1, "vm-passthrough": 1}
    assert [(n["name"], n["mode"]) for n in st["nodes"]] == [("n1", "vm-passthrough"), ("n2", "container")]


def test_status_table_mentions_missing_operator(apiserver):
    apiserver.add(o.npu_node("n1"))
    r = cli("status", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "no KubeVirt CR found" in r.stderr and "n1" in r.stdout


def test_node_list_yaml_and_selector(apiserver):
    _seed(apiserver)
    r = cli("node", "list", "-o", "yaml", "-l", "rebellions.ai/npu.workload.config=vm-passthrough",
            server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert doc["kind"] == "NpuNodeList"
    nodes = doc["items"]
    assert [n["name"] for n in nodes] == ["n2", "n3"]
    assert all(any(k.startswith("rebellions.ai/RBLN-") for k in n["resources"]) for n in nodes)


def test_invalid_mode_label_is_shown(apiserver):
    apiserver.add(o.npu_node("n1", labels={"rebellions.ai/npu.workload.config": "vm"}))
    r = cli("node", "list", "-o", "json", server=apiserver.url)
    n = json.loads(r.stdout)["items"][0]
    assert n["mode"] == "container" and n["modeLabel"] == "vm" and n["modeLabelValid"] is False


def test_status_bad_selector_is_a_usage_error(apiserver):
    _seed(apiserver)
    r = cli("status", "-l", "bad selector!!", server=apiserver.url)
    assert r.exit_code == 2 and "bad label selector" in r.stderr


def test_status_shows_the_policy_the_operator_acts_on(apiserver):
    _seed(apiserver)
    ignored = o.cluster_policy("a-leftover", sandbox=False, dra=True, device_plugin=False)
    ignored["status"] = {"state": "ignored"}
    apiserver.add(ignored)
    st = json.loads(cli("status", "-o", "json", server=apiserver.url).stdout)
    assert st["policy"]["name"] == "rbln-cluster-policy"
    assert any("a-leftover" in n for n in st["notes"])


def test_status_lists_the_operator_deployments_once(apiserver):
    """The namespace lookup and the release read share one LIST (rblnctl.operator.cluster.OperatorView)."""
    _seed(apiserver)  # the policy names no namespace: the Deployments tell it
    apiserver.clear_requests()
    assert cli("status", "-o", "json", server=apiserver.url).exit_code == 0
    assert len([r for r in apiserver.requests if r.path.endswith("/deployments")]) == 1
