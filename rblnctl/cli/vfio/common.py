"""What the `rblnctl vfio` verbs share: the group's Typer app they register on, the device selection and host
options, the one flow every sysfs change runs through (execute), its recovery hints and its result view."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli import completion
from rblnctl.cli.output import Cell, Column

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rblnctl.cli.options import HostMutating, VfioHost
    from rblnctl.cli.output import OutputSpec, View
    from rblnctl.host.vfio import VfioBinder, VfioPlan, Write
    from rblnctl.host.vfio.model import DeviceResult, Operation

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

# --- wiring ------------------------------------------------------------------------------------------


def selection(bdfs: list[str] | None, all_devices: bool) -> None:
    """BDFs or --all, exactly one of them (checked before anything is read)."""
    from rblnctl.errors import ConfigError, InvalidInput

    if bdfs and all_devices:
        raise ConfigError("name devices or pass --all, not both")
    if not bdfs and not all_devices:
        raise InvalidInput("name at least one PCI address (DDDD:BB:DD.F) or pass --all")


def binder(host: VfioHost, *, force: bool = False, keep_going: bool = False, load_modules: bool = False) -> VfioBinder:
    """The binder of one vfio change, on the host tree `host` names."""
    from rblnctl.cli.console import info, warn
    from rblnctl.host.vfio import VfioBinder

    return VfioBinder(root=host.root, state_file=host.state_file, force=force, keep_going=keep_going,
                      load_modules=load_modules, write_timeout_s=host.timeout_s,
                      on_write=lambda w: _progress("write", w), on_event=warn, on_done=info)


def execute(ctx: typer.Context, binder: VfioBinder, plan: VfioPlan, *, change: HostMutating,
            output: OutputSpec) -> None:
    """Every vfio change through the one flow; moving devices between drivers is disruptive, so it asks."""
    from rblnctl.cli.console import warn
    from rblnctl.cli.flow import CLIENT, Mutation, run
    from rblnctl.errors import HostError

    def plan_view(p: VfioPlan) -> View:
        lines = [f"would run: modprobe {m}" for m in p.load_modules] + [_write_line("would write", w)
                                                                         for w in p.writes]
        return results_view(p.operation, p.preview(), notes=lines)

    changes = "\n".join(f"  {d.bdf} {d.model or d.ids}: {d.from_driver or 'no driver'} -> "
                         f"{d.to_driver or 'kernel default'}" for d in plan.changes)
    outcome = run(Mutation(
        plan=plan, apply=binder.apply, refusal=f"vfio {plan.operation} refused; nothing was changed",
        question=f"{plan.operation.capitalize()} {len(plan.changes)} device(s)?", disruptive=True,
        dry_run=CLIENT if change.dry_run else None, yes=change.yes, output=output, plan_view=plan_view,
        result_view=lambda o: results_view(plan.operation, o.results), question_detail=changes,
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


def results_view(operation: Operation | str, results: Sequence[DeviceResult], *,
                  notes: list[str] | None = None) -> View:
    from rblnctl.cli.output import View, rows
    from rblnctl.documents import VFIO_CHANGE, body

    doc = body(VFIO_CHANGE, operation=operation, results=results)
    # no rows, no table: a header alone says less than the `nothing to do` line beside it (as vfio status)
    tables = [rows(doc["devices"], *_RESULT_COLUMNS)] if doc["devices"] else []
    return View(kind="VfioChange", body=doc, tables=tables, notes=notes or [],
                names=[f"pci/{r['bdf']}" for r in doc["devices"]])

