"""kubectl's JSONPath templates (`-o jsonpath=...`) over rblnctl's documents.

The syntax and printing rules are client-go's (kubernetes/client-go · util/jsonpath/parser.go and
jsonpath.go), for the cases people type:

- text outside `{}` is printed as is; `{"\\n"}` and `{'\\t'}` are string literals;
- `{.a.b}`, `{.items[*].name}`, `{.items[0]}`, `{.items[-1]}`, `{.items[0:2]}`, `{..name}` (recursive),
  `{.labels.rebellions\\.ai/npu}` and `{.labels['rebellions.ai/npu']}` for keys with dots,
  `{.items[?(@.mode=="vm-passthrough")].name}` (==, !=, <, <=, >, >=, or existence), `{.a,.b}`;
- `{range .items[*]}...{end}`, nested;
- results of one action are separated by a space; maps and lists print as compact JSON; a missing
  key prints nothing (kubectl get's default, --allow-missing-template-keys=true); map keys in JSON
  are sorted, as Go's encoding/json writes them;
- an index or slice bound outside the list is an error, as client-go's evalArray makes it (slices are
  not clamped): `[99]` of 4 items is `array index out of bounds: index 99, length 4`, `[-5]` is
  `index -1`, `[0:99]` is `index 98`; `[1:0]` is `starting index 1 is greater than ending index 0`; a
  slice asking for no item (`[2:2]`, `[9:9]`) is empty; a step must be > 0; an index of a value that is not
  a list is `string is not array or slice`. An existence filter (`[?(@.a[7])]`) swallows the error, a
  comparison does not (evalFilter). kubernetes/client-go util/jsonpath/jsonpath.go (evalArray,
  evalFilter) and parser.go (parseArray: `[n]` is the slice `[n:n+1]`, its end "Derived"); checked
  against kubectl 1.32 in tests/cli/test_output.py.

Anything else is bad input with the position, never a traceback; an evaluation error names the template.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import TypeAlias

from rblnctl.errors import InvalidInput


@dataclass
class _Text:
    text: str


@dataclass
class _Paths:
    paths: list[list[tuple]]  # a union: each path is a list of steps


@dataclass
class _Range:
    path: list[tuple]
    body: list[_Node] = field(default_factory=list)


_Node: TypeAlias = _Text | _Paths | _Range  # a parsed template: text, a union of paths, a {range}...{end}


def _bad(template: str, why: str) -> InvalidInput:
    return InvalidInput(f"bad jsonpath template {template!r}: {why}")


def parse(template: str) -> list[_Node]:
    """Parse a template into nodes; raises InvalidInput with what is wrong."""
    root: list[_Node] = []
    stack: list[list[_Node]] = [root]
    i = 0
    while i < len(template):
        j = template.find("{", i)
        if j < 0:
            stack[-1].append(_Text(template[i:]))
            break
        if j > i:
            stack[-1].append(_Text(template[i:j]))
        k = _matching(template, template, j, "{}")
        action = template[j + 1:k].strip()
        i = k + 1
        if action.startswith("range ") or action == "range":
            node = _Range(_path(template, action[5:].strip()))
            stack[-1].append(node)
            stack.append(node.body)
        elif action == "end":
            if len(stack) == 1:
                raise _bad(template, "{end} without {range}")
            stack.pop()
        elif action[:1] in ("'", '"') and action[-1:] == action[:1] and len(action) >= 2:
            stack[-1].append(_Text(_unquote(action)))
        elif not action:
            raise _bad(template, "empty {}")
        else:
            stack[-1].append(_Paths([_path(template, p.strip()) for p in _split_union(action)]))
    if len(stack) != 1:
        raise _bad(template, "{range} without {end}")
    return root


def _matching(template: str, text: str, start: int, pair: str) -> int:
    """The index of the bracket closing the one at `start` (`pair` is "{}" or "[]"), skipping quoted text."""
    opening, closing = pair[0], pair[1]
    depth, quote = 0, ""
    for k in range(start, len(text)):
        ch = text[k]
        if quote:
            if ch == quote and text[k - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth == 0:
                return k
    raise _bad(template, f"unclosed {opening}" + ("" if text is template else f" in {text!r}"))


def _unquote(literal: str) -> str:
    body = literal[1:-1]
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape") if "\\" in body else body


def _split_union(action: str) -> list[str]:
    parts, depth, quote, cur = [], 0, "", ""
    for ch in action:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return parts


_NAME = re.compile(r"(?:\\.|[^.\[\\])+")
_INT = re.compile(r"^-?\d+$")
_FILTER = re.compile(r"^\?\(\s*@((?:\.(?:\\.|[^.\s=!<>\[\\])+|\[[^\]]*\])*)\s*(?:(==|!=|<=|>=|<|>)\s*(.+?))?\s*\)$")


def _path(template: str, text: str) -> list[tuple]:
    """Steps: ("key", k), ("all",), ("arrays", [(start, end, step, end_derived)...]), ("keys", [k...]),
    ("recurse", k), ("filter", steps, op, value). A union of subscripts ([0,2], ['a','b']) lists one entry per
    member, evaluated member by member over every input, as client-go's evalUnion does."""
    if text in ("@", "$", ""):
        return []
    if text[0] in "@$":
        text = text[1:]
    steps: list[tuple] = []
    i = 0
    while i < len(text):
        if text.startswith("..", i):
            m = _NAME.match(text, i + 2)
            if not m:
                raise _bad(template, f"a name must follow '..' at {text!r}")
            steps.append(("recurse", _unescape(m.group())))
            i = m.end()
        elif text[i] == ".":
            if text.startswith(".*", i):
                steps.append(("all",))
                i += 2
                continue
            if i + 1 < len(text) and text[i + 1] == "[":
                i += 1
                continue
            m = _NAME.match(text, i + 1)
            if not m:
                raise _bad(template, f"a name must follow '.' in {text!r}")
            steps.append(("key", _unescape(m.group())))
            i = m.end()
        elif text[i] == "[":
            end = _matching(template, text, i, "[]")
            steps.append(_bracket(template, text[i + 1:end].strip()))
            i = end + 1
        else:
            m = _NAME.match(text, i)
            if not m or i != 0:
                raise _bad(template, f"unexpected {text[i]!r} in {text!r}")
            steps.append(("key", _unescape(m.group())))
            i = m.end()
    return steps


def _unescape(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


def _bracket(template: str, inner: str) -> tuple:
    if inner == "*":
        return ("all",)
    if inner.startswith("?"):
        m = _FILTER.match(inner)
        if not m:
            raise _bad(template, f"unsupported filter [{inner}]")
        sub, op, raw = m.groups()
        return ("filter", _path(template, sub or ""), op, None if raw is None else _literal(template, raw.strip()))
    if ":" in inner:
        parts = [p.strip() for p in inner.split(":")]
        if len(parts) > 3 or any(p and not _INT.match(p) for p in parts):
            raise _bad(template, f"bad slice [{inner}]")
        a, b, *c = (int(p) if p else None for p in parts)
        step = c[0] if c and c[0] is not None else 1
        if step <= 0:
            raise _bad(template, "step must be > 0")  # client-go says so when it evaluates the slice
        return ("arrays", [(a, b, step, False)])
    keys = [k.strip() for k in _split_union(inner)]
    if all(_INT.match(k) for k in keys):  # client-go parses [n] as the slice [n:n+1] with a derived end
        return ("arrays", [(int(k), int(k) + 1, 1, True) for k in keys])
    if all(len(k) >= 2 and k[0] == k[-1] and k[0] in "'\"" for k in keys):
        return ("keys", [k[1:-1] for k in keys])
    raise _bad(template, f"bad subscript [{inner}]")


def _literal(template: str, raw: str) -> object:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    if raw in ("true", "false"):
        return raw == "true"
    try:
        return json.loads(raw)
    except ValueError:
        raise _bad(template, f"bad literal {raw!r} in a filter") from None


# -- evaluation --------------------------------------------------------------------------------------


class _EvalError(Exception):
    """The template cannot be applied to the document (client-go's Execute error); render() names the template."""


_GO_TYPES = {str: "string", dict: "map[string]interface {}", bool: "bool", int: "int64", float: "float64"}


def _array(values: list[object], start: int | None, end: int | None, step: int, derived: bool) -> list[object]:
    """One subscript over every input, as client-go's evalArray: no clamping, an out-of-range bound is an error."""
    out: list[object] = []
    for v in values:
        if v is None:
            continue
        if not isinstance(v, list):
            raise _EvalError(f"{_GO_TYPES.get(type(v), type(v).__name__)} is not array or slice")
        n = len(v)
        a = 0 if start is None else start
        if a < 0:
            a += n
        b = n if end is None else end
        if b < 0 or (b == 0 and derived):
            b += n
        if a == b:  # asking for no item is allowed, whatever the bounds
            return out
        if a >= n or a < 0:
            raise _EvalError(f"array index out of bounds: index {a}, length {n}")
        if b > n or b < 0:
            raise _EvalError(f"array index out of bounds: index {b - 1}, length {n}")
        if a > b:
            raise _EvalError(f"starting index {a} is greater than ending index {b}")
        out.extend(v[a:b:step])
    return out


_FIELD = re.compile(r"^[a-z][A-Za-z0-9]*$")  # a document's field (camelCase); a map with other keys is data


class Misses:
    """Which paths named a field that no object they reached has: kubectl's `couldn't find any field with path`.

    A path counts as found when one evaluation passed every `.name` step without a miss (an empty list or a
    filter matching nothing is no miss: there was nothing to look in); it is missing when every evaluation that
    reached objects found none with the field. Only objects count: a mapping with a key that is no camelCase
    field (`rebellions.ai/RBLN-CA22_PF`, `kubernetes.io/hostname`) is data, where a missing key is an answer,
    and an empty mapping has nothing to look in. `missed` keeps the first miss: the path up to it and the fields the
    objects there do have.
    """

    def __init__(self) -> None:
        self.found: set[int] = set()
        self.missed: dict[int, tuple[list[tuple], str, list[str]]] = {}

    def unknown(self) -> list[tuple[list[tuple], str, list[str]]]:
        return [miss for key, miss in self.missed.items() if key not in self.found]


def _walk(values: list[object], steps: list[tuple], misses: Misses | None = None) -> list[object]:
    for n, step in enumerate(steps):
        out: list[object] = []
        kind = step[0]
        if misses is not None and kind == "key":
            objects = [v for v in values if isinstance(v, dict) and v and all(map(_FIELD.match, v))]
            if objects and not any(step[1] in v for v in objects):
                fields: dict[str, None] = {}
                for v in objects:
                    fields.update(dict.fromkeys(v))
                misses.missed.setdefault(id(steps), (steps[:n], step[1], list(fields)))
                return []
        if kind == "arrays":
            for params in step[1]:
                out.extend(_array(values, *params))
            values = out
            continue
        if kind == "keys":
            for k in step[1]:
                out.extend(v[k] for v in values if isinstance(v, dict) and k in v)
            values = out
            continue
        for v in values:
            if kind == "key":
                if isinstance(v, dict) and step[1] in v:
                    out.append(v[step[1]])
            elif kind == "all":
                if isinstance(v, dict):
                    out.extend(v.values())
                elif isinstance(v, list):
                    out.extend(v)
            elif kind == "recurse":
                out.extend(_recurse(v, step[1]))
            elif kind == "filter":
                items = v if isinstance(v, list) else list(v.values()) if isinstance(v, dict) else []
                out.extend(item for item in items if _holds(item, step[1], step[2], step[3]))
        values = out
    if misses is not None:
        misses.found.add(id(steps))
    return values


def _recurse(value: object, key: str) -> list[object]:
    found: list[object] = []
    stack = [value]
    while stack:
        v = stack.pop(0)
        if isinstance(v, dict):
            if key in v:
                found.append(v[key])
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return found


_OPS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _holds(item: object, steps: list[tuple], op: str | None, value: object) -> bool:
    if op is None:  # existence: client-go's evalFilter ignores the error of the path
        try:
            return bool(_walk([item], steps))
        except _EvalError:
            return False
    got = _walk([item], steps)
    for g in got:
        try:
            if _OPS[op](g, value):
                return True
        except TypeError:  # a string against a number: no match, as client-go
            continue
    return False


def _text(value: object) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)  # Go sorts map keys
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def _render(nodes: list[_Node], current: object, out: list[str], misses: Misses | None = None) -> None:
    for node in nodes:
        if isinstance(node, _Text):
            out.append(node.text)
        elif isinstance(node, _Paths):
            results: list[object] = []
            for p in node.paths:
                results.extend(_walk([current], p, misses))
            out.append(" ".join(_text(r) for r in results))
        else:
            for item in _walk([current], node.path, misses):
                _render(node.body, item, out, misses)


def render(template: str, document: object, *, allow_missing_keys: bool = False) -> str:
    """The template applied to a document, as kubectl prints it (no newline added).

    A field no object has is an error naming the fields there are (`unknown_field`), not an empty line with
    exit 0: rblnctl's documents are not Kubernetes objects (items are flat, `.name`), so a kubectl habit such as
    `{.items[*].metadata.name}` would otherwise print nothing and pass (docs/output.md). `allow_missing_keys`:
    kubectl get's default (--allow-missing-template-keys=true), a missing field prints nothing."""
    nodes = parse(template)
    out: list[str] = []
    misses = Misses()
    try:
        _render(nodes, document, out, misses)
    except _EvalError as e:  # kubectl prints nothing then, and fails
        raise InvalidInput(f"error executing jsonpath {template!r}: {e}") from None
    if not allow_missing_keys:
        unknown_field(template, misses)
    return "".join(out)


def _step_text(step: tuple) -> str:
    kind = step[0]
    if kind == "key":
        name = step[1]
        return f".{name}" if _NAME.fullmatch(name) and "." not in name else f"[{name!r}]"
    if kind == "recurse":
        return f"..{step[1]}"
    if kind == "filter":
        return "[?()]"
    if kind == "keys":
        return "[" + ",".join(repr(k) for k in step[1]) + "]"
    if kind == "arrays":
        return "[" + ",".join(str(a) if derived else f"{'' if a is None else a}:{'' if b is None else b}"
                              for a, b, _, derived in step[1]) + "]"
    return "[*]"


def unknown_field(template: str, misses: Misses) -> None:
    """InvalidInput (exit 2) when a path of the template found its field in no object: kubectl's words for
    `--sort-by` (kubectl pkg/cmd/get/sorter.go: `couldn't find any field with path %q in the list of objects`),
    then the fields the objects there have, and the Kubernetes habit rblnctl's flat items do not follow."""
    unknown = misses.unknown()
    if not unknown:
        return
    before, name, fields = unknown[0]
    where = "".join(_step_text(s) for s in before)
    have = ", ".join(f".{f}" for f in fields)
    habit = ""
    if name == "metadata" and "name" in fields:
        habit = f" (rblnctl's items are flat: {where}.name, not {where}.metadata.name; docs/output.md)"
    raise InvalidInput(f"couldn't find any field with path {json.dumps(template)} in the list of objects: "
                       f"no {name!r} in the objects{' at ' + where if where else ''}, which have {have}{habit}")


# -- custom-columns and --sort-by: one expression, its values --------------------------------------------

_RELAXED = re.compile(r"^\{\.?([^{}]+)\}$|^\.?([^{}]+)$")


def relaxed(path: str) -> str:
    """kubectl's RelaxedJSONPathExpression (kubectl pkg/cmd/get/customcolumn.go): `a.b`, `.a.b`, `{a.b}` and
    `{.a.b}` all mean `{.a.b}`, as custom-columns and --sort-by take them."""
    m = _RELAXED.match(path.strip())
    if not m:
        raise InvalidInput(f"unexpected path string {path!r}, expected a 'name1.name2' or '.name1.name2' or "
                           "'{name1.name2}' or '{.name1.name2}'")
    return "{." + (m.group(1) or m.group(2)).strip() + "}"


def values(template: str, document: object, misses: Misses | None = None) -> list[object]:
    """The values one expression (`{.a.b}`) finds in a document ([] when none); bad input names the template.
    `misses` collects the fields not found, over every document it is given (unknown_field decides)."""
    nodes = _parsed(template)
    out: list[object] = []
    try:
        for node in nodes:
            if isinstance(node, _Paths):
                for p in node.paths:
                    out.extend(_walk([document], p, misses))
    except _EvalError as e:
        raise InvalidInput(f"error executing jsonpath {template!r}: {e}") from None
    return out


@functools.lru_cache(maxsize=64)
def _parsed(template: str) -> list[_Node]:
    """One parse per template, so a path keeps its identity over every item (Misses counts per path)."""
    return parse(template)


def cell(found: list[object]) -> str:
    """A custom-columns cell: the values joined with commas, `<none>` when there is none (kubectl's printer)."""
    shown = [_text(v) for v in found if v is not None]
    return ",".join(shown) if shown else "<none>"


def sort_key(found: list[object]) -> tuple:
    """A --sort-by key: missing first, then numbers by value, strings by text, booleans false < true."""
    if not found or found[0] is None:
        return (0, 0, "")
    v = found[0]
    if isinstance(v, bool):
        return (1, int(v), "")
    if isinstance(v, (int, float)):
        return (2, v, "")
    return (3, 0, _text(v))
