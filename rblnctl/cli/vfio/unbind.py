"""`rblnctl vfio unbind`: NPUs back to their recorded host driver (or --driver, or the kernel's default)."""

from __future__ import annotations

from typing import Annotated

import typer

from rblnctl.cli.options import HostMutating, OutputOpt, VfioHost, examples, grouped
from rblnctl.cli.vfio.common import BdfArgs, ForceOpt, KeepGoingOpt, app, binder, execute, selection


@app.command("unbind", short_help="Give NPUs back to their host driver.", epilog=examples(
    "sudo rblnctl vfio unbind --all",
    "sudo rblnctl vfio unbind 0000:3b:00.0 --driver rebellions",
))
@grouped
def unbind(
    ctx: typer.Context,
    bdfs: BdfArgs = None,
    all_devices: Annotated[bool, typer.Option("--all", help="Every RBLN NPU on vfio-pci or with driver_override "
                                              "vfio-pci, and every one the state file records (left without a "
                                              "driver: it gets its recorded driver back; already on a host driver: "
                                              "its record is dropped).")] = False,
    driver: Annotated[
        str | None,
        typer.Option("--driver", metavar="NAME", help="Host driver to bind instead of the recorded one "
                     "(without a record: the kernel's default).", show_default=False),
    ] = None,
    change: HostMutating = HostMutating.options(),
    force: ForceOpt = False,
    keep_going: KeepGoingOpt = False,
    output: OutputOpt = "table",
    host: VfioHost = VfioHost.options(),
) -> None:
    """Give NPUs back to their host driver."""
    selection(bdfs, all_devices)
    b = binder(host, force=force, keep_going=keep_going)
    execute(ctx, b, b.plan("unbind", bdfs or (), all_devices=all_devices, driver=driver), change=change, output=output)
