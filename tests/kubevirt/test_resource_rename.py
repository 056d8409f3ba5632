"""rblnctl.vm.resource_rename: old NPU resource names renamed in the KubeVirt CR and every VM, with bounded requests."""

from __future__ import annotations

import math

import pytest

from rblnctl.errors import InvalidInput, Partial, Refused
from rblnctl.vm.resource_rename import (
    MigrateOptions,
    ResourceMigrator,
    Source,
    derive_rename,
    parse_mapping,
    plan_vm,
)
from rblnctl.operator.policy import parse_policy
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from tests.fakes.releases import V0_3_0
from tests.kubevirt.support import NEW, OLD, selector_disagreeing_with_map, upgraded_cluster

VMS_PATH = "/apis/kubevirt.io/v1/virtualmachines"
VM_PATH = "^/apis/kubevirt.io/v1/namespaces/[^/]+/virtualmachines/[^/]+$"
KV_PATH = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
PCI = "/spec/configuration/permittedHostDevices/pciHostDevices"


def migrator(kube, **kw) -> ResourceMigrator:
    return ResourceMigrator(kube=kube, options=MigrateOptions(**kw), clock=FakeClock())


def host_devices(apiserver, ns, name):
    return apiserver.get("VirtualMachine", name, ns)["spec"]["template"]["spec"]["domain"]["devices"].get(
        "hostDevices")


def permitted_names(apiserver):
    return [e["resourceName"] for e in apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"][
        "permittedHostDevices"]["pciHostDevices"]]


# -- mapping -------------------------------------------------------------------------------------


def test_parse_mapping_qualifies_and_refuses_what_cannot_be_meant():
    assert parse_mapping(["ATOM_PT=RBLN-CA22_PF", "rebellions.ai/REBEL_PT=rebellions.ai/RBLN-CR03_PF"]) == (
        ("rebellions.ai/ATOM_PT", "rebellions.ai/RBLN-CA22_PF"),
        ("rebellions.ai/REBEL_PT", "rebellions.ai/RBLN-CR03_PF"))
    for bad, why in (("ATOM_PT", "expected OLD=NEW"), ("ATOM_PT=", "expected OLD=NEW"), ("A B=C", "expected OLD=NEW"),
                     ("nvidia.com/T4=RBLN-CA22_PF", "not a Rebellions resource"), ("X_PT=X_PT", "to itself")):
        with pytest.raises(InvalidInput, match=why):
            parse_mapping([bad])
    with pytest.raises(InvalidInput, match="mapped twice"):
        parse_mapping(["A_PT=RBLN-CA22_PF", "A_PT=RBLN-CA25_PF"])
    with pytest.raises(InvalidInput, match="both renamed and a new name"):
        parse_mapping(["A_PT=B_PT", "B_PT=RBLN-CA22_PF"])


def test_each_source_of_a_mapping_and_its_limits():
    adv = {NEW: ["n0"]}
    # the KubeVirt CR's selector says which device the old name stood for (a VF stays a VF)
    r = derive_rename(OLD, entries=[{"resourceName": OLD, "pciVendorSelector": "1EFF:1251"}], policy=None,
                      advertised=adv)
    assert (r.new, r.source) == ("rebellions.ai/RBLN-CA25_VF", Source.PERMITTED)
    # the chart v0.3.0 policy's resourceList names one product for it
    policy = parse_policy(V0_3_0.policy(sandbox=True, vfio_manager=True))
    r = derive_rename("rebellions.ai/ATOM_PT", entries=[], policy=policy, advertised={})
    assert (r.new, r.source) == ("rebellions.ai/RBLN-CA12_PF", Source.POLICY)
    # a model in the name (the operator README's ATOM_CA25_PT)
    r = derive_rename("rebellions.ai/ATOM_CA22_PT", entries=[], policy=None, advertised={})
    assert (r.new, r.source) == ("rebellions.ai/RBLN-CA22_PF", Source.NAME)
    # the chart's default list only when a node advertises where it leads
    r = derive_rename(OLD, entries=[], policy=None, advertised=adv)
    assert (r.new, r.source) == (NEW, Source.CHART_DEFAULT)
    why = derive_rename("rebellions.ai/ATOM_PT", entries=[], policy=None, advertised=adv)
    assert isinstance(why, str) and "no vm-passthrough node advertises rebellions.ai/RBLN-CA12_PF" in why
    # several devices under one name, none singled out by what nodes advertise
    two = [{"resourceName": OLD, "pciVendorSelector": "1EFF:1250"},
           {"resourceName": OLD, "pciVendorSelector": "1EFF:1251"}]
    assert "several devices" in derive_rename(OLD, entries=two, policy=None, advertised={})
    assert derive_rename(OLD, entries=two, policy=None, advertised=adv).new == NEW
    assert "neither" in derive_rename("rebellions.ai/FOO_PT", entries=[], policy=None, advertised={})


def test_plan_vm_rewrites_host_devices_gpus_and_resources_with_guards():
    vm = o.vm("ns", "a", host_devices=[OLD, "rebellions.ai/RBLN-CA22_PF"])
    domain = vm["spec"]["template"]["spec"]["domain"]
    domain["devices"]["gpus"] = [{"name": "g0", "deviceName": OLD}]
    domain["resources"] = {"requests": {"memory": "4Gi", OLD: "2"}, "limits": {OLD: "2"}}
    change = plan_vm(vm, {OLD: NEW}, running=False)
    assert [(c.field, c.new) for c in change.changes] == [
        ("hostDevices[npu0].deviceName", NEW), ("gpus[g0].deviceName", NEW),
        ("resources.requests", NEW), ("resources.limits", NEW)]
    tests = [op for op in change.patch if op["op"] == "test"]
    assert [t["path"] for t in tests] == [
        "/metadata/uid", "/spec/template/spec/domain/devices/hostDevices", "/spec/template/spec/domain/devices/gpus",
        "/spec/template/spec/domain/resources/requests", "/spec/template/spec/domain/resources/limits"]
    assert {"op": "remove", "path": "/spec/template/spec/domain/resources/requests/rebellions.ai~1ATOM_MAX_PT"} \
        in change.patch
    assert {"op": "add", "path": "/spec/template/spec/domain/resources/limits/rebellions.ai~1RBLN-CA25_PF",
            "value": "2"} in change.patch
    # both names with different quantities: nobody can say which one is meant
    domain["resources"]["limits"][NEW] = "4"
    clash = plan_vm(vm, {OLD: NEW}, running=False)
    assert clash.patch == [] and "has both" in clash.blockers[0].message


# -- the cluster ---------------------------------------------------------------------------------


def test_over_300_vms_in_several_namespaces_in_bounded_paged_requests(kube, apiserver):
    upgraded_cluster(apiserver)
    stale, fresh, plain = [], [], []
    for i in range(320):
        ns = f"team-{i % 4}"
        if i % 3 == 0:
            apiserver.add(o.vm(ns, f"vm-{i}", host_devices=[OLD, OLD], running=False))
            stale.append((ns, f"vm-{i}"))
        elif i % 3 == 1:
            apiserver.add(o.vm(ns, f"vm-{i}", host_devices=[NEW], running=False))
            fresh.append((ns, f"vm-{i}"))
        else:
            apiserver.add(o.vm(ns, f"vm-{i}", running=False))
            plain.append((ns, f"vm-{i}"))
    apiserver.clear_requests()
    m = migrator(kube, page_size=100)
    plan = m.plan()
    assert not plan.blockers and plan.scanned_vms == 320
    assert [(r.old, r.new, r.source) for r in plan.renames] == [(OLD, NEW, Source.PERMITTED)]
    assert sorted((v.namespace, v.name) for v in plan.vms) == sorted(stale)

    lists = apiserver.requests_matching("GET", f"^{VMS_PATH}$")
    assert len(lists) == math.ceil(320 / 100)
    assert all(r.query.get("limit") == ["100"] for r in lists)
    assert [bool(r.query.get("continue")) for r in lists] == [False, True, True, True]
    assert apiserver.requests_matching("GET", VM_PATH) == []  # no per-VM GET before deciding
    assert apiserver.writes() == []
    reads = len(apiserver.requests)

    result = m.apply(plan)
    assert result.kubevirt_changed and sorted(result.changed) == sorted(f"{ns}/{n}" for ns, n in stale)
    writes = apiserver.writes()
    assert len(writes) == len(stale) + 1
    assert [w.path for w in writes].count(KV_PATH) == 1
    assert all(w.method == "PATCH" and w.content_type == "application/json-patch+json" for w in writes)
    assert len(apiserver.requests) == reads + len(writes)  # apply read nothing more
    for ns, n in stale:
        assert [d["deviceName"] for d in host_devices(apiserver, ns, n)] == [NEW, NEW]
    assert permitted_names(apiserver) == [NEW]

    # idempotent: a re-run reads the same bounded lists and writes nothing
    apiserver.clear_requests()
    again = m.plan()
    assert again.noop and again.renames == [] and not again.blockers
    assert m.apply(again).changed == [] and apiserver.writes() == []
    assert apiserver.requests_matching("GET", VM_PATH) == []
    assert len(apiserver.requests) == reads


def test_a_concurrent_edit_is_read_again_and_replanned(kube, apiserver):
    upgraded_cluster(apiserver)
    apiserver.add(o.vm("ns", "a", host_devices=[OLD], running=False), o.vm("ns", "b", host_devices=[OLD],
                                                                            running=False))
    m = migrator(kube)
    retried = []
    m.on_retry = lambda what, attempt, msg: retried.append((what, attempt))
    plan = m.plan()

    # someone adds a second NPU (by the old name) to VM a after the plan was made
    def add_device(vm):
        vm["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"].append(
            {"name": "npu1", "deviceName": OLD})

    apiserver.mutate("VirtualMachine", "a", "ns", fn=add_device)
    apiserver.clear_requests()
    result = m.apply(plan)
    assert sorted(result.changed) == ["ns/a", "ns/b"] and result.retries == 1
    assert retried == [("VirtualMachine ns/a", 1)]
    assert [d["deviceName"] for d in host_devices(apiserver, "ns", "a")] == [NEW, NEW]
    a_path = "^/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/a$"
    assert [r.status for r in apiserver.requests_matching("PATCH", a_path)] == [422, 200]
    assert len(apiserver.requests_matching("GET", a_path)) == 1  # only the edited VM is read again
    assert apiserver.requests_matching("GET", "^/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/b$") == []


def test_a_vm_deleted_and_re_created_after_the_plan_is_reported_replaced_and_never_renamed(kube, apiserver):
    """Issue 37: the VM patch tests the uid it was planned on; the VM of the same name its owner re-created from
    the same manifest (another uid, the old names again) is not renamed, and the run says so (Replaced)."""
    upgraded_cluster(apiserver)
    apiserver.add(o.vm("ns", "a", host_devices=[OLD], running=False), o.vm("ns", "b", host_devices=[OLD],
                                                                            running=False))
    m = migrator(kube)
    plan = m.plan()
    first = apiserver.get("VirtualMachine", "a", "ns")
    apiserver.delete("VirtualMachine", "a", "ns")
    again = o.vm("ns", "a", host_devices=[OLD], running=False)
    again["metadata"]["uid"] = "0a0a0a0a-0000-4000-8000-000000000001"
    apiserver.add(again)
    assert apiserver.get("VirtualMachine", "a", "ns")["metadata"]["uid"] != first["metadata"]["uid"]
    apiserver.clear_requests()
    with pytest.raises(Partial) as err:
        m.apply(plan)
    outcomes = {(x.kind, x.name): x for x in err.value.result.outcomes}
    a = outcomes[("VirtualMachine", "ns/a")]
    assert a.state == "failed" and "was deleted and re-created while rblnctl renamed its NPU resources" in a.reason
    assert outcomes[("VirtualMachine", "ns/b")].state == "done"
    assert [d["deviceName"] for d in host_devices(apiserver, "ns", "a")] == [OLD]  # the new VM: untouched
    a_path = "^/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/a$"
    assert [r.status for r in apiserver.requests_matching("PATCH", a_path)] == [422]  # its uid test refused it


def test_a_vm_that_keeps_changing_gives_up_with_a_conflict(kube, apiserver):
    upgraded_cluster(apiserver)
    apiserver.add(o.vm("ns", "a", host_devices=[OLD], running=False))
    m = migrator(kube, max_attempts=2)
    plan = m.plan()
    apiserver.inject_fault(method="PATCH", path="virtualmachines/a$", status=409, reason="Conflict",
                           message="the object has been modified", times=5)
    with pytest.raises(Partial) as err:  # one object of a multi-object run: its failure is its outcome
        m.apply(plan)
    ((kv, vm),) = [err.value.result.outcomes]
    assert (kv.kind, kv.state) == ("KubeVirt", "done")
    assert (vm.name, vm.state) == ("ns/a", "failed") and "kept changing" in vm.reason


def test_a_403_and_a_500_mid_run_fail_their_vms_and_every_other_vm_is_renamed(kube, apiserver):
    """Before: one VM refused (RBAC, or a 5xx that would not pass) aborted the rest, the CR already renamed, and
    nothing said which VMs were done."""
    upgraded_cluster(apiserver)
    for ns in ("a", "b", "c", "d"):
        apiserver.add(o.vm(ns, "vm", host_devices=[OLD], running=False))
    apiserver.forbid("patch", "virtualmachines.kubevirt.io", "b")
    apiserver.inject_fault(method="PATCH", path="namespaces/c/virtualmachines/vm$", status=500, times=10)
    m = migrator(kube)
    with pytest.raises(Partial) as err:
        m.apply(m.plan())
    fate = {x.name: x.state.value for x in err.value.result.outcomes}
    assert fate == {"kubevirt/kubevirt": "done", "a/vm": "done", "b/vm": "failed", "c/vm": "failed", "d/vm": "done"}
    assert "RBAC does not allow patch" in next(x.reason for x in err.value.result.outcomes if x.name == "b/vm")
    assert err.value.result.changed == ["a/vm", "d/vm"]
    assert [d["deviceName"] for d in host_devices(apiserver, "d", "vm")] == [NEW]
    assert "not every object was renamed: 3 done, 2 failed" in str(err.value)


def test_a_kubevirt_cr_that_cannot_be_renamed_leaves_every_vm_not_attempted(kube, apiserver):
    """VMs renamed to names KubeVirt does not permit could not start: that failure makes the rest unsafe."""
    upgraded_cluster(apiserver)
    apiserver.add(o.vm("a", "vm", host_devices=[OLD], running=False))
    apiserver.forbid("patch", "kubevirts.kubevirt.io")
    m = migrator(kube)
    with pytest.raises(Partial) as err:
        m.apply(m.plan())
    assert [(x.kind, x.state.value) for x in err.value.result.outcomes] == [
        ("KubeVirt", "failed"), ("VirtualMachine", "not-attempted")]
    assert "KubeVirt would not permit their new names" in err.value.result.outcomes[1].reason
    assert [d["deviceName"] for d in host_devices(apiserver, "a", "vm")] == [OLD]


def test_an_api_server_lost_mid_run_leaves_the_vms_after_it_not_attempted(kube, apiserver):
    """A VM whose patch conflicted and whose re-read finds no API server: the next VMs would fail the same way, so
    they are reported not attempted (a re-run does what is left) instead of each failing in turn."""
    upgraded_cluster(apiserver)
    for ns in ("a", "b", "c"):
        apiserver.add(o.vm(ns, "vm", host_devices=[OLD], running=False))
    kube.read_retries = 0
    apiserver.inject_fault(method="PATCH", path="namespaces/a/virtualmachines/vm$", status=409, reason="Conflict",
                           times=1)
    apiserver.inject_fault(method="GET", path="namespaces/a/virtualmachines/vm$", drop=True, times=5)
    m = migrator(kube)
    with pytest.raises(Partial) as err:
        m.apply(m.plan())
    fate = [(x.name, x.state.value) for x in err.value.result.outcomes]
    assert fate == [("kubevirt/kubevirt", "done"), ("a/vm", "failed"), ("b/vm", "not-attempted"),
                    ("c/vm", "not-attempted")]
    assert "could not be reached" in err.value.result.outcomes[2].reason
    assert [d["deviceName"] for d in host_devices(apiserver, "c", "vm")] == [OLD]


def test_a_lost_reply_is_settled_by_reading_the_vm_back(kube, apiserver):
    upgraded_cluster(apiserver)
    apiserver.add(o.vm("ns", "a", host_devices=[OLD], running=False))
    m = migrator(kube)
    plan = m.plan()
    apiserver.inject_fault(method="PATCH", path="virtualmachines/a$", lose_reply=True)
    result = m.apply(plan)
    assert result.changed == ["ns/a"]
    assert len(apiserver.requests_matching("PATCH", "virtualmachines/a$")) == 1  # landed: not sent again
    assert [d["deviceName"] for d in host_devices(apiserver, "ns", "a")] == [NEW]


def test_an_unmappable_name_is_refused_naming_its_objects(kube, apiserver):
    upgraded_cluster(apiserver)
    apiserver.add(o.vm("ns", "a", host_devices=[OLD], running=False),
                  o.vm("ns", "odd", host_devices=["rebellions.ai/FOO_PT"], running=False))
    m = migrator(kube)
    plan = m.plan()
    (blocker,) = plan.blockers
    assert "rebellions.ai/FOO_PT" in blocker.message and "VirtualMachine ns/odd" in blocker.message
    assert blocker.override == "mapping"
    with pytest.raises(Refused):
        m.apply(plan)
    assert apiserver.writes() == []
    # the caller's mapping settles it
    given = migrator(kube, mapping=parse_mapping(["FOO_PT=RBLN-CA25_PF", "ATOM_MAX_PT=RBLN-CA25_PF"]))
    plan = given.plan()
    assert not plan.blockers and {r.source for r in plan.renames} == {Source.GIVEN}
    given.apply(plan)
    assert host_devices(apiserver, "ns", "odd")[0]["deviceName"] == NEW


def test_running_vms_are_reported_and_their_instances_never_edited(kube, apiserver):
    upgraded_cluster(apiserver)
    apiserver.add(o.vm("ns", "live", host_devices=[OLD]), o.vmi("ns", "live", "n0", host_devices=[OLD]),
                  o.vm("ns", "off", host_devices=[OLD], running=False))
    m = migrator(kube)
    plan = m.plan()
    assert plan.restart_needed == ["ns/live"]
    (inst,) = plan.instances
    assert (inst.name, inst.node, inst.names, inst.vm) == ("live", "n0", [OLD], "live")
    result = m.apply(plan)
    assert result.restart_needed == ["ns/live"]
    assert not [w for w in apiserver.writes() if "virtualmachineinstances" in w.path]
    assert not [w for w in apiserver.writes() if "/restart" in w.path or "/stop" in w.path]
    # the re-run writes nothing and still says which instance runs with the old name
    apiserver.clear_requests()
    again = m.plan()
    assert again.noop and [i.name for i in again.instances] == ["live"]
    assert apiserver.writes() == []


def test_a_name_still_advertised_somewhere_waits_for_the_upgrade_unless_forced(kube, apiserver):
    upgraded_cluster(apiserver)
    # one vm-passthrough node's sandbox plugin still runs the old release
    apiserver.add(o.npu_node("old-node", mode=o.MODE_VM, allocatable={OLD: "2"}))
    apiserver.add(o.vm("ns", "a", host_devices=[OLD], running=False))
    given = parse_mapping([f"{OLD}={NEW}"])
    plan = migrator(kube, mapping=given).plan()
    assert [b.override for b in plan.blockers] == ["force"] and "old-node" in plan.blockers[0].message
    forced = migrator(kube, mapping=given, force=True)
    forced.apply(forced.plan())
    assert permitted_names(apiserver) == [OLD, NEW]  # KubeVirt still permits the old name for old-node
    assert host_devices(apiserver, "ns", "a")[0]["deviceName"] == NEW


def test_a_given_mapping_wins_over_the_cr_entrys_selector(kube, apiserver):
    """The CR permits the old name with another device's selector than the one the user names in --map: the
    user's word wins everywhere, the CR's entry included (renamed to the given name, with that name's selector),
    so KubeVirt permits exactly what the renamed VMs ask for."""
    given, suggested = selector_disagreeing_with_map(apiserver)
    apiserver.add(o.vm("ns", "a", host_devices=[OLD], running=False))
    assert migrator(kube).plan().mapping == {OLD: suggested}  # what the CR alone would have said
    m = migrator(kube, mapping=parse_mapping([given]))
    plan = m.plan()
    assert plan.mapping == {OLD: NEW} and not plan.blockers
    assert [(c.old, c.new, c.detail) for c in plan.kubevirt.changes] == [(OLD, NEW, "selector=1EFF:1250")]
    m.apply(plan)
    assert apiserver.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["permittedHostDevices"][
        "pciHostDevices"] == [{"pciVendorSelector": "1EFF:1250", "resourceName": NEW, "externalResourceProvider": True}]
    assert host_devices(apiserver, "ns", "a")[0]["deviceName"] == NEW


def test_an_entry_for_the_new_name_already_there_absorbs_the_old_one(kube, apiserver):
    upgraded_cluster(apiserver, permitted=[("1EFF:1250", OLD), ("1EFF:1250", NEW)])
    apiserver.add(o.vm("ns", "a", host_devices=[OLD], running=False))
    m = migrator(kube)
    plan = m.plan()
    assert [c.kept for c in plan.kubevirt.changes] == [True]
    m.apply(plan)
    assert permitted_names(apiserver) == [NEW]


def test_server_dry_run_sends_every_write_with_dry_run_all(kube, apiserver):
    upgraded_cluster(apiserver)
    apiserver.add(o.vm("ns", "a", host_devices=[OLD], running=False))
    m = migrator(kube, server_dry_run=True)
    m.apply(m.plan())
    writes = apiserver.writes()
    assert len(writes) == 2 and all(w.dry_run for w in writes)
    assert host_devices(apiserver, "ns", "a")[0]["deviceName"] == OLD and permitted_names(apiserver) == [OLD]


def test_chart_v030_names_map_through_the_policy_while_it_still_lists_them(kube, apiserver):
    """A policy that still carries resourceList (the CR was kept on upgrade) names each old resource's product."""
    apiserver.add(V0_3_0.policy(vfio_manager=True, sandbox=True))
    apiserver.add(o.npu_node("n0", mode=o.MODE_VM, product="RBLN-CA12", allocatable={
        "rebellions.ai/RBLN-CA12_PF": "2"}, release=V0_3_0, policy=V0_3_0.policy(sandbox=True)))
    apiserver.mutate("Node", "n0", fn=lambda n: [n["status"][f].pop("rebellions.ai/ATOM_PT", None)
                                                 for f in ("allocatable", "capacity")])
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.add(o.vm("ns", "a", host_devices=["rebellions.ai/ATOM_PT"], running=False))
    plan = migrator(kube).plan()
    assert [(r.new, r.source) for r in plan.renames] == [("rebellions.ai/RBLN-CA12_PF", Source.POLICY)]
    assert plan.kubevirt.noop  # nothing permitted under the old name


def test_a_dra_vm_with_the_old_fixed_claim_name_gets_its_own(kube, apiserver):
    """The VMs rblnctl wrote before shared the pod-level claim name rbln-npu: migrate-resources renames each to
    its own (docs/vm.md, Claim names), with a guarded patch; a VM already named right is left alone."""
    upgraded_cluster(apiserver, permitted=())
    legacy = dict(resource_claims=[o.template_claim("rbln-npu", "rbln-npu-1")],
                  host_devices=[o.dra_host_device("npu0", claim="rbln-npu")], running=False)
    mine = o.vm_claim("b", "vm")
    apiserver.add(o.vm("a", "vm", **legacy),
                  o.vm("b", "vm", running=False, resource_claims=[o.template_claim(mine, "rbln-npu-1")],
                       host_devices=[o.dra_host_device("npu0", claim=mine)]))
    m = migrator(kube)
    plan = m.plan()
    (change,) = plan.vms
    assert change.ref == "a/vm" and [(c.field, c.old, c.new) for c in change.changes] == [
        ("resourceClaims[rbln-npu].name", "rbln-npu", o.vm_claim("a", "vm")),
        ("hostDevices[npu0].claimName", "rbln-npu", o.vm_claim("a", "vm"))]
    m.apply(plan)
    spec = apiserver.get("VirtualMachine", "vm", "a")["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == [o.template_claim(o.vm_claim("a", "vm"), "rbln-npu-1")]
    assert spec["domain"]["devices"]["hostDevices"][0]["claimName"] == o.vm_claim("a", "vm")
    assert migrator(kube).plan().noop


def test_a_vm_with_several_rblnctl_claim_entries_is_left_to_vm_attach(kube, apiserver):
    """Two entries rblnctl could have written (the old rbln-npu, and another VM's own name: a copied manifest edited
    by hand): which one is this VM's is unknown, so migrate-resources renames neither (vm attach sorts it out) and
    still renames the VM's resources."""
    upgraded_cluster(apiserver)
    copied = o.vm_claim("a", "original")
    claims = [o.template_claim("rbln-npu", "rbln-npu-1"), o.template_claim(copied, "rbln-npu-1")]
    devices = [o.dra_host_device("npu0", claim="rbln-npu"), o.dra_host_device("npu1", claim=copied), OLD]
    apiserver.add(o.vm("a", "copy", running=False, resource_claims=claims, host_devices=devices))
    m = migrator(kube)
    plan = m.plan()
    (change,) = plan.vms
    assert [(c.field, c.old, c.new) for c in change.changes] == [("hostDevices[npu2].deviceName", OLD, NEW)]
    m.apply(plan)
    spec = apiserver.get("VirtualMachine", "copy", "a")["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == claims
    assert [d.get("claimName") or d.get("deviceName") for d in spec["domain"]["devices"]["hostDevices"]] == [
        "rbln-npu", copied, NEW]
