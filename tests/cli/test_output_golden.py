"""Every kind's document, byte for byte: each scenario of test_output_schema prints exactly its golden file.

tests/golden/<Kind>.json holds, per scenario (its arguments joined by spaces), the -o json that scenario prints, with
the values a run cannot repeat (uids, timestamps, durations, versions of the tools on this machine) replaced by
placeholders (`volatile`). A change to a document is a change to its golden file and to docs/output.md's schema: the
golden files are also validated against that schema here, so the three cannot drift apart. Regenerate after a
deliberate change with `RBLNCTL_GOLDEN=update .venv/bin/python -m pytest tests/cli/test_output_golden.py` and read
the diff.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from tests.cli.test_output_schema import SCENARIOS, host, run, schemas  # noqa: F401 (fixtures)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("RBLNCTL_GOLDEN") == "update"

_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
_IN_TEXT = [(re.compile(r"https?://127\.0\.0\.1:\d+"), "<server>"),
            (re.compile(r"/\S*/pytest-\d+/(?:popen-gw\d+/)?[^/\s]+\d+/"), "<tmp>/"),  # xdist: a folder per worker
            (re.compile(r"\bin \d+(\.\d+)?s\b"), "in <seconds>s"),
            (re.compile(r"(virt-launcher-[a-z0-9-]+)-[a-z0-9]{5}\b"), r"\1-<hash>")]
_VOLATILE_KEYS = {"elapsedSeconds", "durationSeconds", "run",  # seconds a run took; a run's id (audit Events)
                  "commit", "python"}  # the checkout and the interpreter rblnctl runs from


def volatile(value: object, key: str = "") -> object:
    """The document with what differs from run to run replaced by `<uid>`, `<time>`, `<volatile>`."""
    if isinstance(value, dict):
        return {k: volatile(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [volatile(v, key) for v in value]
    if key in _VOLATILE_KEYS and value is not None:
        return 0 if isinstance(value, (int, float)) else "<volatile>"
    if isinstance(value, str):
        if _UID.match(value):
            return "<uid>"
        if _TIME.match(value):
            return "<time>"
        for pattern, placeholder in _IN_TEXT:
            value = pattern.sub(placeholder, value)
    return value


@pytest.fixture
def cluster(operated):
    """test_output_schema's world, its simulated operator kept, to wait for after a scenario's setup."""
    apiserver, op = operated
    apiserver.golden_operator = op
    return apiserver


def _settle(apiserver) -> None:
    assert apiserver.golden_operator.wait_idle()  # the operator's pods on a node the setup added are there


def _id(scenario) -> str:
    """The scenario's arguments, and the world it sets up when it has one (two scenarios may run one command)."""
    setup = getattr(scenario.setup, "__name__", "")
    return " ".join(scenario.args) + (f" [{setup.strip('_<>')}]" if setup else "")


def _golden(kind: str) -> dict:
    path = GOLDEN / f"{kind}.json"
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_id)
def test_each_kind_prints_its_golden_document(scenario, request, tmp_path):
    text = run(scenario, request, tmp_path, settle=_settle)
    doc = volatile(json.loads(text))
    if UPDATE:
        path = GOLDEN / f"{scenario.kind}.json"
        golden = _golden(scenario.kind)
        golden[_id(scenario)] = doc
        path.write_text(json.dumps(golden, indent=2, ensure_ascii=False) + "\n")
        return
    assert _id(scenario) in _golden(scenario.kind), "no golden document: run with RBLNCTL_GOLDEN=update"
    expected = _golden(scenario.kind)[_id(scenario)]
    got, want = (json.dumps(d, indent=2, ensure_ascii=False).splitlines() for d in (doc, expected))
    assert got == want, "\n".join(difflib.unified_diff(want, got, "golden", "printed", lineterm="", n=2))


def test_every_kind_has_a_golden_file_that_its_schema_accepts():
    kinds = {s.kind for s in SCENARIOS}
    assert {p.stem for p in GOLDEN.glob("*.json")} == kinds
    for kind in sorted(kinds):
        for args, doc in _golden(kind).items():
            assert doc["kind"] == kind, args
            jsonschema.Draft202012Validator(schemas()[kind]).validate(doc)
