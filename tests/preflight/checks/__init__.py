"""Tests of rblnctl.preflight.checks, one module per area."""
