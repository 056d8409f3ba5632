"""Subcommands registered lazily: `rblnctl --help` and `--version` import only what they print.

The root group's `commands` is a LazyCommands mapping: its keys (in help order) and each command's short help are
known without importing anything; a command's module is imported, and its click command built exactly as typer
builds it for `app.add_typer(...)` / `app.command(...)`, the first time the command itself is asked for (it is
invoked, its own --help is shown, completion walks into it). `rblnctl --help` then costs the import of typer and
of rblnctl.cli.app, not of every command module (issue 31: ~70 ms of ~180 ms). tests/test_lazy_commands.py checks
that the table here says what the commands themselves say.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, NamedTuple

from rblnctl.cli.errors import RblnGroup

if TYPE_CHECKING:  # typer's click (typer._click), named for the checker only
    import typer
    from typer._click import Command, Context, HelpFormatter


class Lazy(NamedTuple):  # not a dataclass: importing dataclasses costs every TAB press ~8 ms (cli/app.py State)
    """One subcommand: its short help (as the root's help lists it) and how to register it on a Typer app."""

    short_help: str
    register: Callable[[typer.Typer], None]  # registers exactly this command (app.command / app.add_typer) on the app
    hidden: bool = False


class LazyCommands(MutableMapping):
    """name -> click command, each built on first access from its Lazy entry (insertion order kept)."""

    def __init__(self, table: dict[str, Lazy], build: Callable[[str, Lazy], Command],
                 loaded: Mapping[str, Command] | None = None) -> None:
        self.table = dict(table)
        self._build = build
        self._loaded: dict[str, Command] = dict(loaded or {})
        self._order = list(dict.fromkeys([*self.table, *self._loaded]))

    def is_loaded(self, name: str) -> bool:
        return name in self._loaded

    def __getitem__(self, name: str) -> Command:
        if name not in self._loaded:
            if name not in self.table:
                raise KeyError(name)
            self._loaded[name] = self._build(name, self.table[name])
        return self._loaded[name]

    def __setitem__(self, name: str, cmd: Command) -> None:
        if name not in self._order:
            self._order.append(name)
        self._loaded[name] = cmd

    def __delitem__(self, name: str) -> None:
        self._order.remove(name)
        self._loaded.pop(name, None)
        self.table.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._order


def builder(**typer_settings: Any) -> Callable[[str, Lazy], Command]:
    """A LazyCommands builder: the click command of one entry, built by typer from a scratch Typer app with the
    root's settings (`typer_settings`), on which only that entry is registered: the same command typer builds when
    the whole tree is registered on the root (typer.main.get_group_from_info builds each command and group on its
    own, from its info and the root's pretty_exceptions_short / rich_markup_mode)."""

    def build(name: str, entry: Lazy) -> Command:
        import typer
        import typer.main

        scratch = typer.Typer(**typer_settings)
        entry.register(scratch)
        return typer.main.get_group(scratch).commands[name]

    return build


class LazyRootGroup(RblnGroup):
    """The root group, its subcommands a LazyCommands mapping (`lazy`, `build`: set by rblnctl.cli.app)."""

    lazy: dict[str, Lazy] = {}
    build: Callable[[str, Lazy], Command] | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.build is not None:
            self.commands = LazyCommands(self.lazy, type(self).build, loaded=self.commands)  # type: ignore[arg-type]

    def list_commands(self, ctx: Context) -> list[str]:
        """The names, in registration order (typer's list_commands reads commands.items(): every command built)."""
        return list(self.commands)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The Commands section, as typer's TyperGroup.format_commands writes it, from the table's short helps
        for commands not loaded (a short help is printed as given: click's get_short_help_str cleans it only)."""
        import inspect

        commands = self.commands
        if not isinstance(commands, LazyCommands):
            return super().format_commands(ctx, formatter)
        rows: list[tuple[str, Command | None]] = []
        for name in self.list_commands(ctx):
            if commands.is_loaded(name) or name not in commands.table:
                cmd = commands[name]
                if cmd is None or cmd.hidden:
                    continue
                rows.append((name, cmd))
            elif not commands.table[name].hidden:
                rows.append((name, None))
        if not rows:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        lines = [(name, cmd.get_short_help_str(limit) if cmd is not None
                  else inspect.cleandoc(commands.table[name].short_help).strip()) for name, cmd in rows]
        from gettext import gettext as _  # as typer.core translates the section title

        with formatter.section(_("Commands")):
            formatter.write_dl(lines)
