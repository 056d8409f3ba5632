"""Tests of rblnctl.hostpods (host pods: spec and runner)."""
