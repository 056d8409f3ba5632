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
from rblnctl.constants import WORKLOAD_LABEL as MODE

HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}


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


def switch_to_vm(cluster, release):
    """set-mode vm as each release allows it: chart v0.3.0's sandbox plugin never serves a vm-passthrough node,
    so there it takes --skip-release-check and times out (exit 5) with the plugin stuck in Init."""
    if not release.sandbox_waits_for_driver:
        r = cli("node", "set-mode", "n1", "vm", "--yes", "--timeout", "30", server=cluster.url)
        assert r.exit_code == 0, r.stderr
        return r
    r = cli("node", "set-mode", "n1", "vm", "--yes", "--skip-release-check", "--timeout", "1", server=cluster.url)
    assert r.exit_code == 5, r.stderr
    assert "sandbox-device-plugin" in r.stderr  # still missing: the plugin pod is not Ready
    return r


def test_set_mode_converges_both_ways(cluster, release):
    if release.sandbox_waits_for_driver:
        pytest.skip("chart v0.3.0 never serves a vm-passthrough node: test_v030_set_mode_vm_is_refused_up_front")
    r = cli("node", "set-mode", "n1", "vm", "--yes", "--timeout", "30", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    node = cluster.get("Node", "n1")
    assert node["metadata"]["labels"][MODE] == "vm-passthrough" and not node["spec"].get("unschedulable")
    assert cluster.get("Pod", "npu-app", "default") is None and cluster.get("Pod", "cpu-app", "default")
    assert node["status"]["allocatable"]["rebellions.ai/RBLN-CA25_PF"] == "2"

    r = cli("node", "set-mode", "n1", "container", "--yes", "--timeout", "30", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    node = cluster.get("Node", "n1")
    assert node["metadata"]["labels"][MODE] == "container" and not node["spec"].get("unschedulable")
    assert not any(k.endswith(("_PT", "_PF")) for k in node["status"]["allocatable"])


def test_node_list_and_status_read_the_release(cluster, release):
    switch_to_vm(cluster, release)
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
    if release.sandbox_waits_for_driver:
        pytest.skip("chart v0.3.0 advertises nothing on a vm-passthrough node: test_v030_preflight_fails_sandbox")
    switch_to_vm(cluster, release)
    r = cli("kubevirt", "permit-devices", "--from-cluster", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    pci = cluster.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["permittedHostDevices"]
    assert pci["pciHostDevices"] == [{"pciVendorSelector": "1EFF:1250", "resourceName": "rebellions.ai/RBLN-CA25_PF",
                                      "externalResourceProvider": True}]
    report = json.loads(cli("preflight", "-o", "json", server=cluster.url).stdout)
    by_id = {c["id"]: c for c in report["checks"] if c["scope"] == "cluster"}
    assert by_id["operator.policy"]["status"] == "PASS"
    assert by_id["kubevirt.permitted-devices"]["status"] == "PASS"
    assert by_id["nodes.vm-mode"]["status"] == "PASS"
    assert by_id["operator.version"]["status"] == "PASS"


@pytest.mark.parametrize("release", [V0_3_0], ids=lambda r: r.name)
def test_v030_set_mode_vm_is_refused_up_front(cluster, release):
    """Chart v0.3.0's sandbox plugin waits in Init for a driver marker no vm-passthrough node gets: refuse
    before any write, naming the release and the way out; --skip-release-check goes ahead and times out."""
    cluster.clear_requests()
    r = cli("node", "set-mode", "n1", "vm", "--yes", "--timeout", "5", server=cluster.url)
    assert r.exit_code == 1, r.stderr
    assert cluster.writes() == []
    assert "v0.3.0 < 0.4.4" in r.stderr and ".driver-ctr-ready" in r.stderr
    assert "upgrade the operator to >= 0.4.4" in r.stderr
    assert "pass --skip-release-check to go ahead anyway" in r.stderr  # issue 21: its own flag, not --force
    assert cluster.get("Node", "n1")["metadata"]["labels"].get(MODE) != "vm-passthrough"

    r = switch_to_vm(cluster, release)  # --skip-release-check: relabelled, then the wait times out
    assert "check skipped:" in r.stderr
    node = cluster.get("Node", "n1")
    assert node["metadata"]["labels"][MODE] == "vm-passthrough"
    assert not any(k.endswith("_PT") for k in node["status"].get("allocatable", {}))
    (sandbox,) = [p for p in cluster.list("Pod", "rbln-system") if "sandbox-device-plugin" in p["metadata"]["name"]]
    assert sandbox["status"]["phase"] == "Pending"
    assert sandbox["status"]["initContainerStatuses"][0]["name"] == "driver-ready"


@pytest.mark.parametrize("release", [V0_3_0], ids=lambda r: r.name)
def test_v030_status_and_policy_show_trust_the_component_conditions_not_the_state(cluster, release):
    """The v0.3.0 operator's policy says `ready` (top level and every status.components[] entry) while the
    sandbox plugin sits in Init; only the entry's DaemonSetReady condition says so (the simulation writes status
    as the real operator does: tests/envtest/test_operator_v030.py compares them)."""
    switch_to_vm(cluster, release)
    policy = cluster.get("RBLNClusterPolicy", "rbln-cluster-policy")
    assert policy["status"]["state"] == "ready"
    assert all(c["state"] == "ready" for c in policy["status"]["components"])
    r = cli("policy", "show", "-o", "json", server=cluster.url)
    comps = {c["component"]: c for c in json.loads(r.stdout)["components"]}
    assert (comps["sandbox-device-plugin"]["state"], comps["sandbox-device-plugin"]["ready"]) == ("notReady", False)
    assert (comps["vfio-manager"]["state"], comps["vfio-manager"]["ready"]) == ("ready", True)
    r = cli("policy", "show", server=cluster.url)
    assert "Policy:      rbln-cluster-policy (ready, but status.components: rbln-sandbox-device-plugin notReady)" \
        in r.stdout
    r = cli("status", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert "DaemonSet rbln-sandbox-device-plugin notReady (DaemonSet rbln-system/rbln-sandbox-device-plugin is " \
        "progressing: 0 of 1 pods are Ready (1 unavailable))" in r.stderr
    assert "rbln-device-plugin" not in r.stderr  # no node is in container mode: its idle DaemonSet is no news


@pytest.mark.parametrize("release", [V0_3_0], ids=lambda r: r.name)
def test_v030_preflight_fails_sandbox(cluster, release):
    report = json.loads(cli("preflight", "-o", "json", server=cluster.url).stdout)
    by_id = {c["id"]: c for c in report["checks"] if c["scope"] == "cluster"}
    check = by_id["operator.version"]
    assert check["status"] == "FAIL"
    assert ".driver-ctr-ready" in check["evidence"] and ">= 0.4.4" in check["remedy"]


def test_chart_defaults_refuse_a_switch_to_vm_with_zero_writes(apiserver, release):
    """The charts ship vfioManager and both VM allocators disabled: the switch could never finish."""
    apiserver.add(release.policy(), o.npu_node("n1", product="RBLN-CA25", release=release))
    apiserver.clear_requests()
    r = cli("node", "set-mode", "n1", "vm", "--yes", server=apiserver.url)
    assert r.exit_code == 1
    assert "vfioManager" in r.stderr and "spec.vfioManager.enabled" in r.stderr
    assert apiserver.writes() == []
