"""permittedHostDevices absent vs present, judged by real KubeVirt v1.9.0 and by `vm diagnose`.

virt-controller checks a VMI's host device names against the list only when the KubeVirt CR has a
`permittedHostDevices` at all (pkg/virt-controller/services/renderresources.go validatePermittedHostDevices:
`if hostDevs := config.GetPermittedHostDevices(); hostDevs != nil`); virt-launcher takes a device from the
device plugin's environment, never from the list (pkg/virt-launcher/virtwrap/device/hostdevice/generic).
So without the field a sandbox VM runs with its NPUs; with it (even empty) an unlisted name is refused.
"""

from __future__ import annotations

from tests.kubevirt_real.test_listing_real import links, running
from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm


def _conf(kv, **conf) -> None:
    def edit(o: dict) -> None:
        c = o["spec"].setdefault("configuration", {})
        c.setdefault("developerConfiguration", {})["featureGates"] = ["HostDevices"]
        c.pop("permittedHostDevices", None)
        c.update(conf)
    kv.api.mutate("KubeVirt", "kubevirt", "kubevirt", edit)


def test_without_permitted_host_devices_kubevirt_checks_no_name(kv):
    _conf(kv)
    running(kv, vm(kv.namespace, "sb", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    (pod,) = kv.launcher_pods("sb")
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    assert compute["resources"]["requests"][SANDBOX_RESOURCE] == "1"
    r, got = links(kv, "sb")
    link = got["PermittedHostDevice"]
    assert link["status"] == "PASS", link
    assert any("checks no host device name" in e for e in link["evidence"]), link


def test_with_an_empty_list_an_unlisted_name_is_refused(kv):
    _conf(kv, permittedHostDevices={"pciHostDevices": []})
    kv.api.seed(vm(kv.namespace, "sb", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    kv.api.wait_for(lambda: "is not permitted in permittedHostDevices configuration" in str(kv.vm("sb")),
                    timeout_s=60)
    r, got = links(kv, "sb")
    assert got["PermittedHostDevice"]["status"] == "FAIL", got["PermittedHostDevice"]
