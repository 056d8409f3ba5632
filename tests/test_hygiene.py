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


# -- the docs name what exists (issue 42) ------------------------------------------------------------------------
# docs/architecture.md is a newcomer's map and docs/add-a-command.md the list of files a new command touches: a path or
# module they name that does not exist sends the reader nowhere. Paths are named in backticks from the repository's
# root (`rblnctl/kube/writes.py`, `tests/envtest/`), or under rblnctl/ or tests/ (`kube/writes.py`); modules and
# their names dotted (`rblnctl.kube.watch_until`).

REPO = TESTS.parent
MAP_PAGES = ("docs/architecture.md", "docs/add-a-command.md")


def _backticked(text: str) -> set[str]:
    import re

    return {t.split("::", 1)[0] for t in re.findall(r"`([^`\s]+)`", text)}


def _path_exists(token: str) -> bool | None:
    """True/False for a token that is a path (from the root, or under rblnctl/ or tests/); None for anything else."""
    import re

    if re.fullmatch(r"(rblnctl|tests|docs|completions|benchmarks|packaging)/[\w./-]*", token):
        return (REPO / token).exists()
    if re.fullmatch(r"\w+(/\w+)*/(\w+\.(py|json|md))?", token):
        return any((REPO / base / token).exists() for base in ("rblnctl", "tests", ""))
    return None


def _dotted_exists(name: str) -> bool:
    """`rblnctl.a.b.c`: the longest importable module, then attributes."""
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_map_pages_name_paths_and_modules_that_exist():
    import re

    missing = []
    for page in MAP_PAGES:
        for token in sorted(_backticked((REPO / page).read_text())):
            found = _path_exists(token)
            if found is None and re.fullmatch(r"rblnctl(\.\w+)+", token):
                found = _dotted_exists(token)
            if found is False:
                missing.append(f"{page}: {token}")
    assert missing == []


def _tree(text: str) -> list[str]:
    """The paths docs/architecture.md's module tree (the ```text block that starts `rblnctl/`) names: a package at
    2 spaces (`kube/`), its modules at 4 (`client.py`, several to a line), a sub-package's modules on its line
    (`vfio/   model.py checks.py`). Deeper lines are descriptions."""
    import re

    block = text.split("```text\nrblnctl/\n", 1)[1].split("```", 1)[0]
    named, package = [], ""
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent not in (2, 4):
            continue
        names = []
        for word in line.split():
            if not re.fullmatch(r"\w+(\.py|/)", word):
                break
            names.append(word)
        if indent == 2:
            package = names[0] if names and names[0].endswith("/") else ""
            names = names[1:] if package else names
            if package:
                named.append(package)
        base = package if indent == 4 or package else ""
        sub = ""
        for n in names:
            named.append(base + sub + n)
            if n.endswith("/") and not sub:
                sub = n  # `vfio/  model.py checks.py ...`: the modules of that sub-package
    return ["rblnctl/" + n for n in named]


def test_the_architecture_tree_names_every_module_and_only_modules_that_exist():
    """A module is named in the tree, or lives in a sub-package the tree names (`rblnctl/vm/diagnose/`): a new module
    gets its line there (what it owns, in a few words)."""
    named = _tree((REPO / "docs" / "architecture.md").read_text())
    assert [p for p in named if not (REPO / p).exists()] == []
    unnamed = []
    for path in sorted(p.relative_to(REPO).as_posix() for p in (REPO / "rblnctl").rglob("*.py")):
        parts = path.split("/")
        if path in named or parts[-1] == "__init__.py" and "/".join(parts[:-1]) + "/" in named:
            continue
        if any("/".join(parts[:i]) + "/" in named for i in range(3, len(parts))):
            continue
        unnamed.append(path)
    assert unnamed == [], "name these in docs/architecture.md's module tree"


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_the_docs_resolves():
    """README.md, docs/*.md and completions/README.md: every relative link names a file that exists and, for a page,
    an anchor one of its headings makes (other pages link to architecture.md's sections by anchor)."""
    import re

    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "completions" / "README.md"]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path) if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in {
                    _slug(m) for m in re.findall(r"^#+ (.*)$", file.read_text(), re.M)}:
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []
