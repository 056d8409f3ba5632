"""Which VM allocators the operator release really serves VMs with (rblnctl/operator/release.py), through
the CLI against the fake API server: chart v0.3.0's DRA kubelet plugin is container-only and its sandbox
plugin never leaves Init on a vm-passthrough node."""

from __future__ import annotations

import json

import pytest

from rblnctl.operator.release import UNKNOWN, release_of
from tests.fakes import objects as o
from tests.fakes.releases import NEWER, V0_3_0
from tests.helpers import cli

DRA_ONLY = {"vfio_manager": True, "dra": True, "device_plugin": False}


def test_the_rule_by_version():
    v030 = release_of([V0_3_0.operator_deployment()])
    newer = release_of([NEWER.operator_deployment()])
    assert v030.version == (0, 3, 0) and newer.version == (0, 6, 0)
    assert (v030.serves_vm("sandbox-device-plugin"), v030.serves_vm("dra-kubelet-plugin")) == (False, False)
    assert (newer.serves_vm("sandbox-device-plugin"), newer.serves_vm("dra-kubelet-plugin")) == (True, True)
    assert UNKNOWN.serves_vm("sandbox-device-plugin") is None and release_of([]) == UNKNOWN
    between = release_of([{**V0_3_0.operator_deployment(), "metadata": {
        "name": "op", "namespace": "ns", "labels": {"app.kubernetes.io/version": "v0.5.0"}}}])
    assert between.serves_vm("sandbox-device-plugin") and not between.serves_vm("dra-kubelet-plugin")
    assert between.problem("dra-kubelet-plugin").endswith(
        "upgrade the operator to >= 0.6.0, or use the sandbox method (policy set-method sandbox)")


@pytest.mark.parametrize("release", [V0_3_0, NEWER], ids=lambda r: r.name)
def test_status_does_not_count_a_container_only_dra_plugin(apiserver, release):
    apiserver.add(release.policy(**DRA_ONLY), release.operator_deployment(),
                  o.npu_node("n1", product="RBLN-CA25", release=release))
    st = json.loads(cli("status", "-o", "json", server=apiserver.url).stdout)
    if release is V0_3_0:
        assert st["policy"]["vmMethod"] is None
        (note,) = [n for n in st["notes"] if "draKubeletPlugin" in n]
        assert "v0.3.0 < 0.6.0" in note and "no DRA kubelet plugin" in note
    else:
        assert st["policy"]["vmMethod"] == "dra"
        assert not any("draKubeletPlugin" in n for n in st["notes"])


def test_v030_dra_only_policy_refuses_set_mode_vm_with_zero_writes(apiserver):
    apiserver.add(V0_3_0.policy(**DRA_ONLY), V0_3_0.operator_deployment(),
                  o.npu_node("n1", product="RBLN-CA25", release=V0_3_0))
    apiserver.clear_requests()
    r = cli("node", "set-mode", "n1", "vm", "--yes", "--timeout", "5", server=apiserver.url)
    assert r.exit_code == 1
    assert apiserver.writes() == []
    assert "hands NPUs to VMs through draKubeletPlugin, but" in r.stderr and "no DRA kubelet plugin" in r.stderr
    assert "pass --skip-release-check to go ahead anyway" in r.stderr


def test_unknown_version_names_the_assumption_and_goes_ahead(apiserver):
    apiserver.add(V0_3_0.policy(vfio_manager=True, sandbox=True), o.npu_node("n1", product="RBLN-CA25",
                                                                             release=V0_3_0))
    apiserver.clear_requests()
    # no operator Deployment: the version is unknown, so the plan goes ahead and says what it assumed
    r = cli("node", "set-mode", "n1", "vm", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == []
    text = " ".join(r.stderr.split())
    assert "version is unknown" in text and "assumes the release's sandbox-device-plugin serves" in text


@pytest.mark.parametrize("version, sandbox_cause", [("v0.1.0", False), ("v0.2.0", False), ("v0.2.1", True),
                                                    ("v0.3.0", True)])
def test_releases_before_driver_ready_are_refused_for_the_documented_minimum(version, sandbox_cause):
    """Chart v0.1.0/v0.2.0 have no driver-ready init container and no DRA plugin: their refusal cites the documented
    minimum, not v0.3.0's cause. Before, every release below 0.4.4 was said to wait in driver-ready."""
    dep = {**V0_3_0.operator_deployment(), "metadata": {"name": "op", "namespace": "ns",
                                                        "labels": {"app.kubernetes.io/version": version}}}
    rel = release_of([dep])
    sandbox, dra = rel.problem("sandbox-device-plugin"), rel.problem("dra-kubelet-plugin")
    assert ("driver-ready" in sandbox) is sandbox_cause
    assert ("documentation's minimum for the sandbox method" in sandbox) is not sandbox_cause
    assert sandbox.endswith("upgrade the operator to >= 0.4.4")
    assert ("no DRA kubelet plugin at all" in dra) is (version < "v0.3.0")
    assert ("container-mode nodes only" in dra) is (version >= "v0.3.0")


def test_the_dra_toolkit_rule_without_a_dra_daemonset_goes_by_the_release():
    from rblnctl.operator.dra import dra_toolkit_rule

    v030 = release_of([V0_3_0.operator_deployment()])
    assert dra_toolkit_rule([], v030).needed is True
    assert dra_toolkit_rule(None, UNKNOWN).needed is None
    assert dra_toolkit_rule([], release_of([NEWER.operator_deployment()])).needed is None
    # the DaemonSet, rendered by the operator from its own code, wins over the release
    ds = o.daemonset("rbln-system", "rbln-dra-kubelet-plugin")
    ds["spec"]["template"]["spec"]["initContainers"] = [{"name": "dra-ready", "image": "x"}]
    assert dra_toolkit_rule([ds], v030).needed is False
