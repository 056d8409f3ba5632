"""Global options may follow the subcommand (kubectl style); --dry-run=MODE is spelled kubectl's way."""

from __future__ import annotations

import pytest
import typer

from rblnctl.cli.errors import hoist_global_options


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["kubevirt", "status", "--context", "prod"], ["--context", "prod", "kubevirt", "status"]),
        (["kubevirt", "status", "--context=prod"], ["--context=prod", "kubevirt", "status"]),
        (["--context", "a", "node", "list", "-v"], ["--context", "a", "-v", "node", "list"]),
        (["node", "list", "-vv", "--no-color"], ["-vv", "--no-color", "node", "list"]),
        (["x", "--kubeconfig", "/k", "-o", "json"], ["--kubeconfig", "/k", "x", "-o", "json"]),
        (["kubevirt", "enable-gates", "--dry-run=server"], ["kubevirt", "enable-gates", "--server-dry-run"]),
        (["kubevirt", "enable-gates", "--dry-run=client"], ["kubevirt", "enable-gates", "--dry-run"]),
        (["kubevirt", "enable-gates", "--dry-run=none"], ["kubevirt", "enable-gates"]),
        (["vfio", "bind", "--", "--context"], ["vfio", "bind", "--", "--context"]),
    ],
)
def test_hoist(argv, expected):
    assert hoist_global_options(argv) == expected


def test_bad_dry_run_mode_is_a_usage_error():
    with pytest.raises(typer.BadParameter):
        hoist_global_options(["kubevirt", "enable-gates", "--dry-run=maybe"])
