"""The import rules of docs/architecture.md, checked on the source: layers import only downwards, no import circles."""

from __future__ import annotations

import ast
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
