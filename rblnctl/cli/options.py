"""Shared option aliases, so every command spells kubectl-style flags the same way."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rblnctl.cli.output import COMMON_FORMATS, FORMATS_HELP, Format, OutputSpec, parse_output


def output_parser(allowed: tuple[Format, ...] = COMMON_FORMATS) -> Any:
    """Turn the `-o` text into an OutputSpec (bad values: exit 2, one line)."""

    def parser(value: Any) -> OutputSpec:
        if isinstance(value, OutputSpec):
            return value
        return parse_output(value, allowed=allowed)

    return parser


def output_option(allowed: tuple[Format, ...] = COMMON_FORMATS, formats_help: str = FORMATS_HELP) -> Any:
    """The -o/--output option for a command printing the given formats."""
    from rblnctl.cli.completion import complete_output

    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        return complete_output(ctx, incomplete, allowed)

    return typer.Option("--output", "-o", metavar="FORMAT", parser=output_parser(allowed),
                        autocompletion=complete,
                        help=f"Output format: {formats_help} (as kubectl: -o=json and -ojson work too).",
                        show_default=False)


OutputOpt = Annotated[OutputSpec, output_option()]
DryRunOpt = Annotated[
    bool,
    typer.Option("--dry-run", help="Print the plan and change nothing. --dry-run=server sends the writes with "
                 "dryRun=All so admission still validates them; nothing persists."),
]
HostDryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print every sysfs write the plan would make, and make none."),
]
ServerDryRunOpt = Annotated[
    bool,
    # kubectl removed --server-dry-run for --dry-run=server; the old spelling still works, unlisted.
    typer.Option("--server-dry-run", hidden=True, help="Same as --dry-run=server."),
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (for automation).")]
# The running-VM guard's one override (rblnctl.vm.guard.OVERRIDE), as node set-mode and drain spell it; on a change
# that evicts nothing (a policy or KubeVirt CR edit) it only goes ahead, and says so.
GuardOverrideOpt = Annotated[
    bool,
    typer.Option("--evict-vms", help="Go ahead although running VMs hold NPUs this change takes away (the refusal "
                 "names them and `virtctl stop NAME -n NS`). Nothing is evicted by this command: those VMs keep "
                 "running with the devices they have and may not get them back at their next start."),
]
SelectorOpt = Annotated[
    str | None, typer.Option("--selector", "-l", metavar="SELECTOR",
                             help="Label selector, e.g. 'rebellions.ai/npu.workload.config=vm-passthrough'.")
]


GLOBAL_NOTE = ("Global options (--context, --kubeconfig, -n, --no-headers, -v=N, --no-color, connection flags) may "
               "go before or after the command; see 'rblnctl --help'.")


def examples(*lines: str) -> str:
    """A command's help epilog: its examples, kept as written, then where the global options are."""
    body = "\n".join(f"  {line}" for line in lines)
    return f"\b\nExamples:\n{body}\n\n{GLOBAL_NOTE}"


def dry_run_mode(dry_run: bool, server_dry_run: bool) -> str | None:
    """None (a real run), "client" (plan only, no request) or "server" (writes sent with dryRun=All)."""
    if server_dry_run:
        return "server"
    return "client" if dry_run else None
