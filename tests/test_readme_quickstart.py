"""The README (issue 30): it starts with the two commands for a fresh machine, then a cluster quick start of 5-8
commands from a fresh cluster to a VM with NPUs, linking docs/vm.md; every rblnctl command line in it parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.helpers import cli

ROOT = Path(__file__).resolve().parent.parent


def _quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start on a cluster", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block and "docs/vm.md#from-a-fresh-cluster-to-a-vm-with-its-npus" in section
    return [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_starts_with_the_two_commands_for_a_fresh_machine():
    text = (ROOT / "README.md").read_text()
    first = re.search(r"```sh\n(.*?)```", text, re.S).group(1).splitlines()
    assert "rblnctl preflight --local" in first[0] and "python -m pytest" in first[1]
    assert text.index("rblnctl preflight --local") < text.index("## Quick start on a cluster")


def test_the_quick_start_has_5_to_8_commands_each_of_which_parses():
    lines = _quick_start()
    assert 5 <= len(lines) <= 8
    assert "vm diagnose" in lines[-1] and any("vm manifest" in line for line in lines)
    anchor = "## From a fresh cluster to a VM with its NPUs"
    assert anchor in (ROOT / "docs" / "vm.md").read_text()  # the link's target
    for line in lines:
        first = line.split("|", 1)[0]
        words = shlex.split(first)
        if words[0] != "rblnctl":
            continue
        # the command and its flags parse: --help after them is what click checks before anything runs
        r = cli(*words[1:], "--help")
        assert r.exit_code == 0, (line, r.stderr)
