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
SIMULATORS = ("fakes/objects.py", "fakes/operator.py", "fakes/releases.py", "fakes/partition.py", "fakes/sysfs.py",
              "fakes/apiserver/",
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


def _feature_table() -> list[list[str]]:
    """docs/testing.md's "Feature -> tests" rows, each cell as written."""
    text = (TESTS.parent / "docs" / "testing.md").read_text()
    section = text.split("## Feature -> tests\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in section.splitlines()
            if line.startswith("| ")]
    assert rows[0] == ["feature", "library", "CLI", "envtest", "kubevirt", "kernel"]
    return rows[1:]


def test_the_feature_table_names_files_that_exist_and_every_test_file():
    import re

    listed: set[str] = set()
    for row in _feature_table():
        assert len(row) == 6, row
        paths = [p for cell in row[1:] for p in re.findall(r"`([^`]+)`", cell)]
        assert paths, f"{row[0]}: no test named"
        for path in paths:
            assert (TESTS / path).exists(), f"docs/testing.md names tests/{path}, which does not exist"
            listed.add(path)
    files = sorted(p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py") if ".venv" not in p.parts)
    unlisted = [f for f in files if f not in listed and not any(d.endswith("/") and f.startswith(d) for d in listed)]
    assert unlisted == [], "add these to docs/testing.md's Feature -> tests table"


def test_every_real_tier_test_is_scheduled_with_the_real_tiers(request):
    """Under xdist the scheduler sees node ids only (tests/conftest.py real_tier): a test that reaches a real control
    plane or KubeVirt stack but does not look like one would run beside the others, two stacks on one machine
    (virt-operator's webhook port is fixed)."""
    from tests.conftest import real_tier

    items = request.session.items
    marked = [i.nodeid for i in items if any(i.get_closest_marker(m) for m in ("envtest", "kubevirt", "kernel"))]
    assert [n for n in marked if not real_tier(n)] == []
    assert real_tier("tests/cli/test_capacity.py::t[real]") and real_tier("tests/x.py::t[real-kubevirt-Always]")
    assert not real_tier("tests/cli/test_capacity.py::t[fake]") and not real_tier("tests/x.py::t[fake-Always]")
    assert real_tier("tests/kernel/test_x.py::t[fake]") and real_tier("tests/host/x.py::t[kernel-bind]")
