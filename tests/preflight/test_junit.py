"""JUnit XML of a report: one testcase per finding; FAIL a failure carrying the remedy, WARN and SKIP skipped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from rblnctl.preflight.junit import to_junit
from rblnctl.preflight.model import CheckResult, Status, make_report


def finding(id_: str, scope: str, status: Status, remedy: str = "", command: str = "") -> CheckResult:
    return CheckResult(id=id_, title=id_.title(), scope=scope, status=status, evidence=f"saw {id_} <&> on {scope}",
                       remedy=remedy, remedy_command=command)


CHECKS = [
    finding("kubernetes.version", "cluster", Status.PASS),
    finding("kubevirt.gates", "cluster", Status.FAIL, "`rblnctl kubevirt enable-gates`",
            "rblnctl kubevirt enable-gates"),
    finding("helm.version", "cluster", Status.SKIP),
    finding("node.iommu", "npu-1", Status.WARN, "run --local there"),
    finding("node.iommu", "npu-2", Status.PASS),
]


def parse(strict: bool = False) -> ET.Element:
    report = make_report(target="cluster", method="sandbox", method_note="n", checks=CHECKS, strict=strict, nodes=2)
    text = to_junit(report)
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites')
    return ET.fromstring(text)


def test_one_testcase_per_finding_one_suite_per_scope():
    root = parse()
    assert [s.get("name") for s in root.findall("testsuite")] == ["cluster", "npu-1", "npu-2"]
    cases = root.findall("testsuite/testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [(c.scope, c.id) for c in CHECKS]
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == ("5", "1", "2", "0")
    cluster = root.find("testsuite[@name='cluster']")
    assert (cluster.get("tests"), cluster.get("failures"), cluster.get("skipped")) == ("3", "1", "1")


def test_a_failure_carries_the_evidence_the_remedy_and_its_command():
    [fail] = parse().findall(".//failure")
    assert fail.get("message") == "FAIL: saw kubevirt.gates <&> on cluster" and fail.get("type") == "FAIL"
    assert fail.text == ("saw kubevirt.gates <&> on cluster\nremedy: `rblnctl kubevirt enable-gates`\n"
                         "command: rblnctl kubevirt enable-gates")


def test_warn_and_skip_are_skipped_testcases_the_warning_keeps_its_remedy():
    root = parse()
    warn = root.find("testsuite[@name='npu-1']/testcase")
    assert warn.find("skipped").get("message") == "WARN: saw node.iommu <&> on npu-1"
    assert "remedy: run --local there" in warn.find("system-out").text
    skip = root.find("testsuite[@name='cluster']/testcase[@name='helm.version']")
    assert skip.find("skipped").get("message").startswith("SKIP: ") and skip.find("system-out") is None


def test_strict_makes_a_warning_a_failure():
    root = parse(strict=True)
    assert root.get("failures") == "2" and root.get("skipped") == "1"
    assert root.find("testsuite[@name='npu-1']/testcase/failure").get("type") == "WARN"
