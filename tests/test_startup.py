"""Startup is a feature: the CLI, --help and host commands must not import the kubernetes package."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from typer.testing import CliRunner
from rblnctl.cli.app import app
args = sys.argv[1:]
if args:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
heavy = sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.") or m == "urllib3")
print(",".join(heavy))
"""


def _imported_after(*args: str) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_the_cli_does_not_import_kubernetes():
    assert _imported_after() == ""


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["kubevirt", "--help"], ["node", "--help"]])
def test_help_does_not_import_kubernetes(args):
    assert _imported_after(*args) == ""


def test_python_dash_m_runs():
    out = subprocess.run([sys.executable, "-m", "rblnctl", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("rblnctl ")
