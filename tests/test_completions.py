"""completions/* must equal what the installed CLI prints for each shell (regenerate: see completions/README.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = {"bash": "rblnctl.bash", "zsh": "_rblnctl", "fish": "rblnctl.fish"}


@pytest.mark.parametrize("shell", sorted(FILES))
def test_completion_script_is_current(shell):
    env = dict(os.environ, _RBLNCTL_COMPLETE=f"source_{shell}")
    code = "import sys; sys.argv[0] = 'rblnctl'; from rblnctl.cli.app import main; main()"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (ROOT / "completions" / FILES[shell]).read_text(), (
        f"completions/{FILES[shell]} is stale: regenerate with completions/generate.sh"
    )
