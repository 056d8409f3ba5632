"""rblnctl.kubevirt.status: effective gates per KubeVirt release and the permitted RBLN devices."""

from __future__ import annotations


from rblnctl.kubevirt.status import kubevirt_status
from tests.fakes import objects as o
from tests.kubevirt.support import NVIDIA


def test_status_counts_beta_on_by_default_from_1_9(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0",
                             permitted_pci=[NVIDIA, ("1EFF:1220", "rebellions.ai/RBLN-CA22_PF")]))
    st = kubevirt_status(kube)
    hd, dra = st.gates
    assert (hd.name, hd.effective, hd.listed) == ("HostDevices", True, True)
    assert (dra.name, dra.effective, dra.listed) == ("HostDevicesWithDRA", True, False) and "Beta" in dra.reason
    assert [(d.resource_name, d.model) for d in st.permitted_devices] == [("rebellions.ai/RBLN-CA22_PF", "CA22 PF")]
    assert st.other_permitted_devices == 1
    assert (st.phase, st.version, st.deleting) == ("Deployed", "v1.9.0", False)
    assert st.notes == []


def test_status_on_1_8_and_disabled_gates(kube, apiserver):
    apiserver.add(o.kubevirt("kv-old", "old", feature_gates=[], version="v1.8.1"),
                  o.kubevirt("kv-new", "new", feature_gates=["HostDevices"], disabled_gates=["HostDevicesWithDRA"]))
    old = kubevirt_status(kube, namespace="kv-old")
    assert [g.effective for g in old.gates] == [False, False]
    assert any("HostDevices is off" in str(n) for n in old.notes)
    # issue 39: words, no command (permit-devices refuses while no node advertises a resource: the CR cannot tell)
    assert any("no RBLN NPU in permittedHostDevices" in str(n) and getattr(n, "command", None) is None
               for n in old.notes)
    new = kubevirt_status(kube, name="new", namespace="kv-new")
    dra = new.gates[1]
    assert dra.effective is False and dra.disabled
    assert any("HostDevicesWithDRA is in disabledFeatureGates" in str(n) for n in new.notes)


def test_status_with_unknown_version_cannot_tell_beta_gates(kube, apiserver):
    apiserver.add(o.kubevirt(feature_gates=[], phase="Deploying"))
    st = kubevirt_status(kube)
    assert st.version is None and st.gates[1].effective is None
    assert any("phase is Deploying" in str(n) for n in st.notes)


def test_status_reports_a_cr_being_deleted(kube, apiserver):
    kv = o.kubevirt(feature_gates=["HostDevices"])
    kv["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    apiserver.add(kv)
    st = kubevirt_status(kube)
    assert st.deleting and any("being deleted" in str(n) for n in st.notes)
