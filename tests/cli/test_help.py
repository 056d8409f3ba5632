"""Every command's --help: a summary that fits, Examples, where the global options are, and plain metavars."""

from __future__ import annotations

import re

import pytest
import typer.main

from rblnctl.cli.app import app
from tests.helpers import cli


def _leaves(group=None, path=()):
    group = group or typer.main.get_command(app)
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        if getattr(cmd, "commands", None):
            yield from _leaves(cmd, (*path, name))
        else:
            yield (*path, name)


COMMANDS = list(_leaves())


def test_the_tree_has_the_commands_the_docs_name():
    assert {("preflight",), ("status",), ("completion",), ("node", "set-mode"), ("kubevirt", "enable-gates"),
            ("vfio", "bind")} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_has_examples_and_names_the_global_options(path):
    r = cli(*path, "--help")
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    assert re.search(r"Examples:\n(    # .*\n)*    (sudo )?(rblnctl|source) ", text), text  # a comment may go above
    assert "Global options" in " ".join(text.split())
    assert not re.search(r"\b(TEXT|INTEGER|FLOAT)\b|<str>|\[GATE\]|\{NODE\}", text), text


@pytest.mark.parametrize("group", [(), ("node",), ("kubevirt",), ("vfio",), ("vm",), ("policy",)],
                         ids=lambda g: " ".join(g) or "root")
def test_command_lists_show_whole_summaries(group):
    r = cli(*group, "--help")
    listing = r.stdout.split("Commands:", 1)[1]
    assert "..." not in listing, listing
