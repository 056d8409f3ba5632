"""`rblnctl kubevirt enable-gates | disable-gates | permit-devices | status | migrate-resources`: the KubeVirt CR
for RBLN NPUs (and the resource names every VM uses).

One module per verb, as rblnctl.cli.vm: gates (enable-gates, disable-gates: the shared gate flow), permit_devices,
status, migrate_resources; common holds what several share, the group's Typer app among them.
"""

from __future__ import annotations

# `rblnctl.cli.kubevirt:app` (cli/app.py mounts it lazily). It lives in common.py, which every verb imports: a verb
# importing it from this package, which imports the verbs, would be an import circle (tests/test_layers.py).
from rblnctl.cli.kubevirt.common import app

# Each verb registers its commands on `app` when imported; this order is the order `rblnctl kubevirt --help` lists them.
from rblnctl.cli.kubevirt import gates, permit_devices, status, migrate_resources  # noqa: F401  # isort: skip

__all__ = ["app"]
