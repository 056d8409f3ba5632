"""Tests of rblnctl.cli.node: the `rblnctl node` commands (one node and a pool, rehearsals, durations)."""
