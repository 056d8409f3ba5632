"""`rblnctl kubevirt migrate-resources`: flags, exit codes, stdout vs stderr, dry runs that write nothing."""

from __future__ import annotations

import json

import pytest

from tests.fakes import objects as o
from tests.fakes.releases import NEWER
from tests.helpers import cli, closed_port_url

OLD = "rebellions.ai/ATOM_MAX_PT"
NEW = "rebellions.ai/RBLN-CA25_PF"


def cluster(apiserver):
    apiserver.add(NEWER.policy(vfio_manager=True, sandbox=True))
    apiserver.add(o.npu_node("n0", mode=o.MODE_VM, product="RBLN-CA25"))
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[("1EFF:1250", OLD)]))
    apiserver.add(o.vm("ns1", "live", host_devices=[OLD]), o.vmi("ns1", "live", "n0", host_devices=[OLD]),
                  o.vm("ns2", "off", host_devices=[OLD], running=False))


def device(apiserver, ns, name):
    return apiserver.get("VirtualMachine", name, ns)["spec"]["template"]["spec"]["domain"]["devices"][
        "hostDevices"][0]["deviceName"]


def test_dry_run_prints_the_plan_per_object_and_writes_nothing(apiserver):
    cluster(apiserver)
    r = cli("kubevirt", "migrate-resources", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == []
    assert f"{OLD} -> {NEW} (permitted: KubeVirt permits 1EFF:1250 as {OLD})" in r.stdout
    rows = [line.split() for line in r.stdout.splitlines()]
    assert ["KubeVirt", "kubevirt", "kubevirt", "pciHostDevices[1EFF:1250]", "ATOM_MAX_PT", "RBLN-CA25_PF"] in rows
    assert ["VirtualMachine", "ns1", "live", "hostDevices[npu0].deviceName", "ATOM_MAX_PT", "RBLN-CA25_PF",
            "restart-needed"] in rows
    assert ["ns1", "live", "n0", "ATOM_MAX_PT", "live"] in rows  # the running instance, reported
    assert "restart it when convenient: `rblnctl vm restart NAME -n NAMESPACE --wait`" in " ".join(r.stdout.split())
    assert "dry run: nothing was sent" in r.stderr


def test_apply_renames_and_names_the_vms_that_need_a_restart(apiserver):
    cluster(apiserver)
    r = cli("kubevirt", "migrate-resources", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "ResourceMigration" and doc["apiVersion"] == "rblnctl.rebellions.ai/v1alpha1"
    assert doc["plan"]["renames"] == [{"old": OLD, "new": NEW, "source": "permitted",
                                       "evidence": f"KubeVirt permits 1EFF:1250 as {OLD}", "stillAdvertisedBy": []}]
    assert doc["result"]["restartNeeded"] == ["ns1/live"] and sorted(doc["result"]["changed"]) == ["ns1/live",
                                                                                                  "ns2/off"]
    assert device(apiserver, "ns1", "live") == NEW and device(apiserver, "ns2", "off") == NEW
    assert not [w for w in apiserver.writes() if "virtualmachineinstances" in w.path]
    # idempotent: the second run sends nothing
    apiserver.clear_requests()
    r = cli("kubevirt", "migrate-resources", server=apiserver.url)
    assert r.exit_code == 0 and apiserver.writes() == []
    assert "nothing to rename" in r.stderr


def test_an_unmappable_name_exits_1_naming_the_vm_and_the_flag(apiserver):
    cluster(apiserver)
    apiserver.add(o.vm("ns3", "odd", host_devices=["rebellions.ai/WEIRD_PT"], running=False))
    r = cli("kubevirt", "migrate-resources", "--yes", server=apiserver.url)
    assert r.exit_code == 1
    assert "refusing to rename NPU resources" in r.stderr and "VirtualMachine ns3/odd" in r.stderr
    assert "--map" in r.stderr and apiserver.writes() == []
    r = cli("kubevirt", "migrate-resources", "--map", "WEIRD_PT=RBLN-CA25_PF", "--map", f"{OLD}={NEW}",
            server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert device(apiserver, "ns3", "odd") == NEW


def test_a_bad_mapping_is_bad_input_before_connecting():
    r = cli("kubevirt", "migrate-resources", "--map", "ATOM_PT", server=closed_port_url())
    assert r.exit_code == 2 and "expected OLD=NEW" in r.stderr and r.stdout == ""


def test_name_output_and_server_dry_run(apiserver):
    cluster(apiserver)
    r = cli("kubevirt", "migrate-resources", "--dry-run", "-o", "name", server=apiserver.url)
    assert r.stdout.split() == ["kubevirt.kubevirt.io/kubevirt", "virtualmachine.kubevirt.io/live",
                                "virtualmachine.kubevirt.io/off"]
    r = cli("kubevirt", "migrate-resources", "--dry-run=server", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert len(apiserver.writes()) == 3 and all(w.dry_run for w in apiserver.writes())
    assert device(apiserver, "ns1", "live") == OLD


def test_an_hco_managed_kubevirt_is_refused_before_any_write(apiserver):
    apiserver.add(NEWER.policy(vfio_manager=True, sandbox=True))
    apiserver.add(o.npu_node("n0", mode=o.MODE_VM, product="RBLN-CA25"))
    apiserver.add(o.hco_kubevirt(feature_gates=["HostDevices"], permitted_pci=[("1EFF:1250", OLD)]))
    apiserver.add(o.vm("ns1", "live", host_devices=[OLD]))
    r = cli("kubevirt", "migrate-resources", "--yes", server=apiserver.url)
    assert r.exit_code == 1
    assert "managed by the HyperConverged Cluster Operator" in r.stderr
    assert "spec.permittedHostDevices.pciHostDevices" in r.stderr
    assert apiserver.writes() == []


@pytest.mark.parametrize("mapping", [
    "rebellions.ai/=RBLN-CA22_PF",  # an empty name after the domain
    "../x=RBLN-CA22_PF",  # a path, not a DNS subdomain
    "ATOM_PT=-bad-",  # starts and ends with '-'
    "memory=RBLN-CA22_PF",  # a Kubernetes resource, not a Rebellions one
    "ATOM_PT=" + "R" * 300,  # longer than 63 after the domain
    "ATOM_PT=rebellions.ai/" + "R" * 64,
    "ATOM_PT=RBLN-CÄ22_PF",  # non-ASCII
    "ATOM_PT=RBLN-CA２２_PF",  # full-width digits
    "ATOM_PT=RBLN-CA22_PF.",  # ends with '.'
])
def test_an_invalid_resource_name_in_a_mapping_is_exit_2_before_connecting(mapping):
    """Before: every one of these was written into the KubeVirt CR and every VM, exit 0."""
    r = cli("kubevirt", "migrate-resources", "--map", mapping, "--yes", server=closed_port_url())
    assert r.exit_code == 2, r.stderr
    assert "invalid resource name in --map" in r.stderr and "cannot reach" not in r.stderr


@pytest.mark.parametrize("args", [["vm", "attach", "v", "--resource", "rebellions.ai/"],
                                  ["vm", "attach", "v", "--resource", "memory"],
                                  ["vm", "manifest", "v", "--resource", "RBLN-CA２２_PF"],
                                  ["kubevirt", "permit-devices", "--resource-name", "../x"]])
def test_an_invalid_resource_flag_is_exit_2_before_connecting(args):
    r = cli(*args, server=closed_port_url())
    assert r.exit_code == 2, r.stderr
    assert "invalid" in r.stderr and "cannot reach" not in r.stderr


def test_a_vm_re_created_mid_run_exits_1_naming_it_and_nothing_is_written_to_it(apiserver):
    """Issue 37: its owner deletes and re-creates VM ns2/off (same manifest, another uid) while the run renames the
    KubeVirt CR: the VM patch's uid test refuses the new VM; the run says it was re-created and exits 6, one object
    of several failed (docs/exit-codes.md); its "finish the job" re-run decides afresh on the VM there now."""
    cluster(apiserver)
    kv_path = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"

    def recreate(req):
        if req.method == "PATCH" and req.path == kv_path and apiserver.get("VirtualMachine", "off", "ns2")[
                "metadata"]["uid"] != "0a0a0a0a-0000-4000-8000-000000000002":
            apiserver.delete("VirtualMachine", "off", "ns2")
            vm = o.vm("ns2", "off", host_devices=[OLD], running=False)
            vm["metadata"]["uid"] = "0a0a0a0a-0000-4000-8000-000000000002"
            apiserver.add(vm)

    apiserver.on_request(recreate)
    r = cli("kubevirt", "migrate-resources", "--yes", server=apiserver.url)
    assert r.exit_code == 6, r.stderr
    assert "VM ns2/off was deleted and re-created while rblnctl renamed its NPU resources" in " ".join(
        r.stderr.split())
    assert device(apiserver, "ns2", "off") == OLD and device(apiserver, "ns1", "live") == NEW
