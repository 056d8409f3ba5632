"""`rblnctl vfio status | bind | unbind | recover`: move NPUs between the host driver and vfio-pci on this host.

One module per verb, as rblnctl.cli.vm; common holds what several share: the group's Typer app, the selection and
host options, the one change flow (execute) with its hints and view. The sysfs-writing verbs take their --dry-run
and --yes as one option group (rblnctl.cli.options.HostMutating). Host commands: importing this package never
imports the kubernetes package (tests/test_startup.py); only `status --node` connects.
"""

from __future__ import annotations

# `rblnctl.cli.vfio:app` (cli/app.py mounts it lazily). It lives in common.py, which every verb imports: a verb
# importing it from this package, which imports the verbs, would be an import circle (tests/test_layers.py).
from rblnctl.cli.vfio.common import app

# Each verb registers its command on `app` when imported; this order is the order `rblnctl vfio --help` lists them.
from rblnctl.cli.vfio import status, bind, unbind, recover  # noqa: F401  # isort: skip

__all__ = ["app"]
