"""A preflight report as JUnit XML for CI systems: one testcase per finding, one testsuite per scope.

How each status shows, chosen for what Jenkins (junit plugin) and GitLab (unit test reports) display:

- FAIL: `<failure>`, whose message is the evidence and whose text is the evidence, the remedy and
  the remedy command: both list failures with that text on the build page.
- WARN: `<skipped>` with a `WARN: ...` message and the remedy in `<system-out>` (with --strict: a
  failure, since the run fails on it). Both systems count and list skipped tests on the summary, so
  a warning stays visible without failing the build; the output of a passing test is only seen by
  opening it.
- SKIP: `<skipped>` with a `SKIP: ...` message.
- PASS: an empty testcase, the evidence in `<system-out>`.

Testcases are named by check id (`kubevirt.gates`), their classname is the scope (`cluster`, `host`
or the node name), so a failing node and check can be found by name in either system.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

from rblnctl.preflight.model import CheckResult, PreflightReport, Status


Spell = Callable[[CheckResult], tuple[str, str]]  # a finding's remedy and its command, as the front end spells them


def _plain(c: CheckResult) -> tuple[str, str]:
    return str(c.remedy), c.remedy_command


def _text(c: CheckResult, spell: Spell) -> str:
    lines = [c.evidence]
    remedy, command = spell(c)
    if remedy:
        lines.append(f"remedy: {remedy}")
    if command:
        lines.append(f"command: {command}")
    return "\n".join(lines)


def to_junit(report: PreflightReport, spell: Spell = _plain) -> str:
    """The report as a JUnit XML document (UTF-8 text, ending in a newline); `spell` says each remedy and its command
    (the CLI: as the finding's document, its commands with the program name run)."""
    strict = report.summary.strict
    suites: dict[str, list] = {}
    for c in report.checks:
        suites.setdefault(c.scope, []).append(c)
    root = ET.Element("testsuites", name=f"rblnctl preflight ({report.target}, method {report.method})")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for scope, checks in suites.items():
        suite = ET.SubElement(root, "testsuite", name=scope)
        counts = {"tests": len(checks), "failures": 0, "skipped": 0}
        for c in checks:
            case = ET.SubElement(suite, "testcase", name=c.id, classname=scope, time="0")
            if c.status == Status.FAIL or (strict and c.status == Status.WARN):
                counts["failures"] += 1
                fail = ET.SubElement(case, "failure", message=f"{c.status.value}: {c.evidence}", type=c.status.value)
                fail.text = _text(c, spell)
            elif c.status in (Status.WARN, Status.SKIP):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{c.status.value}: {c.evidence}")
                if c.remedy:
                    ET.SubElement(case, "system-out").text = _text(c, spell)
            else:
                ET.SubElement(case, "system-out").text = c.evidence
        suite.set("tests", str(counts["tests"]))
        suite.set("failures", str(counts["failures"]))
        suite.set("errors", "0")
        suite.set("skipped", str(counts["skipped"]))
        for k in totals:
            totals[k] += counts[k]
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
