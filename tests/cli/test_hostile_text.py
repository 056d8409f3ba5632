"""Every string a tenant or the cluster writes, poisoned, through every command that reads it (issue 38, finding 1).

The worlds are test_output_schema's scenario worlds (the documents' worlds: one per `-o json` scenario) and the
stuck-init world of tests/cli/test_stuck_init.py (init container log lines). After a world is set up, `poison` walks
every object the fake API server holds and appends to each string the API server takes as free text (annotation
values, condition and Event messages and reasons, phases, device names, every string of a spec or a status:
see EXEMPT for what is not) a payload with a tag of its own: OSC 52 (set the clipboard), ESC[2K (erase the line), a C1
CSI, rich markup, a bidi override and a zero-width space. Every init container's log gets one too. The fields are
found by the walk, not listed here, so a field the fake's objects gain is poisoned with no change to this test.

Each read command (and each mutating one's --dry-run) of those scenarios then runs as people read it: the table,
-o wide and -o name where the command has them, and -o json, whose values stay exact with every hidden character a
JSON escape. Nothing raw may reach stdout or stderr, each tag that is printed is printed escaped. `covered` counts
the (field, command) pairs printed in the human formats: docs/testing.md gives the number (COVERED_AT_LEAST is its
floor). A command may print no poisoned text in its world (a refused vm attach names no
string of the cluster), but the world of the stuck init container must get its log lines printed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from rblnctl.rbac import READ_COMMANDS
from tests.cli.test_output_schema import SCENARIOS, Scenario
from tests.fakes.operator import stack_v030
from tests.helpers import cli

# What the walk leaves alone: what the API server itself validates to a form that cannot hold these characters
# (names, namespaces, uids, resource versions, timestamps, quantities, owner references, label and annotation keys:
# the walk poisons values, never a map's keys; label values, which are checked as names are and select objects), and
# what the fake needs to stay the same world (apiVersion, kind).
EXEMPT_KEYS = frozenset({"name", "namespace", "uid", "resourceVersion", "generateName", "apiVersion", "kind",
                         "nodeName", "ownerReferences", "managedFields", "finalizers", "involvedObject", "regarding",
                         "claimName", "resourceClaimName", "resourceClaimTemplateName", "containerID", "imageID",
                         "reportingController"})
QUANTITIES = frozenset({"capacity", "allocatable", "requests", "limits"})
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
_ENUM = frozenset({"True", "False", "Unknown"})  # a condition's status: validated by the real server for core kinds

PROSE = frozenset({"message", "note", "user", "by"})  # people's words: what a world keeps working with when poisoned
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def payload(tag: int) -> str:
    return f"\x1b]52;c;cm0K\x07\x1b[2K~P{tag}~\x9b[bold]\u202e\u200b"


def escaped(tag: int) -> str:
    """How a tag's payload reads once escaped (rblnctl.cli.sanitize): the tag and its neighbours, cut nowhere."""
    return f"\\x1b[2K~P{tag}~\\x9b[bold]\\u202e\\u200b"


def _exempt(path: tuple[str, ...], value: str) -> bool:
    key = path[-1]
    parents = set(path[:-1])
    if key in EXEMPT_KEYS or parents & (QUANTITIES | {"ownerReferences", "managedFields", "involvedObject",
                                                      "regarding"}):
        return True
    if path[:2] == ("metadata", "labels") or key == "matchLabels":
        return True  # label values: validated as names are (63 of [A-Za-z0-9_.-]), and what selects what
    return bool(_TIME.match(value)) or value in _ENUM or key.endswith(("Time", "Timestamp", "time"))


def _walk(node: Any, path: tuple[str, ...], fields: list, kind: str, prose: bool) -> Any:
    if isinstance(node, dict):
        return {k: _walk(v, (*path, str(k)), fields, kind, prose) for k, v in node.items()}
    if isinstance(node, list):
        return [_walk(v, path, fields, kind, prose) for v in node]
    if isinstance(node, str) and not _exempt(path, node):
        inner = _json(node)
        if inner is not None:  # a record in an annotation (rblnctl's own: the set-mode record, the audit): its strings
            return json.dumps(_walk(inner, path, fields, kind, prose), ensure_ascii=False)
        if prose and path[-1] not in PROSE and not (len(path) == 3 and path[:2] == ("metadata", "annotations")):
            return node
        fields.append(f"{kind}.{'.'.join(path)}")
        return node + payload(len(fields) - 1)
    return node


def _json(text: str) -> Any:
    if not text.startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def poison(apiserver, *, prose: bool = False) -> list[str]:
    """Poison every free-text string of every object the fake holds (`prose`: only the messages, notes and annotation
    values, whose text decides nothing, so the commands still find what they look for); returns the field of each
    tag (its index)."""
    fields: list[str] = []
    for res in apiserver.resources():
        if res.kind in ("Namespace", "CustomResourceDefinition", "APIService", "Lease"):
            continue
        try:
            objects = apiserver.list(res.kind, api_version=res.api_version)
        except (KeyError, ValueError):
            continue
        for obj in objects:
            kind = obj.get("kind", res.kind)
            poisoned = {k: v if k in ("apiVersion", "kind") else _walk(v, (k,), fields, kind, prose)
                        for k, v in obj.items()}
            apiserver.update(poisoned)
    for pod in apiserver.list("Pod"):
        for c in pod.get("spec", {}).get("initContainers") or []:
            fields.append(f"Pod log of init container {c['name']}")
            apiserver.set_pod_log(pod["metadata"]["namespace"], pod["metadata"]["name"],
                                  f"last line {payload(len(fields) - 1)}\n", container=c["name"])
    return fields


def _reads(scenario: Scenario) -> bool:
    words = " ".join(scenario.args[:2])
    return scenario.cluster and ("--dry-run" in scenario.args or words in READ_COMMANDS
                                 or scenario.args[0] in READ_COMMANDS)


READS = [s for s in SCENARIOS if _reads(s)]  # two scenarios may run one command in two worlds: both run


def _id(scenario: Scenario) -> str:
    setup = getattr(scenario.setup, "__name__", "")
    return " ".join(scenario.args) + (f" [{setup.strip('_')}]" if setup else "")
STUCK_READS = [("node", "list"), ("status",), ("preflight",), ("node", "set-mode", "vm", "n1", "--yes", "--timeout",
                                                                "1")]
FORMATS = ((), ("-o", "wide"), ("-o", "name"), ("-o", "json"))
COVERED_AT_LEAST = 72
covered: set[tuple[str, str]] = set()
ran: list[str] = []  # the poisoned tests this process ran: the count is only whole when it ran all of them


def _run(apiserver, args: tuple[str, ...], fields: list[str]) -> int:
    """Run `args` in every human format it has; returns how many poisoned fields it printed (escaped)."""
    printed = 0
    for fmt in FORMATS:
        r = cli(*args, *fmt, server=apiserver.url)
        if r.exit_code == 2 and "-o " in r.stderr and fmt:
            continue  # a format this command does not print
        assert r.exit_code != 70 and "Traceback" not in r.stderr, r.stderr
        for name, out in (("stdout", r.stdout), ("stderr", r.stderr)):
            raw = RAW.search(out)
            assert raw is None, f"{' '.join(args + fmt)}: raw U+{ord(raw.group()):04X} on {name}:\n{out}"
        if fmt == ("-o", "json"):  # exact values (it parses), every hidden character a JSON escape (checked above)
            assert r.stdout and "~P" in json.dumps(json.loads(r.stdout)) or "~P" not in r.stdout
            continue
        text = r.stdout + r.stderr
        for tag in map(int, re.findall(r"~P(\d+)~", text)):
            # escaped, or inside a printed JSON document (a dry run's patch): JSON's escapes, shown, never sent
            assert escaped(tag) in text or f"~P{tag}~\\x9b" in text or json.dumps(payload(tag))[1:-1] in text, \
                (tag, fields[tag], fmt, text)
            command = " ".join(args + fmt)
            if (fields[tag], command) not in covered:
                covered.add((fields[tag], command))
                printed += 1
    return printed


@pytest.mark.parametrize("prose", [False, True], ids=["every-string", "prose"])
@pytest.mark.parametrize("scenario", READS, ids=_id)
def test_poisoned_text_is_printed_escaped_by_every_read_command(scenario, prose, operated):
    apiserver, op = operated
    if scenario.setup:
        scenario.setup(apiserver)
    assert op.wait_idle()
    op.stop()  # the operator would put its own labels back: the poison stays as written
    fields = poison(apiserver, prose=prose)
    assert len(fields) > (5 if prose else 50)
    _run(apiserver, scenario.args, fields)
    ran.append(f"{_id(scenario)} {prose}")


def test_poisoned_init_container_logs_and_statuses_in_set_mode_wait_node_list_status_preflight(apiserver):
    op = stack_v030(apiserver, ("n1", "n2"))
    r = cli("node", "set-mode", "vm", "n1", "--yes", "--timeout", "2", server=apiserver.url)
    assert r.exit_code == 5 and op.stuck_in_init, r.stderr
    op.stop()
    fields = poison(apiserver)
    logs = {i for i, f in enumerate(fields) if f.startswith("Pod log")}
    for args in STUCK_READS:
        assert _run(apiserver, args, fields) > 0, args
    shown_logs = {f for f, _ in covered if f.startswith("Pod log")}
    assert logs and shown_logs, "no init container's log line was printed"
    ran.append("stuck")


def test_the_count_of_fields_by_commands_is_recorded():
    """Runs after the two above in one process (-n 0 or one xdist worker's share): the floor docs/testing.md gives."""
    expected = 2 * len(READS) + 1
    if len(ran) < expected:  # xdist shared them out: each worker's set is a part (`-n 0` checks the whole)
        pytest.skip(f"{len(ran)} of the {expected} poisoned runs ran in this process")
    print(f"\n(field, command) pairs printed escaped: {len(covered)}; fields: "
          f"{len({f for f, _ in covered})}; commands: {len({c for _, c in covered})}")
    assert len(covered) >= COVERED_AT_LEAST
