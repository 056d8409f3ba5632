"""A sandbox VM when the KubeVirt CR has no permittedHostDevices at all: KubeVirt checks no name then
(rblnctl.kubevirt.devices.names_checked; measured in tests/kubevirt_real/test_unlisted_devices_real.py), so
`vm attach` goes ahead with a warning and `vm diagnose` passes the link, where a list without the resource refuses."""

from __future__ import annotations

from tests.fakes import objects as o
from tests.vm.support import sandbox_cluster
from tests.vm.test_attach import CA22, NS, attacher


def _unlisted(apiserver) -> None:
    sandbox_cluster(apiserver)
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", lambda kv: kv["spec"]["configuration"].pop(
        "permittedHostDevices"))


def test_attach_goes_ahead_and_warns_without_a_list(apiserver, kube):
    _unlisted(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.blockers == [] and plan.patch is not None
    (w,) = [w for w in plan.warnings if "permittedHostDevices" in str(w)]
    assert "once anyone adds the list KubeVirt refuses" in w and CA22 in w


def test_attach_refuses_when_the_list_lacks_it(apiserver, kube):
    sandbox_cluster(apiserver, permitted=False)
    apiserver.add(o.vm(NS, "v1", running=False))
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert any("not in KubeVirt kubevirt/kubevirt permittedHostDevices" in b.message for b in plan.blockers)


def test_diagnose_names_the_command_that_permits_it(apiserver, kube):
    from rblnctl.remedy import Command, Remedy
    from rblnctl.vm.diagnose import diagnose

    _unlisted(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    d = diagnose(kube, "v1", NS)
    (w,) = [w for w in d.warnings if isinstance(w, Remedy)]
    assert w.command == Command.own("kubevirt", "permit-devices", resource_name=CA22)
    (link,) = [lk for lk in d.links if lk.name == "PermittedHostDevice"]
    assert link.ok and "checks no host device name" in " ".join(link.evidence)
