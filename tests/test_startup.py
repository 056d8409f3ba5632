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


# The real entry point in a fresh process: what a user (or a TAB press) pays for host commands.
ENTRY_PROBE = """
import sys
sys.argv = ["rblnctl", *sys.argv[1:]]
from rblnctl.cli.app import main
try:
    main()
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else 1
else:
    code = 0
heavy = sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.") or m == "urllib3")
sys.stderr.write("\\nIMPORTED:" + ",".join(heavy) + f"\\nEXIT:{code}\\n")
"""


@pytest.mark.parametrize(
    "args",
    [
        ["vfio", "status"],
        ["vfio", "status", "-o", "json", "--all-vendors"],
        ["preflight", "--local"],
        ["preflight", "--local", "-o", "yaml"],
        ["vfio", "bind", "--all", "--dry-run"],
        ["vfio", "recover", "--all", "--dry-run"],
        ["vfio", "--help"],
        ["preflight", "--help"],
    ],
)
def test_host_commands_do_not_import_kubernetes_in_a_subprocess(args, tmp_path):
    # An empty host tree: the commands run to their real verdict (no NPUs, IOMMU off) without a cluster.
    root_args = ["--root", str(tmp_path)] if "--help" not in args else []
    (tmp_path / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    out = subprocess.run([sys.executable, "-c", ENTRY_PROBE, *args, *root_args],
                         capture_output=True, text=True, timeout=60)
    tail = out.stderr.rsplit("\nIMPORTED:", 1)
    assert len(tail) == 2, out.stderr
    imported, code = tail[1].split("\nEXIT:")
    assert int(code) in (0, 1), out.stderr  # a verdict, not a usage error, crash or cluster error
    assert imported.strip() == ""
