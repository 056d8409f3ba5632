"""`rblnctl vfio recover`: re-probe NPUs left without a driver or with a stale driver_override."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from rblnctl import constants as C  # plain data: the defaults the help texts show
from rblnctl.cli.options import HostMutating, OutputOpt, VfioHost, examples, grouped
from rblnctl.cli.vfio.common import AllOpt, BdfArgs, app, binder, execute, selection


class ModeChoice(str, enum.Enum):
    """--mode values of recover."""

    container = "container"
    vm = "vm"


@app.command("recover", short_help="Re-probe NPUs left without a driver.", epilog=examples(
    "sudo rblnctl vfio recover --all --dry-run",
    "sudo rblnctl vfio recover 0000:3b:00.0 --mode vm",
))
@grouped
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
    change: HostMutating = HostMutating.options(),
    output: OutputOpt = "table",
    host: VfioHost = VfioHost.options(),
) -> None:
    """Re-probe NPUs left without a driver or with a stale driver_override."""
    selection(bdfs, all_devices)
    b = binder(host)
    execute(ctx, b, b.plan("recover", bdfs or (), all_devices=all_devices, mode=mode.value), change=change,
            output=output)
