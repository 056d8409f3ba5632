"""node set-mode/drain --timeout takes kubectl drain's durations."""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.helpers import cli


@pytest.mark.parametrize("value", ["0", "soon", "-1m"])
def test_bad_timeout_is_a_usage_error_before_any_request(apiserver, value):
    apiserver.add(o.npu_node("n1"))
    apiserver.clear_requests()
    r = cli("node", "set-mode", "n1", "vm", "--yes", f"--timeout={value}", server=apiserver.url)
    assert r.exit_code == 2 and "--timeout" in r.stderr
    assert apiserver.writes() == []


def test_duration_timeout_is_accepted(apiserver):
    apiserver.add(o.npu_node("n1", mode="vm-passthrough"))
    r = cli("node", "drain", "n1", "--dry-run", "--timeout", "1m30s", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
