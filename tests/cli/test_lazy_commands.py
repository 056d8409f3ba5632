"""Subcommands are registered lazily (rblnctl.cli.lazy): --help and --version import no command module, and the
root's table of short helps says what the commands themselves say."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer.main

from rblnctl.cli.app import app
from rblnctl.cli.lazy import LazyCommands, LazyRootGroup

COMMAND_MODULES = ("rblnctl.cli.preflight", "rblnctl.cli.status", "rblnctl.cli.rbac", "rblnctl.cli.version",
                   "rblnctl.cli.node", "rblnctl.cli.kubevirt", "rblnctl.cli.vm", "rblnctl.cli.policy",
                   "rblnctl.cli.vfio", "rblnctl.cli.output")

PROBE = """
import sys
from typer.testing import CliRunner
from rblnctl.cli.app import app
r = CliRunner().invoke(app, sys.argv[1:])
assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
print(",".join(sorted(m for m in sys.modules if m.startswith("rblnctl.cli."))))
"""


def _cli_modules_after(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.strip().split(","))


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_root_help_and_version_import_no_command_module(args):
    assert _cli_modules_after(*args).isdisjoint(COMMAND_MODULES)


def test_a_group_help_imports_that_group_only():
    loaded = _cli_modules_after("node", "--help")
    assert "rblnctl.cli.node" in loaded
    assert loaded.isdisjoint({"rblnctl.cli.vm", "rblnctl.cli.kubevirt", "rblnctl.cli.vfio", "rblnctl.cli.policy"})


def test_the_table_says_what_each_command_says():
    root = typer.main.get_command(app)
    assert isinstance(root, LazyRootGroup) and isinstance(root.commands, LazyCommands)
    table = root.commands.table
    assert list(root.commands) == list(table)
    for name, entry in table.items():
        cmd = root.commands[name]
        assert cmd.name == name
        assert cmd.get_short_help_str(200) == entry.short_help
        assert bool(cmd.hidden) == entry.hidden


def test_commands_section_is_the_same_loaded_or_not():
    from typer.core import TyperGroup

    root = typer.main.get_command(app)
    ctx = root.make_context("rblnctl", [], resilient_parsing=True)
    lazy = ctx.make_formatter()
    root.format_commands(ctx, lazy)
    assert not any(root.commands.is_loaded(n) for n in root.commands.table)
    for name in list(root.commands):
        root.commands[name]  # load every command
    loaded = ctx.make_formatter()
    TyperGroup.format_commands(root, ctx, loaded)  # typer's own, from the commands themselves
    assert "preflight" in lazy.getvalue() and lazy.getvalue() == loaded.getvalue()
