"""vm diagnose (library): a healthy VM, and each broken link with its evidence and remedy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rblnctl.vm.diagnose import LinkName, LinkStatus, diagnose, parse_failed_scheduling
from rblnctl.remedy import Command
from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.vm.support import CA22, NS, dra_cluster, sandbox_cluster
from rblnctl.constants import OPERATOR_NAMESPACE as OPS

INSUFFICIENT = ("0/5 nodes are available: 3 Insufficient rebellions.ai/RBLN-CA22_PF, 2 node(s) didn't match Pod's "
                "node affinity/selector. preemption: 0/5 nodes are available: 5 Preemption is not helpful for "
                "scheduling.")


@pytest.fixture
def operator(apiserver):
    """The simulated operator: vm-mode nodes get their component pods (Ready) and advertise their NPUs."""
    op = SimulatedOperator(apiserver).start()
    yield op
    op.stop()


def _running_sandbox_vm(apiserver, *, npus=2, name="v1"):
    devices = [CA22] * npus
    apiserver.add(o.vm(NS, name, host_devices=devices), o.vmi(NS, name, "n1", devices),
                  o.virt_launcher(NS, name, "n1", resources={CA22: str(npus)}))


def _names(d):
    return [(link.name, link.status) for link in d.links]


def _broken(d):
    assert not d.ok
    return d.broken


def test_a_healthy_sandbox_vm_holds_every_link(apiserver, kube, operator):
    sandbox_cluster(apiserver)
    operator.wait_idle()
    _running_sandbox_vm(apiserver)
    d = diagnose(kube, "v1", NS)
    assert d.ok and d.broken is None, [(link.name, link.message) for link in d.links]
    assert [n for n, _ in _names(d)] == [
        LinkName.VM, LinkName.REQUEST, LinkName.GATES, LinkName.VM_NODES, LinkName.PERMITTED, LinkName.ADVERTISED,
        LinkName.SCHEDULABLE, LinkName.CAPACITY, LinkName.INSTANCE, LinkName.SCHEDULING, LinkName.NODE, LinkName.READY]
    assert (d.method, d.npus) == ("sandbox", 2)
    assert "Running and Ready on n1 with npu0, npu1" in d.links[-1].message


def test_a_healthy_dra_vm_holds_every_link(apiserver, kube):
    dra_cluster(apiserver)
    # The DRA node as the operator leaves it: vfio-manager and the DRA plugin Ready on n1.
    with SimulatedOperator(apiserver) as op:
        op.wait_idle()
        claim_entry = o.template_claim("rbln-npu", "rbln-npu-1")
        apiserver.add(o.resource_claim_template(NS, "rbln-npu-1"),
                      o.vm(NS, "v1", host_devices=[o.dra_host_device("npu0")], resource_claims=[claim_entry]),
                      o.vmi(NS, "v1", "n1", [o.dra_host_device("npu0")], resource_claims=[claim_entry]))
        pod = o.virt_launcher(NS, "v1", "n1", claims={"rbln-npu": "v1-rbln-npu-x7k2p"})
        apiserver.add(pod, o.resource_claim(NS, "v1-rbln-npu-x7k2p", allocated=[("n1", "vfio-0000-3b-00-0")],
                                            pod=pod))
        d = diagnose(kube, "v1", NS)
    assert d.ok, [(link.name, link.message) for link in d.links]
    assert LinkName.CLAIM in [n for n, _ in _names(d)] and LinkName.PERMITTED not in [n for n, _ in _names(d)]
    claim = next(link for link in d.links if link.name == LinkName.CLAIM)
    assert "allocated: npu0=n1/vfio-0000-3b-00-0" in claim.message


def test_no_such_vm(apiserver, kube):
    sandbox_cluster(apiserver)
    b = _broken(diagnose(kube, "ghost", NS))
    assert b.name == LinkName.VM and b.remedy.command == own("vm", "manifest", "ghost", namespace=NS, npus=1)
    assert b.failure == f"VirtualMachine {NS}/ghost not found"  # not the title, "the VirtualMachine exists"


def test_a_vm_without_npus(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[{"name": "gpu0", "deviceName": "nvidia.com/T4"}]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.REQUEST and "passes no NPU (host devices: gpu0)" in b.message
    assert b.failure == "its spec passes no NPU"
    assert b.remedy.command == own("vm", "attach", "v1", namespace=NS)


def test_gate_off(apiserver, kube):
    sandbox_cluster(apiserver, gates=())
    _running_sandbox_vm(apiserver)
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.GATES and b.status == LinkStatus.FAIL
    assert "HostDevices: off" in b.message and b.remedy.command == own("kubevirt", "enable-gates")
    assert b.failure == "a KubeVirt feature gate it needs is off"


def test_no_kubevirt_is_not_called_a_gate_that_is_off(apiserver, kube):
    apiserver.add(o.cluster_policy(), o.npu_node("n1", mode="vm-passthrough"), o.vm(NS, "v1", host_devices=[CA22]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.GATES and b.failure == "KubeVirt is not installed (no KubeVirt CR)"


def test_dra_gate_disabled(apiserver, kube):
    dra_cluster(apiserver, gates=("HostDevices",), disabled=("HostDevicesWithDRA",))
    claim_entry = o.template_claim("rbln-npu", "rbln-npu-1")
    apiserver.add(o.vm(NS, "v1", host_devices=[o.dra_host_device("npu0")], resource_claims=[claim_entry]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.GATES and b.remedy.command == own("kubevirt", "enable-gates", dra=True)


def test_resource_not_permitted(apiserver, kube):
    sandbox_cluster(apiserver, permitted=False)
    _running_sandbox_vm(apiserver)
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.PERMITTED and f"{CA22} is not in KubeVirt" in b.message
    assert b.remedy.command == own("kubevirt", "permit-devices", resource_name=CA22)


def test_no_vm_mode_node(apiserver, kube):
    sandbox_cluster(apiserver, vm_nodes={}, container_nodes=("n1", "n2"))
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.VM_NODES and "no NPU node is in vm-passthrough mode" in b.message
    assert b.remedy.command == own("node", "set-mode", "vm", "n1")


def test_vm_node_not_advertising_says_what_the_operator_has_not_done(apiserver, kube):
    sandbox_cluster(apiserver)
    node = apiserver.get("Node", "n1")
    node["status"]["allocatable"].pop(CA22)
    apiserver.update(node)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.ADVERTISED and f"no vm-passthrough node advertises {CA22}" in b.message
    assert "n1: " in b.message and "vfio-manager" in b.message  # no component pod runs there


def test_no_free_capacity(apiserver, kube):
    sandbox_cluster(apiserver, npus=2)
    # Another VM holds both NPUs of n1; ours is stopped.
    _running_sandbox_vm(apiserver, name="other")
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.CAPACITY
    assert f"no node the VM may run on (no placement constraints) has 1 free {CA22}" in b.evidence[0]
    assert f"n1: 2 {CA22} allocatable, 2 in use ({NS}/virt-launcher-other-abcde), 0 free" in b.evidence
    assert b.remedy.command == own("vm", "list", all_namespaces=True)


def test_capacity_on_nodes_the_vm_may_not_use_does_not_count(apiserver, kube):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA22"})
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    node = apiserver.get("Node", "n2")
    node["spec"]["taints"] = [taint]
    apiserver.update(node)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22], node_selector={"rack": "a"}))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.CAPACITY
    assert "n1: excluded by nodeSelector rack=a (node has no rack label)" in b.evidence
    assert "n2: excluded by nodeSelector rack=a (node has no rack label)" in b.evidence
    apiserver.mutate("VirtualMachine", "v1", NS, lambda vm: vm["spec"]["template"]["spec"].pop("nodeSelector"))
    d = diagnose(kube, "v1", NS)
    capacity = next(link for link in d.links if link.name == LinkName.CAPACITY)
    assert capacity.ok and capacity.evidence[0] == f"1 {CA22} fit on n1"
    assert "n2: excluded by untolerated taint dedicated=gpu:NoSchedule" in capacity.evidence
    assert d.broken.name == LinkName.INSTANCE  # the chain goes on, to the stopped VM


def test_a_stopped_vm_holds_nothing(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.INSTANCE and "the VM is Stopped" in b.message and \
        b.remedy.command == own("vm", "start", "v1", namespace=NS, wait=True)
    assert b.failure == "no VMI runs it"


def test_kubevirt_refused_to_render_the_pod(apiserver, kube):
    sandbox_cluster(apiserver)
    failed = {"type": "Synchronized", "status": "False", "reason": "FailedCreate",
              "message": f"failed to render launch manifest: HostDevice {CA22} is not permitted in "
                         "permittedHostDevices configuration"}
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22]),
                  o.vmi(NS, "v1", None, [CA22], phase="Scheduling", conditions=[failed]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.INSTANCE and "made no virt-launcher pod" in b.message
    assert "is not permitted" in b.message and b.failure == "KubeVirt made no virt-launcher pod for its VMI"


def test_launcher_pending_with_an_insufficient_event(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22], printable_status="ErrorUnschedulable"),
                  o.vmi(NS, "v1", None, [CA22], phase="Scheduling"))
    pod = o.virt_launcher(NS, "v1", None, resources={CA22: "1"})
    apiserver.add(pod, o.failed_scheduling(pod, INSUFFICIENT))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.SCHEDULING
    assert "FailedScheduling: 0 of 5 nodes available" in b.evidence
    assert f"3 node(s): Insufficient {CA22}" in b.evidence
    assert "2 node(s): node(s) didn't match Pod's node affinity/selector" in b.evidence
    assert b.remedy.command == own("vm", "list", all_namespaces=True) and "NPUs in use" in b.remedy.text


def test_the_newest_failed_scheduling_event_wins(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22]), o.vmi(NS, "v1", None, [CA22], phase="Scheduling"))
    pod = o.virt_launcher(NS, "v1", None, resources={CA22: "1"})
    old = o.failed_scheduling(pod, "0/1 nodes are available: 1 node(s) had untolerated taint {a: b}.", name="e1")
    old["lastTimestamp"] = "2025-01-01T00:00:00Z"
    new = o.failed_scheduling(pod, INSUFFICIENT, name="e2")
    new["lastTimestamp"] = "2025-01-01T00:05:00Z"
    apiserver.add(pod, new, old)
    b = _broken(diagnose(kube, "v1", NS))
    assert f"3 node(s): Insufficient {CA22}" in b.evidence


def test_claim_unallocated(apiserver, kube):
    dra_cluster(apiserver)
    claim_entry = o.template_claim("rbln-npu", "rbln-npu-1")
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-1"),
                  o.vm(NS, "v1", host_devices=[o.dra_host_device("npu0")], resource_claims=[claim_entry]),
                  o.vmi(NS, "v1", None, [o.dra_host_device("npu0")], resource_claims=[claim_entry],
                        phase="Scheduling"))
    pod = o.virt_launcher(NS, "v1", None, claims={"rbln-npu": "v1-rbln-npu-x7k2p"})
    apiserver.add(pod, o.resource_claim(NS, "v1-rbln-npu-x7k2p", pod=pod),
                  o.failed_scheduling(pod, "0/2 nodes are available: 1 cannot allocate all claims, 1 node(s) didn't "
                                           "match Pod's node affinity/selector."))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.CLAIM
    assert f"ResourceClaim {NS}/v1-rbln-npu-x7k2p (rbln-npu) is not allocated" in b.evidence
    assert any("cannot allocate all claims" in e for e in b.evidence)


def test_claim_not_made_yet(apiserver, kube):
    dra_cluster(apiserver)
    claim_entry = o.template_claim("rbln-npu", "rbln-npu-1")
    apiserver.add(o.vm(NS, "v1", host_devices=[o.dra_host_device("npu0")], resource_claims=[claim_entry]),
                  o.vmi(NS, "v1", None, [o.dra_host_device("npu0")], resource_claims=[claim_entry],
                        phase="Scheduling"),
                  o.virt_launcher(NS, "v1", None, claims={"rbln-npu": None}))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.CLAIM and "no ResourceClaim made for rbln-npu yet" in b.message


def test_node_in_container_mode_or_not_converged(apiserver, kube):
    sandbox_cluster(apiserver)
    _running_sandbox_vm(apiserver)  # no operator: n1 runs no component pod
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.NODE and "n1: no vfio-manager pod on n1 yet" in b.evidence
    assert b.remedy.command == own("node", "list") and b.failure == "its node's operator components are not ready"


def test_a_node_without_any_policy_names_the_missing_operator_not_a_convergence_to_watch(apiserver, kube):
    # A vm-passthrough node (labelled by hand, or by an operator since uninstalled) and no RBLNClusterPolicy:
    # nothing will converge it, so "watch `node list`" would wait for nothing.
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[("1EFF:1220", CA22)]),
                  o.npu_node("n1", mode="vm-passthrough"))
    _running_sandbox_vm(apiserver)
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.NODE and "n1: no RBLNClusterPolicy" in b.evidence
    assert b.failure == "no RBLNClusterPolicy: nothing runs the operator's components on its node"
    assert b.remedy.command.program == "helm" and "{command}" in b.remedy.text


def test_template_and_running_vmi_disagree(apiserver, kube):
    """A VMI that passes NPUs has them (the spec's other ones wait for its restart: a warning); one that passes none
    has none until it restarts: that link is broken."""
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22, CA22]), o.vmi(NS, "v1", "n1", [CA22]))
    d = diagnose(kube, "v1", NS)
    assert d.links[1].name == LinkName.REQUEST and d.links[1].status == LinkStatus.PASS
    assert "its running VMI passes 1 (1x rebellions.ai/RBLN-CA22_PF) until it restarts" in d.links[1].message
    assert any("its spec asks for 2 NPU(s), its running VMI passes 1 until it restarts" in str(w) for w in d.warnings)
    apiserver.add(o.vm(NS, "v2", host_devices=[CA22]), o.vmi(NS, "v2", "n1", []))
    b = _broken(diagnose(kube, "v2", NS))
    assert b.name == LinkName.REQUEST and "but its running VMI passes 0 (none)" in b.message
    assert b.failure == "its running VMI passes other NPUs than its spec"
    assert b.remedy.command == own("vm", "restart", "v2", namespace=NS, wait=True)


def test_mixed_methods(apiserver, kube):
    sandbox_cluster(apiserver)
    claim_entry = o.template_claim("rbln-npu", "rbln-npu-1")
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, o.dra_host_device("npu1")],
                       resource_claims=[claim_entry]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.REQUEST and "through both methods" in b.message
    assert b.failure == "its spec passes NPUs through both methods"
    assert b.remedy.command.option_map == {"namespace": NS, "method": "sandbox", "convert": True, "restart": True}


def test_diagnose_makes_no_write(apiserver, kube):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    apiserver.clear_requests()
    diagnose(kube, "v1", NS)
    assert apiserver.writes() == []


# -- the scheduler's message ---------------------------------------------------------------------------------


def test_parse_failed_scheduling():
    f = parse_failed_scheduling(INSUFFICIENT)
    assert (f.available, f.total) == (0, 5)
    assert f.reasons == ((3, f"Insufficient {CA22}"), (2, "node(s) didn't match Pod's node affinity/selector"))


def test_parse_failed_scheduling_single_reason_and_odd_text():
    assert parse_failed_scheduling("0/1 nodes are available: 1 Insufficient rebellions.ai/npu.").reasons == (
        (1, "Insufficient rebellions.ai/npu"),)
    odd = parse_failed_scheduling("running PreBind plugin \"DynamicResources\": claim not allocated")
    assert odd.total is None and odd.reasons == ((0, 'running PreBind plugin "DynamicResources": claim not allocated'),)


def test_a_release_whose_sandbox_plugin_serves_no_vm_names_the_upgrade(apiserver, kube):
    from tests.preflight.cluster_support import operator_deployment

    sandbox_cluster(apiserver)
    node = apiserver.get("Node", "n1")
    node["status"]["allocatable"].pop(CA22)
    apiserver.update(node)
    apiserver.add(operator_deployment("0.3.0"), o.vm(NS, "v1", running=False, host_devices=[CA22]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.ADVERTISED and "0.3.0 < 0.4.4" in b.message
    assert b.remedy.text.startswith("upgrade the operator to >= 0.4.4")


# -- the RBLN DRA plugin's own states, claim names, a VM KubeVirt did not create -----------------------------


def _dra_vm(apiserver, name="v1", ns=NS, node=None, claim="rbln-npu"):
    entry = o.template_claim(claim, "rbln-npu-1")
    devices = [o.dra_host_device("npu0", claim=claim)]
    apiserver.add(o.resource_claim_template(ns, "rbln-npu-1"),
                  o.vm(ns, name, host_devices=devices, resource_claims=[entry], running=node is not None))
    if node:
        apiserver.add(o.vmi(ns, name, node, devices, resource_claims=[entry]))


def _dra_plugin_pod(apiserver, node="n1"):
    return next(p for p in apiserver.list("Pod", OPS) if p["spec"].get("nodeName") == node
                and "dra" in p["metadata"]["ownerReferences"][0]["name"])


def _settled_dra_node(apiserver):
    """n1 as the simulated operator leaves it (vfio-manager and the DRA plugin ready), without its slices."""
    dra_cluster(apiserver, slices=False)
    with SimulatedOperator(apiserver) as op:
        op.wait_idle()
    for s in apiserver.list("ResourceSlice"):
        apiserver.delete_now("ResourceSlice", s["metadata"]["name"])
    return _dra_plugin_pod(apiserver)


def test_a_dra_plugin_crash_looping_until_vfio_binding_is_named_with_its_log(apiserver, kube):
    pod = _settled_dra_node(apiserver)
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]

    def crash(p):
        cs = p["status"]["containerStatuses"][0]
        cs.update(ready=False, restartCount=6, state={"waiting": {"reason": "CrashLoopBackOff"}},
                  lastState={"terminated": {"exitCode": 1, "reason": "Error"}})
    apiserver.mutate("Pod", name, ns, crash)
    apiserver.set_pod_log(ns, name, 'level=ERROR msg="Command failed" err="error enumerating all possible devices: '
                                    'rbln-smi: no device"\n')
    _dra_vm(apiserver)
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.DRA_PLUGIN
    assert f"n1: DRA plugin pod {name} crash-looping, 6 restart(s)" in b.message
    assert "'error enumerating all possible devices' in its log" in b.message
    assert "crash-loops on every vm-mode node" in b.failure and "vfio-pci" in b.remedy.text


def test_a_dra_plugin_that_just_started_is_waited_for_its_30s_rescan(apiserver, kube):
    pod = _settled_dra_node(apiserver)
    started = datetime.now(UTC) - timedelta(seconds=10)
    apiserver.mutate("Pod", pod["metadata"]["name"], OPS, lambda p: p["status"]["containerStatuses"][0].update(
        state={"running": {"startedAt": started.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
    _dra_vm(apiserver)
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.SLICES and any("rescans every 30s" in e for e in b.evidence)
    assert b.remedy.text.startswith("wait 30s")


def test_npus_without_an_iommu_group_skipped_by_the_dra_plugin_are_named(apiserver, kube):
    pod = _settled_dra_node(apiserver)
    apiserver.set_pod_log(OPS, pod["metadata"]["name"],
                          'level=WARN msg="Skipping vfio-pci NPU without an IOMMU group" device=vfio-0000-3b-00-0 '
                          'pciBusID=0000:3b:00.0\n')
    _dra_vm(apiserver)
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.SLICES and "no IOMMU group" in b.failure
    assert any("skipped 1 vfio-pci NPU(s) without an IOMMU group" in e for e in b.evidence)
    assert b.remedy.command == own("preflight", hosts=True, node="n1")


def test_two_vms_with_one_claim_name_on_a_node_is_the_broken_link(apiserver, kube):
    dra_cluster(apiserver)
    with SimulatedOperator(apiserver) as op:
        op.wait_idle()
        _dra_vm(apiserver, "v1", node="n1")
        _dra_vm(apiserver, "v2", ns="other", node="n1")
        pod = o.virt_launcher(NS, "v1", "n1", claims={"rbln-npu": "v1-rbln-npu-x7k2p"})
        apiserver.add(pod, o.resource_claim(NS, "v1-rbln-npu-x7k2p", allocated=[("n1", "vfio-0000-3b-00-0")],
                                            pod=pod))
        d = diagnose(kube, "v1", NS)
    b = _broken(d)
    assert b.name == LinkName.CLAIM_NAME
    assert "VM other/v2 on n1 holds a claim under resourceclaimtemplates/rbln-npu too" in b.evidence
    assert b.remedy.command == own("vm", "attach", "v1", namespace=NS, restart=True)


def test_a_vm_that_should_run_but_has_no_vmi_says_what_kubevirt_says(apiserver, kube):
    """runStrategy Always, no VMI: not 'Stopped' but the VM's Failure condition and printableStatus."""
    sandbox_cluster(apiserver)
    vm = o.vm(NS, "v1", host_devices=[CA22], printable_status="ErrorUnschedulable")
    vm["status"]["conditions"] = [{"type": "Failure", "status": "True", "reason": "FailedCreate",
                                   "message": "Error creating virtual machine instance: admission webhook denied: "
                                              "Host Devices feature gate is not enabled in kubevirt-config"}]
    apiserver.add(vm)
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.INSTANCE and b.failure == "KubeVirt did not create its VMI (FailedCreate)"
    assert "runStrategy Always but no VMI: the VM is ErrorUnschedulable" in b.evidence
    assert "Stopped" not in b.message and b.remedy.command == own("kubevirt", "enable-gates")


def test_the_links_are_judged_from_facts_read_once(apiserver, kube):
    """diagnose = judge(read_facts(...)): judging sends no request at all."""
    from rblnctl.vm.diagnose import judge, read_facts

    sandbox_cluster(apiserver)
    _running_sandbox_vm(apiserver)
    facts = read_facts(kube, "v1", NS)
    apiserver.clear_requests()
    d = judge(facts)
    assert apiserver.requests == [] and d.links


# -- what the real scheduler weighs beside the NPUs: KubeVirt's kubevirt.io/schedulable, DRA device taints -------

NO_HANDLER = ("excluded by KubeVirt's nodeSelector kubevirt.io/schedulable=true (the node has no "
              "kubevirt.io/schedulable label: virt-handler, which sets it on its node, does not run there)")


def _unlabel(apiserver, node):
    apiserver.mutate("Node", node, fn=lambda n: n["metadata"]["labels"].pop("kubevirt.io/schedulable"))


def test_no_node_offering_its_npus_with_kubevirt_schedulable_is_the_broken_link(apiserver, kube):
    """n1 advertises the VM's NPUs but no virt-handler labelled it: every virt-launcher's nodeSelector asks for
    kubevirt.io/schedulable=true (kubevirt/kubevirt@v1.9.0 pkg/virt-controller/services/nodeselectorrenderer.go),
    so the scheduler will never place the VM; the link names the label and virt-handler, which sets it."""
    sandbox_cluster(apiserver)
    _unlabel(apiserver, "n1")
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    d = diagnose(kube, "v1", NS)
    b = _broken(d)
    assert b.name == LinkName.SCHEDULABLE
    assert b.evidence == (f"n1 offers {CA22} but is excluded by {NO_HANDLER.removeprefix('excluded by ')}",)
    assert b.failure == "no node that offers its NPUs is schedulable for VMs (kubevirt.io/schedulable)"
    assert "kubectl -n kubevirt get pods -l kubevirt.io=virt-handler -o wide" in b.remedy.text
    assert d.summary() == (f"VM {NS}/v1: no node that offers its NPUs is schedulable for VMs "
                           "(kubevirt.io/schedulable) (broken link: KubeVirtSchedulable)")


def test_a_node_without_kubevirt_schedulable_is_named_while_another_takes_the_vm(apiserver, kube):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA22"})
    apiserver.mutate("Node", "n2", fn=lambda n: n["metadata"]["labels"].update({"kubevirt.io/schedulable": "false"}))
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    d = diagnose(kube, "v1", NS)
    link = next(link for link in d.links if link.name == LinkName.SCHEDULABLE)
    assert link.ok and link.evidence[0] == "kubevirt.io/schedulable=true on n1"
    assert "n2 offers" in link.evidence[1] and "kubevirt.io/schedulable=false" in link.evidence[1]
    capacity = next(link for link in d.links if link.name == LinkName.CAPACITY)
    assert any(e.startswith("n2: excluded by KubeVirt's nodeSelector") for e in capacity.evidence)
    assert d.broken.name == LinkName.INSTANCE  # stopped: the chain goes on to it


def test_a_dra_vm_whose_nodes_lack_kubevirt_schedulable(apiserver, kube):
    dra_cluster(apiserver)
    _unlabel(apiserver, "n1")
    claim_entry = o.template_claim("rbln-npu", "rbln-npu-1")
    apiserver.add(o.resource_claim_template(NS, "rbln-npu-1"),
                  o.vm(NS, "v1", running=False, host_devices=[o.dra_host_device("npu0")],
                       resource_claims=[claim_entry]))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.SCHEDULABLE and b.evidence[0].startswith("n1 offers vfio NPUs but is excluded by")


def test_a_launcher_waiting_while_the_only_node_with_free_npus_is_unlabelled(apiserver, kube):
    """n2 has no kubevirt.io/schedulable, n1 has it but no free NPU: the scheduler says "1 Insufficient, 1 didn't
    match Pod's node affinity/selector"; rblnctl no longer counts n2's free NPUs, so FreeCapacity is the broken link
    and names KubeVirt's label."""
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA22"})
    _unlabel(apiserver, "n2")
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22], printable_status="ErrorUnschedulable"),
                  o.vmi(NS, "v1", None, [CA22], phase="Scheduling"))
    pod = o.virt_launcher(NS, "v1", None, resources={CA22: "1"})
    apiserver.add(pod, o.failed_scheduling(pod, "0/2 nodes are available: 1 Insufficient rebellions.ai/RBLN-CA22_PF, "
                                                "1 node(s) didn't match Pod's node affinity/selector. no new claims to "
                                                "deallocate, preemption: 0/2 nodes are available: 2 Preemption is not "
                                                "helpful for scheduling."))
    apiserver.add(o.vm(NS, "other", host_devices=[CA22, CA22]), o.vmi(NS, "other", "n1", [CA22, CA22]),
                  o.virt_launcher(NS, "other", "n1", resources={CA22: "2"}))
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.CAPACITY
    assert f"n2: {NO_HANDLER}" in b.evidence
    assert f"no node the VM may run on (no placement constraints) has 1 free {CA22}" in b.evidence[0]


def _dra_vm_waiting_for_its_claim(apiserver, npus, *, tolerations=None):
    claim_entry = o.template_claim("rbln-npu", "rbln-npu-2")
    template = o.resource_claim_template(NS, "rbln-npu-2", npus=npus)
    for r in template["spec"]["spec"]["devices"]["requests"]:
        if tolerations is not None:
            r["exactly"]["tolerations"] = tolerations
    devices = [o.dra_host_device(f"npu{i}") for i in range(npus)]
    apiserver.add(template, o.vm(NS, "v1", host_devices=devices, resource_claims=[claim_entry]),
                  o.vmi(NS, "v1", None, devices, resource_claims=[claim_entry], phase="Scheduling"))
    pod = o.virt_launcher(NS, "v1", None, claims={"rbln-npu": "v1-rbln-npu-x7k2p"})
    apiserver.add(pod, o.resource_claim(NS, "v1-rbln-npu-x7k2p", npus=npus, pod=pod),
                  o.failed_scheduling(pod, "0/2 nodes are available: 2 cannot allocate all claims. still not "
                                           "schedulable, preemption: 0/2 nodes are available: 2 Preemption is not "
                                           "helpful for scheduling."))


UNHEALTHY = {"key": "rebellions.ai/unhealthy", "value": "true", "effect": "NoSchedule"}


def test_a_tainted_device_that_keeps_the_claim_unallocated_is_named(apiserver, kube):
    """n1 has two vfio devices, one tainted NoSchedule; the VM asks for 2: the scheduler cannot allocate its claim
    (allocator_stable.go taintPreventsAllocation). Freeing NPUs would not help: the taint is what is in the way."""
    dra_cluster(apiserver)
    apiserver.mutate("ResourceSlice", "n1-npu.rebellions.ai-slice",
                     fn=lambda s: s["spec"]["devices"][1].update(taints=[UNHEALTHY]))
    _dra_vm_waiting_for_its_claim(apiserver, 2)
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.CLAIM
    assert ("n1: 1 free of 2 (1 tainted, not tolerated: vfio-0000-3c-00-0 (rebellions.ai/unhealthy=true:NoSchedule)), "
            "2 needed") in b.evidence
    assert "device taint keeps vfio NPUs on n1 from its claim" in b.remedy.text and "tolerations" in b.remedy.text


def test_a_claim_whose_requests_tolerate_the_taint_is_not_blamed_on_it(apiserver, kube):
    dra_cluster(apiserver)
    apiserver.mutate("ResourceSlice", "n1-npu.rebellions.ai-slice",
                     fn=lambda s: s["spec"]["devices"][1].update(taints=[UNHEALTHY]))
    _dra_vm_waiting_for_its_claim(apiserver, 2, tolerations=[{"key": "rebellions.ai/unhealthy", "operator": "Exists"}])
    b = _broken(diagnose(kube, "v1", NS))
    assert b.name == LinkName.CLAIM and "n1: 2 free of 2" in b.evidence
    assert "taint" not in b.remedy.text


def test_parse_failed_scheduling_as_kube_scheduler_1_36_writes_it():
    """1.36 appends what every PostFilter plugin said after the reasons' full stop (DynamicResources: "no new claims
    to deallocate" or "still not schedulable"), before the preemption sentence: not a reason."""
    f = parse_failed_scheduling("0/2 nodes are available: 1 Insufficient rebellions.ai/RBLN-CA22_PF, 1 node(s) "
                                "didn't match Pod's node affinity/selector. no new claims to deallocate, preemption: "
                                "0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
    assert f.reasons == ((1, f"Insufficient {CA22}"), (1, "node(s) didn't match Pod's node affinity/selector"))
    f = parse_failed_scheduling("0/2 nodes are available: 2 cannot allocate all claims. still not schedulable, "
                                "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
    assert f.reasons == ((2, "cannot allocate all claims"),)


own = Command.own
