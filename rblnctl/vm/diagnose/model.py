"""vm diagnose's result: the chain of links, each PASS or FAIL with its evidence and remedy (rblnctl.vm.diagnose)."""


from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rblnctl.remedy import Remedy
from rblnctl.vm.model import VmRef



class LinkStatus(enum.StrEnum):
    """Whether a link holds."""

    PASS = "PASS"
    FAIL = "FAIL"


class LinkName(enum.StrEnum):
    """The links, in the order they are walked."""

    VM = "VirtualMachine"
    REQUEST = "NpuRequest"
    GATES = "FeatureGates"
    VM_NODES = "VmModeNodes"
    PERMITTED = "PermittedHostDevice"
    DEVICE_CLASS = "DeviceClass"
    ADVERTISED = "Advertised"
    DRA_PLUGIN = "DraPlugin"
    SLICES = "ResourceSlices"
    SCHEDULABLE = "KubeVirtSchedulable"
    CAPACITY = "FreeCapacity"
    INSTANCE = "Instance"
    CLAIM = "ClaimAllocated"
    SCHEDULING = "Scheduling"
    CLAIM_NAME = "ClaimName"
    NODE = "NodeComponents"
    READY = "Ready"


TITLES = {
    LinkName.VM: "the VirtualMachine exists",
    LinkName.REQUEST: "its spec asks for NPUs",
    LinkName.GATES: "KubeVirt's feature gates are on",
    LinkName.PERMITTED: "KubeVirt permits the resource",
    LinkName.DEVICE_CLASS: "the passthrough DeviceClass exists",
    LinkName.VM_NODES: "some NPU node is in vm mode",
    LinkName.ADVERTISED: "a vm-mode node advertises the resource",
    LinkName.DRA_PLUGIN: "the RBLN DRA plugin runs on a vm-mode node",
    LinkName.SLICES: "ResourceSlices offer vfio NPUs",
    LinkName.SCHEDULABLE: "a node that offers its NPUs is schedulable for VMs (kubevirt.io/schedulable)",
    LinkName.CAPACITY: "a node it may run on has free NPUs",
    LinkName.INSTANCE: "a VMI runs it",
    LinkName.CLAIM: "its ResourceClaim is allocated",
    LinkName.SCHEDULING: "its virt-launcher pod is scheduled",
    LinkName.CLAIM_NAME: "no other VM on its node has a DRA claim of the same name",
    LinkName.NODE: "the node's operator components are ready",
    LinkName.READY: "the VMI is Running and Ready",
}
# What is wrong when a link does not hold: each title, negated. A link that can fail for several reasons
# says which one where it fails (_Chain.add's `failure`).
FAILURES = {
    LinkName.VM: "the VirtualMachine does not exist",
    LinkName.REQUEST: "its spec passes no NPU",
    LinkName.GATES: "a KubeVirt feature gate it needs is off",
    LinkName.PERMITTED: "KubeVirt does not permit its NPU resource",
    LinkName.DEVICE_CLASS: "the passthrough DeviceClass does not exist",
    LinkName.VM_NODES: "no NPU node is in vm mode",
    LinkName.ADVERTISED: "no vm-mode node advertises its NPU resource",
    LinkName.DRA_PLUGIN: "the RBLN DRA plugin runs on no vm-mode node",
    LinkName.SLICES: "no ResourceSlice offers vfio NPUs",
    LinkName.SCHEDULABLE: "no node that offers its NPUs is schedulable for VMs (kubevirt.io/schedulable)",
    LinkName.CAPACITY: "no node it may run on has free NPUs",
    LinkName.INSTANCE: "no VMI runs it",
    LinkName.CLAIM: "its ResourceClaim is not allocated",
    LinkName.SCHEDULING: "its virt-launcher pod is not scheduled",
    LinkName.CLAIM_NAME: "another VM on its node has a DRA claim of the same name",
    LinkName.NODE: "its node's operator components are not ready",
    LinkName.READY: "the VMI is not Running and Ready",
}


@dataclass(frozen=True, kw_only=True)
class Link:
    """One link of the chain."""

    name: LinkName
    status: LinkStatus
    evidence: tuple[str, ...]
    remedy: Remedy | None = None
    failure: str | None = None  # what is wrong, in words (None: the link holds)

    @property
    def title(self) -> str:
        """What the link asserts, in words (what holds when it passes: not a fact when it fails)."""
        return TITLES[self.name]

    @property
    def message(self) -> str:
        """The evidence as one line."""
        return "; ".join(self.evidence)

    @property
    def ok(self) -> bool:
        """The link holds."""
        return self.status == LinkStatus.PASS


@dataclass(frozen=True, kw_only=True)
class VmDiagnosis:
    """The links walked, up to and including the first broken one."""

    vm: VmRef
    method: str | None
    npus: int
    links: tuple[Link, ...]
    warnings: tuple[str | Remedy, ...] = field(default=())  # a Remedy: a warning that names a command

    @property
    def ok(self) -> bool:
        """Every link holds: the VM has its NPUs."""
        return all(link.ok for link in self.links)

    @property
    def broken(self) -> Link | None:
        """The first link that does not hold."""
        return next((link for link in self.links if not link.ok), None)

    @property
    def found(self) -> bool:
        """The VirtualMachine (or a standalone VMI) exists."""
        return not any(link.name == LinkName.VM and not link.ok for link in self.links)

    def summary(self) -> str | None:
        """The broken link as one line saying what is wrong (None: every link holds)."""
        broken = self.broken
        if broken is None:
            return None
        if broken.name == LinkName.VM:
            return str(broken.failure)
        return f"VM {self.vm}: {broken.failure} (broken link: {broken.name.value})"
