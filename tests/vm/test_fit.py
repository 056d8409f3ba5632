"""`vm fit` and rblnctl.vm.fit: how many VMs of K NPUs fit now and where, each VM's NPUs on one node, on the
nodes a VM may land on; the same answer behind the warnings of vm attach and vm manifest."""

from __future__ import annotations

import json

import pytest
import yaml

from rblnctl.errors import Ambiguous
from rblnctl.vm.fit import FitOptions, fit
from rblnctl.vm.placement import placement_of
from tests.fakes import objects as o
from tests.helpers import cli, vm_fit_per_product
from tests.vm.support import CA22, CA25, NS, attacher, dra_cluster, sandbox_cluster, vfio_device


def launcher(vm: str, node: str, npus: int, resource: str = CA22) -> dict:
    return o.virt_launcher(NS, vm, node, resources={resource: str(npus)})


@pytest.fixture
def two_nodes(apiserver):
    """vm-mode n1 and n2 with 4 RBLN-CA22_PF each; VMs hold 2 on n1 and 1 on n2; container-mode n9."""
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA22"}, npus=4)
    apiserver.add(launcher("a", "n1", 2), launcher("b", "n2", 1))
    return apiserver


def rows(answer):
    return {n.node: n for n in answer.nodes}


def test_each_node_holds_its_free_npus_divided_by_k(two_nodes, kube):
    answer = fit(kube, FitOptions(npus=2, count=3))
    assert (answer.kind, answer.fits, answer.ok) == (CA22, 2, False)
    r = rows(answer)
    assert [(r[n].free, r[n].fits) for n in ("n1", "n2")] == [(2, 1), (3, 1)]
    assert r["n1"].holders == (f"{NS}/virt-launcher-a-abcde",)
    assert not r["n9"].eligible and "in container mode" in str(r["n9"].reason)
    assert answer.summary() == f"3 VM(s) of 2 NPU(s) ({CA22}): only 2 fit now, on n1 (1), n2 (1)"
    three = rows(fit(kube, FitOptions(npus=3)))
    assert (three["n1"].fits, three["n2"].fits) == (0, 1)
    assert three["n1"].reason == f"2 free of 4 (held by {NS}/virt-launcher-a-abcde), 3 needed"


def test_finished_launchers_hold_nothing(two_nodes, kube):
    two_nodes.set_pod_phase(NS, "virt-launcher-a-abcde", "Succeeded")
    assert rows(fit(kube, FitOptions(npus=4)))["n1"].fits == 1


@pytest.mark.parametrize("change, reason", [
    (lambda n: n["spec"].update(unschedulable=True), "untolerated taint node.kubernetes.io/unschedulable:NoSchedule"),
    (lambda n: n["spec"].update(taints=[{"key": "maintenance", "effect": "NoExecute"}]),
     "untolerated taint maintenance:NoExecute"),
], ids=["cordoned", "tainted"])
def test_cordons_and_taints_the_vm_does_not_tolerate_exclude_a_node(two_nodes, kube, change, reason):
    two_nodes.mutate("Node", "n2", fn=change)
    answer = fit(kube, FitOptions(npus=1))
    r = rows(answer)
    assert (r["n2"].eligible, r["n2"].fits, r["n2"].reason) == (False, 0, f"excluded by {reason}")
    assert answer.fits == 2  # n1 only


def test_a_toleration_or_a_soft_taint_lets_the_vm_in(two_nodes, kube):
    two_nodes.mutate("Node", "n2", fn=lambda n: n["spec"].update(taints=[
        {"key": "npu", "value": "vm", "effect": "NoSchedule"}, {"key": "soft", "effect": "PreferNoSchedule"}]))
    vm = o.vm(NS, "t", tolerations=[{"key": "npu", "operator": "Equal", "value": "vm", "effect": "NoSchedule"}])
    answer = fit(kube, FitOptions(npus=1, placement=placement_of(vm["spec"]["template"]["spec"])))
    assert rows(answer)["n2"].fits == 3


def test_more_than_any_node_has_never_fits(two_nodes, kube):
    answer = fit(kube, FitOptions(npus=5))
    assert answer.never and answer.most == (4, "n1")
    assert answer.warning() == ("5 NPUs: no vm-passthrough node offers that many (the most is 4, on n1); the VM will "
                                "not be scheduled until one does")
    busy = fit(kube, FitOptions(npus=4))  # both nodes have 4, neither has 4 free
    assert not busy.never and busy.fits == 0
    assert "no node the VM may run on has that many free now (free: n1 2, n2 3)" in busy.warning()


def test_a_vms_own_launcher_is_not_counted_against_it(two_nodes, kube):
    uid = o.stable_uid("VirtualMachineInstance", NS, "a")  # the VMI whose launcher holds 2 on n1
    assert rows(fit(kube, FitOptions(npus=4, own_vmi=uid)))["n1"].fits == 1


def test_dra_counts_vfio_devices_less_those_claims_hold(apiserver, kube):
    dra_cluster(apiserver)  # n1 publishes two vfio devices
    apiserver.add(o.resource_slice("n1", name="n1-more", devices=[vfio_device("0000:3d:00.0")]),
                  o.resource_claim(NS, "held", allocated=[("n1", "vfio-0000-3b-00-0")]))
    answer = fit(kube, FitOptions(npus=2))
    assert (answer.method, answer.kind) == ("dra", "vfio-npu.rebellions.ai")
    r = rows(answer)
    assert (r["n1"].allocatable, r["n1"].allocated, r["n1"].free, r["n1"].fits) == (3, 1, 2, 1)
    assert r["n1"].holders == (f"{NS}/held",)


def test_dra_devices_rbac_hides_are_unknown_not_absent(apiserver):
    """RBAC refuses to list ResourceSlices: fit cannot tell what n1 offers; it says so instead of "advertises no"."""
    dra_cluster(apiserver)
    apiserver.inject_fault(method="GET", path="/apis/resource.k8s.io/v1/resourceslices", status=403,
                           reason="Forbidden", message='resourceslices is forbidden: User "u" cannot list', times=50)
    r = cli("vm", "fit", "--npus", "1", "-o", "json", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    (n1,) = [n for n in json.loads(r.stdout)["nodes"] if n["name"] == "n1"]
    assert (n1["eligible"], n1["free"]) == (True, None) and "cannot list ResourceSlices" in n1["reason"]


def test_several_resources_need_a_name_or_a_product(apiserver, kube):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA25"}, npus=4)
    with pytest.raises(Ambiguous):
        fit(kube, FitOptions(npus=1))
    answer = fit(kube, FitOptions(npus=1, product="RBLN-CA25"))
    assert answer.kind == CA25 and [n.node for n in answer.nodes if n.fits] == ["n2"]
    assert rows(answer)["n1"].reason == f"advertises no {CA25}"
    # issue 39 (4): the command answers per product instead of refusing (a VM asks for one of them)
    items = vm_fit_per_product(apiserver.url, 1, f"1 VM(s) of 1 NPU(s) ({CA22}): 1 fit now (4 could), on n1 (4)",
                               f"1 VM(s) of 1 NPU(s) ({CA25}): 1 fit now (4 could), on n2 (4)")
    assert [(i["kind"], i["resource"]) for i in items] == [("VmFit", CA22), ("VmFit", CA25)]


def test_the_command_prints_every_node_and_exits_1_when_too_few_fit(two_nodes):
    r = cli("vm", "fit", "--npus", "2", "--count", "2", server=two_nodes.url)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"2 VM(s) of 2 NPU(s) ({CA22}): 2 fit now (2 could), on n1 (1), n2 (1)"
    header = lines[2].split()
    assert header == ["NODE", "MODE", "NPUS", "ALLOCATED", "FREE", "FITS", "REASON"]
    assert [line.split()[:6] for line in lines[3:]] == [["n1", "vm-passthrough", "4", "2", "2", "1"],
                                                        ["n2", "vm-passthrough", "4", "1", "3", "1"],
                                                        ["n9", "container", "0", "0", "0", "0"]]
    wide = cli("vm", "fit", "--npus", "2", "-o", "wide", server=two_nodes.url).stdout
    assert f"{NS}/virt-launcher-a-abcde" in wide
    r = cli("vm", "fit", "--npus", "2", "--count", "3", "-o", "yaml", server=two_nodes.url)
    assert r.exit_code == 1
    doc = yaml.safe_load(r.stdout)
    assert doc["kind"] == "VmFit" and doc["fits"] == 2 and doc["ok"] is False
    assert "error: 3 VM(s) of 2 NPU(s)" in r.stderr and "only 2 fit now" in r.stderr
    assert cli("vm", "fit", "--npus", "2", "-o", "name", server=two_nodes.url).stdout.split() == ["node/n1", "node/n2"]


@pytest.mark.parametrize("args", [("--npus", "0"), ("--npus", "65"), ("--npus", "1", "--count", "0"),
                                  ("--npus", "1", "--resource", "memory"),
                                  ("--npus", "1", "--method", "dra", "--product", "RBLN-CA22")])
def test_bad_input_is_exit_2_before_connecting(args):
    from tests.helpers import closed_port_url

    r = cli("vm", "fit", *args, server=closed_port_url())
    assert r.exit_code == 2, r.stderr


def test_attach_warns_when_the_vm_would_wait_for_free_npus(two_nodes, kube):
    two_nodes.add(o.vm(NS, "v1", running=False))
    plan = attacher(kube, npus=4).plan("v1", NS)
    assert any("no node the VM may run on has that many free now (free: n1 2, n2 3)" in w for w in plan.warnings)
    assert not any("free now" in w for w in attacher(kube, npus=3).plan("v1", NS).warnings)  # n2 has 3


def test_attach_counts_a_running_vms_own_npus_as_its_own(two_nodes, kube):
    """VM a holds 2 on n1 and asks for 4 with --restart: its own 2 come back when it restarts."""
    two_nodes.add(o.vm(NS, "a", host_devices=[CA22, CA22]), o.vmi(NS, "a", "n1", [CA22, CA22]))
    plan = attacher(kube, npus=4, restart=True).plan("a", NS)
    assert not any("free now" in w for w in plan.warnings), plan.warnings


def test_manifest_json_and_fit_agree(two_nodes):
    r = cli("vm", "manifest", "big", "-n", NS, "--npus", "4", "-o", "json", server=two_nodes.url)
    assert r.exit_code == 0 and json.loads(r.stdout)["kind"] == "List"
    assert "no node the VM may run on has that many free now" in r.stderr


# -- KubeVirt's own nodeSelector and DRA device taints: what the real scheduler weighs beside the NPUs ---------------

NO_HANDLER = ("excluded by KubeVirt's nodeSelector kubevirt.io/schedulable=true (the node has no "
              "kubevirt.io/schedulable label: virt-handler, which sets it on its node, does not run there)")


def schedulable(value):
    """A Node mutation: kubevirt.io/schedulable set to `value` (None: the label removed)."""
    def fn(n):
        labels = n["metadata"]["labels"]
        labels.pop("kubevirt.io/schedulable", None) if value is None else labels.update(
            {"kubevirt.io/schedulable": value})
    return fn


@pytest.mark.parametrize("value, reason", [
    (None, NO_HANDLER),
    ("false",
     "excluded by KubeVirt's nodeSelector kubevirt.io/schedulable=true (the node has kubevirt.io/schedulable=false: "
     "virt-handler writes false until its device plugins are up, virt-controller when virt-handler stops answering)"),
], ids=["no-label", "false"])
def test_a_node_without_kubevirt_schedulable_fits_no_vm(two_nodes, kube, value, reason):
    """Every virt-launcher's nodeSelector holds kubevirt.io/schedulable=true (kubevirt/kubevirt@v1.9.0
    pkg/virt-controller/services/nodeselectorrenderer.go): the scheduler places no VM on n2, whatever it has free."""
    two_nodes.mutate("Node", "n2", fn=schedulable(value))
    answer = fit(kube, FitOptions(npus=1, count=3))
    r = rows(answer)
    assert (r["n2"].eligible, r["n2"].fits, r["n2"].reason) == (False, 0, reason)
    assert (answer.fits, answer.ok) == (2, False)  # n1's 2 free only


def test_the_kubevirt_crs_cluster_wide_node_selectors_count_too(two_nodes, kube):
    """developerConfiguration.nodeSelectors go into every virt-launcher's nodeSelector (v1.9.0 template.go
    newNodeSelectorRenderer: GetNodeSelectors), the VM's own nodeSelector winning on the same key."""
    two_nodes.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda kv: kv["spec"].setdefault("configuration", {})
                     .setdefault("developerConfiguration", {}).update(nodeSelectors={"vm-pool": "a"}))
    two_nodes.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({"vm-pool": "a"}))
    r = rows(fit(kube, FitOptions(npus=1)))
    assert (r["n1"].fits, r["n2"].fits) == (2, 0)
    assert r["n2"].reason == "excluded by nodeSelector vm-pool=a (node has no vm-pool label)"
    own = placement_of({"nodeSelector": {"vm-pool": "b"}})
    two_nodes.mutate("Node", "n2", fn=lambda n: n["metadata"]["labels"].update({"vm-pool": "b"}))
    assert [n.node for n in fit(kube, FitOptions(npus=1, placement=own)).nodes if n.fits] == ["n2"]


def test_attach_and_manifest_warn_when_no_node_offering_the_npus_may_run_vms(two_nodes, kube):
    for name in ("n1", "n2"):
        two_nodes.mutate("Node", name, fn=schedulable(None))
    answer = fit(kube, FitOptions(npus=1))
    assert answer.fits == 0 and not answer.never
    assert answer.warning().startswith(f"1 NPUs: no node that offers {CA22} may run the VM (n1: {NO_HANDLER}")
    r = cli("vm", "manifest", "v", "-n", NS, "--npus", "1", server=two_nodes.url)
    assert r.exit_code == 0 and "no node that offers" in r.stderr and "kubevirt.io/schedulable" in r.stderr
    r = cli("vm", "fit", "--npus", "1", "-o", "json", server=two_nodes.url)
    assert r.exit_code == 1 and json.loads(r.stdout)["fits"] == 0


def test_dra_a_device_taint_keeps_the_device_from_the_vm(apiserver, kube):
    """A NoSchedule taint on one of n1's two vfio devices: the scheduler allocates it to no claim that does not
    tolerate it, so a VM of 2 fits nowhere; tolerated by every request of the VM, it fits."""
    dra_cluster(apiserver)
    apiserver.mutate("ResourceSlice", "n1-npu.rebellions.ai-slice", fn=lambda s: s["spec"]["devices"][1].update(
        taints=[{"key": "rebellions.ai/unhealthy", "value": "true", "effect": "NoSchedule"}]))
    answer = fit(kube, FitOptions(npus=2))
    n1 = rows(answer)["n1"]
    assert (n1.allocatable, n1.allocated, n1.free, n1.fits) == (2, 0, 1, 0) and not answer.never
    assert n1.tainted == ("vfio-0000-3c-00-0 (rebellions.ai/unhealthy=true:NoSchedule)",)
    assert n1.reason == ("1 free of 2 (1 tainted, not tolerated: vfio-0000-3c-00-0 "
                         "(rebellions.ai/unhealthy=true:NoSchedule)), 2 needed")
    assert rows(fit(kube, FitOptions(npus=1)))["n1"].fits == 1
    tolerant = ({"key": "rebellions.ai/unhealthy", "operator": "Exists"},)
    assert fit(kube, FitOptions(npus=2, device_tolerations=(tolerant, tolerant))).fits == 1
    r = cli("vm", "fit", "--npus", "2", "-o", "json", server=apiserver.url)
    (doc,) = [n for n in json.loads(r.stdout)["nodes"] if n["name"] == "n1"]
    assert r.exit_code == 1 and doc["free"] == 1 and doc["tainted"] == list(n1.tainted)


# -- issue 41.3: the other labels virt-controller v1.9.0 puts into a launcher's nodeSelector -------------------------


def test_a_mixed_arch_cluster_counts_only_nodes_of_the_vms_architecture(two_nodes, kube):
    """kubevirt/kubevirt@v1.9.0 nodeselectorrenderer.go NewNodeSelectorRenderer adds kubernetes.io/arch=<the VMI's
    spec.architecture> to every launcher (the KubeVirt CR's defaultArchitecture when the VM names none). Before:
    an arm64 NPU node counted for an amd64 VM the scheduler never places there."""
    two_nodes.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({"kubernetes.io/arch": "amd64"}))
    two_nodes.mutate("Node", "n2", fn=lambda n: n["metadata"]["labels"].update({"kubernetes.io/arch": "arm64"}))
    vm = o.vm(NS, "a")
    vm["spec"]["template"]["spec"]["architecture"] = "amd64"  # as KubeVirt's VM defaulting writes it
    r = rows(fit(kube, FitOptions(npus=1, placement=placement_of(vm["spec"]["template"]["spec"]))))
    assert (r["n1"].fits, r["n2"].fits) == (2, 0)
    assert r["n2"].reason == "excluded by nodeSelector kubernetes.io/arch=amd64 (node has kubernetes.io/arch=arm64)"
    two_nodes.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda kv: kv["spec"].setdefault("configuration", {})
                     .update(architectureConfiguration={"defaultArchitecture": "arm64"}))
    r = rows(fit(kube, FitOptions(npus=1)))  # a VM that names none gets the CR's default
    assert (r["n1"].fits, r["n2"].fits) == (0, 3)


def test_dedicated_cpus_and_a_cpu_model_need_the_labels_kubevirt_selects(two_nodes, kube):
    """template.go newNodeSelectorRenderer: dedicatedCpuPlacement -> kubevirt.io/cpumanager=true, a named CPU model
    -> cpu-model.node.kubevirt.io/<model>=true, required features -> cpu-feature.node.kubevirt.io/<f>=true (after
    the VMI's own nodeSelector); host-model and host-passthrough add no label."""
    spec = {"domain": {"cpu": {"dedicatedCpuPlacement": True, "model": "Skylake-Server",
                               "features": [{"name": "avx512f"}, {"name": "pcid", "policy": "optional"}]}}}
    p = placement_of(spec)
    assert p.rendered_selector == {"kubevirt.io/cpumanager": "true",
                                   "cpu-model.node.kubevirt.io/Skylake-Server": "true",
                                   "cpu-feature.node.kubevirt.io/avx512f": "true"}
    labels = dict.fromkeys(p.rendered_selector, "true")
    two_nodes.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update(labels))
    r = rows(fit(kube, FitOptions(npus=1, placement=p)))
    assert (r["n1"].fits, r["n2"].fits) == (2, 0)
    assert r["n2"].reason == ("excluded by nodeSelector kubevirt.io/cpumanager=true (node has no "
                              "kubevirt.io/cpumanager label)")
    assert placement_of({"domain": {"cpu": {"model": "host-passthrough"}}}).rendered_selector == {}
