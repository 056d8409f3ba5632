"""`rblnctl vm attach | detach | manifest | list | diagnose | fit | start | stop | restart`: give KubeVirt VMs their
NPUs, say why one has none and where more would fit, and run them.

One module per verb, as virtctl (kubevirt/kubevirt pkg/virtctl/vm at v1.9.0: start.go, stop.go,
restart.go, ..., common.go): change (attach, detach: the shared change flow), manifest, listing (list), diagnose,
fit, lifecycle (start, stop, restart); common holds what several share. This package holds the typer app they
register on; importing it registers every verb, in the order `rblnctl vm --help` lists them.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Give KubeVirt VMs their NPUs (sandbox or DRA), list them, say why a VM has none and where more fit, "
         "and start, stop or restart them.",
    no_args_is_help=True,
)

# Each module registers its commands on `app` when imported (after `app` exists: they import it from here).
from rblnctl.cli.vm import change, manifest, listing, diagnose, fit, lifecycle  # noqa: E402,F401
