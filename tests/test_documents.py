"""rblnctl.documents: the one mechanism a result's document is declared with, and tables derived from documents."""

from __future__ import annotations

import dataclasses
import enum

from rblnctl.cli.output import Column, rows
from rblnctl.documents import Each, Of, Said, Shape, body, to_data
from rblnctl.remedy import Remedy


class Mode(enum.Enum):
    vm = "vm-passthrough"


@dataclasses.dataclass(frozen=True)
class Inner:
    some_value: int
    mode: Mode = Mode.vm


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner | None
    inners: tuple[Inner, ...]
    warnings: tuple = ()


INNER = Shape(value="some_value", mode="mode")
OUTER = Shape(name="name", inner=Of("inner", INNER), inners=Each("inners", INNER), count=lambda o: len(o.inners),
              warnings=Said("warnings"))


def test_a_shape_lists_its_keys_in_order_and_makes_every_value_plain_json():
    doc = OUTER(Outer("a", Inner(1), (Inner(2), Inner(3))))
    assert list(doc) == ["name", "inner", "inners", "count", "warnings"]
    assert doc == {"name": "a", "inner": {"value": 1, "mode": "vm-passthrough"},
                   "inners": [{"value": 2, "mode": "vm-passthrough"}, {"value": 3, "mode": "vm-passthrough"}],
                   "count": 2, "warnings": []}


def test_a_missing_nested_object_is_null_and_messages_are_spelt_by_the_caller():
    said = []
    doc = OUTER(Outer("a", None, (), warnings=("plain", Remedy("run {command}"))),
                say=lambda m: said.append(m) or f"<{m}>")
    assert doc["inner"] is None
    assert doc["warnings"] == ["<plain>", f"<{Remedy('run {command}')}>"]
    assert len(said) == 2


def test_a_document_of_several_results_and_a_shape_extended_by_another():
    extended = Shape(first="plan.name") | Shape(second=Of("result", INNER))
    assert body(extended, plan=Outer("p", None, ()), result=None) == {"first": "p", "second": None}


def test_the_generic_form_is_the_dataclass_fields_in_camel_case():
    assert to_data(Inner(4)) == {"someValue": 4, "mode": "vm-passthrough"}


def test_a_derived_table_shows_what_the_documents_say():
    docs = [OUTER(Outer("a", Inner(1), ())), OUTER(Outer("", None, (Inner(2),)))]
    t = rows(docs, Column("NAME"), Column("VALUE", value="inner.value"),
             Column("COUNT", value=lambda d: str(d["count"] * 10)))
    assert t.render() == "NAME     VALUE    COUNT\na        1        0\n<none>   <none>   10\n"


def test_the_cli_declares_no_document_of_its_own():
    """Issue 29: every document's keys are declared in rblnctl/documents.py. A dict literal with camelCase keys in
    rblnctl/cli/ is a document built by hand (a second place the JSON contract would live), unless it is a
    Kubernetes object (apiVersion/kind: `rbac`, `vm manifest`, the versioned wrapper) or version's table labels."""
    import ast
    import re
    from pathlib import Path

    import rblnctl

    camel = re.compile(r"^[a-z]+[A-Z][A-Za-z]*$")
    found = []
    for path in sorted((Path(rblnctl.__file__).parent / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Dict):
                continue
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if "apiVersion" in keys or (path.name == "version.py" and "draDriver" in keys):
                continue
            if len(keys) >= 2 and any(camel.match(k) for k in keys):
                found.append(f"{path.name}:{node.lineno} {keys[:4]}")
    assert found == []


def test_json_output_falls_back_where_msgspec_cannot_encode():
    """A lone surrogate (a non-UTF-8 file name decoded with surrogateescape): -o json is then json.dumps's, as
    before msgspec wrote it (issue 31), the surrogate as its JSON escape (issue 38: rblnctl.cli.sanitize; the same
    value to a JSON reader, and valid UTF-8 on stdout)."""
    import json

    from rblnctl.cli.output import Format, dump, json_bytes

    for doc in ({"path": "/dev/vfio/\udcff"},):
        assert json_bytes(doc) is None
        text = dump(doc, Format.json)
        assert text == json.dumps(doc, indent=2, ensure_ascii=False).replace("\udcff", "\\udcff") + "\n"
        assert json.loads(text) == doc
    doc = {"a": [1, "é"]}
    assert json_bytes(doc) == (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
