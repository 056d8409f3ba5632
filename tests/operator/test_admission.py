"""rblnctl.operator.admission: the policy CRD's CEL rules, read from the CRD or chosen by release."""

from __future__ import annotations

from rblnctl.operator import admission
from rblnctl.operator.policy import parse_policy
from rblnctl.operator.release import OperatorRelease
from tests.fakes import objects as o


def release(version):
    return OperatorRelease(version=version, text="v" + ".".join(map(str, version)))


def test_rules_by_release_when_the_crd_cannot_be_read():
    assert admission.for_release(release((0, 3, 0))).ids == []
    assert admission.for_release(release((0, 5, 1))).ids == ["vfio-for-vm", "sandbox-for-vm"]
    later = admission.for_release(release((0, 6, 0)))
    assert later.ids == ["sandbox-xor-dra", "device-plugin-xor-dra", "vfio-for-vm", "allocator-for-vm"]
    unknown = admission.for_release(OperatorRelease(version=None))
    assert unknown.assumed and unknown.ids == later.ids and "unknown" in unknown.source


def test_rules_read_from_the_crd_by_their_cel_text_and_unknown_ones_reported():
    crd = o.crd("rblnclusterpolicies", "rebellions.ai", "RBLNClusterPolicy", "Cluster", versions=("v1beta1",))
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] = {"spec": {"x-kubernetes-validations": [
        {"rule": "!(has(self.draKubeletPlugin) && self.draKubeletPlugin.enabled\n    && self.devicePlugin.enabled)"},
        {"rule": "self.driver.enabled || true"}]}}
    rules = admission.from_crd(crd)
    assert rules.ids == ["device-plugin-xor-dra"] and rules.unknown == ("self.driver.enabled || true",)
    assert not rules.assumed
    dra_and_dp = parse_policy(o.cluster_policy(sandbox=False, dra=True, device_plugin=True))
    assert rules.problems(dra_and_dp) == ["devicePlugin and draKubeletPlugin are both enabled (mutually exclusive)"]
    assert admission.from_crd(o.crd("x", "y", "Z")).ids == []  # v0.3.0's CRD: no rules


def test_the_chart_rule_refuses_dra_only_on_vm_passthrough_and_the_bases_admit_it():
    dra_only = parse_policy(o.cluster_policy(workload_type="vm-passthrough", vfio_manager=True, sandbox=False,
                                             dra=True, device_plugin=False))
    chart = admission.for_release(release((0, 5, 0)))
    bases = admission.for_release(release((0, 6, 0)))
    assert [r.id for r in chart.broken(dra_only)] == ["sandbox-for-vm"]
    assert bases.broken(dra_only) == []
