"""The typer command layer: parse flags, call the library, render results. Nothing here talks to a cluster or sysfs."""
