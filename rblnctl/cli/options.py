"""Shared option aliases, so every command spells kubectl-style flags the same way."""

from __future__ import annotations

from typing import Annotated

import typer

from rblnctl.cli.output import Output

OutputOpt = Annotated[
    Output, typer.Option("--output", "-o", help="Output format: table, json or yaml (json/yaml: stdout only).",
                         case_sensitive=False)
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print the plan and make no change (also --dry-run=client).")
]
ServerDryRunOpt = Annotated[
    bool,
    typer.Option("--server-dry-run", help="Send writes with dryRun=All so admission still validates; nothing persists "
                 "(also --dry-run=server)."),
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (for automation).")]
NamespaceOpt = Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace of the object.")]
SelectorOpt = Annotated[
    str | None, typer.Option("--selector", "-l", help="Label selector, e.g. 'rebellions.ai/npu.present=true'.")
]


def dry_run_mode(dry_run: bool, server_dry_run: bool) -> str | None:
    """None (a real run), "client" (plan only, no request) or "server" (writes sent with dryRun=All)."""
    from rblnctl.errors import ConfigError

    if dry_run and server_dry_run:
        raise ConfigError("--dry-run and --server-dry-run cannot be combined; pick one")
    return "client" if dry_run else "server" if server_dry_run else None
