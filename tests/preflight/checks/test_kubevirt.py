"""`kubevirt.installed`, `kubevirt.version`, `kubevirt.gates`, and remedies that work."""

from __future__ import annotations

import pytest

from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import CA22_PF, seed, run, cluster


def test_kubevirt_crd_missing(apiserver, kube):
    seed(apiserver)
    apiserver.remove_resource("kubevirts.kubevirt.io")
    c = cluster(run(kube))
    assert c["kubevirt.installed"].status == Status.FAIL
    assert "CRD is not installed" in c["kubevirt.installed"].evidence and "kubevirt-operator.yaml" in \
        c["kubevirt.installed"].remedy
    assert [c[i].status for i in ("kubevirt.version", "kubevirt.gates", "kubevirt.permitted-devices")] == \
        [Status.SKIP] * 3


def test_kubevirt_not_deployed(apiserver, kube):
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"], phase="Deploying",
                                        permitted_pci=[("1EFF:1220", CA22_PF)]))
    c = cluster(run(kube))
    assert c["kubevirt.installed"].status == Status.FAIL and "phase Deploying" in c["kubevirt.installed"].evidence
    assert c["kubevirt.version"].status == Status.WARN  # observedKubeVirtVersion is unset until Deployed


def test_kubevirt_too_old_for_dra(apiserver, kube):
    seed(apiserver, method="dra", kubevirt=o.kubevirt(feature_gates=["HostDevices"], version="v1.8.2"))
    c = cluster(run(kube))
    assert c["kubevirt.version"].status == Status.FAIL and "v1.8.2 < 1.9.0" in c["kubevirt.version"].evidence
    gates = c["kubevirt.gates"]
    assert gates.status == Status.FAIL and "Alpha" in gates.evidence  # HostDevicesWithDRA off before 1.9
    # issue 39: enable-gates --dra refuses this KubeVirt, so no command to run yet: the step in words, after the upgrade
    assert "then enable them with kubevirt enable-gates" in gates.remedy and gates.remedy_command == ""


def test_gates_missing(apiserver, kube):
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=[], permitted_pci=[("1EFF:1220", CA22_PF)]))
    gates = cluster(run(kube))["kubevirt.gates"]
    assert gates.status == Status.FAIL and "HostDevices: not listed" in gates.evidence
    assert gates.remedy.startswith("`rblnctl kubevirt enable-gates`")


def test_dra_gate_disabled(apiserver, kube):
    seed(apiserver, method="dra", kubevirt=o.kubevirt(feature_gates=["HostDevices"],
                                                      disabled_gates=["HostDevicesWithDRA"]))
    gates = cluster(run(kube))["kubevirt.gates"]
    assert gates.status == Status.FAIL and "HostDevicesWithDRA: in disabledFeatureGates" in gates.evidence


def test_dra_gate_unlisted_on_beta_release_warns(apiserver, kube):
    seed(apiserver, method="dra", kubevirt=o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"))
    gates = cluster(run(kube))["kubevirt.gates"]
    assert gates.status == Status.WARN and "on by default since KubeVirt 1.9.0" in gates.evidence


@pytest.mark.parametrize("version", [None, "", "weird"])
def test_dra_gate_with_unknown_kubevirt_version_warns_and_remedy_needs_force(apiserver, kube, version):
    kv = o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0")
    if version is None:
        del kv["status"]["observedKubeVirtVersion"]
    else:
        kv["status"]["observedKubeVirtVersion"] = version
    seed(apiserver, method="dra", kubevirt=kv)
    c = cluster(run(kube))
    gates = c["kubevirt.gates"]
    # HostDevicesWithDRA unlisted + version unknown: whether it is on is unknown, not off
    assert gates.status == Status.WARN, gates
    # enable-gates --dra refuses an unknown version without --force: the remedy must say so
    assert "`rblnctl kubevirt enable-gates --dra --force`" in gates.remedy
    if version == "weird":
        assert "'weird'" in c["kubevirt.version"].evidence and "empty" not in c["kubevirt.version"].evidence


def test_dra_gate_on_old_kubevirt_remedy_upgrades_first(apiserver, kube):
    seed(apiserver, method="dra", kubevirt=o.kubevirt(feature_gates=["HostDevices"], version="v1.8.2"))
    gates = cluster(run(kube))["kubevirt.gates"]
    assert gates.status == Status.FAIL
    assert "upgrade KubeVirt to 1.9.0" in gates.remedy  # enable-gates --dra alone would be refused
    assert "then enable them with kubevirt enable-gates" in gates.remedy and gates.remedy_command == ""


def test_remedies_pick_the_cr_when_there_are_several(apiserver, kube):
    """With two KubeVirt CRs, `rblnctl kubevirt ...` without --name/--namespace refuses: the remedy must pick one."""
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=[]))
    apiserver.add(o.kubevirt("kv2", "other", feature_gates=[], phase="Deploying"))
    c = cluster(run(kube))
    assert "`rblnctl kubevirt enable-gates -n kubevirt --name kubevirt`" in c["kubevirt.gates"].remedy
    assert "`rblnctl kubevirt permit-devices -n kubevirt --from-cluster --name kubevirt`" in \
        c["kubevirt.permitted-devices"].remedy



def test_hco_managed_kubevirt_remedies_name_the_hyperconverged_cr(apiserver, kube):
    seed(apiserver, method="dra", kubevirt=o.hco_kubevirt(feature_gates=["CPUManager", "HostDevices", "Snapshot"],
                                                           disabled_gates=["HostDevicesWithDRA"]))
    g = cluster(run(kube))["kubevirt.gates"]
    assert g.status == Status.FAIL and g.remedy_command == ""  # enable-gates would refuse this CR
    assert "HyperConverged kubevirt-hyperconverged" in g.remedy and "kubevirt.kubevirt.io/jsonpatch" in g.remedy


def test_hco_managed_kubevirt_devices_are_permitted_in_the_hyperconverged_cr(apiserver, kube):
    seed(apiserver, kubevirt=o.hco_kubevirt(feature_gates=["HostDevices"], permitted_pci=[]))
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert p.status == Status.FAIL and p.remedy_command == ""
    assert "spec.permittedHostDevices.pciHostDevices" in p.remedy and "pciDeviceSelector" in p.remedy


def test_kubevirt_outside_its_kubernetes_support_window_warns(apiserver, kube):
    """KubeVirt 1.N supports Kubernetes 1.(N+25)-1.(N+27) (kubevirt/sig-release releases/k8s-support-matrix.md)."""

    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"], version="v1.5.2"))
    apiserver.set_version("v1.33.1")
    v = cluster(run(kube))["kubevirt.version"]
    assert v.status == Status.WARN
    assert "KubeVirt 1.5 supports Kubernetes 1.30 to 1.32 by its support matrix" in v.evidence and "1.33" in v.evidence
    apiserver.set_version("v1.32.4")
    assert cluster(run(kube))["kubevirt.version"].status == Status.PASS
    # a release newer than the matrix: the pattern, said as such
    apiserver.set_version("v1.30.0")
    seed_kv = apiserver.get("KubeVirt", "kubevirt", "kubevirt")
    seed_kv["status"]["observedKubeVirtVersion"] = "v1.9.0"
    apiserver.update(seed_kv)
    v = cluster(run(kube))["kubevirt.version"]
    assert v.status == Status.WARN and "1.34 to 1.36 by the pattern of its support matrix" in v.evidence
