"""Tests of rblnctl.preflight (host and cluster checks)."""
