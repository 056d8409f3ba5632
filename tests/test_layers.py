"""The import rules of docs/architecture.md, checked on the source: layers import only downwards, no import circles."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import rblnctl

ROOT = Path(rblnctl.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module (or package) an imported name lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path) -> set[str]:
    """Every rblnctl module a file imports: at the top, inside functions and under TYPE_CHECKING alike."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rblnctl"):
            for alias in node.names:
                target = _resolve(f"{node.module}.{alias.name}")
                if target:
                    found.add(target)
        elif isinstance(node, ast.Import):
            found |= {t for a in node.names if a.name.startswith("rblnctl") and (t := _resolve(a.name))}
    return found


GRAPH = {m: _imports(p) - {m} for m, p in MODULES.items()}


def _cycles() -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def _under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_no_import_circles():
    """Lazy and TYPE_CHECKING imports count: a circle is a circle when the code is read, whenever it runs."""
    assert _cycles() == []


@pytest.mark.parametrize(("package", "forbidden"), [
    ("rblnctl.kube", ("rblnctl.operator", "rblnctl.node", "rblnctl.vm", "rblnctl.kubevirt", "rblnctl.method",
                      "rblnctl.preflight", "rblnctl.hostpods", "rblnctl.host", "rblnctl.cli")),
    ("rblnctl.operator", ("rblnctl.node", "rblnctl.vm", "rblnctl.kubevirt", "rblnctl.method", "rblnctl.preflight",
                          "rblnctl.hostpods", "rblnctl.cli", "rblnctl.status")),
    ("rblnctl.kubevirt", ("rblnctl.method", "rblnctl.cli")),
    ("rblnctl.node", ("rblnctl.method", "rblnctl.cli")),
    ("rblnctl.vm", ("rblnctl.method", "rblnctl.cli")),
    ("rblnctl.method", ("rblnctl.cli",)),
    ("rblnctl.preflight", ("rblnctl.method", "rblnctl.cli")),
])
def test_layers_import_only_downwards(package, forbidden):
    bad = sorted(f"{m} -> {t}" for m, targets in GRAPH.items() if _under(m, package)
                 for t in targets if _under(t, *forbidden))
    assert bad == []


def test_the_method_change_sits_above_the_model():
    """MethodChanger uses the operator model, KubeVirt, nodes and VMs: it lives in rblnctl.method, not operator/."""
    assert "rblnctl.operator.method" not in MODULES
    assert {"rblnctl.operator", "rblnctl.kubevirt", "rblnctl.vm"} <= {
        t.rsplit(".", 1)[0] if t.count(".") > 1 else t for m, ts in GRAPH.items() if _under(m, "rblnctl.method")
        for t in ts}


WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def _write_calls(path: Path) -> list[str]:
    """Calls that send a write without rblnctl.kube.writes: x.patch/create/delete(...) on anything but the
    `writes` module, and x.request("POST" | "PUT" | "PATCH" | "DELETE", ...)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        if name in ("patch", "create", "delete") and not (isinstance(owner, ast.Name) and owner.id == "writes"):
            out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} .{name}(")
        elif name == "request" and node.args and isinstance(node.args[0], ast.Constant) and \
                str(node.args[0].value).upper() in WRITE_METHODS:
            out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} .request({node.args[0].value!r}")
    return out


def test_every_write_goes_through_the_one_helper():
    """docs/architecture.md "Writes whose outcome is unknown": rblnctl.kube.writes sends every write and settles
    every unknown outcome by reading back; only it (and the client it drives) may call the write methods."""
    allowed = {ROOT / "kube" / "client.py", ROOT / "kube" / "writes.py"}
    found = [c for p in sorted(MODULES.values()) if p not in allowed for c in _write_calls(p)]
    assert found == []


# -- "what next" names no program (issue 29) ------------------------------------------------------------------------

# A command of this program, spelt in a library string: the library says it as data (rblnctl.remedy.Command) and the
# CLI spells it from the program name invoked and the flags given (rblnctl.cli.rerun.render).
_OWN_COMMAND = re.compile(r"\brblnctl (?:vm|node|kubevirt|policy|preflight|vfio|rbac|status|version|completion)\b")
# Files that still spell one, and how many: the count may only go down (update it when you convert one).
_STILL_SPELT = {
    # names the tool, not a command to type: the JUnit report's title, and another process holding the lock
    "rblnctl/preflight/junit.py": 1,
    "rblnctl/host/vfio/state.py": 1,
    # preflight findings are documents (remedy, remedyCommand strings) that host pods' rblnctl writes and this one
    # reads back (CheckResult.from_dict, host_checks' `vfio recover` parser): they move to Remedy with the document
    "rblnctl/preflight/checks/access.py": 2,
    "rblnctl/preflight/checks/kubevirt.py": 2,
    "rblnctl/preflight/checks/nodes.py": 10,
    "rblnctl/preflight/checks/permitted_devices.py": 3,
    "rblnctl/preflight/host_checks.py": 4,
    # not converted yet: exception messages and strings shared with preflight (OperatorRelease.remedy)
    "rblnctl/kubevirt/devices.py": 5,
    "rblnctl/method/plan.py": 2,
    "rblnctl/operator/release.py": 1,
    "rblnctl/vm/diagnose.py": 1,
    "rblnctl/vm/fit.py": 2,
    "rblnctl/vm/listing.py": 1,
    "rblnctl/host/system.py": 1,
}


def _spelt_commands(path: Path) -> int:
    """How many of this program's commands a file's string constants spell (docstrings and comments aside)."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return sum(len(_OWN_COMMAND.findall(n.value)) for n in ast.walk(tree)
               if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs)


def test_the_library_names_no_program_in_what_it_says_to_do_next():
    """docs/architecture.md "What to do next": a library message never spells `rblnctl ...` (a hint that did said
    `rblnctl` to kubectl rbln users and dropped --context); it carries a Remedy whose command the CLI spells."""
    found = {}
    for path in sorted(MODULES.values()):
        rel = str(path.relative_to(ROOT.parent))
        if rel.startswith("rblnctl/cli/"):
            continue
        n = _spelt_commands(path)
        if n or rel in _STILL_SPELT:
            found[rel] = n
    assert found == _STILL_SPELT


def test_no_library_remedy_spells_a_flag():
    """A Command names this program's options by parameter name (`dra=True`), never as a flag (`--dra`): the CLI
    spells them, so they cannot drift from the command line."""
    flags = []
    for path in sorted(MODULES.values()):
        rel = str(path.relative_to(ROOT.parent))
        if rel.startswith("rblnctl/cli/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "own":
                flags += [f"{rel}:{node.lineno}" for a in node.args
                          if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
    assert flags == []
