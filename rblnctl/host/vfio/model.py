"""The data of `rblnctl vfio`: operations, statuses, plans, results and status rows (JSON values are a contract)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from rblnctl.errors import Refused
from rblnctl.host.procfs import OPEN, Holder
from rblnctl.plan import Blocker


class Operation(enum.StrEnum):
    """What a plan does to the devices it names."""

    BIND = "bind"  # host driver -> vfio-pci
    UNBIND = "unbind"  # vfio-pci -> the recorded host driver, a named one, or the kernel's default
    RECOVER = "recover"  # driverless or stale-override functions -> the driver the node's mode wants


class Action(enum.StrEnum):
    """What a plan does to one device."""

    BIND = "bind"
    UNBIND = "unbind"
    RECOVER = "recover"
    SKIP = "skip"


class Mode(enum.StrEnum):
    """The node mode `recover` restores a function for (the driver that mode wants)."""

    CONTAINER = "container"  # the host driver (rebellions), no driver_override
    VM = "vm"  # vfio-pci, driver_override=vfio-pci (as bind leaves it)


class Status(enum.StrEnum):
    """`DeviceResult.status` (docs/vfio.md)."""

    PLANNED = "planned"  # dry run: this would change
    BLOCKED = "blocked"  # dry run: this would change, but a blocker refuses the run
    OK = "ok"  # changed and verified
    SKIPPED = "skipped"  # nothing to do
    FAILED = "failed"  # this device failed; `message` says where it ended (normally where it started)
    ROLLED_BACK = "rolled-back"  # changed, then restored because another device failed or a signal came
    NOT_ATTEMPTED = "not-attempted"  # never touched: an earlier device failed and the run stopped
    DRIVERLESS = "driverless"  # a rollback failed and the device has no driver now
    PENDING = "pending"  # an unbind still blocked in the kernel by a VFIO user when the bound passed; it finishes
    # once that user lets go (`message` names it), then the same command again finishes the device


# Statuses that make an outcome not ok.
PROBLEMS = frozenset({Status.FAILED, Status.DRIVERLESS, Status.ROLLED_BACK, Status.NOT_ATTEMPTED, Status.PENDING})


@dataclass(frozen=True)
class DeviceBlocker(Blocker):
    """A blocker about particular devices (`bdfs`); one without devices refuses the whole plan."""

    bdfs: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Write:
    """One sysfs write: `value` into `path`, done for `bdf` (`why` says which step it is).

    `may_block`: the kernel may hold the write until a user lets go of the device (an unbind from a vfio driver
    while a VFIO user holds it: "blocked until released by user"), so it runs with a bound.
    """

    bdf: str
    path: str
    value: str
    why: str
    may_block: bool = False


@dataclass(frozen=True, kw_only=True)
class DevicePlan:
    """What one function looks like now and the writes that move it to `to_driver`.

    `to_driver` None on an unbind means the kernel's default (empty override + drivers_probe).
    """

    bdf: str
    ids: str
    model: str | None
    iommu_group: str | None
    action: Action
    from_driver: str | None
    from_override: str | None
    to_driver: str | None
    note: str = ""
    writes: tuple[Write, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DeviceResult:
    """The outcome for one function (the stable `-o json` schema of bind, unbind and recover)."""

    bdf: str
    action: Operation
    from_driver: str | None
    to_driver: str | None
    status: Status
    message: str


@dataclass(frozen=True, kw_only=True)
class VfioPlan:
    """Everything `apply()` would do, and every reason it would refuse to (`blockers`)."""

    operation: Operation
    devices: tuple[DevicePlan, ...]
    blockers: tuple[Blocker, ...] = ()
    warnings: tuple[str, ...] = ()
    load_modules: tuple[str, ...] = ()  # modprobe'd by apply() before the first write
    # unbind: recorded devices already back on a host driver (a run cut after its last write, a reboot): apply()
    # drops their records, as a finished unbind would have
    forget: tuple[str, ...] = ()
    # the command that made this plan, without its BDFs: its verb and own flags (`("unbind", "--driver", "d")`); what
    # a pending unbind's record names as the command that finishes the device
    finish: tuple[str, ...] = ()

    @property
    def changes(self) -> list[DevicePlan]:
        """Devices the run would change."""
        return [d for d in self.devices if d.action != Action.SKIP]

    @property
    def noop(self) -> bool:
        """True when no device would change (then nothing is checked, recorded or written)."""
        return not self.changes

    @property
    def writes(self) -> list[Write]:
        """Every sysfs write, in order."""
        return [w for d in self.devices for w in d.writes]

    def blockers_for(self, bdf: str) -> list[Blocker]:
        """The blockers that refuse this device: its own, and every plan-wide one."""
        return [b for b in self.blockers if not isinstance(b, DeviceBlocker) or not b.bdfs or bdf in b.bdfs]

    def check(self) -> None:
        """Raise Refused, listing every blocker, when the plan must not run."""
        if self.blockers:
            raise Refused(f"vfio {self.operation} refused; nothing was changed", blockers=list(self.blockers))

    def preview(self) -> list[DeviceResult]:
        """The plan as results (what a dry run shows): `planned`, `blocked` or `skipped` per device."""
        out = []
        for d in self.devices:
            if d.action == Action.SKIP:
                status, message = Status.SKIPPED, d.note
            elif hits := self.blockers_for(d.bdf):
                status, message = Status.BLOCKED, "; ".join(b.message for b in hits)
            else:
                status, message = Status.PLANNED, d.note or f"{len(d.writes)} sysfs writes"
            out.append(DeviceResult(bdf=d.bdf, action=self.operation, from_driver=d.from_driver,
                                    to_driver=d.to_driver, status=status, message=message))
        return out


@dataclass(frozen=True, kw_only=True)
class VfioOutcome:
    """Per-device results of `apply()`, in plan order."""

    results: tuple[DeviceResult, ...]

    @property
    def ok(self) -> bool:
        """True when no device failed, was rolled back, was left out or was left without a driver."""
        return not any(r.status in PROBLEMS for r in self.results)


@dataclass(frozen=True, kw_only=True)
class GroupMember:
    """Another function in the same IOMMU group."""

    bdf: str
    ids: str
    driver: str | None
    bridge: bool  # header type 1: a PCI-to-PCI bridge or PCIe port
    blocks_group: str | None = None  # why this member keeps the group from VFIO (pci.group_member_blocker)


@dataclass(frozen=True, kw_only=True)
class DeviceStatus:
    """One function as `vfio status` reports it."""

    bdf: str
    ids: str
    model: str | None
    function: str | None
    driver: str | None
    driver_override: str | None
    iommu_group: str | None
    group_members: tuple[GroupMember, ...]
    # False when driver_override could not be read (an unbind pending, the kernel holding the device: then
    # driver_override is None without meaning "no override", and a None driver may be an unbind in progress)
    driver_override_known: bool = True
    numa_node: int | None
    vfio_device: str | None  # <root>/dev/vfio/<group> (None without a group)
    vfio_device_present: bool
    holders: tuple[Holder, ...]


@dataclass(frozen=True, kw_only=True)
class VfioStatus:
    """`vfio status`: devices, warnings (VFIO Manager present, incomplete holder scan) and where it looked."""

    devices: tuple[DeviceStatus, ...]
    warnings: tuple[str, ...] = ()
    searched: str = ""  # the PCI devices directory that was listed

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VfioStatus:
        """Read a VfioStatus document body back (rblnctl.documents.VFIO_STATUS: a document another rblnctl printed).

        Raises KeyError, TypeError or ValueError when the data is not one.
        """
        return cls(searched=str(data["searched"]), warnings=tuple(str(w) for w in data["warnings"]), devices=tuple(
            DeviceStatus(
                bdf=str(d["bdf"]), ids=str(d["ids"]), model=d["model"], function=d["function"], driver=d["driver"],
                driver_override=d["driverOverride"], iommu_group=d["iommuGroup"],
                # an older rblnctl (a --node pod's image) prints no driverOverrideKnown: it read every override
                driver_override_known=bool(d.get("driverOverrideKnown", True)),
                group_members=tuple(GroupMember(bdf=str(m["bdf"]), ids=str(m["ids"]), driver=m["driver"],
                                                bridge=bool(m["bridge"]), blocks_group=m["blocksGroup"])
                                    for m in d["groupMembers"]),
                numa_node=None if d["numaNode"] is None else int(d["numaNode"]), vfio_device=d["vfioDevice"],
                vfio_device_present=bool(d["vfioDevicePresent"]),
                holders=tuple(Holder(pid=int(h["pid"]), command=str(h["command"]), path=str(h["path"]),
                                     how=str(h.get("how") or OPEN), certain=h.get("certain", True) is not False)
                              for h in d["holders"]),
            ) for d in data["devices"]))
