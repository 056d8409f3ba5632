"""The nouns of the vm commands: a VM reference, one NPU host device, what a VM holds, remedies and refusals."""

from __future__ import annotations

from dataclasses import dataclass

from rblnctl import constants as C
from rblnctl.errors import InvalidInput, RblnError
from rblnctl.plan import Blocker
from rblnctl.remedy import Command, Remedy  # noqa: F401 - the one Remedy (rblnctl.remedy), named here for vm code


@dataclass(frozen=True, order=True)
class VmRef:
    """A VirtualMachine (or a standalone VirtualMachineInstance) by namespace and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


VmBlocker = Blocker  # a refusal of a VM change that carries its remedy (Blocker.remedy)


@dataclass(frozen=True, kw_only=True)
class NpuDevice:
    """One hostDevices entry that passes an NPU: a device plugin's resource (sandbox) or a DRA claim request."""

    name: str  # hostDevices[].name (npu0)
    method: str  # sandbox | dra
    resource: str | None = None  # sandbox: deviceName (rebellions.ai/RBLN-CA22_PF)
    claim: str | None = None  # dra: claimName (a resourceClaims entry)
    request: str | None = None  # dra: requestName
    managed: bool = False  # dra: through rblnctl's own claim entry (rbln-npu-<hash>, or the old rbln-npu)

    @property
    def source(self) -> str:
        """The resource, or `claim/request`: what the device comes from, for one table cell."""
        return self.resource or f"{self.claim}/{self.request}"


@dataclass(frozen=True, kw_only=True)
class VmNpus:
    """The NPUs one VM (or VMI) spec passes, split by method, and what else it carries."""

    sandbox: tuple[NpuDevice, ...] = ()
    dra: tuple[NpuDevice, ...] = ()
    managed_claim: dict | None = None  # rblnctl's resourceClaims entry, as written
    other_devices: tuple[str, ...] = ()  # names of host devices that are not NPUs (kept untouched)

    @property
    def devices(self) -> tuple[NpuDevice, ...]:
        """Every NPU device, sandbox first."""
        return self.sandbox + self.dra

    @property
    def count(self) -> int:
        """How many NPUs the spec passes."""
        return len(self.sandbox) + len(self.dra)

    @property
    def method(self) -> str | None:
        """`sandbox`, `dra`, `mixed` (both: one of them cannot work), or None (no NPU)."""
        if self.sandbox and self.dra:
            return "mixed"
        if self.sandbox:
            return C.METHOD_SANDBOX
        if self.dra:
            return C.METHOD_DRA
        return None

    @property
    def resources(self) -> list[str]:
        """The sandbox resources named, in order, without repeats."""
        return list(dict.fromkeys(d.resource for d in self.sandbox if d.resource))

    @property
    def managed_template(self) -> str | None:
        """The ResourceClaimTemplate rblnctl's claim entry names (None: no entry, or a direct claim)."""
        entry = self.managed_claim or {}
        return entry.get("resourceClaimTemplateName") or None


class VmDiagnosisFailed(RblnError):
    """`vm diagnose` found a broken link; the diagnosis itself was already shown."""


def npu_choice(method: str | None, resource: str | None, product: str | None) -> str | None:
    """Check how a command was told which NPUs to use (--method, --resource, --product) and return the resource in
    its canonical form (None: none given). Raises InvalidInput: an unknown method, both a resource and a product,
    a malformed resource, or either with DRA (DRA asks for the VM DeviceClass, not a resource)."""
    from rblnctl.operator import resources as R

    if method is not None and method not in C.METHODS:
        raise InvalidInput(f"unknown method {method!r}: use {' or '.join(C.METHODS)}")
    if resource and product:
        raise InvalidInput("name a resource or a product, not both")
    if resource:
        resource = R.parse_resource(resource, what="--resource")
    if method == C.METHOD_DRA and (resource or product):
        raise InvalidInput("a resource or product picks a sandbox device plugin resource; DRA uses the "
                           f"{C.DRA_DEVICECLASS_VM} class")
    return resource or None
