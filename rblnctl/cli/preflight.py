"""`rblnctl preflight`: cluster and host readiness checks (built by the preflight issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Mount the command on the root app."""
