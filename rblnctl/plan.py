"""The shape every mutating operation shares: plan() reads and returns a plan, apply(plan) writes it.

A plan says what would change (`noop` when nothing), what warrants a warning, and every reason it
must not run (`blockers`). A blocker names, as data, the option that would let the operation go
ahead (`override`, an options-field name such as `force`) and, when something else fixes it, a
Remedy (rblnctl.remedy: words and the command as data); front ends phrase both their own way (the
CLI says "pass --force"), so no library message names a program or a command-line flag.

`Plan` is that shape as a type: what every plan() returns and what the CLI's one flow (rblnctl.cli.flow.Mutation)
accepts, so mypy tells a command whose plan lacks one of the three.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rblnctl.remedy import Remedy


@dataclass(frozen=True)
class Blocker:
    """One reason an operation refuses to run; `override` is the option that would allow it (None: nothing does),
    `remedy` what fixes it otherwise (None: nothing named)."""

    message: str
    override: str | None = None
    remedy: Remedy | None = field(default=None, kw_only=True)  # keyword: subclasses add positional fields

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Advice:
    """A warning that names, as data, the option that acts on it (`option`: an options-field name)."""

    message: str
    option: str | None = None

    def __str__(self) -> str:
        return self.message



class Plan(Protocol):
    """What every plan() returns: `blockers` (non-empty: apply() refuses and writes nothing), `warnings` (said before
    it runs, a Remedy when a command fixes one) and `noop` (nothing would change). Read-only: a dataclass's fields
    or properties satisfy it."""

    @property
    def blockers(self) -> Sequence[Blocker]: ...

    @property
    def warnings(self) -> Sequence[str | Remedy | Advice]: ...

    @property
    def noop(self) -> bool: ...
