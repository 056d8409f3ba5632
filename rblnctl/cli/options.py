"""Shared options, so every command spells kubectl-style flags the same way: one Annotated alias per option, and
option groups (a frozen value of aliases, declared once) that a command receives whole (`grouped`).

This module is the home of option groups (one mechanism for them, standards.md; every group lives here): Mutating
(--dry-run, the server's dry run, --yes: every command that changes the cluster), HostMutating (--dry-run and --yes
of a command that writes a host's sysfs: vfio bind, unbind, recover), VfioHost (the host tree and record those three
work on, and how long an unbind may wait), GateEdit (kubevirt enable-gates, disable-gates), Waiting (--wait and
--timeout of vm start, stop, restart), DrainFlags (node drain's and set-mode's flags that select, pace and drain the
nodes) and ModeFlags (set-mode's: DrainFlags and its own). To add one:

1. declare each option once, as an Annotated alias here (`FooOpt = Annotated[int, typer.Option("--foo", ...)]`);
2. subclass OptionGroup here: its fields are class annotations naming those aliases, their defaults class attributes
   (properties may derive from them, as Mutating.how);
3. a command takes it as one parameter defaulting to `Group.options()` under `@grouped` (below its `@app.command`);
   `Group.options(field=value)` fixes a field the command does not offer;
4. tests/cli/test_option_groups.py (test_every_command_takes_a_groups_options_through_the_group) names the fields no
   command may declare itself.

An option a printed re-run or recovery command leaves out (rblnctl.cli.rerun: a dry run, -o) says so where it is
declared: `not_repeated(typer.Option(...))` (rblnctl.cli.flags, re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar

import typer

from rblnctl import constants as C  # plain data: the defaults the help texts show
from rblnctl.cli.flags import not_repeated
from rblnctl.cli.output import COMMON_FORMATS, FORMATS_HELP, Format, OutputSpec, parse_output
from rblnctl.node.defaults import DEFAULT_TIMEOUT_S  # plain values, no imports (read at startup for free)

if TYPE_CHECKING:
    import inspect

    from typer.models import OptionInfo

    from rblnctl.node.options import DrainOptions, ModeOptions
    from rblnctl.node.pool import PoolOptions


def output_parser(allowed: tuple[Format, ...] = COMMON_FORMATS) -> Callable[[str | OutputSpec], OutputSpec]:
    """Turn the `-o` text into an OutputSpec (bad values: exit 2, one line)."""

    def parser(value: str | OutputSpec) -> OutputSpec:
        if isinstance(value, OutputSpec):
            return value
        return parse_output(value, allowed=allowed)

    return parser


def output_option(allowed: tuple[Format, ...] = COMMON_FORMATS, formats_help: str = FORMATS_HELP) -> OptionInfo:
    """The -o/--output option for a command printing the given formats."""
    from rblnctl.cli.completion import complete_output

    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        return complete_output(ctx, incomplete, allowed)

    return not_repeated(typer.Option("--output", "-o", metavar="FORMAT", parser=output_parser(allowed),
                                     autocompletion=complete,
                                     help=f"Output format: {formats_help} (as kubectl: -o=json and -ojson work too).",
                                     show_default=False))


OutputOpt = Annotated[OutputSpec, output_option()]
DryRunOpt = Annotated[
    bool,
    not_repeated(typer.Option("--dry-run", help="Print the plan, change nothing (=server: the server's admission "
                              "checks the writes, none persists).")),
]
HostDryRunOpt = Annotated[
    bool, not_repeated(typer.Option("--dry-run", help="Print every sysfs write the plan would make, and make none.")),
]
ServerDryRunOpt = Annotated[
    bool,
    # kubectl removed --server-dry-run for --dry-run=server; the old spelling still works, unlisted.
    not_repeated(typer.Option("--server-dry-run", hidden=True, help="Same as --dry-run=server.")),
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (for automation).")]
KubeVirtNameOpt = Annotated[
    str | None,
    typer.Option("--name", metavar="NAME", help="Name of the KubeVirt CR [default: the only one in the cluster].",
                 show_default=False),
]
KubeVirtForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Go ahead when the KubeVirt version is below what the change needs, or unknown."),
]
AllowUnknownGatesOpt = Annotated[
    bool,
    typer.Option("--allow-unknown", help="Write gates no KubeVirt release rblnctl knows registers (for a KubeVirt "
                 "newer than rblnctl); without it such a name is refused as a typo, with the gate it most likely "
                 "meant."),
]
_HOST_ROOT_HELP = ("The host's root directory: sys/, proc/, dev/ and run/ are read{} under it; a captured or "
                   "simulated tree, or /host in a debug pod.")
HostRootOpt = Annotated[  # of the commands that write sysfs (VfioHost)
    Path,
    typer.Option("--root", metavar="DIR", help=_HOST_ROOT_HELP.format(" (and sys/ written)"), show_default=True),
]
HostReadRootOpt = Annotated[  # of vfio status, which only reads
    Path, typer.Option("--root", metavar="DIR", help=_HOST_ROOT_HELP.format(""), show_default=True),
]
VfioStateOpt = Annotated[
    Path | None,
    typer.Option("--state-file", metavar="FILE", help="Record of original drivers "
                 f"[default: {C.VFIO_STATE_FILE} under --root].", show_default=False),
]
VfioWriteTimeoutOpt = Annotated[
    str,
    typer.Option("--timeout", metavar="DURATION", help="How long to wait for an unbind from vfio-pci, which the "
                 "kernel holds until a VFIO user (a VM) lets go of the device: then rblnctl stops waiting, names the "
                 "holder and says how to finish (the write itself cannot be cancelled). At least "
                 f"{C.VFIO_MIN_WRITE_TIMEOUT_S:g}s."),
]
# The running-VM guard's one override (rblnctl.vm.guard.OVERRIDE), as node set-mode and drain spell it; on a change
# that evicts nothing (a policy or KubeVirt CR edit) it only goes ahead, and says so.
GuardOverrideOpt = Annotated[
    bool,
    typer.Option("--evict-vms", help="Go ahead although running VMs hold NPUs this change takes away (the refusal "
                 "names them and `virtctl stop NAME -n NS`). Nothing is evicted by this command: those VMs keep "
                 "running with the devices they have and may not get them back at their next start."),
]
WatchOpt = Annotated[
    bool, typer.Option("--watch", "-w", help="Keep watching: redraw on every change (on a terminal), or print each "
                       "change as a line (piped). Ctrl-C ends it.")
]


def sort_by_option(example: str) -> OptionInfo:
    """--sort-by of a list command; `example`: two of its items' fields, as kubectl spells them."""
    return typer.Option("--sort-by", metavar="JSONPATH", show_default=False,
                        help=f"Sort by a field of each item's JSON (as kubectl: {example}; the fields in "
                        "docs/output.md).")


SelectorOpt = Annotated[
    str | None, typer.Option("--selector", "-l", metavar="SELECTOR",
                             help="Label selector, e.g. 'pool=vm' (kubectl's -l).")
]


GLOBAL_NOTE = ("Global options (--context, --kubeconfig, -n, --no-headers, -v=N, --no-color, connection flags) may "
               "go before or after the command; see 'rblnctl --help'.")


EXAMPLE_ROOM = 76  # an example line's columns on an 80-column terminal: click indents the epilog by 2, examples() by 2


def example_lines(line: str, room: int = EXAMPLE_ROOM) -> list[str]:
    """One example as the lines that fit `room`: kept as written when it fits; else its `# comment` goes on lines
    of its own above the command (folded at spaces, each a comment), and the command stands alone on its line,
    never broken (a command longer than the room is the one line left wider: copied whole, it still runs)."""
    if len(line) <= room:
        return [line]
    import textwrap

    command, sep, comment = line.partition(" # ") if not line.startswith("#") else ("", "#", line[1:])
    if not sep:
        return [line]
    said = [f"# {text}" for text in textwrap.wrap(comment.strip(), room - 2, break_long_words=False,
                                                    break_on_hyphens=False)]
    return said + ([command.rstrip()] if command.strip() else [])


def examples(*lines: str) -> str:
    """A command's help epilog: its examples, each fitting an 80-column terminal (example_lines), then where the
    global options are."""
    body = "\n".join(f"  {out}" for line in lines for out in example_lines(line))
    return f"\b\nExamples:\n{body}\n\n{GLOBAL_NOTE}"


def dry_run_mode(dry_run: bool, server_dry_run: bool) -> str | None:
    """None (a real run), "client" (plan only, no request) or "server" (writes sent with dryRun=All)."""
    if server_dry_run:
        return "server"
    return "client" if dry_run else None


def timeout_s(text: str, option: str = "--timeout", *, minimum_s: float = 0.0) -> float:
    """A wait's --timeout in seconds (rblnctl.durations; bad input: exit 2, one line). Zero is refused: rblnctl
    never waits forever on a node, a VM or the operator; so is a value below `minimum_s`."""
    from rblnctl.durations import parse_duration

    seconds = parse_duration(text, what=option, minimum_s=minimum_s)
    assert seconds is not None  # zero_means_forever is off: parse_duration refuses 0
    return seconds


# -- option groups ---------------------------------------------------------------------------------------------


class OptionGroup:
    """Base of an option group: a frozen value whose fields are typer options (class annotations: the Annotated
    aliases; class attributes: the options' defaults). A command takes the group as one parameter whose default is
    `Group.options()`; `grouped` turns it into the fields' parameters for typer, at the parameter's place (so --help
    and completion list the options where they always were), and hands the command the group object.

    Not a dataclass: @dataclass runs at import, a few ms per group on every TAB press (as State in cli/app.py).
    `_order` (optional) is the --help order of the fields, for a group that extends another one's.
    """

    _order: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **values: object) -> None:
        names = self.fields()
        unknown = set(values) - set(names)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        for name in names:
            object.__setattr__(self, name, values.get(name, getattr(type(self), name)))

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """The fields' names, in --help order."""
        names = tuple(dict.fromkeys(n for klass in reversed(cls.__mro__)
                                    for n in vars(klass).get("__annotations__", {}) if not n.startswith("_")))
        if not cls._order:
            return names
        if sorted(cls._order) != sorted(names):
            raise TypeError(f"{cls.__name__}._order must name each of its fields once: {', '.join(names)}")
        return cls._order

    @classmethod
    def options(cls, **fixed: object) -> _Use:
        """This group's options, for a command's parameter default; `fixed` fields are values, not options (`vm
        start` asks nothing: Mutating.options(yes=True))."""
        return _Use(cls, fixed)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash(tuple(vars(self).items()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class _Use:
    """A command's use of an option group: the group, and the fields it fixes."""

    def __init__(self, group: type[OptionGroup], fixed: dict[str, object]) -> None:
        self.group, self.fixed = group, fixed

    def parameters(self) -> list[inspect.Parameter]:
        import inspect
        import typing

        hints = typing.get_type_hints(self.group, include_extras=True)
        return [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=getattr(self.group, name),
                                  annotation=hints[name])
                for name in self.group.fields() if name not in self.fixed]

    def build(self, values: dict[str, object]) -> OptionGroup:
        return self.group(**values, **self.fixed)


class grouped:  # noqa: N801 - used as a decorator
    """A command whose option groups (parameters defaulting to `Group.options()`) typer sees as the groups' fields.

    Under `@app.command(...)`. The signature typer reads is built when typer first builds the command, not at
    import (a command typer never builds costs nothing); a call gets each group built from its fields' values.
    """

    def __init__(self, func: Callable[..., None]) -> None:
        self.__wrapped__ = func
        self.__name__, self.__qualname__ = func.__name__, func.__qualname__
        self.__module__, self.__doc__ = func.__module__, func.__doc__
        # the signature typer reads, and each group parameter's use with its fields' names
        self._expanded: tuple[inspect.Signature, dict[str, tuple[_Use, list[str]]]] | None = None

    def _expand(self) -> tuple[inspect.Signature, dict[str, tuple[_Use, list[str]]]]:
        if self._expanded is None:
            import inspect

            sig = inspect.signature(self.__wrapped__, eval_str=True)
            params: list[inspect.Parameter] = []
            uses: dict[str, tuple[_Use, list[str]]] = {}  # group parameter -> (its use, its fields' names)
            for p in sig.parameters.values():
                if isinstance(p.default, _Use):
                    fields = p.default.parameters()
                    uses[p.name] = (p.default, [f.name for f in fields])
                    params += fields
                else:
                    params.append(p)
            self._expanded = (sig.replace(parameters=params), uses)
        return self._expanded

    @property
    def __signature__(self) -> inspect.Signature:  # what typer (inspect.signature) reads
        return self._expand()[0]

    @property
    def __annotations__(self) -> dict[str, object]:  # type: ignore[override]  # what typing.get_type_hints reads
        return {p.name: p.annotation for p in self._expand()[0].parameters.values()}

    def __call__(self, *args: object, **kwargs: object) -> None:
        for name, (use, fields) in self._expand()[1].items():
            if name not in kwargs:
                kwargs[name] = use.build({f: kwargs.pop(f) for f in fields if f in kwargs})
        return self.__wrapped__(*args, **kwargs)


class Mutating(OptionGroup):
    """--dry-run (client or server) and --yes: every command that changes the cluster."""

    dry_run: DryRunOpt = False
    server_dry_run: ServerDryRunOpt = False
    yes: YesOpt = False

    @property
    def how(self) -> str | None:
        """None (a real run), "client" or "server" (dry_run_mode)."""
        return dry_run_mode(self.dry_run, self.server_dry_run)

    @property
    def server(self) -> bool:
        """A server dry run: writes sent with dryRun=All."""
        return self.how == "server"


class HostMutating(OptionGroup):
    """--dry-run (every sysfs write printed, none made) and --yes (no question before moving devices between
    drivers): every command that writes a host's sysfs (vfio bind, unbind, recover). No server dry run: no server."""

    dry_run: HostDryRunOpt = False
    yes: YesOpt = False


class VfioHost(OptionGroup):
    """--root, --state-file and --timeout of vfio bind, unbind and recover: the host tree they read and write, the
    record of original drivers, and how long an unbind from vfio-pci may wait."""

    root: HostRootOpt = Path(C.HOST_ROOT)
    state_file: VfioStateOpt = None
    timeout: VfioWriteTimeoutOpt = "10s"

    @property
    def timeout_s(self) -> float:
        return timeout_s(self.timeout, minimum_s=C.VFIO_MIN_WRITE_TIMEOUT_S)


class GateEdit(OptionGroup):
    """--name, --force and --allow-unknown of kubevirt enable-gates and disable-gates: which KubeVirt CR, and the two
    checks a gate edit may be told to pass over (the KubeVirt version, a gate name no release registers)."""

    name: KubeVirtNameOpt = None
    force: KubeVirtForceOpt = False
    allow_unknown: AllowUnknownGatesOpt = False


# -- vm start, stop and restart ---------------------------------------------------------------------------------

WaitOpt = Annotated[
    bool, typer.Option("--wait", help="Wait until the VM is Ready with its NPUs attached (stop: until its VMI and "
                       "virt-launcher pod are gone, its NPUs free), showing progress on stderr.")
]
WaitTimeoutOpt = Annotated[
    str, typer.Option("--timeout", metavar="DURATION", help="With --wait (or a start of a VM still stopping): how "
                      "long to wait (seconds or 90s, 5m, 1h); not there by then is exit 5.")
]


class Waiting(OptionGroup):
    """--wait and --timeout of vm start, stop and restart."""

    wait: WaitOpt = False
    timeout: WaitTimeoutOpt = "5m"

    @property
    def timeout_s(self) -> float:
        return timeout_s(self.timeout)


# -- node drain and set-mode: the flags that select, pace and drain the nodes (DrainFlags), and set-mode's own
# beside them (ModeFlags), each bound to one field of the library's options (docs/node.md "Overrides") -------------

def switch(flag: str, help: str) -> OptionInfo:
    """A yes/no option, `--flag` (or `--flag/--no-flag` for one a group turns on by default): its alias fits a line
    or two, as a group's switches are many (the default is the group field's)."""
    return typer.Option(flag, help=help)


AllPodsOpt = Annotated[bool, switch("--all-pods", "Evict every pod but DaemonSets', not only NPU users (as kubectl "
                                    "drain).")]
EmptyDirOpt = Annotated[bool, switch("--delete-emptydir-data", "Evict pods with emptyDir volumes (data lost).")]
DisableEvictionOpt = Annotated[bool, switch("--disable-eviction", "DELETE pods: no PodDisruptionBudget holds them.")]
TakeOverOpt = Annotated[bool, switch("--take-over", "Take over the node's lock if its holder expired.")]
DrainForceOpt = Annotated[bool, switch("--force", "Also evict pods no controller recreates (kubectl drain --force); "
                                       "nothing else.")]
DrainEvictVmsOpt = Annotated[bool, switch("--evict-vms", "Evict the VMs using the node's NPUs (they stop: no live "
                                          "migration).")]
ContinueOnErrorOpt = Annotated[bool, switch("--continue-on-error", "After a failure keep starting nodes, and skip "
                                            "refused ones [default: start no more].")]
GracePeriodOpt = Annotated[
    int | None,
    typer.Option("--grace-period", help="Seconds each pod gets to terminate [default: the pod's own].",
                 metavar="SECONDS", min=0, max=2**63 - 1, show_default=False),  # DeleteOptions: int64
]
DEFAULT_DRAIN_TIMEOUT = f"{DEFAULT_TIMEOUT_S / 60:g}m"
DrainTimeoutOpt = Annotated[
    str, typer.Option("--timeout", help="How long to wait (evictions, the operator): 90s, 10m, 1h.", metavar="DURATION")
]
LockNamespaceOpt = Annotated[
    str | None, typer.Option("--lock-namespace", help="The node lock's (a Lease) [default: the operator's].",
                             metavar="NAMESPACE", show_default=False)
]
MaxUnavailableOpt = Annotated[
    str, typer.Option("--max-unavailable", metavar="N|P%", help="Nodes mid-switch at once: N, or P% of them, rounded "
                      "down (at least 1).")
]

class DrainFlags(OptionGroup):
    """The flags of `node drain` and `node set-mode` that select, pace and drain the nodes, declared once; bound to the
    library's options one flag to one field (docs/node.md "Overrides")."""

    selector: SelectorOpt = None
    max_unavailable: MaxUnavailableOpt = "1"
    continue_on_error: ContinueOnErrorOpt = False
    force: DrainForceOpt = False
    evict_vms: DrainEvictVmsOpt = False
    all_pods: AllPodsOpt = False
    delete_emptydir_data: EmptyDirOpt = False
    disable_eviction: DisableEvictionOpt = False
    grace_period: GracePeriodOpt = None
    timeout: DrainTimeoutOpt = DEFAULT_DRAIN_TIMEOUT
    take_over: TakeOverOpt = False
    lock_namespace: LockNamespaceOpt = None

    def drain_options(self, *, server_dry_run: bool) -> DrainOptions:
        from rblnctl.node.options import DrainOptions

        return DrainOptions(all_pods=self.all_pods, force=self.force, evict_vms=self.evict_vms,
                            delete_emptydir_data=self.delete_emptydir_data, disable_eviction=self.disable_eviction,
                            grace_period_s=self.grace_period, timeout_s=timeout_s(self.timeout),
                            server_dry_run=server_dry_run, take_over=self.take_over,
                            lock_namespace=self.lock_namespace)

    def pool_options(self) -> PoolOptions:
        from rblnctl.errors import InvalidInput
        from rblnctl.node.pool import MaxUnavailable, PoolOptions

        try:
            limit = MaxUnavailable.parse(self.max_unavailable)
        except InvalidInput as e:
            raise InvalidInput(f"--max-unavailable: {e}") from e
        return PoolOptions(max_unavailable=limit, continue_on_error=self.continue_on_error)


EvictDaemonsetsOpt = Annotated[bool, switch("--evict-daemonsets", "Evict DaemonSet pods that use the node's NPUs.")]
SkipIommuCheckOpt = Annotated[bool, switch("--skip-iommu-check", "To vm although NFD reports the IOMMU off.")]
SkipReleaseCheckOpt = Annotated[bool, switch("--skip-release-check", "To vm although the operator release serves no "
                                             "VMs (the wait times out).")]
ReverseOpt = Annotated[bool, switch("--reverse", "Go back from the node's unfinished switch to the other mode.")]
UncordonOpt = Annotated[bool, switch("--uncordon/--no-uncordon", "Uncordon at the end (if rblnctl cordoned it).")]

class ModeFlags(DrainFlags):
    """set-mode's flags: the drain's, and the switch's own among them (in --help where they have always been)."""

    evict_daemonsets: EvictDaemonsetsOpt = False
    skip_iommu_check: SkipIommuCheckOpt = False
    skip_release_check: SkipReleaseCheckOpt = False
    reverse: ReverseOpt = False
    uncordon: UncordonOpt = True

    _order: ClassVar[tuple[str, ...]] = (
        "selector", "max_unavailable", "continue_on_error", "force", "evict_vms", "evict_daemonsets",
        "skip_iommu_check", "skip_release_check", "reverse", "all_pods", "delete_emptydir_data", "disable_eviction",
        "grace_period", "timeout", "uncordon", "take_over", "lock_namespace")

    def mode_options(self, *, server_dry_run: bool) -> ModeOptions:
        from rblnctl.node.options import ModeOptions

        return ModeOptions(drain=self.drain_options(server_dry_run=server_dry_run),
                           evict_daemonsets=self.evict_daemonsets, skip_iommu_check=self.skip_iommu_check,
                           skip_release_check=self.skip_release_check, reverse=self.reverse, uncordon=self.uncordon)
