"""`rblnctl vm attach | detach | manifest | list | diagnose | fit | start | stop | restart`: give KubeVirt VMs their
NPUs, say why one has none and where more would fit, and run them.

One module per verb, as virtctl (kubevirt/kubevirt pkg/virtctl/vm at v1.9.0: start.go, stop.go,
restart.go, ..., common.go): change (attach, detach: the shared change flow), manifest, listing (list), diagnose,
fit, lifecycle (start, stop, restart); common holds what several share, the group's Typer app among them.
"""

from __future__ import annotations

# `rblnctl.cli.vm:app` (cli/app.py mounts it lazily). It lives in common.py, which every verb imports: a verb importing
# it from this package, which imports the verbs, would be an import circle (tests/test_layers.py).
from rblnctl.cli.vm.common import app

# Each verb registers its commands on `app` when imported; this order is the order `rblnctl vm --help` lists them.
from rblnctl.cli.vm import change, manifest, listing, diagnose, fit, lifecycle  # noqa: F401  # isort: skip

__all__ = ["app"]
