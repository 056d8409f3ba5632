"""NPUs per node as the scheduler counts them (rblnctl.operator.capacity): requests of unfinished pods, init
containers and sidecars by the scheduler's formula, DRA devices less those claims hold; and what is read."""

from __future__ import annotations

import json

import pytest

from rblnctl import constants as C
from rblnctl.operator import capacity as cap
from rblnctl.operator.policy import parse_policy
from tests.fakes import objects as o
from rblnctl.constants import GENERIC_CONTAINER_RESOURCE as NPU

CA22 = "rebellions.ai/RBLN-CA22_PF"


def _container(name: str, npus: int, *, sidecar: bool = False) -> dict:
    c = {"name": name, "image": "x", "resources": {"requests": {NPU: str(npus)}, "limits": {NPU: str(npus)}}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def _pod(containers=(), init=(), **kw) -> dict:
    p = o.pod("default", kw.pop("name", "p"), node=kw.pop("node", "n1"), **kw)
    p["spec"]["containers"] = list(containers) or [_container("main", 0)]
    if init:
        p["spec"]["initContainers"] = list(init)
    return p


@pytest.mark.parametrize("containers, init, expected", [
    ([_container("a", 1), _container("b", 2)], [], 3),  # containers add up
    ([_container("a", 1)], [_container("i", 3)], 3),  # an init container larger than the containers: its amount
    ([_container("a", 2)], [_container("i", 1)], 2),  # smaller: the containers'
    ([_container("a", 1)], [_container("i1", 2), _container("i2", 1)], 2),  # init containers run one at a time
    # a sidecar runs beside the containers (1 + 1) and beside the init containers after it (1 + 2)
    ([_container("a", 1)], [_container("s", 1, sidecar=True), _container("i", 2)], 3),
    ([_container("a", 2)], [_container("s", 1, sidecar=True), _container("i", 1)], 3),
], ids=["sum", "init-larger", "init-smaller", "init-one-at-a-time", "sidecar-then-init", "sidecar-beside"])
def test_a_pod_asks_what_the_scheduler_counts(containers, init, expected):
    assert cap.pod_requests(_pod(containers, init)) == {NPU: expected}


def test_requests_default_to_limits_and_other_resources_are_not_npus():
    p = o.pod("default", "p", node="n1", limits={CA22: "2"}, requests={"cpu": "4", "nvidia.com/gpu": "1"})
    p["spec"]["containers"][0]["resources"]["requests"].pop(CA22, None)
    assert cap.pod_requests(p) == {CA22: 2}


def test_finished_pods_hold_nothing_terminating_ones_do():
    node = o.npu_node("n1", npus=4)
    done = _pod([_container("a", 1)], name="done", phase="Succeeded")
    failed = _pod([_container("a", 1)], name="failed", phase="Failed")
    leaving = _pod([_container("a", 1)], name="leaving")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    elsewhere = _pod([_container("a", 1)], name="elsewhere", node="n2")
    c = cap.node_capacity(node, [done, failed, leaving, elsewhere])
    assert (c.allocatable, c.allocated, c.free) == (4, 1, 3)
    assert c.of(NPU).holders == ("default/leaving",)


def test_more_held_than_advertised_is_zero_free_not_negative():
    """A device plugin that went away: allocatable 0, pods still hold what they got."""
    node = o.npu_node("n1", npus=2, allocatable={NPU: "0"})
    c = cap.node_capacity(node, [_pod([_container("a", 2)])])
    assert (c.allocatable, c.allocated, c.free) == (0, 2, 0)


def test_unknown_pods_leave_allocated_unknown():
    c = cap.node_capacity(o.npu_node("n1", npus=4), None, problem="cannot list pods")
    assert (c.allocatable, c.allocated, c.free, c.known) == (4, None, None, False)


def vfio(bdf: str) -> dict:
    return {"name": "vfio-" + bdf.replace(":", "-").replace(".", "-"), "attributes": {"type": {"string": "vfio"}}}


def test_dra_devices_less_those_allocated_to_claims():
    node = o.npu_node("n1", mode="vm-passthrough", dra=True)
    slices = [o.resource_slice("n1", devices=[vfio("0000:3b:00.0"), vfio("0000:3c:00.0"), vfio("0000:3d:00.0")])]
    claims = [o.resource_claim("vms", "c1", allocated=[("n1", "vfio-0000-3b-00-0")]),
              o.resource_claim("vms", "other-driver", allocated=[("n1", "vfio-0000-3c-00-0")],
                               driver="gpu.example.com"),
              o.resource_claim("vms", "unallocated")]
    c = cap.node_capacity(node, [], slices=slices, allocated=cap.allocated_devices(claims))
    (use,) = c.resources
    assert (use.name, use.dra, use.allocatable, use.allocated, use.free) == ("vfio-npu.rebellions.ai", True, 3, 1, 2)
    assert use.holders == ("vms/c1",) and use.free_devices == ("vfio-0000-3c-00-0", "vfio-0000-3d-00-0")
    unknown = cap.node_capacity(node, [], slices=slices, allocated=None)
    assert not unknown.known and unknown.allocatable == 3


def _pod_lists(apiserver):
    return [r for r in apiserver.requests if r.method == "GET" and r.path == "/api/v1/pods"]


def test_few_nodes_one_list_each_many_nodes_one_list(apiserver, kube, monkeypatch):
    nodes = [o.npu_node(f"n{i}", npus=4) for i in range(3)]
    apiserver.add(*nodes, _pod([_container("a", 1)], node="n1"), _pod([_container("a", 2)], name="q", node="n2"))
    apiserver.clear_requests()
    few = cap.read_facts(kube, nodes, None)
    lists = _pod_lists(apiserver)
    assert [r.query.get("fieldSelector") for r in lists] == [
        [f"spec.nodeName=n{i},status.phase!=Succeeded,status.phase!=Failed"] for i in range(3)]
    monkeypatch.setattr(cap, "PER_NODE_LISTS", 2)
    apiserver.clear_requests()
    many = cap.read_facts(kube, nodes, None)
    assert [r.query.get("fieldSelector") for r in _pod_lists(apiserver)] == [
        ["status.phase!=Succeeded,status.phase!=Failed"]]
    assert [few.capacity(n).allocated for n in nodes] == [many.capacity(n).allocated for n in nodes] == [0, 1, 2]


def test_dra_is_read_only_when_the_policy_runs_the_dra_plugin(apiserver, kube):
    node = o.npu_node("n1", mode="vm-passthrough", dra=True)
    apiserver.add(node, o.resource_slice("n1", devices=[vfio("0000:3b:00.0")]),
                  o.resource_claim("vms", "c1", allocated=[("n1", "vfio-0000-3b-00-0")]))
    sandbox = parse_policy(o.cluster_policy())
    assert cap.read_facts(kube, [node], sandbox).capacity(node).allocatable == 0
    dra = parse_policy(o.cluster_policy(workload_type="vm-passthrough", sandbox=False, dra=True, device_plugin=False))
    c = cap.read_facts(kube, [node], dra).capacity(node)
    assert (c.allocatable, c.allocated, c.free) == (1, 1, 0)


def test_forbidden_pods_are_unknown_not_zero(apiserver, kube):
    node = o.npu_node("n1", npus=4)
    apiserver.add(node, _pod([_container("a", 1)]))
    apiserver.inject_fault(method="GET", path="/api/v1/pods", status=403, reason="Forbidden",
                           message='pods is forbidden: User "u" cannot list resource "pods"', times=5)
    facts = cap.read_facts(kube, [node], None)
    c = facts.capacity(node)
    assert c.allocated is None and c.allocatable == 4 and "cannot list pods" in str(c.problem)


DRA_POLICY = dict(workload_type="vm-passthrough", sandbox=False, dra=True, device_plugin=False)


def test_forbidden_resourceslices_under_a_dra_policy_are_unknown_not_zero(apiserver, kube):
    """With the DRA plugin on, a node's NPUs are the devices of its ResourceSlices: when RBAC refuses to list them,
    the node's allocated and free NPUs are unknown (and say why), not 0 of 0."""
    node = o.npu_node("n1", mode="vm-passthrough", dra=True)
    apiserver.add(node, o.resource_slice("n1", devices=[vfio("0000:3b:00.0")]))
    apiserver.inject_fault(method="GET", path="/apis/resource.k8s.io/v1/resourceslices", status=403,
                           reason="Forbidden", message='resourceslices is forbidden: User "u" cannot list', times=5)
    c = cap.read_facts(kube, [node], parse_policy(o.cluster_policy(**DRA_POLICY))).capacity(node)
    assert (c.known, c.allocated, c.free) == (False, None, None) and "cannot list ResourceSlices" in str(c.problem)


def _slice(node: str, generation: int, names: list[str], *, count: int = 1, name: str | None = None) -> dict:
    s = o.resource_slice(node, devices=[vfio(n) for n in names], name=name or f"{node}-g{generation}")
    s["spec"]["pool"].update(generation=generation, resourceSliceCount=count)
    return s


def test_only_the_newest_generation_of_a_pool_counts():
    """A driver republishing its pool leaves the old generation's slices a while: the scheduler ignores them
    (kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/
    pools_stable.go addSlice), so the node's devices are not counted twice."""
    node = o.npu_node("n1", mode="vm-passthrough", dra=True)
    old = _slice("n1", 1, ["0000:3b:00.0", "0000:3c:00.0"])
    new = _slice("n1", 2, ["0000:3b:00.0", "0000:3c:00.0"])
    for slices in ([old, new], [new, old]):
        (use,) = cap.node_capacity(node, [], slices=slices, allocated={}).resources
        assert (use.allocatable, use.free) == (2, 2)
    # a pool spread over two slices of the newest generation counts both
    parts = [_slice("n1", 3, ["0000:3b:00.0"], count=2, name="a"), _slice("n1", 3, ["0000:3c:00.0"], count=2, name="b")]
    (use,) = cap.node_capacity(node, [], slices=[old, *parts], allocated={}).resources
    assert use.allocatable == 2


def test_admin_access_results_do_not_hold_devices():
    """A device allocated with adminAccess stays free for others (kubernetes/kubernetes
    pkg/scheduler/framework/plugins/dynamicresources/allocateddevices.go foreachAllocatedDevice)."""
    monitor = o.resource_claim("ops", "monitor", allocated=[("n1", "vfio-0000-3b-00-0")])
    monitor["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    vm = o.resource_claim("vms", "c1", allocated=[("n1", "vfio-0000-3c-00-0")])
    assert list(cap.allocated_devices([monitor, vm]).values()) == ["vms/c1"]


def test_an_extended_resource_served_by_dra_is_counted_once_through_its_claim():
    """DeviceClass extendedResourceName (the operator's npu.rebellions.ai class maps rebellions.ai/npu): on a node
    no device plugin advertises it, the scheduler serves the pod's request from a claim it makes and names in
    status.extendedResourceClaimStatus (KEP-5004); the pod's request is not counted beside the claim's device."""
    node = o.npu_node("n1", mode="vm-passthrough", dra=True, allocatable={})
    pod = _pod([_container("a", 1)], name="infer")
    pod["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "infer-extended-resources-x1", "requestMappings": [
            {"containerName": "a", "resourceName": NPU, "requestName": "container-0-request-0"}]}
    claim = o.resource_claim("default", "infer-extended-resources-x1", allocated=[("n1", "vfio-0000-3b-00-0")])
    slices = [_slice("n1", 1, ["0000:3b:00.0", "0000:3c:00.0"])]
    c = cap.node_capacity(node, [pod], slices=slices, allocated=cap.allocated_devices([claim]))
    assert (c.allocatable, c.allocated, c.free) == (2, 1, 1)
    assert [r.name for r in c.resources] == ["vfio-npu.rebellions.ai"]


def _tainted(bdf: str, *taints: dict) -> dict:
    return {**vfio(bdf), "taints": list(taints)}


UNHEALTHY = {"key": "rebellions.ai/unhealthy", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize("taint, counts_free", [
    (UNHEALTHY, False),
    ({"key": "maintenance", "effect": "NoExecute"}, False),
    ({"key": "note", "effect": "None"}, True),  # only NoSchedule and NoExecute keep a device away
    ({"key": "later", "effect": "SomeFutureEffect"}, True),  # an unknown effect is treated like None
], ids=["NoSchedule", "NoExecute", "None", "unknown-effect"])
def test_a_device_taint_the_request_does_not_tolerate_keeps_the_device_from_free(taint, counts_free):
    """The scheduler's allocator skips a device whose NoSchedule/NoExecute taint no toleration of the request
    tolerates (kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/
    allocator_stable.go taintPreventsAllocation): it is allocatable but not free."""
    node = o.npu_node("n1", mode="vm-passthrough", dra=True)
    slices = [o.resource_slice("n1", devices=[vfio("0000:3b:00.0"), _tainted("0000:3c:00.0", taint)])]
    (use,) = cap.node_capacity(node, [], slices=slices, allocated={}).resources
    assert use.allocatable == 2 and use.allocated == 0
    if counts_free:
        assert (use.free, use.tainted) == (2, ())
    else:
        assert use.free == 1 and use.free_devices == ("vfio-0000-3b-00-0",)
        assert use.tainted == (cap.TaintedDevice(device="vfio-0000-3c-00-0", taint=cap.taint_text(taint)),)


@pytest.mark.parametrize("tolerations, free", [
    ([[{"key": "rebellions.ai/unhealthy", "operator": "Exists"}]], 2),
    ([[{"key": "rebellions.ai/unhealthy", "value": "true", "effect": "NoSchedule"}]], 2),
    ([[{"operator": "Exists"}]], 2),  # an empty key with Exists tolerates every taint
    ([[{"key": "rebellions.ai/unhealthy", "value": "false"}]], 1),  # Equal: the value must match
    ([[{"key": "rebellions.ai/unhealthy", "operator": "Exists", "effect": "NoExecute"}]], 1),  # another effect
    ([[{"operator": "Exists"}], []], 1),  # a device counts for the VM only when each of its requests tolerates it
], ids=["exists", "equal", "everything", "other-value", "other-effect", "one-request-does-not"])
def test_a_request_that_tolerates_the_taint_may_have_the_device(tolerations, free):
    node = o.npu_node("n1", mode="vm-passthrough", dra=True)
    slices = [o.resource_slice("n1", devices=[vfio("0000:3b:00.0"), _tainted("0000:3c:00.0", UNHEALTHY)])]
    (use,) = cap.node_capacity(node, [], slices=slices, allocated={}, device_tolerations=tolerations).resources
    assert use.free == free


def test_a_tainted_device_a_claim_holds_is_allocated_not_tainted():
    """NoExecute after allocation is the eviction controller's business; the device is held either way."""
    node = o.npu_node("n1", mode="vm-passthrough", dra=True)
    slices = [o.resource_slice("n1", devices=[_tainted("0000:3b:00.0", UNHEALTHY), vfio("0000:3c:00.0")])]
    claims = [o.resource_claim("vms", "c1", allocated=[("n1", "vfio-0000-3b-00-0")])]
    (use,) = cap.node_capacity(node, [], slices=slices, allocated=cap.allocated_devices(claims)).resources
    assert (use.allocatable, use.allocated, use.free, use.tainted) == (2, 1, 1, ())


def test_node_list_leaves_a_tainted_device_out_of_free_and_says_so(apiserver):
    """`node list` on a DRA policy: n1 publishes two vfio devices, one tainted NoSchedule: NPUS 2, FREE 1, RESOURCES
    and a note name the tainted one, and the JSON lists it under npuResources[].tainted."""
    from tests.helpers import cli
    from tests.vm.support import dra_cluster

    dra_cluster(apiserver)
    apiserver.mutate("ResourceSlice", "n1-npu.rebellions.ai-slice",
                     fn=lambda s: s["spec"]["devices"][1].update(taints=[UNHEALTHY]))
    r = cli("node", "list", "n1", "-o", "wide", server=apiserver.url)  # RESOURCES is a wide column
    assert r.exit_code == 0, r.stderr
    row = r.stdout.splitlines()[1].split()
    assert row[3:6] == ["2", "0", "1"] and "vfio-npu.rebellions.ai=2(dra,1" in r.stdout
    assert ("note: FREE leaves out 1 DRA device(s) whose NoSchedule/NoExecute taint keeps them from a claim that "
            "does not tolerate it: n1 vfio-0000-3c-00-0 (rebellions.ai/unhealthy=true:NoSchedule)") in r.stderr
    (use,) = json.loads(cli("node", "list", "n1", "-o", "json", server=apiserver.url).stdout)["items"][0][
        "npuResources"]
    assert (use["free"], use["tainted"]) == (1, [{"device": "vfio-0000-3c-00-0",
                                                  "taint": "rebellions.ai/unhealthy=true:NoSchedule"}])


def test_pods_read_for_capacity_keep_only_what_they_hold():
    """A fleet's pods stream through PodsByNode (issue 31): each keeps its PodUse (namespace/name, uid, NPU
    requests, the VMI a launcher runs); a pod asking no NPU and running no VMI is dropped; a DaemonSet's pod held
    in an init container is kept whole as well, for the operator's init holds (another held pod is not).
    Capacity counts the same as from the pods."""
    node = o.npu_node("n1", npus=4)
    app = o.pod("default", "app", node="n1", requests={NPU: "2"})
    web = o.pod("default", "web", node="n1", requests={"cpu": "1"})
    launcher = o.pod("vms", "virt-launcher-vm1-abcde", node="n1", labels={C.LAUNCHER_CREATED_BY_LABEL: "uid-vm1"})
    held = o.set_pod_initializing(o.pod("rbln-system", "rbln-daemon-x", node="n1", owner_kind="DaemonSet",
                                        owner_name="rbln-daemon"), ["toolkit-validation"], "toolkit-validation")
    app_held = o.set_pod_initializing(o.pod("default", "app-x", node="n1"), ["wait-db"], "wait-db")  # not kept
    other = o.pod("default", "elsewhere", node="n2", requests={NPU: "1"})
    pods = cap.PodsByNode()
    for p in (app, web, launcher, held, app_held, other):
        pods.add(p, {"n1": []})
    assert [u.ref for u in pods.uses["n1"]] == ["default/app", "vms/virt-launcher-vm1-abcde"]
    assert pods.uses["n1"][0].requests == ((NPU, 2),) and pods.uses["n1"][1].launcher_of == "uid-vm1"
    assert pods.held == {"n1": [held]} and "n2" not in pods.uses
    facts = cap.CapacityFacts(uses=pods.uses, held=pods.held)
    assert facts.capacity(node) == cap.node_capacity(node, [app, web, launcher, held, other])
    own = facts.capacity(node, skip_pod=lambda u: u.launcher_of == "uid-vm1")
    assert (own.allocated, own.free) == (2, 2)
