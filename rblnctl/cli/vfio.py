"""`rblnctl vfio status | bind | unbind | recover`: move NPUs between the host driver and vfio-pci on this host."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rblnctl.cli import completion
from rblnctl.cli.options import examples

from rblnctl import constants as C  # plain data: the defaults the help texts show
from rblnctl.cli.options import HostDryRunOpt, OutputOpt, YesOpt
from rblnctl.cli.output import Cell, Column, joined

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rblnctl.cli.output import OutputSpec, View
    from rblnctl.host.vfio import VfioBinder, VfioPlan, Write
    from rblnctl.host.vfio.model import DeviceResult, Operation, VfioStatus

app = typer.Typer(
    help="Bind RBLN NPUs to vfio-pci for VM passthrough, give them back to the host driver, repair leftovers, and "
    "show their VFIO state. Host commands: run them on the node; bind, unbind and recover need root, status does "
    "not.\n\n"
    "bind checks every device first (root, IOMMU, vfio-pci loaded, no process holding it open, IOMMU group "
    "viable), records the original drivers, then binds through driver_override and verifies; a failure rolls "
    "back. unbind returns each device to its recorded driver (or --driver, or the kernel's default). recover "
    "re-probes NPUs left without a driver or with a stale driver_override. --dry-run prints every sysfs write "
    "and makes none. See docs/vfio.md.",
    no_args_is_help=True,
)


class ModeChoice(str, enum.Enum):
    """--mode values of recover."""

    container = "container"
    vm = "vm"


BdfArgs = Annotated[
    list[str] | None,
    typer.Argument(metavar="BDF", help="PCI addresses, DDDD:BB:DD.F or BB:DD.F (domain 0000).",
                   autocompletion=completion.complete_bdfs,
                   show_default=False),
]
AllOpt = Annotated[bool, typer.Option("--all", help="Every RBLN NPU on this host (instead of naming BDFs).")]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Accept functions that are not RBLN NPUs, and devices held open by a process.")
]
KeepGoingOpt = Annotated[
    bool,
    typer.Option("--keep-going", help="On a failure, keep the devices that succeeded (the failed one is still "
                 "rolled back) instead of rolling everything back."),
]
RootOpt = Annotated[
    Path,
    typer.Option("--root", metavar="DIR", help="The host's root directory: sys/, proc/, dev/ and run/ are read (and "
                 "sys/ written) under it; a captured or simulated tree, or /host in a debug pod.",
                 show_default=True),
]
WriteTimeoutOpt = Annotated[
    str,
    typer.Option("--timeout", metavar="DURATION", help="How long to wait for an unbind from vfio-pci, which the "
                 "kernel holds until a VFIO user (a VM) lets go of the device: then rblnctl stops waiting, names the "
                 "holder and says how to finish (the write itself cannot be cancelled)."),
]
StateOpt = Annotated[
    Path | None,
    typer.Option("--state-file", metavar="FILE", help="Record of original drivers "
                 f"[default: {C.VFIO_STATE_FILE} under --root].", show_default=False),
]


@app.command("status", short_help="Show NPUs' drivers, IOMMU groups, holders.", epilog=examples(
    "rblnctl vfio status",
    "rblnctl vfio status --all-vendors -o wide",
    "rblnctl vfio status --root /host -o json      # from a debug pod with the host at /host",
    "rblnctl vfio status --node npu-node-1         # a cluster node's NPUs, from a pod on it",
))
def status(
    ctx: typer.Context,
    bdfs: BdfArgs = None,
    all_vendors: Annotated[bool, typer.Option("--all-vendors", help="List every PCI function, not only NPUs.")] = False,
    output: OutputOpt = "table",
    root: RootOpt = Path(C.HOST_ROOT),
    node: Annotated[
        str | None,
        typer.Option("--node", metavar="NODE", help="Show the NPUs of this cluster node instead: runs this command in "
                     "a short-lived read-only pod on it, in -n NAMESPACE [default: the operator's namespace, "
                     f"{C.OPERATOR_NAMESPACE}] (docs/preflight.md, host pods).", show_default=False),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option("--image", metavar="IMAGE", help="With --node: the rblnctl image the pod runs "
                     f"[default: {C.HOST_POD_IMAGE_REPOSITORY}:<this version>].", show_default=False),
    ] = None,
) -> None:
    """Show NPUs' drivers, IOMMU groups and holders (of this host, or with --node of a cluster node)."""
    from rblnctl.cli.console import info, warn
    from rblnctl.cli.output import emit
    from rblnctl.errors import InvalidInput

    if node is None:
        if image is not None:
            raise InvalidInput("--image only applies to --node")
        from rblnctl.host.vfio import vfio_status  # no kubernetes import on this path

        st = vfio_status(root=root, bdfs=bdfs or (), all_vendors=all_vendors)
    else:
        if root != Path(C.HOST_ROOT):
            raise InvalidInput("--root reads a host tree here; with --node the pod reads the node's own")
        from rblnctl.cli.console import waiting
        from rblnctl.hostpods.vfio import RemoteVfioStatus

        given: dict[str, Any] = {"image": image} if image is not None else {}
        remote = RemoteVfioStatus(kube=ctx.obj.kube(), node=node, namespace=ctx.obj.namespace or C.OPERATOR_NAMESPACE,
                                  **given)
        with waiting(f"running vfio status in a pod on {node}..."):
            st = remote.run(bdfs or (), all_vendors=all_vendors)
    for w in st.warnings:
        warn(w)
    if not st.devices:
        if all_vendors:
            info(f"no PCI function under {st.searched}")
        else:
            info(f"no RBLN NPU (vendor {C.PCI_VENDOR_RBLN:04x}, class {C.PCI_CLASS_NPU >> 8:04x}xx) under "
                 f"{st.searched}; --all-vendors lists every PCI function")
        if output.is_table:
            return  # a header with no rows says less than the line above
    emit(_status_view(st), output)


@app.command("bind", short_help="Bind NPUs to vfio-pci (checked, rolled back).", epilog=examples(
    "sudo rblnctl vfio bind --all --dry-run        # every sysfs write, none made",
    "sudo rblnctl vfio bind 0000:3b:00.0 -y",
    "sudo rblnctl vfio bind --all --load-modules",
))
def bind(
    ctx: typer.Context,
    bdfs: BdfArgs = None,
    all_devices: AllOpt = False,
    dry_run: HostDryRunOpt = False,
    force: ForceOpt = False,
    keep_going: KeepGoingOpt = False,
    load_modules: Annotated[
        bool, typer.Option("--load-modules", help="Run `modprobe vfio-pci` when vfio-pci is not loaded.")
    ] = False,
    yes: YesOpt = False,
    output: OutputOpt = "table",
    root: RootOpt = Path(C.HOST_ROOT),
    state_file: StateOpt = None,
    timeout: WriteTimeoutOpt = "10s",
) -> None:
    """Bind NPUs to vfio-pci (checked, rolled back)."""
    _selection(bdfs, all_devices)
    binder = _binder(root, state_file, force=force, keep_going=keep_going, load_modules=load_modules, timeout=timeout)
    _execute(binder, binder.plan("bind", bdfs or (), all_devices=all_devices), dry_run=dry_run, yes=yes, ctx=ctx,
             output=output)


@app.command("unbind", short_help="Give NPUs back to their host driver.", epilog=examples(
    "sudo rblnctl vfio unbind --all",
    "sudo rblnctl vfio unbind 0000:3b:00.0 --driver rebellions",
))
def unbind(
    ctx: typer.Context,
    bdfs: BdfArgs = None,
    all_devices: Annotated[bool, typer.Option("--all", help="Every RBLN NPU now on vfio-pci.")] = False,
    driver: Annotated[
        str | None,
        typer.Option("--driver", metavar="NAME", help="Host driver to bind instead of the recorded one "
                     "(without a record: the kernel's default).", show_default=False),
    ] = None,
    dry_run: HostDryRunOpt = False,
    force: ForceOpt = False,
    keep_going: KeepGoingOpt = False,
    yes: YesOpt = False,
    output: OutputOpt = "table",
    root: RootOpt = Path(C.HOST_ROOT),
    state_file: StateOpt = None,
    timeout: WriteTimeoutOpt = "10s",
) -> None:
    """Give NPUs back to their host driver."""
    _selection(bdfs, all_devices)
    binder = _binder(root, state_file, force=force, keep_going=keep_going, timeout=timeout)
    _execute(binder, binder.plan("unbind", bdfs or (), all_devices=all_devices, driver=driver), dry_run=dry_run,
             yes=yes, output=output, ctx=ctx)


@app.command("recover", short_help="Re-probe NPUs left without a driver.", epilog=examples(
    "sudo rblnctl vfio recover --all --dry-run",
    "sudo rblnctl vfio recover 0000:3b:00.0 --mode vm",
))
def recover(
    ctx: typer.Context,
    bdfs: BdfArgs = None,
    all_devices: AllOpt = False,
    mode: Annotated[
        ModeChoice,
        typer.Option("--mode", help="The node's mode, which decides the driver: container (the host driver "
                     f"{C.HOST_DRIVER}, no driver_override) or vm ({C.VFIO_DRIVER}, as bind leaves it).",
                     case_sensitive=False),
    ] = ModeChoice.container,
    dry_run: HostDryRunOpt = False,
    yes: YesOpt = False,
    output: OutputOpt = "table",
    root: RootOpt = Path(C.HOST_ROOT),
    state_file: StateOpt = None,
    timeout: WriteTimeoutOpt = "10s",
) -> None:
    """Re-probe NPUs left without a driver or with a stale driver_override."""
    _selection(bdfs, all_devices)
    binder = _binder(root, state_file, timeout=timeout)
    _execute(binder, binder.plan("recover", bdfs or (), all_devices=all_devices, mode=mode.value), dry_run=dry_run,
             yes=yes, output=output, ctx=ctx)


# --- wiring ------------------------------------------------------------------------------------------


def _selection(bdfs: list[str] | None, all_devices: bool) -> None:
    """BDFs or --all, exactly one of them (checked before anything is read)."""
    from rblnctl.errors import ConfigError, InvalidInput

    if bdfs and all_devices:
        raise ConfigError("name devices or pass --all, not both")
    if not bdfs and not all_devices:
        raise InvalidInput("name at least one PCI address (DDDD:BB:DD.F) or pass --all")


def _binder(root: Path, state_file: Path | None, *, force: bool = False, keep_going: bool = False,
            load_modules: bool = False, timeout: str = "10s") -> VfioBinder:
    from rblnctl.cli.console import info, warn
    from rblnctl.cli.options import timeout_s
    from rblnctl.host.vfio import VfioBinder

    return VfioBinder(root=root, state_file=state_file, force=force, keep_going=keep_going,
                      load_modules=load_modules, write_timeout_s=timeout_s(timeout),
                      on_write=lambda w: _progress("write", w), on_event=warn, on_done=info)


def _execute(binder: VfioBinder, plan: VfioPlan, *, dry_run: bool, yes: bool, output: OutputSpec,
             ctx: typer.Context) -> None:
    """Every vfio change through the one flow; moving devices between drivers is disruptive, so it asks."""
    from rblnctl.cli.console import warn
    from rblnctl.cli.flow import CLIENT, Mutation, run
    from rblnctl.errors import HostError

    def plan_view(p: VfioPlan) -> View:
        lines = [f"would run: modprobe {m}" for m in p.load_modules] + [_write_line("would write", w)
                                                                         for w in p.writes]
        return _results_view(p.operation, p.preview(), notes=lines)

    changes = "\n".join(f"  {d.bdf} {d.model or d.ids}: {d.from_driver or 'no driver'} -> "
                         f"{d.to_driver or 'kernel default'}" for d in plan.changes)
    outcome = run(Mutation(
        plan=plan, apply=binder.apply, refusal=f"vfio {plan.operation} refused; nothing was changed",
        question=f"{plan.operation.capitalize()} {len(plan.changes)} device(s)?", disruptive=True,
        dry_run=CLIENT if dry_run else None, yes=yes, output=output, plan_view=plan_view,
        result_view=lambda o: _results_view(plan.operation, o.results), question_detail=changes,
        noop_message=f"vfio {plan.operation}: every device is already where it should be; nothing to do",
        dry_run_message="dry run: nothing was written",
    ))
    if outcome is None:
        return
    for hint in _recovery_hints(ctx, outcome.results):
        warn(hint)
    if not outcome.ok:
        bad = [r for r in outcome.results if r.status not in ("ok", "skipped")]
        raise HostError(f"vfio {plan.operation} did not complete: {len(bad)} of {len(outcome.results)} devices "
                        "failed, were rolled back or were not attempted (see the STATUS column)")


def _recovery_hints(ctx: typer.Context, results: Sequence[DeviceResult]) -> list[str]:
    """The command that gives a device left without a driver its driver back (the library says it in words), as this
    user types it: the program name as invoked and the run's own --root and --state-file."""
    from rblnctl.cli.rerun import render
    from rblnctl.remedy import Command

    hints = []
    for r in results:
        if r.status == "pending":
            cmd = Command.own("vfio", str(r.action), r.bdf, again=True)
            hints.append(f"{r.bdf}: its unbind from {r.from_driver} is still waiting in the kernel for a VFIO user to "
                         f"let go; once it has, run `{render(ctx, cmd, drop=_ONE_DEVICE)}` to finish")
            continue
        if r.status != "driverless":
            continue
        if r.action == "bind" and r.from_driver:
            cmd = Command.own("vfio", "unbind", r.bdf, driver=r.from_driver, again=True)
        elif r.action == "unbind":
            cmd = Command.own("vfio", "recover", r.bdf, mode="vm", again=True)
        else:
            cmd = Command.own("vfio", "recover", r.bdf, again=True)
        hints.append(f"{r.bdf} has no driver: once its driver works again, run `{render(ctx, cmd, drop=_ONE_DEVICE)}`")
    return hints


# What a hint for one device leaves out of the run it repeats: the selection and the run's bulk behaviour.
_ONE_DEVICE = frozenset({"all_devices", "keep_going", "force", "load_modules", "yes"})  # another change: it asks


def _write_line(verb: str, w: Write) -> str:
    value = w.value.strip()
    return f'{verb}: {w.path} <- "{value}"' + (" (clear)" if not value else "") + f"  # {w.bdf} {w.why}"


def _progress(verb: str, w: Write) -> None:
    from rblnctl.cli.console import info

    info(_write_line(verb, w))


# --- views -------------------------------------------------------------------------------------------

_RESULT_STYLE = {"ok": "green", "skipped": "dim", "planned": "cyan", "blocked": "yellow"}


_RESULT_COLUMNS = (Column("BDF"), Column("ACTION"), Column("FROM", value="fromDriver"),
                   Column("TO", value=lambda r: r["toDriver"] or "<default>"),
                   Column("STATUS", value=lambda r: Cell(r["status"], _RESULT_STYLE.get(r["status"], "red"))),
                   Column("MESSAGE", value=lambda r: r["message"]))


def _results_view(operation: Operation | str, results: Sequence[DeviceResult], *,
                  notes: list[str] | None = None) -> View:
    from rblnctl.cli.output import View, rows
    from rblnctl.documents import VFIO_CHANGE, body

    doc = body(VFIO_CHANGE, operation=operation, results=results)
    return View(kind="VfioChange", body=doc, tables=[rows(doc["devices"], *_RESULT_COLUMNS)], notes=notes or [],
                names=[f"pci/{r['bdf']}" for r in doc["devices"]])


def _model(d: dict) -> str:
    model = f"{d['model']}-{d['function']}" if d["model"] and d["function"] else d["model"] or d["ids"]
    return model.replace(" ", "-")


def _members(d: dict) -> str:
    return joined(f"{m['bdf']}({m['driver'] or 'none'}{',bridge' if m['bridge'] else ''}"
                  f"{',blocks-group' if m['blocksGroup'] else ''})" for m in d["groupMembers"])


_STATUS_COLUMNS = (
    Column("BDF"), Column("MODEL", value=_model), Column("DRIVER"), Column("OVERRIDE", value="driverOverride"),
    Column("GROUP", value="iommuGroup"), Column("OTHER-MEMBERS", value=_members), Column("NUMA", value="numaNode"),
    Column("VFIO-DEV", value=lambda d: ("yes" if d["vfioDevicePresent"] else "no") if d["iommuGroup"] else "<none>"),
    Column("HOLDERS", value=lambda d: joined(f"{h['pid']}/{h['command']}" for h in d["holders"])))


def _status_view(st: VfioStatus) -> View:
    from rblnctl.cli.output import View, rows
    from rblnctl.documents import VFIO_STATUS

    doc = VFIO_STATUS(st)
    return View(kind="VfioStatus", body=doc, tables=[rows(doc["devices"], *_STATUS_COLUMNS)],
                names=[f"pci/{d['bdf']}" for d in doc["devices"]])
