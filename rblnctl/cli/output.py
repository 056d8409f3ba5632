"""Render results as kubectl does: plain aligned tables for people; versioned documents for programs.

Every command that shows something builds one View (its document, its table, its names) and hands it
to emit() with the parsed `-o` value. The formats:

- `table` / `wide`: columns aligned with spaces, a header row (`--no-headers` drops it), no box, no
  rule, no indent; colour only on a terminal. `wide` adds the view's wide columns. Piped, a row is one
  line whatever its length (grep finds a row whole); on a terminal narrower than the table, the widest
  columns fold their cells at word boundaries (after a space or a comma) onto continuation lines, so
  nothing is broken mid-word by the terminal, and long prose lines (preamble, epilogue) fold the same
  way with a hanging indent (fit_width, fold).
- `name`: `kind/name` lines (`node/n1`), as `kubectl get -o name`.
- `json` / `yaml`: one document with `apiVersion: rblnctl.rebellions.ai/v1alpha1` and `kind`,
  camelCase keys, numbers as numbers (docs/output.md has the schema of every kind).
- `jsonpath=TEMPLATE`: kubectl's JSONPath template over that document (rblnctl.cli.jsonpath).

Only emit() and the confirmation prompt write tables; nothing else in the CLI formats results.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from rblnctl.documents import camel, document, to_data  # noqa: F401 (the library owns the JSON contract)
from rblnctl.cli.fold import cell_words, commands, fold, fold_prose, prose_indent
from rblnctl.errors import InvalidInput


class Format(str, enum.Enum):
    """-o/--output formats."""

    table = "table"
    wide = "wide"
    name = "name"
    json = "json"
    yaml = "yaml"
    jsonpath = "jsonpath"
    custom_columns = "custom-columns"  # custom-columns=HEADER:PATH,... or custom-columns-file=FILE
    junit = "junit"  # preflight only


COMMON_FORMATS = (Format.table, Format.wide, Format.name, Format.json, Format.yaml, Format.jsonpath,
                  Format.custom_columns)
FORMATS_HELP = "table, wide, name, json, yaml, jsonpath=TEMPLATE or custom-columns=HEADER:PATH,..."


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """A parsed `-o` value, with the global --no-headers."""

    format: Format = Format.table
    template: str | None = None  # for jsonpath
    no_headers: bool = False
    columns: tuple[tuple[str, str], ...] = ()  # custom-columns: (header, `{.path}` template)

    @property
    def is_table(self) -> bool:
        """Whether people read it (table or wide): progress and notes then go to stderr as prose."""
        return self.format in (Format.table, Format.wide)

    @property
    def is_document(self) -> bool:
        """Whether stdout carries one machine-readable document (json, yaml, jsonpath, junit)."""
        return self.format in (Format.json, Format.yaml, Format.jsonpath, Format.junit)


TABLE = OutputSpec()
_no_headers = False  # the global --no-headers, set once per invocation by the root command


def set_no_headers(value: bool) -> None:
    """The global --no-headers (tables without their header row)."""
    global _no_headers
    _no_headers = value


def parse_output(text: str | None, *, allowed: Sequence[Format] = COMMON_FORMATS, no_headers: bool = False
                 ) -> OutputSpec:
    """Parse `-o` as kubectl does: `json`, `=json` (from `-o=json`), `jsonpath={.items[*].name}`, `jsonpath='...'`."""
    raw = (text or "table").strip()
    if raw.startswith("="):  # `-o=json`: click hands a short option's value over with the `=`
        raw = raw[1:]
    name, eq, template = raw.partition("=")
    name = name.strip().lower()
    columns: tuple[tuple[str, str], ...] = ()
    if name in ("jsonpath", "jsonpath-as-json") and (eq or name == "jsonpath"):
        if not template.strip():
            raise InvalidInput("-o jsonpath needs a template, e.g. -o jsonpath='{.items[*].name}'")
        template = template.strip()
        if len(template) >= 2 and template[0] == template[-1] and template[0] in "'\"":
            template = template[1:-1]
        from rblnctl.cli.jsonpath import parse as parse_template

        parse_template(template)  # a bad template is bad input now, not after the cluster was read
        fmt = Format.jsonpath
    elif name in ("custom-columns", "custom-columns-file"):
        fmt = Format.custom_columns
        columns = _custom_columns(template, from_file=name == "custom-columns-file")
    else:
        known = name in Format._value2member_map_
        if not known or eq:
            names = ", ".join(_format_name(f) for f in allowed)
            raise InvalidInput(f"unable to match a printer suitable for the output format {raw!r}, allowed formats "
                               f"are: {names}")
        fmt = Format(name)
    if fmt not in allowed:
        names = ", ".join(_format_name(f) for f in allowed)
        raise InvalidInput(f"this command cannot print -o {fmt.value}; allowed formats are: {names}")
    return OutputSpec(format=fmt, template=template if fmt == Format.jsonpath else None, no_headers=no_headers,
                      columns=columns if fmt == Format.custom_columns else ())


def _format_name(f: Format) -> str:
    return {Format.jsonpath: "jsonpath=TEMPLATE", Format.custom_columns: "custom-columns=SPEC"}.get(f, f.value)


def _custom_columns(spec: str, *, from_file: bool) -> tuple[tuple[str, str], ...]:
    """kubectl's `custom-columns=NAME:.path,...` (split on `,`, then on the first `:`), or a file whose first line
    holds the headers and whose second the paths, whitespace-separated (kubectl pkg/cmd/get/customcolumn.go)."""
    from rblnctl.cli.jsonpath import parse as parse_template
    from rblnctl.cli.jsonpath import relaxed

    spec = spec.strip()
    if len(spec) >= 2 and spec[0] == spec[-1] and spec[0] in "'\"":
        spec = spec[1:-1]
    if from_file:
        from pathlib import Path

        try:
            lines = [line for line in Path(spec).expanduser().read_text().splitlines() if line.strip()]
        except OSError as e:
            raise InvalidInput(f"custom-columns-file {spec}: {e.strerror or e}") from None
        if len(lines) != 2 or len(lines[0].split()) != len(lines[1].split()):
            raise InvalidInput(f"custom-columns-file {spec}: expected two lines, the headers and as many paths")
        pairs = list(zip(lines[0].split(), lines[1].split()))
    else:
        if not spec:
            raise InvalidInput("custom-columns format specified but no custom columns given, e.g. "
                               "-o custom-columns=NAME:.name,MODE:.mode")
        pairs = []
        for part in spec.split(","):
            header, colon, path = part.partition(":")
            if not colon or not header.strip() or not path.strip():
                raise InvalidInput(f"unexpected custom-columns spec: {part!r}, expected <header>:<json-path-expr>")
            pairs.append((header.strip(), path.strip()))
    out = []
    for header, path in pairs:
        template = relaxed(path)
        parse_template(template)  # bad input now, before the cluster is read
        out.append((header, template))
    return tuple(out)


# -- documents ---------------------------------------------------------------------------------------


def dump(doc: object, fmt: Format, *, literal_blocks: bool = False) -> str:
    """Serialise a document as JSON or YAML text; `literal_blocks`: multi-line strings as YAML `|` blocks (a
    manifest people read and keep in git, e.g. cloud-init user data)."""
    if fmt == Format.json:
        from rblnctl.cli.sanitize import json_text_visible

        data = json_bytes(doc)
        return data.decode() if data is not None else json_text_visible(json.dumps(doc, indent=2, ensure_ascii=False)
                                                                         + "\n")
    import yaml

    if not literal_blocks:
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: Any, value: str) -> Any:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(doc, Dumper=Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def json_bytes(doc: object) -> bytes | None:
    """A document as `-o json` writes it (UTF-8, two-space indent, a final newline); None when msgspec cannot
    encode it and json.dumps must (a type it does not know, a lone surrogate from a file name). DEL, C1 controls,
    bidi and zero-width characters, which JSON lets an encoder write raw, are written as `\\u` escapes (the same
    values, nothing a terminal acts on: rblnctl.cli.sanitize.json_visible).

    msgspec writes what json.dumps(indent=2, ensure_ascii=False) writes, byte for byte on every golden document
    (tests/golden; floats aside: 1e-7, not 1e-07), in C and in one buffer: json.dumps joins a list of a small
    string per token, ~100 MB at peak for `node list -o json` at 5,000 nodes (issue 31)."""
    import msgspec

    from rblnctl.cli.sanitize import json_visible

    try:
        return json_visible(msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")
    except (TypeError, UnicodeEncodeError):
        return None


# -- tables ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Column:
    """A table column: `wide` columns show only with -o wide. `value`: where a row's cell comes from in the row's
    document (a dotted path of keys, or a function of that document) for tables derived from documents (rows())."""

    header: str
    wide: bool = False
    value: str | Callable[[dict], object] | None = None

    def cell(self, item: dict) -> object:
        """This column's cell of one document: a path's value (None or "" as `<none>`, kubectl's placeholder), or
        what the function says."""
        if callable(self.value):
            return self.value(item)
        value: object = item
        for key in (self.value or self.header.lower()).split("."):
            value = value.get(key) if isinstance(value, dict) else None
        return "<none>" if value is None or value == "" else str(value)


def rows(items: Iterable[dict], *columns: Column) -> Table:
    """A table derived from documents: a row per item, each cell read from the item (Column.cell), so a table shows
    what the JSON says and nothing else."""
    t = Table(*columns)
    for item in items:
        t.add_row(*(c.cell(item) for c in columns))
    return t


@dataclasses.dataclass(frozen=True)
class Cell:
    """A cell with a colour for terminals (`red`, `green`, `yellow`, `dim`, `bold red`...)."""

    text: str
    style: str = ""

    def __str__(self) -> str:
        return self.text


_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35",
        "cyan": "36"}
PADDING = 3  # spaces between columns, as kubectl's printers (tabwriter padding 3)


def _paint(text: str, style: str) -> str:
    codes = [_SGR[w] for w in style.split() if w in _SGR]
    return f"\x1b[{';'.join(codes)}m{text}\x1b[0m" if codes and text else text


class Table:
    """Rows under column headers, printed as kubectl prints `get` output."""

    def __init__(self, *columns: str | Column) -> None:
        self.columns = [c if isinstance(c, Column) else Column(c) for c in columns]
        self.rows: list[list[object]] = []
        self.only: list[str | None] = []

    def add_row(self, *cells: object, only: str | None = None) -> None:
        """One row; a cell is text or a Cell. Missing trailing cells print as empty. `only="wide"`: a row only -o
        wide shows; `only="table"`: one only the default table shows (a summary of those wide rows)."""
        if len(cells) > len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(list(cells) + [""] * (len(self.columns) - len(cells)))
        self.only.append(only)

    def render(self, *, wide: bool = False, headers: bool = True, color: bool = False, width: int | None = None
               ) -> str:
        """The table as text lines; trailing spaces stripped. Without `width` (piped) one line per row, never
        folded; with it (a terminal's columns) the widest columns fold at word boundaries to fit (fit_width), and
        when that cannot fit, or a column is narrower than a `command` in it, columns go under each row as
        `    HEADER: value` lines (the widest floor first; a command there stands whole on its own line)."""
        keep = [i for i, c in enumerate(self.columns) if wide or not c.wide]
        grid: list[list[object]] = []
        if headers:
            grid.append([self.columns[i].header for i in keep])
        for row, only in zip(self.rows, self.only):
            if only is None or only == ("wide" if wide else "table"):
                grid.append([_one_line(row[i]) for i in keep])
        if not grid:
            return ""
        widths = [max(len(str(r[j])) for r in grid) for j in range(len(keep))]
        under: list[int] = []  # columns that fold under their row (`HEADER: value`) when the table cannot fit
        if width is not None:
            shown = list(range(len(keep)))
            while True:
                fitted = fit_width([widths[j] for j in shown], [[str(r[j]) for r in grid] for j in shown], width)
                # a column whose `command` a cell would break (narrower than the command) goes under its rows,
                # where the command stands whole on a line of its own (fold_prose)
                broken = [k for k in range(1, len(shown)) if any(len(c) > fitted[k] for r in grid
                                                                 for c in commands(str(r[shown[k]])))]
                if broken:
                    under = sorted([*under, shown.pop(broken[-1])])
                    continue
                if sum(fitted) + PADDING * (len(shown) - 1) <= width or len(shown) <= 2:
                    break
                floors = _floors([widths[j] for j in shown], [[str(r[j]) for r in grid] for j in shown])
                k = max(range(1, len(shown)), key=lambda i: (floors[i], i))  # the widest that can go, rightmost
                under = sorted([*under, shown.pop(k)])  # goes under its row, and the rest tries again
            headers_at = [self.columns[keep[j]].header for j in under]
            grid = [[r[j] for j in shown] + ([] if i == 0 and headers else [r[j] for j in under])
                    for i, r in enumerate(grid)]
            widths = fitted
        lines = []
        for i, full in enumerate(grid):
            r = full[:len(widths)]
            pieces = [fold(str(cell), widths[j], hang=j < len(r) - 1) if width is not None else [str(cell)]
                      for j, cell in enumerate(r)]
            for k in range(max(len(p) for p in pieces)):
                parts = []
                for j, cell in enumerate(r):
                    text = pieces[j][k] if k < len(pieces[j]) else ""
                    pad = "" if j == len(r) - 1 else " " * max(1, widths[j] - len(text) + PADDING)
                    style = cell.style if isinstance(cell, Cell) else ""
                    parts.append((_paint(text, style) if color else text) + pad)
                lines.append("".join(parts).rstrip())
            for header, cell in zip(headers_at if width is not None else (), full[len(widths):]):
                if str(cell):
                    line = f"    {header}: {cell}"
                    lines.extend(fold_prose(line, width or 0, indent=6) if commands(str(cell)) else
                                 fold(line, width or 0, indent=6))
        return "\n".join(lines) + "\n"


MIN_FOLD = 12  # a column folds no narrower than this, its header, or its longest word (up to MAX_WORD)
MAX_WORD = 40  # a longer word is cut; below it a column that cannot fit goes under its rows instead


def fit_width(widths: Sequence[int], columns: Sequence[Sequence[str]], width: int) -> list[int]:
    """Column widths that fit `width` terminal columns: the widest column gives up one column at a time, down to
    its floor (MIN_FOLD, its header, its longest word up to MAX_WORD), until the table fits or nothing can give
    more; a table that cannot fit even so keeps its widths here, and Table.render moves columns under its rows."""
    out = list(widths)
    floors = _floors(widths, columns)
    room = width - PADDING * (len(out) - 1)
    if sum(floors) > room:
        return out  # cannot fit even folded (-o wide): one line per row, as kubectl, and the terminal wraps
    while sum(out) > room:
        j = max(range(len(out)), key=lambda i: (out[i] - floors[i] > 0, out[i]))
        if out[j] <= floors[j]:
            break
        out[j] -= 1
    return out


def _floors(widths: Sequence[int], columns: Sequence[Sequence[str]]) -> list[int]:
    """How narrow each column can fold: MIN_FOLD, its header, its longest word up to MAX_WORD; a column of names
    (one word a cell: pods, nodes) not at all, since a name is never cut."""
    floors = []
    for j, cells in enumerate(columns):
        header, *values = cells if cells else [""]
        word = max((len(w.rstrip(",")) for v in values for w in cell_words(v)), default=0)  # a comma may hang
        if all(len(cell_words(v)) <= 1 for v in values):
            word = widths[j]  # a column of names (pods, nodes): never cut one
        floors.append(min(widths[j], max(len(header), word if word == widths[j] else min(word, MAX_WORD), MIN_FOLD)))
    return floors


def _one_line(cell: object) -> object:
    """A cell on one line (a newline inside a cell would break every reader of the table), every character a
    terminal acts on escaped (rblnctl.cli.sanitize: before the widths are measured and the colours painted)."""
    from rblnctl.cli.sanitize import visible

    text = original = str(cell)
    if "\n" in text or "\t" in text:
        text = " ".join(text.split())
    text = visible(text)
    if text == original:
        return cell
    return Cell(text, cell.style) if isinstance(cell, Cell) else text


# -- views -------------------------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class View:
    """What one command shows, in every format.

    `body` is the document without apiVersion/kind (a mapping or a dataclass; called lazily when a
    callable). `tables` are printed one after another, a blank line between them; `preamble` lines
    come first (`key: value` facts), `epilogue` lines last (remedies, a verdict); `notes` go to
    stderr in every format (hints such as "no NPU nodes found", the writes a dry run would make).
    `names` are the `-o name` lines; a view without names refuses `-o name`.
    """

    kind: str
    body: object  # a mapping or a dataclass (rblnctl.documents.to_data), or a function giving one
    tables: Sequence[Table] = ()
    preamble: Sequence[str] = ()
    epilogue: Sequence[str] = ()
    notes: Sequence[str] = ()
    names: Sequence[str] | None = None
    junit: Callable[[], str] | None = None

    def document(self) -> dict:
        """The versioned document."""
        body = self.body() if callable(self.body) else self.body
        return document(self.kind, body)


def render_tables(view: View, *, wide: bool = False, headers: bool = True, color: bool = False,
                  width: int | None = None) -> str:
    """The human form of a view: preamble, then the tables, a blank line between blocks; with `width` (a
    terminal's columns) tables and prose lines fold at word boundaries to fit it."""
    blocks = []
    if view.preamble:
        blocks.append(prose(view.preamble, width))
    for t in view.tables:
        text = t.render(wide=wide, headers=headers, color=color, width=width)
        if text:
            blocks.append(text)
    if view.epilogue:
        blocks.append(prose(view.epilogue, width))
    return "\n".join(blocks)


def prose(lines: Iterable[str], width: int | None) -> str:
    """Lines of text; with `width`, each folded at word boundaries with a hanging indent: under the value of a
    `Key:   value` line, else two columns in from the line's own indent."""
    from rblnctl.cli.sanitize import visible

    out = []
    for line in map(visible, lines):
        if width is None or len(line) <= width:
            out.append(line)
            continue
        out.extend(fold_prose(line, width, indent=prose_indent(line, width)))
    return "".join(f"{line}\n" for line in out)


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The columns of the terminal `stream` (stdout) writes to: COLUMNS when set, else the terminal's own; None
    when it is no terminal (piped output keeps a row on one line, for grep)."""
    import os
    import shutil

    stream = sys.stdout if stream is None else stream
    if not _isatty(stream):
        return None
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, AttributeError, ValueError):
        return shutil.get_terminal_size().columns


def emit(view: View, spec: OutputSpec = TABLE) -> None:
    """Write a view to stdout in the format asked for; notes go to stderr for people only."""
    fmt = spec.format
    if view.notes:  # stderr, whatever the format: stdout stays the document alone
        from rblnctl.cli.console import info

        for note in view.notes:
            info(note)
    if fmt in (Format.table, Format.wide):
        from rblnctl.cli.console import color_enabled

        color = color_enabled() and _isatty(sys.stdout)
        _write(render_tables(view, wide=fmt == Format.wide, headers=not (spec.no_headers or _no_headers),
                             color=color, width=terminal_width()))
        return
    if fmt == Format.name:
        if view.names is None:
            raise InvalidInput(f"-o name is not available here: a {view.kind} has no object names")
        from rblnctl.cli.sanitize import visible

        _write("".join(f"{visible(n)}\n" for n in view.names))
        return
    if fmt == Format.junit:
        if view.junit is None:
            raise InvalidInput("-o junit is only for preflight")
        _write(view.junit())
        return
    doc = view.document()
    if fmt == Format.custom_columns:
        _write(custom_columns_text(doc, spec.columns, headers=not (spec.no_headers or _no_headers)))
        return
    if fmt == Format.jsonpath:
        from rblnctl.cli.jsonpath import render

        _write(render(spec.template or "", doc))
        return
    if fmt == Format.json:
        data = json_bytes(doc)  # written as bytes: never a str copy of a document that may be tens of MB
        if data is not None:
            _write_bytes(data)
            return
    _write(dump(doc, fmt))


def document_items(doc: dict) -> list[object]:
    """The objects a list document holds (`items`), or the document itself as the only one."""
    items = doc.get("items")
    return list(items) if isinstance(items, list) else [doc]


def custom_columns_text(doc: dict, columns: Sequence[tuple[str, str]], *, headers: bool = True) -> str:
    """kubectl's custom-columns over a document: a row per item (or one for a document that is no list)."""
    from rblnctl.cli.jsonpath import Misses, cell, unknown_field, values

    t = Table(*(h for h, _ in columns))
    misses = {template: Misses() for _, template in columns}
    for item in document_items(doc):
        t.add_row(*(cell(values(template, item, misses[template])) for _, template in columns))
    for template, missed in misses.items():  # kubectl prints <none>: a column no item has is a typo (docs/output.md)
        unknown_field(template, missed)
    return t.render(headers=headers)


def sort_order(documents: Sequence[dict], path: str | None) -> list[int]:
    """`--sort-by=PATH` (kubectl's relaxed JSONPath) over the items' documents as printed: the indexes in sorted
    order, stable; None: as given. The caller reorders its documents and whatever it keeps beside them."""
    if not path:
        return list(range(len(documents)))
    from rblnctl.cli.jsonpath import Misses, relaxed, sort_key, unknown_field, values

    template = relaxed(path)
    misses = Misses()
    keys = [sort_key(values(template, doc, misses)) for doc in documents]
    unknown_field(template, misses)  # kubectl pkg/cmd/get/sorter.go: a field no item has is an error
    return sorted(range(len(keys)), key=keys.__getitem__)


def check_sort_by(path: str | None) -> str | None:
    """Validate --sort-by before anything is read (bad input: exit 2); returns it unchanged."""
    if path:
        from rblnctl.cli.jsonpath import parse, relaxed

        parse(relaxed(path))
    return path


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _write_bytes(data: bytes) -> None:
    """UTF-8 bytes to stdout: straight to its buffer where it has one (a terminal, a pipe, a file), else as text
    (a test's captured stdout)."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        _write(data.decode())
        return
    sys.stdout.flush()
    buffer.write(data)
    buffer.flush()


def yes_no(value: bool | None, *, no: str = "no", unknown: str = "unknown") -> str:
    """A boolean as a table cell (never Python's True/False)."""
    return unknown if value is None else "yes" if value else no


def joined(items: Iterable[object], *, empty: str = "<none>") -> str:
    """A list as one comma-separated cell, `<none>` when empty (kubectl's placeholder)."""
    text = ",".join(str(i) for i in items)
    return text or empty
