"""Findings as `rblnctl preflight` says them: each Remedy spelt by the CLI (program `rblnctl`, no flags given), as
the report's document carries it (`remedy`, `remedyCommand`), so a library test reads what a user reads."""

from __future__ import annotations

import dataclasses
from typing import Any

from rblnctl.preflight.model import CheckResult


def voice() -> Any:
    """The CLI's voice for a plain `rblnctl` run: a context of the root command, nothing given."""
    from rblnctl.cli.app import app
    from rblnctl.cli.rerun import Voice
    from tests.helpers import _get_command_once

    root = _get_command_once(app)
    return Voice(root.make_context("rblnctl", ["version"], resilient_parsing=True))


def spelt_check(c: CheckResult) -> CheckResult:
    """One finding, its remedy and command as strings (CheckResult.from_dict of its document)."""
    from rblnctl.documents import CHECK_RESULT

    doc = CHECK_RESULT(c, voice())
    return dataclasses.replace(c, remedy=doc["remedy"], remedy_command=doc["remedyCommand"])


def spelt(report: Any) -> Any:
    """A whole report so spelt."""
    return dataclasses.replace(report, checks=[spelt_check(c) for c in report.checks])
