"""The flag a user types for a library options-field name (a Blocker's or an Advice's `override`): one table; and
the mark of an option a printed command leaves out (not_repeated: read by rblnctl.cli.rerun, used where
rblnctl.cli.options declares the options; here, below both, so that neither imports the other)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typer.models import OptionInfo

# The option a library Blocker names (`override`, an options-field name) -> how a user types it.
OVERRIDE_FLAGS = {
    "force": "--force",
    "delete_emptydir_data": "--delete-emptydir-data",
    "load_modules": "--load-modules",
    "mapping": "--map",
}


def flag_for(option: str) -> str:
    """The flag a user types for an options-field name (`delete_emptydir_data`: `--delete-emptydir-data`)."""
    return OVERRIDE_FLAGS.get(option, "--" + option.replace("_", "-"))


# The attribute not_repeated() sets on an option's declaration (typer copies it with the declaration, so
# rblnctl.cli.rerun finds it among the parameters typer read to build the command).
NOT_REPEATED = "rblnctl_not_repeated"


def not_repeated(option: OptionInfo) -> OptionInfo:
    """Declare an option a printed re-run or recovery command never repeats (rblnctl.cli.rerun): a dry-run flag (the
    hint is for the real run), -o (the hint's output goes to a terminal).

    `Annotated[T, not_repeated(typer.Option(...))]`: the mark is on the declaration, wherever it is used."""
    setattr(option, NOT_REPEATED, True)
    return option
