"""Every cluster command against what each supported operator release really puts in a cluster.

Chart v0.3.0 and the later releases differ in pod labels, DaemonSet names, resource names and
component lists (tests/fakes/releases.py); the simulated operator plays each. The commands must
work against both without being told which release runs.
"""

from __future__ import annotations

import json

import pytest

from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.fakes.releases import RELEASES, V0_3_0
from tests.helpers import cli

HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}
MODE = "rebellions.ai/npu.workload.config"


@pytest.fixture(params=RELEASES, ids=lambda r: r.name)
def release(request):
    return request.param


@pytest.fixture
def cluster(apiserver, release):
    """One CA25 node (covered by every release's resource names) with an NPU pod and a CPU pod."""
    policy = release.policy(**HYBRID)
    npu = release.container_resource(policy, "RBLN-CA25")
    apiserver.add(policy, release.operator_deployment(), o.kubevirt(feature_gates=["HostDevices"]),
                  o.npu_node("n1", product="RBLN-CA25", release=release, policy=policy),
                  o.node_feature("n1", pci_devices=[{"vendor": "1eff", "device": "1250", "class": "1200"}]),
                  o.replicaset("default", "web"),
                  o.pod("default", "npu-app", node="n1", owner_kind="ReplicaSet", owner_name="web",
                        requests={npu: "1"}),
                  o.pod("default", "cpu-app", node="n1", owner_kind="ReplicaSet", owner_name="web"))
    op = SimulatedOperator(apiserver, release=release, ready_delay_s=0.05).start()
    assert op.wait_idle()
    yield apiserver
    op.stop()
    assert op.errors == []


def test_set_mode_converges_both_ways(cluster, release):
    r = cli("node", "set-mode", "n1", "vm", "--yes", "--timeout", "30", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    node = cluster.get("Node", "n1")
    assert node["metadata"]["labels"][MODE] == "vm-passthrough" and not node["spec"].get("unschedulable")
    assert cluster.get("Pod", "npu-app", "default") is None and cluster.get("Pod", "cpu-app", "default")
    vm_res = "rebellions.ai/ATOM_MAX_PT" if release is V0_3_0 else "rebellions.ai/RBLN-CA25_PF"
    assert node["status"]["allocatable"][vm_res] == "2"

    r = cli("node", "set-mode", "n1", "container", "--yes", "--timeout", "30", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    node = cluster.get("Node", "n1")
    assert node["metadata"]["labels"][MODE] == "container" and not node["spec"].get("unschedulable")
    assert not any(k.endswith(("_PT", "_PF")) for k in node["status"]["allocatable"])


def test_node_list_and_status_read_the_release(cluster, release):
    cli("node", "set-mode", "n1", "vm", "--yes", server=cluster.url)
    nodes = json.loads(cli("node", "list", "-o", "json", server=cluster.url).stdout)["items"]
    assert [(n["name"], n["mode"]) for n in nodes] == [("n1", "vm-passthrough")]
    assert "vfio-manager" in nodes[0]["components"] and "sandbox-device-plugin" in nodes[0]["components"]
    st = json.loads(cli("status", "-o", "json", server=cluster.url).stdout)
    assert st["modes"] == {"vm-passthrough": 1} and st["operatorNamespace"] == "rbln-system"


def test_drain_evicts_npu_consumers_and_leaves_the_operator_alone(cluster, release):
    before = {p["metadata"]["name"] for p in cluster.list("Pod", "rbln-system")}
    r = cli("node", "drain", "n1", "--yes", "-o", "json", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert [p["name"] for p in json.loads(r.stdout)["result"]["evicted"]] == ["npu-app"]
    assert {p["metadata"]["name"] for p in cluster.list("Pod", "rbln-system")} == before


def test_preflight_and_permit_devices_after_a_switch(cluster, release):
    assert cli("node", "set-mode", "n1", "vm", "--yes", server=cluster.url).exit_code == 0
    r = cli("kubevirt", "permit-devices", "--from-cluster", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    pci = cluster.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["permittedHostDevices"]
    vm_res = "rebellions.ai/ATOM_MAX_PT" if release is V0_3_0 else "rebellions.ai/RBLN-CA25_PF"
    assert pci["pciHostDevices"] == [{"pciVendorSelector": "1EFF:1250", "resourceName": vm_res,
                                      "externalResourceProvider": True}]
    report = json.loads(cli("preflight", "-o", "json", server=cluster.url).stdout)
    by_id = {c["id"]: c for c in report["checks"] if c["scope"] == "cluster"}
    assert by_id["operator.policy"]["status"] == "PASS"
    assert by_id["kubevirt.permitted-devices"]["status"] == "PASS"
    assert by_id["nodes.vm-mode"]["status"] == "PASS"
    assert by_id["operator.version"]["status"] == ("WARN" if release is V0_3_0 else "PASS")


def test_chart_defaults_refuse_a_switch_to_vm_with_zero_writes(apiserver, release):
    """The charts ship vfioManager and both VM allocators disabled: the switch could never finish."""
    apiserver.add(release.policy(), o.npu_node("n1", product="RBLN-CA25", release=release))
    apiserver.clear_requests()
    r = cli("node", "set-mode", "n1", "vm", "--yes", server=apiserver.url)
    assert r.exit_code == 1
    assert "vfioManager" in r.stderr and "spec.vfioManager.enabled" in r.stderr
    assert apiserver.writes() == []
