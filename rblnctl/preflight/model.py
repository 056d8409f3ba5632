"""What a preflight run returns: CheckResult per finding, PreflightReport with summary, grouping of per-node results."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from rblnctl.remedy import Remedy

SCOPE_CLUSTER = "cluster"
SCOPE_HOST = "host"
TARGET_CLUSTER = "cluster"
TARGET_HOST = "host"
METHOD_AUTO = "auto"


class Status(str, enum.Enum):
    """Outcome of one check; JSON carries the value (`"PASS"`)."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


# Worst first: the order groups of one check are shown in.
SEVERITY = {Status.FAIL: 0, Status.WARN: 1, Status.SKIP: 2, Status.PASS: 3}


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One finding: which check, where, what it saw, and what to do about it.

    `scope` is `cluster`, `host` or a node name. `remedy` is empty for PASS; for WARN and FAIL it
    says what to change, naming the exact parameter, label, gate or command. A command of this program is
    Remedy data (rblnctl.remedy: the front end spells it with the program name run and its connection flags);
    text is what another rblnctl's report carried, spelt already (from_dict).
    """

    id: str
    title: str
    scope: str
    status: Status
    evidence: str
    remedy: str | Remedy = ""
    remedy_command: str = ""  # with a text remedy, its command runnable as given (no placeholders); "" when none

    @classmethod
    def from_dict(cls, data: dict, *, scope: str | None = None) -> CheckResult:
        """A finding from its document data (rblnctl.documents.CHECK_RESULT: another rblnctl's report); `scope`
        replaces the one it carries.

        Raises ValueError or KeyError when the data is not a finding.
        """
        return cls(id=str(data["id"]), title=str(data["title"]), scope=scope or str(data["scope"]),
                   status=Status(data["status"]), evidence=str(data["evidence"]), remedy=str(data.get("remedy") or ""),
                   remedy_command=str(data.get("remedyCommand") or ""))


@dataclass(frozen=True, kw_only=True)
class Summary:
    """Counts per status, the method checked, and whether the run passes (`ok`, what the exit code follows)."""

    total: int
    passed: int
    warned: int
    failed: int
    skipped: int
    method: str
    strict: bool
    ok: bool


@dataclass(frozen=True, kw_only=True)
class CheckGroup:
    """Findings of one check that are identical except for their scope (one row of the grouped table)."""

    id: str
    title: str
    status: Status
    evidence: str
    remedy: str | Remedy
    scopes: list[str]


@dataclass(frozen=True, kw_only=True)
class PreflightReport:
    """Every finding of one run, in check order.

    `target` is `cluster` (checks through the API) or `host` (`--local`). `method` is `sandbox`
    or `dra` as checked (for the host, `auto` when none was asked for: host checks are the same
    for both); `method_note` says how it was chosen.
    """

    target: str
    method: str
    method_note: str
    checks: list[CheckResult]
    summary: Summary
    nodes: int = 0  # NPU nodes checked (cluster target)

    def failing(self) -> list[CheckResult]:
        """The findings that make this run fail: FAIL, and WARN too when strict."""
        bad = {Status.FAIL, Status.WARN} if self.summary.strict else {Status.FAIL}
        return [c for c in self.checks if c.status in bad]

    def failed_ids(self) -> list[str]:
        """Ids of the failing checks, each once, in check order."""
        return list(dict.fromkeys(c.id for c in self.failing()))


def make_report(
    *,
    target: str,
    method: str,
    method_note: str,
    checks: Iterable[CheckResult],
    strict: bool = False,
    nodes: int = 0,
) -> PreflightReport:
    """Build a report and its summary from the findings."""
    checks = list(checks)
    count = {s: sum(1 for c in checks if c.status == s) for s in Status}
    bad = count[Status.FAIL] + (count[Status.WARN] if strict else 0)
    summary = Summary(
        total=len(checks),
        passed=count[Status.PASS],
        warned=count[Status.WARN],
        failed=count[Status.FAIL],
        skipped=count[Status.SKIP],
        method=method,
        strict=strict,
        ok=bad == 0,
    )
    return PreflightReport(
        target=target, method=method, method_note=method_note, checks=checks, summary=summary, nodes=nodes
    )


def group_checks(checks: Iterable[CheckResult]) -> list[CheckGroup]:
    """Merge findings that differ only in scope, so 1,000 healthy nodes make one row, not 1,000.

    Groups keep the order in which each check id first appears; within one id the worst status
    comes first, then the larger group.
    """
    order: dict[str, int] = {}
    groups: dict[tuple[str, Status, str, str | Remedy], list[CheckResult]] = {}
    for c in checks:
        order.setdefault(c.id, len(order))
        groups.setdefault((c.id, c.status, c.evidence, c.remedy), []).append(c)
    out = [
        CheckGroup(
            id=key[0],
            title=members[0].title,
            status=key[1],
            evidence=key[2],
            remedy=key[3],
            scopes=list(dict.fromkeys(m.scope for m in members)),
        )
        for key, members in groups.items()
    ]
    out.sort(key=lambda g: (order[g.id], SEVERITY[g.status], -len(g.scopes)))
    return out


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe of several statuses (PASS when there are none)."""
    return min(statuses, key=lambda s: SEVERITY[s], default=Status.PASS)


@dataclass
class Findings:
    """An ordered collector the check functions append to (not part of the returned data)."""

    items: list[CheckResult] = field(default_factory=list)

    def add(self, id: str, title: str, scope: str, status: Status, evidence: str, remedy: str | Remedy = "",
            command: str = "") -> CheckResult:
        """Append one finding; PASS and SKIP carry no remedy. `command`: a text remedy's runnable (external)
        command; a Remedy carries its own."""
        problem = status in (Status.WARN, Status.FAIL)
        result = CheckResult(
            id=id,
            title=title,
            scope=scope,
            status=status,
            evidence=evidence,
            remedy=remedy if problem else "",
            remedy_command=command if problem else "",
        )
        self.items.append(result)
        return result
