"""Issue 39's remedy check, one mechanism for every tier: run a world's commands, record every Remedy the CLI
spells, then run each rblnctl one with `--dry-run` in the same world (none may be refused, be bad input, or fail as
a dry run) and check each external one (kubectl, helm, virtctl) against that program's `--help`.

The fakes' worlds are tests/cli/test_remedies_run.py; the real tiers' (a real kube-apiserver, the real operator
v0.3.0) tests/envtest/test_remedies_run_real.py. A world is reached by its connection flags (`--server URL` for the
fake, `--kubeconfig PATH` for a real apiserver): the remedies are spelt with them, as a user who gave them sees
them, and run with them.
"""

from __future__ import annotations

import functools
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest
from typer.testing import CliRunner

from rblnctl.cli.app import app
from rblnctl.remedy import Command
from tests.fakes import objects as o
from tests.helpers import _get_command_once

# What is run in every world: what a user looks at first, and the dry runs of the writes that print remedies.
SURFACES: tuple[tuple[str, ...], ...] = (
    ("status",), ("node", "list", "-o", "wide"), ("preflight",), ("vm", "list", "-A"),
    ("vm", "fit", "--npus", "1"), ("vm", "fit", "--npus", "2"), ("vm", "fit", "--npus", "2", "--product", "RBLN-CA12"),
    ("vm", "manifest", "my-vm", "-n", "vms", "--npus", "2"), ("kubevirt", "status"), ("policy", "show"),
    ("kubevirt", "permit-devices", "--dry-run"), ("kubevirt", "enable-gates", "--dry-run"),
)


# -- recording the remedies the CLI spells ---------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.own: dict[tuple[str, ...], Command] = {}  # the words as spelt -> the command
        self.external: set[tuple[str, ...]] = set()
        self.running: tuple[str, ...] = ()  # the command whose output is being recorded
        self.printed_by: dict[tuple[str, ...], tuple[str, ...]] = {}  # a remedy's words -> the first that printed it

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import rblnctl.cli.rerun as rerun

        spelt = rerun.command_words
        render = rerun.render

        def command_words(ctx: Any, command: Any, **kw: Any) -> list[str]:
            words = spelt(ctx, command, **kw)
            self._note(command, words)
            return words

        def render_(ctx: Any, command: Any, **kw: Any) -> str:
            self._note(command, None)
            return render(ctx, command, **kw)

        line = Command.line

        def line_(command: Command) -> str:
            self._note(command, None)
            return line.fget(command)  # type: ignore[attr-defined]

        monkeypatch.setattr(rerun, "command_words", command_words)
        monkeypatch.setattr(rerun, "render", render_)
        monkeypatch.setattr(Command, "line", property(line_))

    def _note(self, command: Any, words: list[str] | None) -> None:
        if command.program:
            key = (command.program, *command.words)
            self.external.add(key)
        elif words is not None and not any(w.startswith("$(") or w.startswith('"$') for w in words):
            key = tuple(str(w) for w in words)
            self.own[key] = command
        else:
            return
        self.printed_by.setdefault(key, self.running)


def invoke(argv: list[str]) -> Any:
    return CliRunner().invoke(app, argv, prog_name="rblnctl", catch_exceptions=False)


# -- checking one rblnctl command ------------------------------------------------------------------------------


def _leaf(words: list[str]) -> tuple[Any, list[str]]:
    """The click command the words name (past the root options), and its own words."""
    root = _get_command_once(app)
    valued = {o for p in root.params if not getattr(p, "is_flag", False) for o in p.opts}
    cmd: Any = root
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-") and hasattr(cmd, "get_command"):
            i += 2 if w in valued else 1
            continue
        sub = cmd.get_command(None, w) if hasattr(cmd, "get_command") else None
        if sub is None:
            break
        cmd, i = sub, i + 1
    return cmd, words[i:]


def check_own(words: tuple[str, ...], command: Command) -> str | None:
    """Run (or, on a host, parse) one spelt rblnctl command in the current world; what is wrong, or None."""
    argv = list(words[1:])  # after the program name (`rblnctl`; `kubectl rbln` is not spelt here)
    cmd, own = _leaf(argv)
    names = {p.name for p in cmd.params}
    if command.on_host:
        try:
            cmd.make_context(cmd.name, list(own))
        except Exception as e:  # click's UsageError and friends: bad input
            return f"does not parse: {e}"
        return None
    dry = "dry_run" in names
    if dry and "--dry-run" not in argv:
        argv.append("--dry-run")
    r = invoke(argv)
    said = r.stderr + r.stdout
    if r.exit_code == 2:
        return f"bad input (exit 2): {said.strip()[-400:]}"
    if re.search(r"^error: refusing", r.stderr, re.M):
        return f"refused: {r.stderr.strip()[-600:]}"
    if dry and r.exit_code != 0:
        return f"its dry run failed (exit {r.exit_code}): {said.strip()[-400:]}"
    return None


# -- checking one external command -----------------------------------------------------------------------------

# helm v3's flags of the subcommands remedies name (helm.sh/docs/helm/helm_upgrade: `helm upgrade [RELEASE] [CHART]
# [flags]`; -i/--install, --reuse-values, --reset-then-reuse-values, --set, --version, -n/--namespace, --devel,
# --wait, --timeout, --atomic, -f/--values, --create-namespace are its flags and helm's globals)
HELM = {("upgrade",): {"--install", "-i", "--reuse-values", "--reset-then-reuse-values", "--reset-values", "--set",
                       "--set-string", "--version", "--namespace", "-n", "--devel", "--wait", "--timeout",
                       "--atomic", "--values", "-f", "--create-namespace", "--kube-context", "--kubeconfig"}}
# virtctl v1.9.0's (kubevirt/kubevirt@v1.9.0 pkg/virtctl/vm/vm.go: start/stop/restart with --dry-run, --force,
# --grace-period; -n/--namespace from the client config): none is named by a remedy today, the table stays honest.
VIRTCTL = {("start",): {"--paused", "--dry-run", "-n", "--namespace"},
           ("stop",): {"--force", "--grace-period", "--dry-run", "-n", "--namespace"},
           ("restart",): {"--force", "--grace-period", "--dry-run", "-n", "--namespace"}}


@functools.cache
def _kubectl_help(path: tuple[str, ...]) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is on PATH"
    return subprocess.run([kubectl, *path, "--help"], capture_output=True, text=True, timeout=30).stdout


def _kubectl_path(words: tuple[str, ...]) -> tuple[str, ...]:
    """The kubectl subcommand the words name (`uncordon`, `auth can-i`): the first word when `kubectl WORD --help`
    knows it, then each word its `Available Commands:` list."""
    if not words or words[0].startswith("-") or "Usage:" not in _kubectl_help(words[:1]):
        return ()
    path: tuple[str, ...] = words[:1]
    for w in words[1:]:
        sub = re.search(r"^Available Commands:\n((?:  .*\n)+)", _kubectl_help(path), re.M)
        if w.startswith("-") or not sub or not re.search(rf"^\s+{re.escape(w)}\s", sub.group(1), re.M):
            break
        path += (w,)
    return path


def _flags(words: tuple[str, ...]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("-") and w != "-"]


def check_external(words: tuple[str, ...]) -> str | None:
    program, args = words[0], words[1:]
    if program == "kubectl":
        path = _kubectl_path(args)
        if not path:
            return f"no kubectl subcommand: {shlex.join(words)}"
        known = _kubectl_help(path) + _kubectl_help(("options",))
        bad = [f for f in _flags(args) if not re.search(rf"(^|[\s,]){re.escape(f)}[=\s:,\[]", known, re.M)]
        return f"kubectl {' '.join(path)} has no {', '.join(bad)}" if bad else None
    table = {"helm": HELM, "virtctl": VIRTCTL}.get(program)
    if table is None:
        return f"an external program no table records: {program}"
    sub = next((p for p in table if args[:len(p)] == p), None)
    if sub is None:
        return f"{program} {args[:1]} is not a recorded subcommand"
    bad = [f for f in _flags(args[len(sub):]) if f not in table[sub]]
    return f"{program} {' '.join(sub)} has no {', '.join(bad)}" if bad else None


# -- one world ---------------------------------------------------------------------------------------------------


class Lister(Protocol):
    """What lists a world's objects: the fake's FakeApiServer or a real server's Api (tests/cluster/client.py)."""

    def list(self, kind: str, namespace: str | None = None) -> list[dict]: ...


def surfaces(world: Lister, own: Sequence[str] | None = None, *, vms: bool = True) -> list[list[str]]:
    """SURFACES, then each NPU node's `node set-mode vm|container --dry-run`, each VM's `vm diagnose`, and the
    world's own command (`own`) as a dry run. `vms`: the world serves KubeVirt's VirtualMachine kind."""
    out = [list(x) for x in SURFACES]
    for n in world.list("Node"):
        if (n["metadata"].get("labels") or {}).get(o.NPU_PRESENT_LABEL):
            out += [["node", "set-mode", m, n["metadata"]["name"], "--dry-run"] for m in ("vm", "container")]
    if vms:
        out += [["vm", "diagnose", v["metadata"]["name"], "-n", v["metadata"]["namespace"]]
                for v in world.list("VirtualMachine")]
    if own:
        out.append([*own, "--dry-run"])
    return out


@dataclass
class Checked:
    """One world's check: how many commands ran there, the distinct remedies recorded, and what is wrong."""

    runs: int
    own: int
    external: int
    seconds: float
    problems: list[str] = field(default_factory=list)


def check_world(world: str, connection: Sequence[str], argvs: Sequence[Sequence[str]],
                monkeypatch: pytest.MonkeyPatch) -> Checked:
    """Run each of `argvs` with the `connection` flags, record the remedies spelt, then check each one. The counts
    are printed (`pytest -s` shows them: docs/testing.md's numbers)."""
    start = time.monotonic()
    rec = Recorder()
    with monkeypatch.context() as m:
        rec.install(m)
        for argv in argvs:
            rec.running = tuple(argv)
            r = invoke([*connection, *argv])
            assert "Traceback" not in r.stderr, (argv, r.stderr)

    def by(words: tuple[str, ...]) -> str:
        return f"(printed by `{shlex.join(rec.printed_by.get(words, ()))}`)"

    problems = [f"{shlex.join(w)} {by(w)}: {why}" for w, c in sorted(rec.own.items()) if (why := check_own(w, c))]
    problems += [f"{shlex.join(w)} {by(w)}: {why}" for w in sorted(rec.external) if (why := check_external(w))]
    checked = Checked(len(argvs), len(rec.own), len(rec.external), time.monotonic() - start, problems)
    print(f"remedy check {world}: {checked.runs} commands run, {checked.own} rblnctl remedies, "
          f"{checked.external} external, {checked.seconds:.1f} s")
    return checked
