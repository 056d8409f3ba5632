"""The command line the user ran, rebuilt from what was parsed: recovery hints repeat it with every flag given.

A hint that drops a flag runs another command (a set-method without --convert-vms converts nothing; a
migrate-resources without its --map derives other names), so the hint is built from the parsed
parameters rather than written by hand: every option given on the command line (or from the
environment), global ones included, in its long spelling, and the arguments in order. Dry-run flags are
dropped (the hint is for the real run) and so is -o (the hint's output goes to a terminal); `add`
appends flags the hint needs.
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Iterable
from typing import Any

# Options a recovery hint never repeats (by parameter name).
DROPPED = frozenset({"dry_run", "server_dry_run", "output"})


def _given(ctx: Any, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _text(value: Any) -> str:
    return str(value.value) if isinstance(value, enum.Enum) else str(value)


def _words(ctx: Any, skip: frozenset[str], override: dict[str, Any]) -> list[str]:
    words: list[str] = []
    args: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name in skip or (name not in override and not _given(ctx, name)):
            continue
        value = override.get(name, ctx.params.get(name))
        if getattr(param, "param_type_name", "") == "argument":
            args += [_text(v) for v in value] if isinstance(value, (list, tuple)) else [_text(value)]
            continue
        opts = sorted(param.opts, key=lambda o: (not o.startswith("--"), -len(o)))
        if getattr(param, "is_flag", False) and not getattr(param, "count", False):
            if value:
                words.append(opts[0])
            elif param.secondary_opts:
                words.append(sorted(param.secondary_opts, key=len)[-1])
            continue
        if getattr(param, "count", False):
            words += [opts[0]] * int(value or 0)
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if v is not None:
                words += [opts[0], _text(v)]
    return words + args


def command_line(ctx: Any, *, add: Iterable[str] = (), drop: Iterable[str] = (),
                 override: dict[str, Any] | None = None) -> str:
    """`rblnctl --context prod policy set-method --convert-vms --timeout 15m --yes dra`: what was run, for a hint.

    `override` sets a parameter (by name) to another value, e.g. the method of a "go back" hint.
    """
    from rblnctl.cli.errors import prog_name

    chain = []
    c = ctx
    while c is not None:
        chain.append(c)
        c = c.parent
    chain.reverse()
    skip = DROPPED | frozenset(drop)
    words = prog_name(ctx).split()
    for i, c in enumerate(chain):
        if i:
            words.append(c.info_name)
        words += _words(c, skip, dict(override or {}))
    for flag in add:
        if flag not in words:
            words.append(flag)
    return shlex.join(words)
