"""Preflight readiness checks: `host` (under a root directory, no cluster) and `cluster` (through the API).

Imports nothing: `rblnctl preflight --local` loads only preflight.host and preflight.model, so the
kubernetes client is never imported on that path.
"""
