"""`kubevirt.permitted-devices` when the KubeVirt CR has no permittedHostDevices at all.

KubeVirt v1.9.0 checks host device names only when the field exists (renderresources.go
validatePermittedHostDevices; measured in tests/kubevirt_real/test_unlisted_devices_real.py): an advertised
resource that is not listed then runs, so preflight warns (the list someone adds later refuses it) instead of
failing, and `vm diagnose` passes the link with the same warning.
"""

from __future__ import annotations

from rblnctl.kubevirt.devices import names_checked
from rblnctl.preflight.model import Status
from tests.fakes import objects as o
from tests.preflight.cluster_support import CA22_PF, cluster, run, seed


def test_names_are_checked_only_when_the_list_exists():
    assert not names_checked(o.kubevirt(feature_gates=["HostDevices"]))
    assert not names_checked({"spec": {"configuration": {"permittedHostDevices": None}}})
    assert names_checked(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[]))
    assert names_checked({"spec": {"configuration": {"permittedHostDevices": {}}}})


def test_no_permitted_host_devices_warns(apiserver, kube):
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"]))
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert p.status == Status.WARN
    assert f"advertised but not permitted: {CA22_PF} (3 nodes) (KubeVirt has no permittedHostDevices" in p.evidence
    assert p.remedy == "`rblnctl kubevirt permit-devices --from-cluster`"
