"""What to do next, as data: one Remedy (words, and the command that does it) for every library result.

Blockers, advice, recovery records and the fixes diagnose and preflight name all carry a Remedy. The
library never spells a command line: a Command says which subcommand, arguments and options (by their
parameter names, `dra`, `namespace`) of this program, or the full argument list of an external program
(kubectl, helm, virtctl). The front end spells it: the CLI with the program name actually invoked
(`rblnctl`, or `kubectl rbln`) and the connection flags the user gave (`--context`, `--kubeconfig`), and,
for a command that repeats or resumes the one the user ran (`again`), every flag of that run as well
(rblnctl.cli.rerun). So no library string names the program or one of its flags, and a hint followed
under `--context prod` acts on the same cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Command:
    """A command as data.

    `words`: for this program, the subcommand path and then its arguments (`("node", "set-mode", "vm", "n1")`);
    for an external `program`, every argument after the program name, as given. `options`: this program's
    options by parameter name (True: a flag; a list: a repeated option); an option of the root command
    (`namespace`) may be named too. `again`: the command repeats or resumes the one the user ran, so the front
    end keeps every option of that run the command also takes.
    """

    words: tuple[str, ...] = ()
    options: tuple[tuple[str, object], ...] = ()
    program: str | None = None  # None: this program; else an external one (kubectl, helm, virtctl)
    again: bool = False
    on_host: bool = False  # run on a node's host (`preflight --local`, `vfio`): no cluster connection flags

    @classmethod
    def own(cls, *words: str, again: bool = False, on_host: bool = False, **options: object) -> Command:
        """A command of this program: `Command.own("kubevirt", "enable-gates", dra=True)`."""
        return cls(words=tuple(words), options=tuple((k, v) for k, v in options.items() if v is not None
                                                      and v is not False), again=again, on_host=on_host)

    @classmethod
    def external(cls, program: str, *words: str) -> Command:
        """A command of another program, runnable as given: `Command.external("kubectl", "uncordon", node)`."""
        return cls(words=tuple(words), program=program)

    @property
    def option_map(self) -> Mapping[str, object]:
        return dict(self.options)

    @property
    def line(self) -> str:
        """An external command as one shell line (this program's own commands are spelt by the front end)."""
        if self.program is None:
            raise ValueError("this program's commands are spelt by the front end (rblnctl.cli.rerun.render)")
        import shlex

        return shlex.join([self.program, *self.words])


@dataclass(frozen=True)
class Remedy:
    """How to go on: `text` in words and, when one exists, the `command` that does it.

    `text` may place the command with `{command}` (the front end puts it there, quoted); without it the
    front end appends it (`text: `command``). `more` are further commands the text places as `{more0}`,
    `{more1}`, ... (plain replacement, so the text may hold braces of its own).
    """

    text: str
    command: Command | None = None
    more: tuple[Command, ...] = field(default=())

    def __str__(self) -> str:
        return self.text

    def inline(self) -> str:
        """The remedy as one line for a library message, when its command is another program's (kubectl, helm:
        spelt the same whoever runs rblnctl): the command put where `{command}` stands, else appended after a colon.
        This program's own commands are left to the front end (rblnctl.cli.rerun.render): their text alone."""
        if self.command is None or self.command.program is None:
            return self.text
        quoted = f"`{self.command.line}`"
        return self.text.replace("{command}", quoted) if "{command}" in self.text else f"{self.text}: {quoted}"
