"""The error edge: RblnGroup maps every RblnError to one line on stderr and its documented exit code.

This is the only place that decides exit codes (docs/exit-codes.md). It also lets kubectl users type
global options anywhere on the line (`rblnctl kubevirt status --context prod`), as kubectl allows.
"""

from __future__ import annotations

from rblnctl.errors import one_line

import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from rblnctl import errors as E
from rblnctl.cli.rerun import LEAF, prog_name, remedy_text, render  # noqa: F401 - prog_name: re-exported
from rblnctl.remedy import Remedy

if TYPE_CHECKING:  # typer's click (typer._click) and the library's types, for the checker only
    from types import FrameType

    from typer._click import ClickException, Command, Context

    from rblnctl.node.record import Recovery
    from rblnctl.plan import Blocker

_prog = prog_name

# Most specific class first; the first match in an error's MRO wins.
EXIT_CODES: dict[type[BaseException], int] = {
    E.ConfigError: 2,
    E.InvalidInput: 2,
    E.ClusterUnreachable: 3,
    E.AuthError: 4,
    E.WaitTimeout: 5,
    E.Partial: 6,
    E.RblnError: 1,
}
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_BUG = 70
EXIT_INTERRUPTED = 130

# Global options (root callback) that may also follow the subcommand; value-taking ones first.
GLOBAL_VALUE_OPTS = ("--kubeconfig", "--context", "--cluster", "--user", "--server", "-s", "--token",
                     "--certificate-authority", "--as", "--as-group", "--request-timeout", "--namespace", "-n", "--v")
GLOBAL_FLAG_OPTS = ("-v", "--verbose", "--no-color", "--insecure-skip-tls-verify", "--all-namespaces", "-A",
                    "--no-headers")
_SHORT_VALUE_OPTS = ("-n", "-s")  # `-nkube-system`, as kubectl accepts
DRY_RUN_MODES = ("client", "server", "none")


def exit_code_for(err: BaseException) -> int:
    """Return the documented exit code for an error."""
    for klass in type(err).__mro__:
        if klass in EXIT_CODES:
            return EXIT_CODES[klass]
    return EXIT_BUG


def interrupt_exit_code(err: BaseException) -> int:
    """130 for Ctrl-C; 128 + the signal number for SIGTERM (143) and SIGHUP (129), as shells report them."""
    signum = getattr(err, "signum", None)
    return EXIT_INTERRUPTED if signum is None else 128 + int(signum)


def install_signal_handlers() -> None:
    """Turn SIGTERM and SIGHUP (timeout(1), systemd, a dropped ssh session) into Interrupted in the main thread."""
    import signal

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise E.Interrupted(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def hoist_global_options(args: list[str], root: Command | None = None) -> list[str]:
    """Move global options that follow a subcommand to the front, and spell kubectl's flags our way.

    `--dry-run=client` -> `--dry-run`, `--dry-run=server` -> `--server-dry-run`, `--dry-run=none` -> dropped;
    a bare `--dry-run` is `--dry-run=client` (kubectl's NoOptDefVal) and never takes the next word: one
    followed by `client`, `server` or `none` is a usage error (kubectl would read that word as an argument:
    `enable-gates --dry-run client` would queue a gate named client);
    kubectl's log level `-v=6`, `-v6` or `-v 6` -> `--v=6` (a bare `-v`, `-vv` still counts).
    Everything after `--` is left alone. With `root` (the click group), the walk follows the
    subcommands, so the value of a subcommand's own option (`-l --context`) is never taken for a
    global option.
    """
    front: list[str] = []
    rest: list[str] = []
    cmd = root
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest.extend(args[i:])
            break
        name, eq, _ = a.partition("=")
        if name in ("--dry-run", "--server-dry-run"):
            # One dry-run mode, the last one given, as kubectl's single --dry-run flag.
            rest = [x for x in rest if x not in ("--dry-run", "--server-dry-run")]
        if a == "--dry-run" and i + 1 < len(args) and args[i + 1] in DRY_RUN_MODES:
            # kubectl (pkg/cmd/util/helpers.go GetDryRunStrategy) takes a bare --dry-run as client and leaves the
            # next word to the command; a mode written after a space is almost always meant as the mode.
            raise typer.BadParameter(f"write the dry-run mode with '=': --dry-run={args[i + 1]} (a bare --dry-run "
                                     f"means --dry-run=client and never takes the next word, so {args[i + 1]!r} "
                                     "would be read as an argument)")
        if name == "--dry-run" and eq:
            mode = a.split("=", 1)[1]
            if mode == "client":
                rest.append("--dry-run")
            elif mode == "server":
                if cmd is not None and not hasattr(cmd, "commands") and \
                        not any("--server-dry-run" in (getattr(p, "opts", ()) or ()) for p in cmd.params):
                    # a host command (vfio bind/unbind/recover): there is no API server to ask
                    raise typer.BadParameter(f"--dry-run=server needs an API server; `{cmd.name}` changes this "
                                             "host: use --dry-run")
                rest.append("--server-dry-run")
            elif mode != "none":
                raise typer.BadParameter(f"--dry-run must be none, client or server, not {mode!r}")
        elif _level(a, args[i + 1] if i + 1 < len(args) else None) is not None:
            value, used = _level(a, args[i + 1] if i + 1 < len(args) else None)  # type: ignore[misc]
            front.append(f"--v={value}")
            i += used - 1
        elif name in GLOBAL_VALUE_OPTS and _own_option(cmd, name):
            # The subcommand has an option of that name (`vm manifest --user`, the guest's user, as virtctl
            # create vm spells it): after the subcommand it is the subcommand's; the global one goes before it.
            rest.append(a)
            if not eq and i + 1 < len(args):
                rest.append(args[i + 1])
                i += 1
        elif name in GLOBAL_VALUE_OPTS:
            if eq:
                front.append(a)
            elif i + 1 < len(args):
                front.extend(args[i : i + 2])
                i += 1
            else:
                front.append(a)  # click reports the missing value
        elif a in GLOBAL_FLAG_OPTS or (a.startswith("-v") and set(a[1:]) == {"v"}):
            front.append(a)
        elif len(a) > 2 and a[:2] in _SHORT_VALUE_OPTS and not a.startswith("--"):
            front.append(a)  # -nkube-system
        else:
            rest.append(a)
            if cmd is not None:
                if not a.startswith("-"):
                    cmd = getattr(cmd, "commands", {}).get(a, cmd)  # descend into a subcommand
                elif not eq and _takes_value(cmd, a) and i + 1 < len(args):
                    rest.append(args[i + 1])  # the option's value, whatever it looks like
                    i += 1
        i += 1
    return front + rest


def _level(arg: str, following: str | None) -> tuple[str, int] | None:
    """kubectl's `-v=N`, `-vN`, `-v N`: the level and how many arguments it used; None otherwise."""
    if arg.startswith("-v=") and arg[3:].isdigit():
        return arg[3:], 1
    if arg.startswith("-v") and arg[2:].isdigit():
        return arg[2:], 1
    if arg in ("-v", "--v") and following is not None and following.isdigit():
        return following, 2
    return None


def _own_option(cmd: Command | None, token: str) -> bool:
    """Whether `cmd` (a leaf command, not a group) declares an option spelt `token` itself."""
    if cmd is None or hasattr(cmd, "commands"):
        return False
    return any(token in (getattr(p, "opts", ()) or ()) for p in getattr(cmd, "params", ()))


def _takes_value(cmd: Command, token: str) -> bool:
    """Whether `token` names an option of `cmd` that reads the next argument as its value."""
    for p in getattr(cmd, "params", ()):
        if token in (getattr(p, "opts", ()) or ()) or token in (getattr(p, "secondary_opts", ()) or ()):
            return (getattr(p, "param_type_name", "") == "option" and not getattr(p, "is_flag", False)
                    and not getattr(p, "count", False) and token not in p.secondary_opts)
    return False


def _argument_metavar(self: TyperArgument, ctx: Context, *, usage: bool = False) -> str:
    """Arguments in usage lines as kubectl writes them: `NODE`, `[GATE]...`, never typer's `{NODE}`."""
    var = self.metavar or (self.name or "").upper()
    if self.nargs != 1 and not var.endswith("..."):
        var += "..."
    return f"[{var}]" if usage and not self.required else var


# typer's TyperArgument has no per-argument hook for this; every rblnctl argument goes through it.
TyperArgument.make_metavar = _argument_metavar

_command_invoke = TyperCommand.invoke


def _leaf_invoke(self: TyperCommand, ctx: Context) -> Any:
    """Note the running command's context, so a hint printed from the error edge (the root's context) repeats it
    with its flags (rblnctl.cli.rerun.render)."""
    ctx.meta[LEAF] = ctx
    return _command_invoke(self, ctx)


TyperCommand.invoke = _leaf_invoke


class RblnGroup(TyperGroup):
    """Root command group: global-option hoisting, the RblnError -> exit code edge, kubectl-style usage errors."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
        from typer.exceptions import Abort

        if os.environ.get("_RBLNCTL_COMPLETE"):  # a completion request: rblnctl's completion classes answer it
            from rblnctl.cli.completion import register

            register()
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                              windows_expand_args=windows_expand_args, **extra)
        except NoArgsIsHelpError as err:  # `rblnctl node`: the group's help, as kubectl prints it (exit 0)
            if not standalone_mode:
                raise
            sys.stdout.write(err.format_message() + "\n")
            sys.exit(EXIT_OK)
        except ClickException as err:  # usage errors: bad flags, missing arguments, bad values
            if not standalone_mode:
                raise
            _usage_error(err)
            sys.exit(err.exit_code)
        except Abort:
            if not standalone_mode:
                raise
            sys.exit(EXIT_INTERRUPTED)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_options(list(args), self))

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except E.RblnError as err:
            _report(ctx, err)
            raise typer.Exit(exit_code_for(err)) from err
        except KeyboardInterrupt as err:
            signum = getattr(err, "signum", None)
            _stderr_line(interrupted_line(signum, _isatty(sys.stderr)))
            raise typer.Exit(interrupt_exit_code(err)) from None
        except Exception as err:  # a bug: one line, the traceback only with -v
            _report(ctx, err, bug=True)
            raise typer.Exit(EXIT_BUG) from err


from rblnctl.cli.flags import OVERRIDE_FLAGS, flag_for  # noqa: E402,F401 - re-exported


def blocker_text(blocker: Blocker, ctx: Context | None = None) -> str:
    """A blocker as the CLI says it: its message, its remedy (with `ctx`: its command spelt for this user), and the
    flag that would override it."""
    override = getattr(blocker, "override", None)
    text = str(blocker)
    remedy = getattr(blocker, "remedy", None)
    if remedy is not None and ctx is not None:
        text += f"; {remedy_text(ctx, remedy)}"
    if override:
        text += f" (pass {flag_for(override)} to go ahead anyway)"
    return text


def recovery_lines(recovery: Recovery | None, ctx: Context, *, drop: Iterable[str] = ()) -> list[str]:
    """A library Recovery phrased as the commands to type (rblnctl.cli.rerun.render: the program name as invoked,
    and every flag of this run the command takes, --context first of all; `drop`: options left out)."""
    if recovery is None or getattr(recovery, "remedies", None) is None:
        return []
    return [f"{(r.text + ':').ljust(8)} {render(ctx, r.command, drop=drop)}" for r in recovery.remedies
            if r.command is not None]


def _verbose(ctx: Context) -> bool:
    """-v given; False for an error raised before the root callback made the State (rblnctl.cli.state)."""
    from rblnctl.cli.state import State

    state = ctx.find_root().obj
    return isinstance(state, State) and state.verbose > 0


def _report(ctx: Context, err: BaseException, *, bug: bool = False) -> None:
    from rblnctl.cli.console import say
    from rblnctl.cli.sanitize import visible

    text = one_line(err) or type(err).__name__
    options = getattr(err, "options", ())
    if options:
        text += f" (pass {' and '.join(flag_for(o) for o in options)})"
    if bug:
        text = f"unexpected {type(err).__name__}: {text}"
        if not _verbose(ctx):
            text += " (rerun with -v for the traceback)"
    say(text, lead="error:", lead_style="bold red")
    for b in getattr(err, "blockers", None) or []:
        say(f"  - {blocker_text(b, ctx)}", indent=4)
    for line in getattr(err, "details", None) or []:  # a Remedy among them: its command spelt for this user
        say(f"  {remedy_text(ctx, line) if isinstance(line, Remedy) else line}")
    for line in recovery_lines(getattr(err, "recovery", None), ctx):
        say(f"  {line}")
    for line in rbac_lines(ctx, err):
        say(f"  {line}")
    if _verbose(ctx):
        import traceback

        sys.stderr.write(visible("".join(traceback.format_exception(err))))


def rbac_lines(ctx: Context, err: BaseException) -> list[str]:
    """After RBAC's 403 (exit 4), the rules this command needs as `rblnctl rbac` prints them: `--role read` for a
    command that only reads, `--role operate` for the rest (rblnctl.rbac.READ_COMMANDS)."""
    if not isinstance(err, E.Forbidden):
        return []
    from rblnctl.rbac import READ_COMMANDS, ROLE_OPERATE, ROLE_READ

    deepest: Context = ctx  # the root's invoke catches it: the command's own context is in the traceback's frames
    tb = err.__traceback__
    while tb is not None:
        found = tb.tb_frame.f_locals.get("ctx")
        if hasattr(found, "command_path") and hasattr(found, "find_root"):
            deepest = found
        tb = tb.tb_next
    try:
        path = deepest.command_path[len(deepest.find_root().command_path):].strip()
    except AttributeError:
        path = ""
    role = ROLE_READ if path in READ_COMMANDS else ROLE_OPERATE
    return [f"the rules rblnctl needs: `{_prog(ctx)} rbac --role {role} | kubectl apply -f -` (by a cluster admin), "
            f"then bind its ClusterRole rblnctl-{role} (and Role, in the operator's namespace) to your account "
            "(docs/rbac.md)"]


def _choice_hint(text: str) -> str:
    """` (did you mean dra?)` after click's "'dar' is not one of 'sandbox', 'dra'" (`set-method dar`)."""
    import re

    m = re.search(r"'([^']*)' is not one of (.*)$", text)
    if not m:
        return ""
    from rblnctl.suggest import did_you_mean

    return did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))


def _usage_error(err: ClickException) -> None:
    """A usage error as kubectl prints one: `error: ...` on one line, then where to read the usage."""
    from rblnctl.cli.console import say

    text = one_line(err.format_message()).rstrip(".")
    text = text[:1].lower() + text[1:] + _choice_hint(text)
    ctx = getattr(err, "ctx", None)
    path = getattr(ctx, "command_path", None) or "rblnctl"
    say(text, lead="error:", lead_style="bold red")
    say(f"See '{path} --help' for usage.")


def interrupted_line(signum: int | None, terminal: bool) -> str:
    """What an interrupted command says last: after Ctrl-C on a terminal, which echoed `^C` where the cursor
    was, on a line of its own (it read `^Cinterrupted`)."""
    if signum is not None:
        return f"terminated by signal {signum}"
    return "\ninterrupted" if terminal else "interrupted"


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _stderr_line(text: str) -> None:
    from rblnctl.cli.console import stderr

    stderr().print(text)
