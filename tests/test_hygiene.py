"""The suite's own hygiene (issue 29): one `kube` fixture, rblnctl's names imported rather than spelt again, and
docs/testing.md's feature -> tests table true of the files."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if ".venv" not in p.parts)


def test_one_kube_fixture():
    """`kube` is tests/fakes/fixtures.py's (re-exported by tests/conftest.py); a module that wants it otherwise marks
    itself (`kube_on_fake_clock`) instead of defining another."""
    defined = [f"{p.relative_to(TESTS)}:{node.lineno}" for p in _modules()
               for node in ast.walk(ast.parse(p.read_text()))
               if isinstance(node, ast.FunctionDef) and node.name == "kube"]
    assert defined == ["fakes/fixtures.py:" + str(next(
        n.lineno for n in ast.parse((TESTS / "fakes" / "fixtures.py").read_text()).body
        if isinstance(n, ast.FunctionDef) and n.name == "kube"))]
