"""The import rules of docs/architecture.md, checked on the source: layers import only downwards, no import circles."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path


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


def _cycles(graph: Mapping[str, Iterable[str]] = GRAPH) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_no_import_circles():
    """Lazy and TYPE_CHECKING imports count: a circle is a circle when the code is read, whenever it runs."""
    assert _cycles() == []


def test_the_method_change_sits_above_the_model():
    """MethodChanger uses the operator model, KubeVirt, nodes and VMs: it lives in rblnctl.method, not operator/."""
    assert "rblnctl.operator.method" not in MODULES
    assert {"rblnctl.operator", "rblnctl.kubevirt", "rblnctl.vm"} <= {
        t.rsplit(".", 1)[0] if t.count(".") > 1 else t for m, ts in GRAPH.items() if _under(m, "rblnctl.method")
        for t in ts}


# -- the package graph (docs/architecture.md "Layers") ---------------------------------------------------------------

# The vocabulary every layer shares: leaf modules that import only each other.
_VOCABULARY = frozenset({"rblnctl", "constants", "errors", "clock", "remedy", "suggest", "durations", "plan", "batch",
                         "versions"})

# What each unit of rblnctl may import: a package (rblnctl/kube/ is `kube`), a top-level module (rblnctl/status.py is
# `status`; rblnctl/__init__.py is `rblnctl`). Every unit is listed, so a new one has to be placed in the drawing, and
# the table itself must be a DAG (test_the_allowed_graph_has_no_circle): a new edge that breaks a rule fails here.
ALLOWED: dict[str, frozenset[str]] = {
    # the vocabulary, bottom up
    "rblnctl": frozenset(), "constants": frozenset(), "clock": frozenset(), "remedy": frozenset(),
    "suggest": frozenset(),
    "errors": frozenset({"remedy"}),  # RblnError.details holds Remedies (a TYPE_CHECKING import)
    "durations": frozenset({"errors"}),
    "versions": frozenset({"constants"}),
    "plan": frozenset({"remedy"}),
    "batch": frozenset({"errors", "remedy"}),
    # facts with no API access of their own
    "rbac": _VOCABULARY,
    "nfd": _VOCABULARY,
    # the two roots: the API server, the host under a root directory
    "kube": _VOCABULARY,
    "host": _VOCABULARY,
    # over kube
    "audit": _VOCABULARY | {"kube"},
    "operator": _VOCABULARY | {"kube"},
    "version": _VOCABULARY | {"kube", "operator"},
    "hostpods": _VOCABULARY | {"kube", "host"},
    "kubevirt": _VOCABULARY | {"kube", "operator"},
    # VMs run on what the KubeVirt CR configures; a node's mode switch asks which VMs hold its NPUs
    "vm": _VOCABULARY | {"kube", "operator", "kubevirt"},
    "node": _VOCABULARY | {"kube", "operator", "vm", "audit", "nfd"},
    "status": _VOCABULARY | {"kube", "operator", "kubevirt", "vm", "node"},
    # a finding's remedy names the switch set-mode accepts for the node (node.record: its unfinished switch)
    "preflight": _VOCABULARY | {"kube", "operator", "kubevirt", "host", "hostpods", "nfd", "rbac", "node"},
    # the use case over them all
    "method": _VOCABULARY | {"kube", "operator", "kubevirt", "vm", "node", "audit"},
    # every result's document (rblnctl/documents.py): above every result it describes, below the CLI
    "documents": _VOCABULARY | {"host", "preflight", "node"},
    # the command layer: any of the library; __main__ runs it
    "cli": _VOCABULARY | {"rbac", "nfd", "kube", "host", "audit", "operator", "version", "hostpods", "kubevirt", "vm",
                          "node", "status", "preflight", "method", "documents"},
    "__main__": frozenset({"cli"}),
}


def _unit(module: str) -> str:
    """rblnctl.vm.attach -> vm; rblnctl.status -> status; rblnctl -> rblnctl."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _unit_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """unit -> unit it imports -> the module imports that make the edge."""
    out: dict[str, dict[str, list[str]]] = {}
    for m, targets in graph.items():
        for t in targets:
            a, b = _unit(m), _unit(t)
            if a != b:
                out.setdefault(a, {}).setdefault(b, []).append(f"{m} -> {t}")
    return out


def test_every_unit_is_placed_in_the_drawing():
    """A new package or top-level module must get its row in ALLOWED (and its place in docs/architecture.md)."""
    assert sorted({_unit(m) for m in MODULES} ^ set(ALLOWED)) == []


def test_the_allowed_graph_has_no_circle():
    assert _cycles(ALLOWED) == []


def test_no_package_circles():
    """Lazy and TYPE_CHECKING imports count, as for modules: node <-> vm and kubevirt <-> vm were such circles."""
    assert _cycles(_unit_graph(GRAPH)) == []


def test_every_package_imports_only_what_the_drawing_allows():
    bad = sorted(why for a, bs in _unit_graph(GRAPH).items() for b, whys in bs.items()
                 if b not in ALLOWED.get(a, frozenset()) for why in whys)
    assert bad == []


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


# The typed seam (issue 42): a command reaches the State through rblnctl.cli.state.state(ctx), which mypy checks, not
# through click's untyped `ctx.obj`. app.py stores it, state.py reads it, the error edge asks whether there is one yet
# (an error before the root callback ran); the modules still to convert may keep at most the reads they have.
_OBJ_READS_ALLOWED = {"rblnctl/cli/app.py": 1, "rblnctl/cli/state.py": 1, "rblnctl/cli/errors.py": 1,
                      "rblnctl/cli/kubevirt.py": 6, "rblnctl/cli/vfio.py": 2}


def test_the_cli_reaches_its_state_through_state_ctx():
    found = {}
    for path in sorted(MODULES.values()):
        rel = str(path.relative_to(ROOT.parent))
        if not rel.startswith("rblnctl/cli/"):
            continue
        n = sum(1 for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Attribute) and node.attr == "obj")
        if n > _OBJ_READS_ALLOWED.get(rel, 0):
            found[rel] = n
    assert found == {}


def numbers(graph: dict[str, set[str]] = GRAPH) -> dict[str, int]:
    """The counts docs/architecture.md "Layers" states: modules, packages, rooms (units), arrows between modules and
    between rooms, and floors (the longest chain of rooms, each one more than the highest it imports)."""
    rooms = _unit_graph(graph)
    floors: dict[str, int] = {}

    def floor(u: str) -> int:
        if u not in floors:
            floors[u] = 1 + max((floor(b) for b in rooms.get(u, {})), default=0)
        return floors[u]

    return {"modules": len(MODULES), "library modules": sum(1 for m in MODULES if not _under(m, "rblnctl.cli")),
            "packages": sum(1 for p in MODULES.values() if p.name == "__init__.py"),
            "rooms": len({_unit(m) for m in MODULES}), "module arrows": sum(map(len, graph.values())),
            "room arrows": sum(map(len, rooms.values())), "floors": max(floor(_unit(m)) for m in MODULES)}


if __name__ == "__main__":  # python -m tests.test_layers: the numbers docs/architecture.md states
    for what, count in numbers().items():
        print(f"{what}: {count:,}")
