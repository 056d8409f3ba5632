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


# The world the tests simulate spells its facts itself (tests/fakes/objects.py says why: a wrong constant in the code
# under test must not make its own tests pass); every other test module imports rblnctl's names.
SIMULATORS = ("fakes/objects.py", "fakes/operator.py", "fakes/releases.py", "fakes/sysfs.py", "fakes/apiserver/",
              "cluster/", "envtest/operator_stack.py", "envtest/crds/")


def test_test_modules_import_rblnctls_names_rather_than_spell_them_again():
    import rblnctl.constants as C

    values = {v: k for k, v in vars(C).items() if k.isupper() and isinstance(v, str)}
    spelt = []
    for p in _modules():
        rel = p.relative_to(TESTS).as_posix()
        if rel.startswith(SIMULATORS):
            continue
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in values:
                spelt.append(f"{rel}:{node.lineno} spells rblnctl.constants.{values[node.value.value]}")
            if isinstance(node, ast.Assign) and ast.unparse(node.value) == f"{{'{C.GENERIC_CONTAINER_RESOURCE}': '1'}}":
                spelt.append(f"{rel}:{node.lineno} spells tests.fakes.objects.ONE_NPU")
    assert spelt == []
