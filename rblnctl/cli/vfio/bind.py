"""`rblnctl vfio bind`: NPUs to vfio-pci, every device checked first, rolled back on a failure."""

from __future__ import annotations

from typing import Annotated

import typer

from rblnctl.cli.options import HostMutating, OutputOpt, VfioHost, examples, grouped
from rblnctl.cli.vfio.common import AllOpt, BdfArgs, ForceOpt, KeepGoingOpt, app, binder, execute, selection


@app.command("bind", short_help="Bind NPUs to vfio-pci (checked, rolled back).", epilog=examples(
    "sudo rblnctl vfio bind --all --dry-run        # every sysfs write, none made",
    "sudo rblnctl vfio bind 0000:3b:00.0 -y",
    "sudo rblnctl vfio bind --all --load-modules",
))
@grouped
def bind(
    ctx: typer.Context,
    bdfs: BdfArgs = None,
    all_devices: AllOpt = False,
    change: HostMutating = HostMutating.options(),
    force: ForceOpt = False,
    keep_going: KeepGoingOpt = False,
    load_modules: Annotated[
        bool, typer.Option("--load-modules", help="Run `modprobe vfio-pci` when vfio-pci is not loaded.")
    ] = False,
    output: OutputOpt = "table",
    host: VfioHost = VfioHost.options(),
) -> None:
    """Bind NPUs to vfio-pci (checked, rolled back)."""
    selection(bdfs, all_devices)
    b = binder(host, force=force, keep_going=keep_going, load_modules=load_modules)
    execute(ctx, b, b.plan("bind", bdfs or (), all_devices=all_devices), change=change, output=output)
