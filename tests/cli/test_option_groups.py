"""Option groups (rblnctl.cli.options.OptionGroup, grouped): declared once, expanded into the same typer parameters.

A grouped command's --help and parsing must be what the same options written out one by one give, and every
command that has a group's options must take them through the group (one declaration, not a copy per command).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Annotated

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from rblnctl.cli.app import app
from rblnctl.cli.options import (
    DrainFlags,
    DryRunOpt,
    HostMutating,
    ModeFlags,
    Mutating,
    OutputOpt,
    ServerDryRunOpt,
    VfioHost,
    Waiting,
    YesOpt,
    grouped,
    not_repeated,
)

CLI = Path(__file__).resolve().parents[2] / "rblnctl" / "cli"


def _apps() -> tuple[typer.Typer, typer.Typer, list]:
    seen: list = []
    by_hand, by_group = typer.Typer(), typer.Typer()

    @by_hand.command()
    def change(name: str, dry_run: DryRunOpt = False, server_dry_run: ServerDryRunOpt = False, yes: YesOpt = False,
               output: OutputOpt = "table") -> None:
        """Change NAME."""

    @by_group.command()
    @grouped
    def change2(name: str, mutation: Mutating = Mutating.options(), output: OutputOpt = "table") -> None:
        """Change NAME."""
        seen.append((name, mutation, output.format))

    return by_hand, by_group, seen


def test_a_grouped_command_has_the_help_of_its_options_written_out():
    by_hand, by_group, _ = _apps()
    runner = CliRunner()
    hand = runner.invoke(by_hand, ["--help"], prog_name="x", env={"COLUMNS": "100"})
    group = runner.invoke(by_group, ["--help"], prog_name="x", env={"COLUMNS": "100"})
    assert hand.exit_code == group.exit_code == 0
    assert "--dry-run" in group.output and "--yes" in group.output and "--server-dry-run" not in group.output
    assert group.output == hand.output


def test_a_grouped_command_receives_the_group_built_from_its_flags():
    _, by_group, seen = _apps()
    runner = CliRunner()
    assert runner.invoke(by_group, ["vm1", "--server-dry-run", "-y", "-o", "json"]).exit_code == 0
    assert runner.invoke(by_group, ["vm2"]).exit_code == 0
    assert runner.invoke(by_group, ["vm3", "--dry-run"]).exit_code == 0
    (n1, m1, f1), (n2, m2, _), (_, m3, _) = seen
    assert (n1, m1, f1) == ("vm1", Mutating(server_dry_run=True, yes=True), "json")
    assert (m1.how, m1.server) == ("server", True)
    assert (n2, m2.how, m2.yes, m2.server) == ("vm2", None, False, False)
    assert (m3.how, m3.server) == ("client", False)


def test_a_fixed_field_is_no_option():
    seen = []
    a = typer.Typer()

    @a.command()
    @grouped
    def go(mutation: Mutating = Mutating.options(yes=True)) -> None:
        seen.append(mutation)

    runner = CliRunner()
    assert runner.invoke(a, ["--yes"]).exit_code == 2  # no such option
    assert runner.invoke(a, []).exit_code == 0
    assert seen == [Mutating(yes=True)]


def test_set_mode_lists_the_drain_flags_then_its_own_where_they_always_were():
    params = [p.name for p in typer.main.get_command(app).commands["node"].commands["set-mode"].params]
    assert params.index("evict_vms") + 1 == params.index("evict_daemonsets")
    assert params.index("timeout") + 1 == params.index("uncordon")
    assert set(DrainFlags.fields()) < set(params)
    assert set(ModeFlags.fields()) == set(DrainFlags.fields()) | {"evict_daemonsets", "skip_iommu_check",
                                                                  "skip_release_check", "reverse", "uncordon"}


def test_an_order_that_misses_a_field_is_refused():
    class Short(Waiting):
        _order = ("wait",)

    with pytest.raises(TypeError, match="timeout"):
        Short.fields()


def _own_parameters() -> dict[str, set[str]]:
    """Each command function in rblnctl/cli (a group's package too: cli/vm/lifecycle.py is vm's): the names of the
    parameters it declares itself, by `group.function`."""
    out: dict[str, set[str]] = {}
    for path in CLI.rglob("*.py"):
        group = path.relative_to(CLI).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "command" for d in node.decorator_list):
                out[f"{group}.{node.name}"] = {a.arg for a in node.args.args + node.args.kwonlyargs}
    return out


def test_every_command_takes_a_groups_options_through_the_group():
    """No command declares --server-dry-run, a node drain flag or a vm lifecycle --wait itself: the groups do."""
    drain = set(DrainFlags.fields()) - {"selector"}  # node list has -l too
    rules = [("", {"server_dry_run"}, "Mutating"), ("node.", drain, "DrainFlags"), ("vm.", {"wait"}, "Waiting"),
             ("vfio.", {"dry_run", "yes"}, "HostMutating"), ("vfio.", {"state_file", "timeout"}, "VfioHost"),
             ("kubevirt.", {"allow_unknown"}, "GateEdit")]
    own = _own_parameters()
    assert {"node.drain", "vm.start", "vfio.bind", "vfio.unbind", "kubevirt.enable_gates"} <= set(own)
    for command, names in own.items():
        for prefix, members, group in rules:
            if command.startswith(prefix):
                assert not names & members, f"{command} declares {sorted(names & members)} itself: use {group}"
    assert set(Waiting.fields()) == {"wait", "timeout"}


def test_vfio_bind_unbind_and_recover_take_the_host_group_spelt_as_before():
    """--dry-run and --yes/-y of the sysfs-writing vfio commands come from HostMutating, --root, --state-file and
    --timeout from VfioHost, with the spellings they had, the host ones last as before."""
    vfio = typer.main.get_command(app).commands["vfio"]
    assert HostMutating.fields() == ("dry_run", "yes")
    assert VfioHost.fields() == ("root", "state_file", "timeout")
    for name in ("bind", "unbind", "recover"):
        params = vfio.commands[name].params
        opts = {p.name: p.opts for p in params}
        assert (opts["dry_run"], sorted(opts["yes"])) == (["--dry-run"], ["--yes", "-y"]), name
        assert [p.opts for p in params[-3:]] == [["--root"], ["--state-file"], ["--timeout"]], name


def test_an_option_declared_not_repeated_is_left_out_of_every_printed_rerun():
    """Whether a re-run repeats an option is said where the option is declared (options.not_repeated), so a new
    option declares it there: --preview here, which no list in rblnctl.cli.rerun names; --keep, declared without it,
    is repeated."""
    from rblnctl.cli.rerun import command_line, render
    from rblnctl.remedy import Command

    seen: list[str] = []
    a = typer.Typer()

    @a.command("go")
    def go(ctx: typer.Context, name: str,
           preview: Annotated[bool, not_repeated(typer.Option("--preview"))] = False,
           keep: Annotated[bool, typer.Option("--keep")] = False) -> None:
        seen.append(command_line(ctx))
        seen.append(render(ctx, Command.own("go", name, again=True)))

    @a.command("other")
    def other() -> None:
        """A second command: `a` is a group, as rblnctl is."""

    r = CliRunner().invoke(a, ["go", "x", "--preview", "--keep"], prog_name="rblnctl")
    assert r.exit_code == 0, r.output
    assert seen == ["rblnctl go --keep x", "rblnctl go x --keep"]


def test_every_dry_run_and_output_option_of_every_command_is_declared_not_repeated():
    """A printed re-run never carries --dry-run, --server-dry-run or -o: each declaration says so (not_repeated), and
    a command that declared one with a plain typer.Option would leak `-o json` into its recovery (a review of the
    move from rerun.DROPPED, which named them, to the declaration)."""
    import typer.main

    from rblnctl.cli.app import app
    from rblnctl.cli.rerun import not_repeated_params

    leaks: list[str] = []
    walked: list[str] = []

    def walk(cmd, path: str) -> None:
        if hasattr(cmd, "commands"):  # a group (typer's vendored click): its lazy commands load as they are asked for
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")
            return
        walked.append(path)
        marked = not_repeated_params(cmd)
        for p in cmd.params:
            flags = set(getattr(p, "opts", ())) | set(getattr(p, "secondary_opts", ()))
            if flags & {"--dry-run", "--server-dry-run", "-o", "--output"} and p.name not in marked:
                leaks.append(f"{path}: {p.name}")

    walk(typer.main.get_command(app), "rblnctl")
    assert len(walked) > 25 and "rblnctl node set-mode" in walked and "rblnctl vfio bind" in walked
    assert leaks == []
