"""Issue 39: every remedy a command prints is accepted by the command it names, checked by running it.

Generated over every scenario world of the suite's fakes: the crash-point explorer's worlds (tests/explore/worlds.py,
one per multi-step command) and the worlds of issue 39 (WORLDS below: the shared stack's three nodes of three
products, chart v0.3.0's policy, in container mode, with two products in vm mode, and with a switch to vm cut
short under a plugin stuck in `Init:0/2`). In each world every display command and every dry run of a write the
world offers (SURFACES, the world's own command too) is run, and each Remedy the CLI spells is recorded where it is
spelt (rblnctl.cli.rerun.command_words / render, rblnctl.remedy.Command.line: one path for all of them). Then, in
the same world:

- each rblnctl command runs with `--dry-run` when it takes one (else as it is: a display); none may be refused
  (`error: refusing ...`), be bad input (exit 2), or, as a dry run, fail. A command run on a node's host
  (Command.on_host: `preflight --local`, `vfio ...`) is parsed only: this machine is not that host.
- each external command (kubectl, helm, virtctl) has its subcommand and every flag checked against that
  program's `--help`: kubectl's own (it is on PATH); helm's and virtctl's recorded below with their source.
"""

from __future__ import annotations

import functools
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from rblnctl.cli.app import app
from rblnctl.remedy import Command
from tests.explore import worlds as explore
from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.releases import V0_3_0
from tests.helpers import _get_command_once

# -- the worlds of issue 39: the shared stack (../shared/stack/README.md, nodes.yaml) on the fake -------------------

STACK = (("npu-node-1", "RBLN-CA12", 4), ("npu-node-2", "RBLN-CA25", 4), ("npu-node-3", "RBLN-CA22", 2))


def stack(server: FakeApiServer, modes: tuple[str, str, str] = ("container",) * 3) -> None:
    """Chart v0.3.0's policy (its sandbox resourceList names RBLN-CA12 ATOM_PT and RBLN-CA25 ATOM_MAX_PT, nothing
    for RBLN-CA22: RBLN-SW/rbln-npu-operator@v0.3.0 deployments/rbln-npu-operator/values.yaml lines 272-284, as
    tests/fakes/releases.py V03_SANDBOX_RESOURCES), KubeVirt v1.9.0 with HostDevices, the stack's three nodes."""
    policy = V0_3_0.policy(vfio_manager=True, sandbox=True, device_plugin=True)
    server.add(policy, o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"), o.namespace("vms"))
    for (name, product, npus), mode in zip(STACK, modes, strict=True):
        server.add(o.npu_node(name, product=product, npus=npus, mode=mode, release=V0_3_0, policy=policy))


def stack_two_products_in_vm_mode(server: FakeApiServer) -> list[Callable[[], None]]:
    stack(server, ("vm-passthrough", "vm-passthrough", "container"))
    server.add(o.vm("vms", "v1", running=False, host_devices=[o.vm_resource_name("RBLN-CA12")]))
    return []


def stack_in_container_mode(server: FakeApiServer) -> list[Callable[[], None]]:
    stack(server)
    return []


def stack_switch_cut_short(server: FakeApiServer) -> list[Callable[[], None]]:
    """npu-node-1 relabelled to vm by a set-mode cut short (its record, the cordon), the simulated operator v0.3.0
    converging it: its sandbox plugin waits in `Init:0/2` (driver-ready) for a driver pod that never runs on a
    vm-passthrough node (RBLN-SW/rbln-npu-operator@v0.3.0 internal/scope/patch/sandbox-device-plugin.go), as on the
    shared stack. A VM asks for the node's product."""
    import json

    from tests.fakes.operator import SimulatedOperator

    stack(server)
    op = SimulatedOperator(server, release=V0_3_0, ready_delay_s=0.05).start()
    assert op.wait_idle()
    server.mutate("Node", "npu-node-1", None, fn=lambda n: (
        n["metadata"]["labels"].update({o.WORKLOAD_LABEL: o.MODE_VM}),
        n["metadata"].setdefault("annotations", {}).update({"rebellions.ai/rblnctl.set-mode": json.dumps(
            {"target": o.MODE_VM, "from": "container", "started": "2026-12-06T10:00:00Z",
             "cordoned_by_rblnctl": True, "step": "wait"})}),
        n["spec"].update(unschedulable=True)))
    assert op.wait_idle()
    server.add(o.vm("vms", "v1", running=False, host_devices=["rebellions.ai/ATOM_PT"]))  # v0.3.0's CA12 name
    return [op.stop]


WORLDS: dict[str, Callable[[FakeApiServer], list[Callable[[], None]]]] = {
    "stack-container": stack_in_container_mode,
    "stack-two-products-vm": stack_two_products_in_vm_mode,
    "stack-switch-cut-short": stack_switch_cut_short,
}
for _w in explore.WORLDS:  # one per builder (several commands share a world)
    if _w.build not in WORLDS.values():
        WORLDS[_w.name] = _w.build
COMMAND_OF = {w.name: w.argv for w in explore.WORLDS}  # the world's own command, as a dry run

# What is run in every world: what a user looks at first, and the dry runs of the writes that print remedies.
SURFACES: tuple[tuple[str, ...], ...] = (
    ("status",), ("node", "list", "-o", "wide"), ("preflight",), ("vm", "list", "-A"),
    ("vm", "fit", "--npus", "1"), ("vm", "fit", "--npus", "2"), ("vm", "fit", "--npus", "2", "--product", "RBLN-CA12"),
    ("vm", "manifest", "my-vm", "-n", "vms", "--npus", "2"), ("kubevirt", "status"), ("policy", "show"),
)


# -- recording the remedies the CLI spells ---------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.own: dict[tuple[str, ...], Command] = {}  # the words as spelt -> the command
        self.external: set[tuple[str, ...]] = set()

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
            self.external.add((command.program, *command.words))
        elif words is not None and not any(w.startswith("$(") or w.startswith('"$') for w in words):
            self.own[tuple(str(w) for w in words)] = command


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


# -- the test ----------------------------------------------------------------------------------------------------

COUNTS: dict[str, tuple[int, int, int, float]] = {}  # world -> (surfaces, rblnctl remedies, external, seconds)


def _npu_nodes(server: FakeApiServer) -> list[str]:
    return [n["metadata"]["name"] for n in server.list("Node")
            if (n["metadata"].get("labels") or {}).get(o.NPU_PRESENT_LABEL)]


@pytest.mark.parametrize("world", sorted(WORLDS))
def test_every_remedy_printed_in_the_world_is_accepted_by_the_command_it_names(world, monkeypatch):
    start = time.monotonic()
    server = FakeApiServer().start()
    stops: list[Callable[[], None]] = []
    try:
        stops = WORLDS[world](server)
        s = ["--server", server.url]
        surfaces = [list(x) for x in SURFACES]
        for n in _npu_nodes(server):
            surfaces += [["node", "set-mode", m, n, "--dry-run"] for m in ("vm", "container")]
        surfaces += [["vm", "diagnose", v["metadata"]["name"], "-n", v["metadata"]["namespace"]]
                     for v in server.list("VirtualMachine")]
        if world in COMMAND_OF:
            surfaces.append([*COMMAND_OF[world], "--dry-run"])
        rec = Recorder()
        with monkeypatch.context() as m:
            rec.install(m)
            for argv in surfaces:
                r = invoke([*s, *argv])
                assert "Traceback" not in r.stderr, (argv, r.stderr)
        problems = [f"{shlex.join(w)}: {why}" for w, c in sorted(rec.own.items())
                    if (why := check_own(w, c))]
        problems += [f"{shlex.join(w)}: {why}" for w in sorted(rec.external) if (why := check_external(w))]
        COUNTS[world] = (len(surfaces), len(rec.own), len(rec.external), time.monotonic() - start)
        assert problems == [], "\n".join(problems)
    finally:
        for stop in stops:
            stop()
        server.stop()


def test_the_check_finds_a_remedy_the_named_command_refuses(monkeypatch):
    """The check itself can fail: issue 39 (1)'s hint, `node set-mode vm npu-node-3` of an RBLN-CA22 node under chart
    v0.3.0's policy, is refused by set-mode, and check_own says so."""
    server = FakeApiServer().start()
    try:
        stack(server)
        words = ("rblnctl", "--server", server.url, "node", "set-mode", "vm", "npu-node-3")
        why = check_own(words, Command.own("node", "set-mode", "vm", "npu-node-3"))
        assert why is not None and why.startswith("refused:") and "RBLN-CA22" in why
        assert check_external(("kubectl", "uncordon", "n1", "--no-such-flag")) == \
            "kubectl uncordon has no --no-such-flag"
        assert check_external(("kubectl", "uncordon", "n1")) is None
        assert check_external(("helm", "upgrade", "x", "y", "--reuse-valuez")) == "helm upgrade has no --reuse-valuez"
    finally:
        server.stop()
