"""rblnctl.operator.policy: reading an RBLNClusterPolicy the way each operator release does."""

from __future__ import annotations

import pytest

from rblnctl.operator.policy import choose_active, parse_policy
from tests.fakes import objects as o
from tests.fakes.releases import NEWER, V0_3_0


def test_chart_v0_3_0_policy_as_rendered():
    p = parse_policy(V0_3_0.policy())
    assert p.base_name == "rbln" and p.namespace is None and p.workload_type == "container"
    # The chart's own defaults: the VM components are off.
    assert not p.is_enabled("vfio-manager") and not p.is_enabled("sandbox-device-plugin")
    assert not p.is_enabled("dra-kubelet-plugin") and p.is_enabled("device-plugin")
    assert p.is_enabled("driver")  # driver.useRBLNDriverCRD: true
    assert p.is_enabled("operator-validator")  # no switch: always deployed
    assert p.is_enabled("rbln-daemon") and p.is_enabled("rbln-smd")  # one component, two names
    assert [e.name for e in p.container_resources.entries] == ["rebellions.ai/ATOM", "rebellions.ai/REBEL"]
    assert [e.name for e in p.vm_resources.entries] == [
        "rebellions.ai/ATOM_PT", "rebellions.ai/ATOM_MAX_PT", "rebellions.ai/REBEL_PT"]
    assert p.dra_driver == "npu.rebellions.ai" and p.dra_device_class_vm == "vfio-npu.rebellions.ai"


def test_newer_policy_names_resources_generically():
    p = parse_policy(NEWER.policy(vfio_manager=True, sandbox=True))
    assert p.container_resources.entries == () and p.vm_resources.entries == ()
    assert p.container_resources.matches("rebellions.ai/npu") and p.vm_resources.matches("rebellions.ai/RBLN-CR13_PF")
    assert p.vm_method == "sandbox"


@pytest.mark.parametrize("component", [{}, {"enabled": None}, {"image": "x"}])
def test_a_missing_or_null_enabled_is_false_as_the_operator_reads_it(component):
    """IsEnabled() returns the field (RBLN-SW/rbln-npu-operator@v0.3.0 api/v1beta1): unset is false."""
    obj = o.cluster_policy()
    obj["spec"]["vfioManager"] = component
    del obj["spec"]["sandboxDevicePlugin"]
    p = parse_policy(obj)
    assert not p.is_enabled("vfio-manager") and not p.is_enabled("sandbox-device-plugin")


def test_base_name_namespace_and_invalid_workload_type():
    obj = o.cluster_policy(workload_type="gpu")
    obj["spec"]["name"] = "npu"
    obj["spec"]["namespace"] = "npu-ops"
    p = parse_policy(obj)
    assert (p.base_name, p.namespace, p.workload_type, p.workload_type_raw) == ("npu", "npu-ops", "container", "gpu")
    assert any("workloadType 'gpu'" in x for x in p.admission_problems())
    obj["spec"].pop("namespace")
    obj["status"]["namespace"] = "from-status"  # later releases report where the components run
    assert parse_policy(obj).namespace == "from-status"


def test_the_active_policy_is_the_one_not_ignored_else_the_oldest():
    a = o.cluster_policy("a")
    b = o.cluster_policy("b")
    a["metadata"]["creationTimestamp"] = "2026-02-01T00:00:00Z"
    b["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    choice = choose_active([a, b])
    assert choice.active.name == "b" and "assumes the oldest" in choice.notes[0]
    b["status"] = {"state": "ignored"}
    assert choose_active([a, b]).active.name == "a"
    b["status"] = {"state": "notReady", "conditions": [{"type": "Ready", "status": "False", "reason": "PolicyIgnored"}]}
    choice = choose_active([a, b])
    assert choice.active.name == "a" and "marked ignored" in choice.notes[0]
    assert choose_active([]).active is None


@pytest.mark.parametrize(("kw", "target", "fields"), [
    ({"vfio_manager": False, "sandbox": True}, "vm-passthrough", ["vfioManager"]),
    ({"vfio_manager": True, "sandbox": False, "dra": False}, "vm-passthrough", ["sandboxDevicePlugin"]),
    ({"vfio_manager": False, "sandbox": False}, "vm-passthrough", ["vfioManager", "sandboxDevicePlugin"]),
    ({"device_plugin": False, "dra": False}, "container", ["devicePlugin"]),
])
def test_switch_blockers_name_the_policy_field(kw, target, fields):
    blockers = parse_policy(o.cluster_policy(**kw)).switch_blockers(target)
    assert len(blockers) == len(fields)
    for b, field in zip(blockers, fields, strict=True):
        assert "spec." in b.message and field in b.message and "kubectl patch rblnclusterpolicy" in b.message
        assert b.override is None  # nothing makes the operator converge: no flag overrides it


def test_nothing_blocks_a_switch_the_policy_supports():
    assert parse_policy(o.cluster_policy(dra=True, sandbox=False)).switch_blockers("vm-passthrough") == []
    assert parse_policy(o.cluster_policy(dra=True, device_plugin=False)).switch_blockers("container") == []


def test_a_v0_3_0_resource_list_that_does_not_cover_the_node_blocks_vm():
    p = parse_policy(V0_3_0.policy(vfio_manager=True, sandbox=True))
    (b,) = p.switch_blockers("vm-passthrough", product="RBLN-CA22")
    assert "RBLN-CA22" in b.message and "resourceList" in b.message and "ATOM_MAX_PT" in b.message
    assert p.switch_blockers("vm-passthrough", product="RBLN-CA25") == []
    assert p.switch_blockers("container", product="RBLN-CA22") == []  # ATOM covers CA12, CA22, CA25


def test_admission_rules_of_later_releases():
    both = parse_policy(o.cluster_policy(sandbox=True, dra=True, device_plugin=True))
    problems = both.admission_problems()
    assert any("sandboxDevicePlugin and draKubeletPlugin" in x for x in problems)
    assert any("devicePlugin and draKubeletPlugin" in x for x in problems)
    vm = parse_policy(o.cluster_policy(workload_type="vm-passthrough", vfio_manager=False, sandbox=False))
    assert any("vfioManager is disabled (workloadType is vm-passthrough)" in x for x in vm.admission_problems())


def test_status_is_shown_while_waiting():
    obj = o.cluster_policy()
    obj["status"] = {"state": "notReady",
                     "conditions": [{"type": "Ready", "status": "False", "reason": "SomeComponentsNotReady",
                                     "message": "rbln-vfio-manager is not ready"}],
                     "components": [{"name": "rbln-vfio-manager", "state": "notReady"},
                                    {"name": "rbln-device-plugin", "state": "ready"}]}
    assert parse_policy(obj).not_ready() == [
        "policy rbln-cluster-policy is notReady", "Ready: SomeComponentsNotReady - rbln-vfio-manager is not ready",
        "rbln-vfio-manager notReady"]


def _v030_component(name: str, ready: bool, message: str) -> dict:
    """A status.components entry as the operator v0.3.0 writes it: `state: ready` whatever the pods do; the
    DaemonSetReady condition (in a list named `condition`) follows the DaemonSet."""
    return {"name": name, "namespace": "rbln-system", "state": "ready", "condition": [
        {"type": "DaemonSetReady", "status": "True" if ready else "False", "observedGeneration": 1,
         "reason": "DaemonSetAllPodsReady" if ready else "DaemonSetAllPodsNotReady", "message": message,
         "lastTransitionTime": "2026-12-03T10:02:32Z"}]}


def test_v030_status_components_are_judged_by_their_condition_not_their_state():
    obj = V0_3_0.policy(vfio_manager=True, sandbox=True)
    stuck = "DaemonSet rbln-system/rbln-sandbox-device-plugin is progressing: 0 of 1 pods are Ready (1 unavailable)"
    ready = {"type": "Ready", "status": "True", "reason": "AllComponentsReady", "message": "All components are Ready"}
    obj["status"] = {"state": "ready", "conditions": [ready],
        "components": [_v030_component("rbln-device-plugin", True, "All pods in DaemonSet ... are running"),
                       _v030_component("rbln-sandbox-device-plugin", False, stuck)]}
    p = parse_policy(obj)
    assert [(c.name, c.verdict, c.ready) for c in p.components] == [
        ("rbln-device-plugin", "ready", True), ("rbln-sandbox-device-plugin", "notReady", False)]
    assert p.not_ready() == [f"rbln-sandbox-device-plugin notReady ({stuck})"]
    assert p.status_summary() == "ready, but status.components: rbln-sandbox-device-plugin notReady"
    obj["status"]["components"][1] = _v030_component("rbln-sandbox-device-plugin", True, "running")
    assert parse_policy(obj).not_ready() == [] and parse_policy(obj).status_summary() == "ready"


def test_a_daemonset_no_node_of_the_modes_in_use_selects_is_not_reported():
    """v0.3.0 counts a DaemonSet with no pod to run (desired 0) as not ready: vfio-manager and the sandbox plugin
    on a cluster whose nodes are all in container mode. Only the modes in use (or a switch's target) matter."""
    obj = V0_3_0.policy(vfio_manager=True, sandbox=True)
    idle = "DaemonSet rbln-system/{} is progressing: 0 of 0 pods are Ready (0 unavailable)"
    obj["status"] = {"state": "ready", "components": [
        _v030_component("rbln-device-plugin", True, "running"),
        _v030_component("rbln-vfio-manager", False, idle.format("rbln-vfio-manager")),
        _v030_component("rbln-sandbox-device-plugin", False, idle.format("rbln-sandbox-device-plugin")),
        _v030_component("rbln-something-new", False, "not ready")]}
    p = parse_policy(obj)
    assert [s.name for s in p.components_not_ready({"container"})] == ["rbln-something-new"]
    assert [s.name for s in p.components_not_ready({"container", "vm-passthrough"})] == [
        "rbln-vfio-manager", "rbln-sandbox-device-plugin", "rbln-something-new"]
    assert p.status_summary({"container"}) == "ready, but status.components: rbln-something-new notReady"
    assert len(p.not_ready(modes=("vm-passthrough",))) == 3 and len(p.not_ready()) == 3


@pytest.mark.parametrize(("release", "chart"), [
    (NEWER, "oci://docker.io/rebellions/rbln-npu-operator-chart --version 0.6.0"),
    (V0_3_0, "rbln-npu-operator --repo https://rbln-sw.github.io/rbln-npu-operator --version v0.3.0"),
])
def test_switch_blocker_names_the_durable_helm_change_on_the_chart_that_rendered_the_policy(release, chart):
    (b,) = parse_policy(release.policy(vfio_manager=False, sandbox=True)).switch_blockers("vm-passthrough")
    assert ("kubectl patch rblnclusterpolicy rbln-cluster-policy --type merge "
            """-p '{"spec":{"vfioManager":{"enabled":true}}}'""") in b.message
    assert (f"helm upgrade rbln-npu-operator {chart} -n rbln-system --reuse-values "
            "--set vfioManager.enabled=true") in b.message


@pytest.mark.parametrize(("kw", "changes"), [
    ({"sandbox": True, "dra": False, "device_plugin": False}, {"draKubeletPlugin": True, "sandboxDevicePlugin": False}),
    ({"sandbox": False, "dra": False, "device_plugin": True}, {"draKubeletPlugin": True, "devicePlugin": False}),
    ({"sandbox": False, "dra": True, "device_plugin": False}, {}),
])
def test_dra_changes_turn_the_device_plugin_off_only_when_it_is_on(kw, changes):
    assert parse_policy(o.cluster_policy(vfio_manager=True, **kw)).method_changes("dra") == changes
