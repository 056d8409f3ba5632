"""The flag a user types for a library options-field name (a Blocker's or an Advice's `override`): one table."""

from __future__ import annotations

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
