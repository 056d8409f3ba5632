"""Typed projections of large lists: decode only the fields rblnctl reads, into plain dicts (issue 31).

A LIST of 20,000 pods is ~80 MB of JSON; turning all of it into dicts (json, orjson or untyped msgspec alike) is
the cost, not the parsing. msgspec decodes into a TypedDict by reading only its declared keys and skipping the
rest of each object without building it, so a projection costs a fraction of a full decode. Measured on the real
kube-apiserver v1.36.2 (benchmarks/fleet.py --serve, 300 nodes: 1,200 pods, 4.9 MB), each a mean of 3 decodes:
stdlib json 0.136 s, untyped msgspec 0.142 s, msgspec into POD (below) 0.010 s, into a projection keeping spec
and status whole (only metadata.managedFields dropped) 0.023 s. docs/architecture.md "Reading at fleet scale".

The result is plain dicts and lists, the same shapes a full decode gives, with the keys outside the projection
absent: every reader of these lists already reads them with `.get`. A projection is lossless for its readers:

* Every projection leaves out metadata.managedFields (never read by rblnctl, ~half of a node's or a pod's bytes:
  the server-side-apply field sets).
* VM, VMI (the VM listing: vm list, status): name and namespace, the template's (VMI's) NPU devices and claims,
  the status the listing reads; not volumes, disks, interfaces, labels or annotations (VmiSpec, NamedMeta below).
* NODE (the NPU nodes every display command lists): metadata, spec, and of the status what a reader reads (its
  allocatable resources and its conditions' types and statuses; NodeStatus below): on the benchmark's nodes,
  which report no images, less than 7.2 KB of dicts a node against 10.3 KB for the whole node less
  managedFields; a real kubelet's image list is most of a node.
* POD (the pods capacity and the operator's component pods are computed from: rblnctl.operator.capacity,
  .components): ObjectMeta less managedFields; of the spec what pod_requests, holds_node_resources and
  init_holds read; of the status the phase and the containers' states.

A reply that does not fit the projection's types (a null where an object belongs, say) is decoded in full
instead (Kube.request falls back to the stdlib decoder), so a projection never fails a read a full decode
would not.
"""

from __future__ import annotations

from typing import Any, Generic, TypedDict, TypeVar

T = TypeVar("T")


class ObjectMeta(TypedDict, total=False):
    """k8s.io/apimachinery meta/v1 ObjectMeta, every field but managedFields."""

    name: Any
    generateName: Any
    namespace: Any
    selfLink: Any
    uid: Any
    resourceVersion: Any
    generation: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    deletionGracePeriodSeconds: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    finalizers: Any



class NodeCondition(TypedDict, total=False):
    """A Node condition as rblnctl reads it: is the node Ready (rblnctl.operator.nodes, .convergence)."""

    type: Any
    status: Any


class NodeStatus(TypedDict, total=False):
    """What rblnctl reads of a Node's status: what it can allocate, whether it is Ready. Left out: images (a
    kubelet reports up to 50, often tens of KB a node), capacity, addresses, daemonEndpoints, nodeInfo, volumes,
    config, runtimeHandlers, and of each condition all but its type and status."""

    allocatable: Any
    conditions: list[NodeCondition] | None


class Node(TypedDict, total=False):
    """A Node as rblnctl reads it: its metadata less managedFields, its spec, NodeStatus."""

    apiVersion: Any
    kind: Any
    metadata: ObjectMeta | None
    spec: Any
    status: NodeStatus | None


class Devices(TypedDict, total=False):
    hostDevices: Any
    gpus: Any


class Domain(TypedDict, total=False):
    devices: Devices | None


class VmiSpec(TypedDict, total=False):
    """What the VM listing reads of a VMI spec (rblnctl.vm.devices: HOST_DEVICES, GPUS, RESOURCE_CLAIMS). Left out:
    volumes (a cloud-init userData is often most of a VM), disks, interfaces, networks, the rest of the domain."""

    domain: Domain | None
    resourceClaims: Any


class VmTemplate(TypedDict, total=False):
    spec: VmiSpec | None


class VmSpec(TypedDict, total=False):
    running: Any
    runStrategy: Any
    template: VmTemplate | None


class NamedMeta(TypedDict, total=False):
    """What the VM listing reads of a VM's or VMI's metadata: who it is (not its labels, annotations, owners)."""

    name: Any
    namespace: Any
    uid: Any


class Condition(TypedDict, total=False):
    type: Any
    status: Any
    reason: Any
    message: Any
    lastTransitionTime: Any


class VmStatus(TypedDict, total=False):
    printableStatus: Any
    conditions: list[Condition] | None  # RestartRequired (rblnctl.vm.pending)


class Vm(TypedDict, total=False):
    """A VirtualMachine as the VM listing reads it (rblnctl.vm.listing): its template's NPUs, its status."""

    apiVersion: Any
    kind: Any
    metadata: NamedMeta | None
    spec: VmSpec | None
    status: VmStatus | None


class VmiStatus(TypedDict, total=False):
    phase: Any
    nodeName: Any


class Vmi(TypedDict, total=False):
    """A VirtualMachineInstance as the VM listing reads it: its spec's NPUs, phase and node (not its conditions,
    interfaces, volume and guest-agent status)."""

    apiVersion: Any
    kind: Any
    metadata: NamedMeta | None
    spec: VmiSpec | None
    status: VmiStatus | None


class Container(TypedDict, total=False):
    """What capacity and init holds read of a container: its requests and limits, a sidecar's restartPolicy."""

    name: Any
    image: Any
    resources: Any
    restartPolicy: Any


class PodSpec(TypedDict, total=False):
    nodeName: Any
    containers: list[Container] | None
    initContainers: list[Container] | None
    overhead: Any
    resourceClaims: Any
    priority: Any
    schedulerName: Any


class PodStatus(TypedDict, total=False):
    phase: Any
    reason: Any
    message: Any
    nominatedNodeName: Any
    startTime: Any
    initContainerStatuses: Any
    containerStatuses: Any
    resourceClaimStatuses: Any
    extendedResourceClaimStatus: Any


class Pod(TypedDict, total=False):
    """A pod as capacity (rblnctl.operator.capacity) and the operator's component pods (.components) read it."""

    apiVersion: Any
    kind: Any
    metadata: ObjectMeta | None
    spec: PodSpec | None
    status: PodStatus | None


class ListOf(TypedDict, Generic[T], total=False):
    """A LIST reply, its items decoded into T."""

    apiVersion: Any
    kind: Any
    metadata: Any
    items: list[T] | None


# a projection names the LIST reply's type
NODE = ListOf[Node]
VM = ListOf[Vm]
VMI = ListOf[Vmi]
POD = ListOf[Pod]

_decoders: dict[type, Any] = {}


def list_decoder(projection: type) -> Any:
    """A function bytes -> the LIST reply (a dict), its items decoded into the projection (cached per type).

    Raises msgspec.DecodeError (invalid JSON) or msgspec.ValidationError (JSON that does not fit the types)."""
    decode = _decoders.get(projection)
    if decode is None:
        import msgspec

        decode = _decoders[projection] = msgspec.json.Decoder(projection).decode
    return decode
