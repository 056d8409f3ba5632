"""The command line the user ran, rebuilt from what was parsed: recovery hints repeat it with every flag given.

A hint that drops a flag runs another command (a set-method without --convert-vms converts nothing; a
migrate-resources without its --map derives other names), so the hint is built from the parsed
parameters rather than written by hand: every option given on the command line (or from the
environment), global ones included, in its long spelling, and the arguments in order. An option declared
not_repeated (rblnctl.cli.flags, as rblnctl.cli.options declares them) is dropped: the dry-run flags (the hint is for
the real run) and -o (the hint's output goes to a terminal); `add` appends flags the hint needs.
"""

from __future__ import annotations

import enum
import functools
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typer._click.core import Command as ClickCommand
    from typer._click.core import Context, Parameter

    from rblnctl.remedy import Command, Remedy

LEAF = "rblnctl.leaf"  # Context.meta (shared by a whole chain): the context of the command that runs (cli.errors)


def prog_name(ctx: Context) -> str:
    """How the user ran rblnctl (`rblnctl`, or `kubectl rbln` as a kubectl plugin): the program name every printed
    command starts with."""
    try:
        name = ctx.find_root().info_name
    except AttributeError:
        name = None
    return name if name in ("rblnctl", "kubectl rbln") else "rblnctl"


def not_repeated_params(*commands: ClickCommand | None) -> frozenset[str]:
    """The parameters of these commands a hint never repeats: those declared not_repeated (rblnctl.cli.flags), read
    from each command's declaration as typer read it to build the command."""
    return frozenset().union(*(_not_repeated(c.callback) for c in commands if c is not None and c.callback))


@functools.cache
def _not_repeated(callback: Callable[..., object]) -> frozenset[str]:
    from typer.utils import get_params_from_function

    from rblnctl.cli.flags import NOT_REPEATED

    declared = getattr(callback, "__wrapped__", callback)  # typer's wrapper (functools.update_wrapper) of the function
    return frozenset(name for name, meta in get_params_from_function(declared).items()
                     if getattr(meta.default, NOT_REPEATED, False))


@dataclass(frozen=True)
class Secret:
    """An option whose value is a secret: no hint or document ever holds it (it would land in terminals, scrollback,
    CI logs and files; kubectl never echoes a token either). It is named by `env`, a variable, and `what` says
    which value that is.

    A hint (shell form) names a shell variable for the shell to expand: `"${TOKEN:?set TOKEN to your --token}"`, not
    `"$TOKEN"`: pasted where TOKEN is unset or empty (no shell sets it), `"$TOKEN"` became `--token ''` and the command
    ran with no token (another identity, or a 401 far from the cause); POSIX `${VAR:?word}` makes the shell refuse
    the line instead, printing "TOKEN: set TOKEN to your --token" (bash, dash, zsh; fish rejects the syntax outright).

    A document's argv (argv form: `remedyCommand`, run with no shell) holds `$(TOKEN)` as the whole element, and
    `remedyEnv` maps TOKEN to `what`: a program replaces that element with the secret (Kubernetes' own spelling of
    a variable in a container's args, `$(VAR)`; docs/output.md, Remedy commands)."""

    env: str
    what: str

    @property
    def shell(self) -> str:
        return f'"${{{self.env}:?set {self.env} to {self.what}}}"'

    @property
    def argv(self) -> str:
        return f"$({self.env})"


SECRETS = {"token": Secret("TOKEN", "your --token")}  # by parameter name


class _Raw(str):
    """A word the shell must see as it is (a variable to expand), not quoted."""


class _Placeholder(str):
    """An argv element that stands for a secret (Secret.argv); `secret` says which."""

    secret: Secret


def _secret_word(secret: Secret, argv: bool) -> str:
    if not argv:
        return _Raw(secret.shell)
    word = _Placeholder(secret.argv)
    word.secret = secret
    return word


def _join(words: list[str]) -> str:
    return " ".join(w if isinstance(w, _Raw) else shlex.quote(w) for w in words)


def _given(ctx: Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _text(value: object) -> str:
    return str(value.value) if isinstance(value, enum.Enum) else str(value)


def _spell(param: Parameter, value: object, *, short: bool = False, argv: bool = False) -> list[str]:
    """One option as typed: its long spelling (`short`: its shortest, `-n`), then its value (a flag alone, a repeated
    option once per value); a secret's value named, never given (Secret: `argv`, its argv form, else its shell form)."""
    opts = sorted(param.opts, key=len) if short else sorted(param.opts, key=lambda o: (not o.startswith("--"), -len(o)))
    if getattr(param, "is_flag", False) and not getattr(param, "count", False):
        if value:
            return [opts[0]]
        return [sorted(param.secondary_opts, key=len)[-1]] if param.secondary_opts else []
    if getattr(param, "count", False):
        return [opts[0]] * (value if isinstance(value, int) else 0)  # a count option's value: an int (None: unset)
    secret = SECRETS.get(param.name or "")
    words: list[str] = []
    for v in value if isinstance(value, (list, tuple)) else [value]:
        if v is not None:
            words += [opts[0], _secret_word(secret, argv) if secret else _text(v)]
    return words


def _words(ctx: Context, skip: frozenset[str], override: Mapping[str, object], argv: bool = False) -> list[str]:
    words: list[str] = []
    args: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name is None or name in skip or (name not in override and not _given(ctx, name)):
            continue
        value = override.get(name, ctx.params.get(name))
        if getattr(param, "param_type_name", "") == "argument":
            args += [_text(v) for v in value] if isinstance(value, (list, tuple)) else [_text(value)]
            continue
        words += _spell(param, value, argv=argv)
    return words + args


def command_line(ctx: Context, *, add: Iterable[str] = (), drop: Iterable[str] = (),
                 override: Mapping[str, object] | None = None) -> str:
    """`rblnctl --context prod policy set-method --convert-vms --timeout 15m --yes dra`: what was run, for a hint.

    `override` sets a parameter (by name) to another value, e.g. the method of a "go back" hint.
    """
    chain = []
    c: Context | None = ctx
    while c is not None:
        chain.append(c)
        c = c.parent
    chain.reverse()
    skip = not_repeated_params(*(c.command for c in chain)) | frozenset(drop)
    words = prog_name(ctx).split()
    for i, c in enumerate(chain):
        if i and c.info_name:
            words.append(c.info_name)
        words += _words(c, skip, dict(override or {}))
    for flag in add:
        if flag not in words:
            words.append(flag)
    return _join(words)


# Root options a hint never repeats when the command names its own namespace (they would contradict it).
_NAMESPACE_OPTS = frozenset({"namespace", "all_namespaces"})
# What a pool's per-node hint leaves out: the selection and the pool's own pacing.
POOL_ONLY = frozenset({"selector", "max_unavailable", "continue_on_error"})


def render(ctx: Context, command: Command, *, drop: Iterable[str] = ()) -> str:
    """A library Command (rblnctl.remedy) as the user types it: the program name as invoked, the root options the
    user gave (`--context prod` stays on every hint), the subcommand, its options spelt from their parameter names,
    and its arguments. A command that repeats or resumes the one run (`again`) also keeps every option of that
    run the command takes, except those in `drop` (and those declared not_repeated: the dry-run and -o flags). An
    external command is printed as given."""
    if command.program:
        return shlex.join([command.program, *command.words])
    return _join(command_words(ctx, command, drop=drop))


def command_words(ctx: Context, command: Command, *, drop: Iterable[str] = (), argv: bool = False) -> list[str]:
    """render()'s words, each an argument as the program receives it; a secret's value in its shell form (a _Raw
    word, for render) or, with `argv`, as its argv placeholder (Secret)."""
    from typer.core import TyperGroup  # a group: its subcommands by name

    if command.program:
        return [command.program, *command.words]
    ran: Context = ctx.meta.get(LEAF, ctx)
    root = ran.find_root()
    own = command.option_map
    root_own = {k: v for k, v in own.items() if any(p.name == k for p in root.command.params)}
    cmd: ClickCommand = root.command
    rest = list(command.words)
    path: list[str] = []
    while rest and isinstance(cmd, TyperGroup):
        sub = cmd.get_command(root, rest[0])
        if sub is None:
            break
        path.append(rest.pop(0))
        cmd = sub
    # The run's -n / -A mean something to its own command only (a VM's namespace to vm, the KubeVirt CR's to
    # kubevirt): another command, or one that names its namespace, does not inherit them.
    same = command.again and cmd is ran.command
    skip = not_repeated_params(root.command, ran.command, cmd) | frozenset(drop)
    if own.keys() & _NAMESPACE_OPTS or not same:
        skip |= _NAMESPACE_OPTS
    words = prog_name(ctx).split()
    if not command.on_host:  # the cluster the user named (--context prod): not for a command run on a node's host
        words += _words(root, skip, {}, argv)
    words += path
    values: dict[str, object] = {}
    if command.again:
        names = {p.name for p in cmd.params}
        for p in ran.command.params:
            if (p.name and p.name in names and p.name not in skip
                    and getattr(p, "param_type_name", "") != "argument" and _given(ran, p.name)):
                values[p.name] = ran.params.get(p.name)
    values.update({k: v for k, v in own.items() if k not in root_own})
    words += rest  # the arguments first, as kubectl's hints write them (`node drain NODE --force`)
    for p in root.command.params:  # the root options the command names (its namespace): after it, as kubectl's -n
        if p.name in root_own:
            words += _spell(p, root_own[p.name], short=True, argv=argv)
    for p in cmd.params:
        if p.name in values and getattr(p, "param_type_name", "") != "argument":
            words += _spell(p, values.pop(p.name), argv=argv)
    for name, value in values.items():  # not an option of that command: spelt as the option it would be
        flag = "--" + name.replace("_", "-")
        words += [flag] if value is True else [flag, _text(value)]
    return words


def remedy_text(ctx: Context, remedy: Remedy | None, *, drop: Iterable[str] = ()) -> str:
    """A library Remedy as the CLI says it: its words, with its command(s) placed where the text says, quoted
    (`{command}`, `{more0}`...), else appended (`text: `command``)."""
    if remedy is None:
        return ""
    text = remedy.text
    for i, extra in enumerate(remedy.more):
        text = text.replace(f"{{more{i}}}", f"`{render(ctx, extra, drop=drop)}`")
    if remedy.command is None:
        return text
    cmd = f"`{render(ctx, remedy.command, drop=drop)}`"
    if "{command}" in text:
        return text.replace("{command}", cmd)
    return f"{text}: {cmd}"


def spell(item: object) -> str:
    """A library message as the CLI says it: a Remedy (a warning, a note that names a command) spelt for the command
    running now (click's current context), anything else as str()."""
    from rblnctl.remedy import Remedy

    if not isinstance(item, Remedy):
        return str(item)
    from typer._click.globals import get_current_context  # typer's click, the one running every rblnctl command

    ctx = get_current_context(silent=True)
    if ctx is None:  # not under a command (a library caller): the words, the commands as data left out
        return item.text.replace("{command}", "").strip()
    return remedy_text(ctx, item)


class Voice:
    """How a document spells the library's messages for one command (rblnctl.documents: `say`): each Remedy as
    remedy_text() says it, and a Remedy's command as the argv to run (Argv) with its secrets' placeholders (ArgvEnv)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def __call__(self, item: object) -> str:
        from rblnctl.remedy import Remedy

        return remedy_text(self.ctx, item) if isinstance(item, Remedy) else str(item)

    def line(self, command: Command) -> str:
        """The command as one shell line, as the user types it (render)."""
        return render(self.ctx, command)

    def argv(self, command: Command) -> list[str]:
        """The command as the argv to run, no shell between: a secret's value is its placeholder (`$(TOKEN)`)."""
        return [str(w) for w in command_words(self.ctx, command, argv=True)]

    def env(self, command: Command) -> dict[str, str]:
        """The placeholders argv() put in the command, each with what it stands for (`{"TOKEN": "your --token"}`)."""
        return {w.secret.env: w.secret.what for w in command_words(self.ctx, command, argv=True)
                if isinstance(w, _Placeholder)}
