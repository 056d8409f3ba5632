"""`rblnctl node list | history | set-mode | drain`: NPU node inventory, who switched or drained a node, safe mode
switching, NPU-aware drain.

One module per verb, as cli/vm/: listing (list), history, set_mode (set-mode, --rehearse), drain; operation holds
the one path both set-mode and drain run, for one node or a pool (NodeOperation, run_nodes); flags their option
groups (DrainFlags, ModeFlags); common what several share, the group's Typer app among them.
"""

from __future__ import annotations

# `rblnctl.cli.node:app` (cli/app.py mounts it lazily). It lives in common.py, which every verb imports: a verb
# importing it from this package, which imports the verbs, would be an import circle (tests/test_layers.py).
from rblnctl.cli.node.common import app

# Each verb registers its commands on `app` when imported; this order is the order `rblnctl node --help` lists them.
from rblnctl.cli.node import listing, history, set_mode, drain  # noqa: F401  # isort: skip

__all__ = ["app"]
