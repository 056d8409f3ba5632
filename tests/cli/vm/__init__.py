"""Tests of rblnctl.cli.vm: the `rblnctl vm` commands (parsing, exit codes, output, prompts)."""
