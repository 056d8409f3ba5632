"""The multi-step commands the crash-point explorer runs, each on the smallest cluster that makes it write every kind
of write it makes (one NPU pod per node, one VM): each write is a crash point, so a bigger world only repeats them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from tests.explore.engine import World
from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.operator import SimulatedOperator
from tests.fakes.releases import NEWER
from tests.fakes.objects import ONE_NPU as NPU

CA22 = "rebellions.ai/RBLN-CA22_PF"
NS = "vms"
FIRST_VMI = "explore.rblnctl.io/first-vmi"  # the VMI a world starts with (a restart replaces it)
NODE_KINDS = ("Node", "Lease", "Pod")
VM_KINDS = ("VirtualMachine", "VirtualMachineInstance", "ResourceClaimTemplate", "Pod", "Lease")
KUBEVIRT_KINDS = ("KubeVirt", "VirtualMachine")


# The simulated operator of each world's server: other actors' cases wait until it is idle before they look.
OPERATORS: weakref.WeakKeyDictionary[FakeApiServer, SimulatedOperator] = weakref.WeakKeyDictionary()


def _operator(server: FakeApiServer, **kw) -> list[Callable[[], None]]:
    op = SimulatedOperator(server, **kw).start()
    assert op.wait_idle()
    OPERATORS[server] = op
    return [op.stop]


def _npu_pods(server: FakeApiServer, nodes: tuple[str, ...]) -> None:
    server.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True), o.replicaset("default", "web"),
               o.npu_node("spare", mode="container"))  # a container node stays: the NPU pods have somewhere to go
    for n in nodes:
        server.add(o.npu_node(n, mode="container"),
                   o.pod("default", f"{n}-app", node=n, owner_kind="ReplicaSet", owner_name="web", requests=NPU))


def set_mode(server: FakeApiServer) -> list[Callable[[], None]]:
    _npu_pods(server, ("n1",))
    return _operator(server)


def pool_set_mode(server: FakeApiServer) -> list[Callable[[], None]]:
    _npu_pods(server, ("n1", "n2"))
    return _operator(server)


def drain(server: FakeApiServer) -> list[Callable[[], None]]:
    _npu_pods(server, ("n1",))
    return []


def set_method(server: FakeApiServer) -> list[Callable[[], None]]:
    """The sandbox method on one vm-passthrough node, a stopped VM on sandbox to convert to DRA."""
    policy = NEWER.policy(vfio_manager=True, sandbox=True, dra=False, device_plugin=True)
    server.add(policy, NEWER.operator_deployment(),
               o.npu_node("vm0", mode=o.MODE_VM, product="RBLN-CA22", release=NEWER, policy=policy),
               o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], version="v1.9.0",
                          permitted_pci=[("1EFF:1220", CA22)]),
               o.vm("team", "two", running=False, host_devices=[CA22]))
    return _operator(server, release=NEWER)


def migrate_resources(server: FakeApiServer) -> list[Callable[[], None]]:
    """After the operator upgrade: the nodes advertise RBLN-CA25_PF, KubeVirt and a stopped VM still name the old."""
    old, new_node = "rebellions.ai/ATOM_MAX_PT", o.npu_node("n0", mode=o.MODE_VM, product="RBLN-CA25")
    server.add(NEWER.policy(vfio_manager=True, sandbox=True), new_node,
               o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[("1EFF:1250", old)]),
               o.vm("team", "old", running=False, host_devices=[old]))
    return []


def enable_gates(server: FakeApiServer) -> list[Callable[[], None]]:
    server.add(o.kubevirt(feature_gates=["Snapshot"]))
    return []


def disable_gates(server: FakeApiServer) -> list[Callable[[], None]]:
    server.add(o.kubevirt(feature_gates=["Snapshot", "HostDevices", "HostDevicesWithDRA"]))
    return []


def permit_devices(server: FakeApiServer) -> list[Callable[[], None]]:
    server.add(o.cluster_policy(vfio_manager=True, sandbox=True), o.npu_node("n1", mode=o.MODE_VM),
               o.kubevirt(feature_gates=["HostDevices"]))
    return []


def _vm_cluster(server: FakeApiServer, *, running: bool, npus: int = 1) -> None:
    server.simulate_kubevirt = True
    server.add(o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[("1EFF:1220", CA22)]), o.cluster_policy(),
               o.npu_node("n1", mode="vm-passthrough", product="RBLN-CA22", npus=2), o.npu_node("n9"))
    server.add(o.vm(NS, "v1", node="n1", running=running, host_devices=[CA22] * npus))


def vm_running(npus: int = 1) -> Callable[[FakeApiServer], list[Callable[[], None]]]:
    def build(server: FakeApiServer) -> list[Callable[[], None]]:
        _vm_cluster(server, running=False, npus=npus)
        # started the way KubeVirt starts it, so its VMI and virt-launcher are the simulation's own
        server.mutate("VirtualMachine", "v1", NS, fn=lambda v: v["spec"].update(runStrategy="Always"))
        # this VMI is the one running now: a restart replaces it with one that is not marked
        server.mutate("VirtualMachineInstance", "v1", NS, fn=lambda v: v["metadata"].setdefault(
            "annotations", {}).update({FIRST_VMI: "true"}))
        return []

    return build


def vm_stopped(server: FakeApiServer) -> list[Callable[[], None]]:
    _vm_cluster(server, running=False)
    return []


def vm_dra_stopped(server: FakeApiServer) -> list[Callable[[], None]]:
    """A DRA cluster (tests/vm/support.py dra_cluster), a stopped VM with 1 NPU through rblnctl's ResourceClaimTemplate
    rbln-npu-1: `attach --npus 2` creates rbln-npu-2, repoints the VM and deletes rbln-npu-1 (no one else names it)."""
    from tests.vm.support import dra_cluster

    server.simulate_kubevirt = True
    dra_cluster(server)
    # placed on n1 when started (the fake's virt-controller: fake.rblnctl.io/node), so a start by its owner, or a
    # printed `--restart`, runs and gets Ready as on a cluster whose scheduler can place it
    server.add(o.resource_claim_template(NS, "rbln-npu-1"), o.dra_vm(NS, "v1", 1, node="n1"))
    return []


def set_method_sandbox(server: FakeApiServer) -> list[Callable[[], None]]:
    """The DRA method on one vm-passthrough node, a stopped VM on DRA (rblnctl's template) to convert to sandbox."""
    policy = NEWER.policy(vfio_manager=True, sandbox=False, dra=True, device_plugin=True)
    server.add(policy, NEWER.operator_deployment(),
               o.npu_node("vm0", mode=o.MODE_VM, product="RBLN-CA22", release=NEWER, policy=policy, dra=True),
               o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], version="v1.9.0",
                          permitted_pci=[("1EFF:1220", CA22)]),
               o.resource_claim_template("team", "rbln-npu-1"), o.dra_vm("team", "two", 1))
    return _operator(server, release=NEWER)


def vm_node(server: FakeApiServer) -> list[Callable[[], None]]:
    """A vm-passthrough node n1 whose NPU a running VM holds (its virt-launcher pod), a container node to spare."""
    server.simulate_kubevirt = True
    server.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True),
               o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[("1EFF:1220", CA22)]),
               o.npu_node("n1", mode=o.MODE_VM, product="RBLN-CA22"), o.npu_node("spare", mode="container"))
    server.add(o.vm(NS, "v1", node="n1", running=False, host_devices=[CA22]))
    server.mutate("VirtualMachine", "v1", NS, fn=lambda v: v["spec"].update(runStrategy="Always"))
    return _operator(server)


def preflight_hosts(server: FakeApiServer) -> list[Callable[[], None]]:
    """An NPU node whose host a HostKubelet runs rblnctl's host pods on (tests/fakes/hostkubelet.py)."""
    import shutil
    import tempfile
    from pathlib import Path

    from tests.fakes import sysfs as ht
    from tests.fakes.hostkubelet import HostKubelet
    from tests.preflight.cluster_support import seed

    tmp = Path(tempfile.mkdtemp(prefix="explore-hosts-"))
    seed(server, nodes=1)
    kubelet = HostKubelet(server, default=ht.build_host(tmp / "node-host", ht.intel_bare_metal()).root).start()
    return [kubelet.stop, lambda: shutil.rmtree(tmp, ignore_errors=True)]


WORLDS = [
    World("set-mode", ("node", "set-mode", "vm", "n1", "--yes"), set_mode, NODE_KINDS, node="n1",
          opposite=("node", "set-mode", "container", "n1", "--yes")),
    World("pool-set-mode", ("node", "set-mode", "vm", "n1", "n2", "--yes"), pool_set_mode, NODE_KINDS, node="n2",
          opposite=("node", "set-mode", "container", "n1", "n2", "--yes"), per_node=("n1", "n2")),
    World("drain", ("node", "drain", "n1", "--yes"), drain, NODE_KINDS, node="n1"),
    World("set-method", ("policy", "set-method", "dra", "--convert-vms", "--yes", "--timeout", "20s"), set_method,
          ("RBLNClusterPolicy", "VirtualMachine", "ResourceClaimTemplate", "Lease"), vm=("team", "two"),
          opposite=("policy", "set-method", "sandbox", "--convert-vms", "--yes", "--timeout", "20s")),
    World("migrate-resources", ("kubevirt", "migrate-resources", "--yes"), migrate_resources, KUBEVIRT_KINDS),
    World("enable-gates", ("kubevirt", "enable-gates", "--dra", "--yes"), enable_gates, KUBEVIRT_KINDS,
          opposite=("kubevirt", "disable-gates", "HostDevicesWithDRA", "--yes")),
    World("disable-gates", ("kubevirt", "disable-gates", "HostDevicesWithDRA", "--add-to-disabled", "--yes"),
          disable_gates, KUBEVIRT_KINDS, opposite=("kubevirt", "enable-gates", "--dra", "--yes")),
    World("permit-devices", ("kubevirt", "permit-devices", "--yes"), permit_devices, KUBEVIRT_KINDS),
    World("vm-start", ("vm", "start", "v1", "-n", NS, "--wait", "--timeout", "20s"), vm_stopped, VM_KINDS,
          vm=(NS, "v1"), opposite=("vm", "stop", "v1", "-n", NS, "--yes")),
    World("vm-stop", ("vm", "stop", "v1", "-n", NS, "--wait", "--yes", "--timeout", "20s"), vm_running(), VM_KINDS,
          vm=(NS, "v1"), opposite=("vm", "start", "v1", "-n", NS)),
    World("vm-restart", ("vm", "restart", "v1", "-n", NS, "--wait", "--yes", "--timeout", "20s"), vm_running(),
          VM_KINDS, vm=(NS, "v1"), opposite=("vm", "stop", "v1", "-n", NS, "--yes")),
    World("vm-attach-restart", ("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", "--timeout",
                                "20s"), vm_running(1), VM_KINDS, vm=(NS, "v1"),
          opposite=("vm", "attach", "v1", "-n", NS, "--npus", "1", "--restart", "--yes", "--timeout", "20s")),
    World("vm-detach-restart", ("vm", "detach", "v1", "-n", NS, "--device", "npu1", "--restart", "--yes",
                                "--timeout", "20s"), vm_running(2), VM_KINDS, vm=(NS, "v1"),
          opposite=("vm", "attach", "v1", "-n", NS, "--npus", "2", "--restart", "--yes", "--timeout", "20s")),
    # issue 37: the multi-step commands the explorer lacked
    World("vm-attach-next-restart", ("vm", "attach", "v1", "-n", NS, "--npus", "2", "--next-restart", "--yes"),
          vm_running(1), VM_KINDS, vm=(NS, "v1"),
          opposite=("vm", "attach", "v1", "-n", NS, "--npus", "1", "--next-restart", "--yes")),
    World("vm-attach-dra", ("vm", "attach", "v1", "-n", NS, "--npus", "2", "--yes"), vm_dra_stopped, VM_KINDS,
          vm=(NS, "v1"), opposite=("vm", "attach", "v1", "-n", NS, "--npus", "1", "--yes")),
    World("set-method-sandbox", ("policy", "set-method", "sandbox", "--convert-vms", "--yes", "--timeout", "20s"),
          set_method_sandbox, ("RBLNClusterPolicy", "VirtualMachine", "ResourceClaimTemplate", "Lease"),
          vm=("team", "two"), opposite=("policy", "set-method", "dra", "--convert-vms", "--yes", "--timeout", "20s")),
    World("set-mode-evict-vms", ("node", "set-mode", "container", "n1", "--evict-vms", "--yes", "--timeout", "20s"),
          vm_node, NODE_KINDS + ("VirtualMachine", "VirtualMachineInstance"), vm=(NS, "v1"), node="n1",
          opposite=("node", "set-mode", "vm", "n1", "--yes", "--timeout", "20s")),
    World("preflight-hosts", ("preflight", "--hosts", "--image", "registry.local/rblnctl:ci"), preflight_hosts,
          ("Pod",), node="npu-0000", leaves_nothing=True),
]
