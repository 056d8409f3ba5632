#!/usr/bin/env python3
"""Every command's `--help` (whole-process, at 100 and 60 columns) and click parameters, one file each, for a
before/after comparison of a change that must not change them (option groups, shared aliases).

Usage: python benchmarks/help_dump.py DIR; then `diff -r BEFORE AFTER`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def commands() -> list[tuple[list[str], object]]:
    import typer.main

    from rblnctl.cli.app import app

    out: list[tuple[list[str], object]] = []

    def walk(cmd: object, path: list[str]) -> None:
        out.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def parameters(cmd: object) -> str:
    lines = []
    for p in cmd.params:  # type: ignore[attr-defined]
        lines.append(repr((p.name, p.opts, p.secondary_opts, type(p).__name__, type(p.type).__name__,
                           getattr(p.type, "name", ""), p.default, getattr(p, "hidden", None),
                           getattr(p, "is_flag", None), getattr(p, "count", None), p.metavar,
                           getattr(p, "show_default", None), p.required, p.multiple, p.nargs,
                           getattr(p, "help", None), getattr(p, "_custom_shell_complete", None) is not None)))
    return "\n".join(lines) + "\n"


def main() -> int:
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    for path, cmd in commands():
        stem = "_".join(["rblnctl", *path])
        (target / f"{stem}.params").write_text(parameters(cmd))
        for columns in (100, 60):
            env = {k: v for k, v in os.environ.items() if k not in ("LINES", "NO_COLOR")}
            env["COLUMNS"] = str(columns)
            run = subprocess.run([sys.executable, "-m", "rblnctl", *path, "--help"], env=env, capture_output=True,
                                 text=True)
            (target / f"{stem}.{columns}").write_text(run.stdout + run.stderr)
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
