"""Every RBLNClusterPolicy change rblnctl makes or prints is one the operator's real CRD accepts.

rblnctl changes the policy itself (`policy set-method`) and prints `kubectl patch rblnclusterpolicy ...` remedies
(preflight, set-mode and set-method refusals) meant to be pasted as given. Chart v0.3.0's CRD requires its
eight components and prunes what it does not know; the later operator's adds CEL rules (vfioManager for
vm-passthrough, sandbox and DRA exclusive, devicePlugin and DRA exclusive). Each printed patch is run with the
real kubectl against the real server (server-side dry run) and must be accepted; applied for real, it must
leave preflight's policy check passing. A change the server refuses (here a site's ValidatingAdmissionPolicy)
must come back as one line naming the refusal, with the policy untouched.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest

from tests.cluster.client import Kind
from tests.fakes import objects as o
from tests.fakes.releases import NEWER, V0_3_0

PATCH = re.compile(r"`(kubectl patch rblnclusterpolicy [^`]+)`")


def patches(text: str) -> list[str]:
    return PATCH.findall(text)


def kubectl(real, command: str, *extra: str) -> subprocess.CompletedProcess:
    argv = shlex.split(command) + ["--kubeconfig", str(real.kubeconfig), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def remedies(real) -> list[str]:
    """The policy patches preflight (both methods) and a refused set-mode vm print on this cluster."""
    out = []
    for method in ("sandbox", "dra"):
        r = real.rblnctl("preflight", "--method", method, "-o", "json")
        for check in json.loads(r.stdout)["checks"]:
            out += patches(check.get("remedy") or "")
    r = real.rblnctl("node", "set-mode", "vm", "c1", "--dry-run")
    out += patches(r.stderr)
    return sorted(set(out))


def seed_nodes(real, release) -> None:
    real.api.seed(o.npu_node("c1", release=release), o.npu_node("v1", mode="vm-passthrough", release=release),
                  o.node_feature("c1"), o.node_feature("v1"), release.operator_deployment(),
                  o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], version="v1.9.0"))


def check_remedies(real, policy: dict) -> None:
    real.api.seed(policy)
    found = remedies(real)
    assert found, "this world should make rblnctl print policy patches"
    for command in found:
        r = kubectl(real, command, "--dry-run=server")
        assert r.returncode == 0, f"{command}: {r.stderr}"
    # preflight's own fix for the policy, for real: then preflight finds nothing wrong with the policy.
    doc = json.loads(real.rblnctl("preflight", "--method", "sandbox", "-o", "json").stdout)
    fix = next(c for c in doc["checks"] if c["id"] == "operator.policy")["remedyCommand"]
    assert fix.startswith("kubectl patch rblnclusterpolicy"), fix
    r = kubectl(real, fix)
    assert r.returncode == 0, r.stderr
    doc = json.loads(real.rblnctl("preflight", "--method", "sandbox", "-o", "json").stdout)
    check = next(c for c in doc["checks"] if c["id"] == "operator.policy")
    assert check["status"] in ("PASS", "WARN"), (fix, check)


def test_remedies_are_accepted_by_the_later_crd(later_policy_crd_installed, real):
    seed_nodes(real, NEWER)
    check_remedies(real, NEWER.policy(vfio_manager=False, sandbox=False))


def test_remedies_are_accepted_by_the_chart_v030_crd(real):
    seed_nodes(real, V0_3_0)
    check_remedies(real, V0_3_0.policy(vfio_manager=False, sandbox=False))


@pytest.mark.parametrize("target", ["dra", "sandbox"])
def test_set_method_patches_are_accepted_by_the_later_crd(later_policy_crd_installed, real, target):
    dra_now = target == "sandbox"
    real.api.seed(o.npu_node("v1", mode="vm-passthrough", dra=dra_now), o.node_feature("v1"),
                  NEWER.policy(vfio_manager=True, sandbox=not dra_now, dra=dra_now, device_plugin=False),
                  NEWER.operator_deployment(),
                  o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], version="v1.9.0"))
    r = real.rblnctl("policy", "set-method", target, "--yes", "--no-wait")
    assert r.exit_code == 0, r.stderr
    spec = real.api.get("RBLNClusterPolicy", "rbln-cluster-policy")["spec"]
    assert spec["draKubeletPlugin"]["enabled"] is (target == "dra")
    assert spec["sandboxDevicePlugin"]["enabled"] is (target == "sandbox")


VAP = Kind("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", False)
VAPB = Kind("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding", False, False)


def test_a_change_the_server_refuses_is_named_and_changes_nothing(later_policy_crd_installed, real):
    """A site's admission policy forbids DRA: set-method dra is refused by the server, not by rblnctl."""
    real.api.register(VAP)
    real.api.register(VAPB)
    real.api.seed(o.npu_node("v1", mode="vm-passthrough"), o.node_feature("v1"),
                  NEWER.policy(vfio_manager=True, sandbox=True, device_plugin=False), NEWER.operator_deployment(),
                  o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], version="v1.9.0"))
    real.api.create({"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "no-dra"}, "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": ["rebellions.ai"], "apiVersions": ["*"],
                                                "operations": ["UPDATE"], "resources": ["rblnclusterpolicies"]}]},
        "validations": [{"expression": "!has(object.spec.draKubeletPlugin) || !object.spec.draKubeletPlugin.enabled",
                         "message": "this site does not run the DRA driver"}]}})
    real.api.create({"kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "no-dra"},
                     "spec": {"policyName": "no-dra", "validationActions": ["Deny"]}})
    probe = "kubectl patch rblnclusterpolicy rbln-cluster-policy --type merge -p " + shlex.quote(
        '{"spec":{"draKubeletPlugin":{"enabled":true},"sandboxDevicePlugin":{"enabled":false}}}')
    real.api.wait_for(lambda: kubectl(real, probe, "--dry-run=server").returncode != 0, timeout_s=30,
                      message="the admission policy to be in force")
    before = real.api.get("RBLNClusterPolicy", "rbln-cluster-policy")["metadata"]["resourceVersion"]
    try:
        r = real.rblnctl("policy", "set-method", "dra", "--yes", "--no-wait")
        assert r.exit_code == 1, r.stdout + r.stderr
        assert "this site does not run the DRA driver" in r.stderr and "Traceback" not in r.stderr
        after = real.api.get("RBLNClusterPolicy", "rbln-cluster-policy")["metadata"]["resourceVersion"]
        assert after == before
    finally:
        real.api.delete("ValidatingAdmissionPolicyBinding", "no-dra")
        real.api.delete("ValidatingAdmissionPolicy", "no-dra")
