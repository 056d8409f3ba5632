"""The method-change tests' cluster: a policy on one method and the simulated operator that rolls it (automatic:
it reconciles on every change, as the real one; the changer's wait watches it); plus the in-between states a method
change must handle (issue 23)."""

from __future__ import annotations

from typing import Any

from rblnctl.method import MethodChanger, MethodOptions
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from tests.fakes.operator import SimulatedOperator
from tests.fakes.releases import DEVICE_IDS, NEWER
from rblnctl.constants import CLUSTER_POLICY_DEFAULT_NAME as POLICY, OPERATOR_NAMESPACE as OPS

SANDBOX_RES = "rebellions.ai/RBLN-CA22_PF"


OPERATORS: list[SimulatedOperator] = []  # stopped after each test (tests/method/conftest.py)


def cluster(apiserver, *, release=NEWER, method="sandbox", product="RBLN-CA22", kubevirt="v1.9.0",
            gates=("HostDevices", "HostDevicesWithDRA"), container_nodes=0, vm_nodes=2, **operator):
    """A cluster whose policy selects `method`, `vm_nodes` vm-passthrough NPU nodes (vm0..) and `container_nodes`
    container ones (c0..), KubeVirt permitting the VM resource; the simulated operator (automatic, its plugins
    Ready after ready_delay_s; `operator` keywords go to it, e.g. kubelet_lag_steps) has converged it."""
    policy = release.policy(vfio_manager=True, sandbox=method == "sandbox", dra=method == "dra",
                            device_plugin=method == "sandbox" or container_nodes > 0)
    apiserver.add(policy, release.operator_deployment())
    for i in range(vm_nodes):
        apiserver.add(o.npu_node(f"vm{i}", mode=o.MODE_VM, product=product, release=release, policy=policy))
    for i in range(container_nodes):
        apiserver.add(o.npu_node(f"c{i}", mode=o.MODE_CONTAINER, release=release, policy=policy))
    permitted = [(f"1EFF:{DEVICE_IDS[product][0]}", release.vm_resource(policy, product))] \
        if release.vm_resource(policy, product) else []
    apiserver.add(o.kubevirt(feature_gates=list(gates), version=kubevirt, permitted_pci=permitted))
    operator.setdefault("ready_delay_s", 0.05)  # a plugin takes a moment to be Ready: the wait has something to watch
    op = SimulatedOperator(apiserver, release=release, **operator).start()
    OPERATORS.append(op)
    for _ in range(3):
        op.step()
    assert op.wait_idle()
    return op


def changer(kube, op=None, *, clock=None, **kw) -> MethodChanger:
    """A MethodChanger whose backoffs take no time (a FakeClock, unless `clock`: a wait that should time out needs
    real time to pass, as the watch it waits on is real); `kw` are MethodOptions fields."""
    kw.setdefault("timeout_s", 60)
    kw.setdefault("poll_s", 1)
    return MethodChanger(kube=kube, options=MethodOptions(**kw), clock=clock or FakeClock())


def switches(apiserver):
    spec = apiserver.get("RBLNClusterPolicy", POLICY)["spec"]
    return {k: spec.get(k, {}).get("enabled") for k in ("sandboxDevicePlugin", "draKubeletPlugin", "devicePlugin")}


def pods_on(apiserver, node):
    return sorted(p["metadata"]["ownerReferences"][0]["name"] for p in apiserver.list("Pod", OPS)
                  if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp"))


def vfio_devices(apiserver, node):
    return [d["name"] for s in apiserver.list("ResourceSlice") if s["spec"]["nodeName"] == node
            for d in s["spec"]["devices"] if d["name"].startswith("vfio-")]


def npu_alloc(apiserver, node):
    return {k: v for k, v in apiserver.get("Node", node)["status"]["allocatable"].items()
            if k.startswith("rebellions.ai/")}


def convert_only(apiserver: Any, *, target: str = "dra", left: tuple[tuple[str, str, int], ...] = (("team", "two", 2),),
                 **kw: Any) -> SimulatedOperator:
    """The policy already selects `target` and the operator has rolled it, while VMs (namespace, name, NPUs) still
    name their NPUs through the other method: a `set-method --convert-vms` whose conversions did not all finish,
    or VMs written from an old manifest. What is left is the convert-only path: no policy patch, only
    conversions. The VMs are stopped; `kw` goes to cluster()."""
    op = cluster(apiserver, method=target, **kw)
    for ns, name, npus in left:
        if target == "dra":  # left on sandbox
            apiserver.add(o.vm(ns, name, running=False, host_devices=[SANDBOX_RES] * npus))
        else:  # left on rblnctl's DRA claim
            apiserver.add(o.dra_vm(ns, name, npus))
            if apiserver.get("ResourceClaimTemplate", f"rbln-npu-{npus}", ns) is None:
                apiserver.add(o.resource_claim_template(ns, f"rbln-npu-{npus}", npus=npus))
    return op
