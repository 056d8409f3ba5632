"""Render results: a rich table for people, JSON or YAML (stdout alone) for programs."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Callable
from typing import Any


class Output(str, enum.Enum):
    """-o/--output formats."""

    table = "table"
    json = "json"
    yaml = "yaml"


def to_data(obj: Any) -> Any:
    """Turn dataclasses, enums, tuples and sets into plain JSON-friendly values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj) if not f.name.startswith("_")}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_data(v) for v in obj]
    return obj


def dump(data: Any, fmt: Output) -> str:
    """Serialise data as JSON or YAML text."""
    data = to_data(data)
    if fmt == Output.json:
        return json.dumps(data, indent=2, default=str) + "\n"
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def emit(data: Any, fmt: Output, table: Callable[[], Any] | None = None) -> None:
    """Write a result to stdout: `table()` builds the rich renderable for `-o table`."""
    if fmt == Output.table and table is not None:
        from rblnctl.cli.console import stdout

        stdout().print(table())
        return
    if fmt == Output.table:
        fmt = Output.yaml
    sys.stdout.write(dump(data, fmt))
    sys.stdout.flush()


def make_table(*columns: str, title: str | None = None) -> Any:
    """A plain rich Table with the house style (no box lines, bold headers)."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, header_style="bold", title_justify="left", pad_edge=False)
    for i, c in enumerate(columns):
        # The first column is the key (a node, a BDF, a check): never broken. Long cells fold rather
        # than end in an ellipsis, so nothing a user may need to copy is hidden.
        t.add_column(c, overflow="fold", no_wrap=i == 0)
    return t
