"""The mutation catalogue stays true to the code: a refactor that moves a guarded line, or renames a test that
catches its mutation, fails here instead of leaving docs/testing.md's "Mutation checks" stale.

(Running the mutations themselves is `python -m tests.mutations.check`: minutes, so not part of the suite.)
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.mutations.check import MUTATIONS, ROOT, markdown


def _functions(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("m", MUTATIONS, ids=lambda m: m.id)
def test_each_mutation_still_applies_to_exactly_one_line(m):
    text = (ROOT / m.file).read_text()
    assert text.count(m.old) == 1, f"{m.id}: {m.old.strip()!r} is not in {m.file} exactly once"
    old, new = m.old.split("\n"), m.new.split("\n")  # context lines may make `old` unique; one line changes
    assert len(old) == len(new) and sum(a != b for a, b in zip(old, new)) == 1, f"{m.id} is not a one-line change"
    assert m.file.startswith("rblnctl/")


@pytest.mark.parametrize("m", MUTATIONS, ids=lambda m: m.id)
def test_each_mutation_names_tests_that_exist(m):
    assert m.tests, f"{m.id} names no test"
    assert m.expect in ("caught", "survives") and (m.expect == "caught" or m.notes)
    for node in m.tests:
        path, _, name = node.partition("::")
        assert re.sub(r"\[.*\]$", "", name) in _functions(path), f"{m.id}: no test {node}"


def test_ids_are_unique_and_the_docs_table_is_the_catalogue():
    ids = [m.id for m in MUTATIONS]
    assert len(ids) == len(set(ids))
    doc = (ROOT / "docs" / "testing.md").read_text()
    assert markdown(list(MUTATIONS)) in doc, "docs/testing.md 'Mutation checks': paste `python -m " \
        "tests.mutations.check --markdown`"
