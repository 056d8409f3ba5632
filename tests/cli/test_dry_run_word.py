"""A bare --dry-run never takes the next word (issue 21 item 4).

kubectl reads a bare --dry-run as --dry-run=client and leaves the next word to the command
(pkg/cmd/util/helpers.go GetDryRunStrategy), so `enable-gates --dry-run client` queued a gate named
client. rblnctl refuses a mode written after a space instead: exit 2, no request.
"""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.helpers import cli


@pytest.mark.parametrize("args", [
    ("kubevirt", "enable-gates", "--dry-run", "client"),
    ("kubevirt", "enable-gates", "--dry-run", "server"),
    ("kubevirt", "disable-gates", "HostDevices", "--dry-run", "none"),
    ("node", "set-mode", "vm", "n1", "--dry-run", "server"),
    ("node", "drain", "n1", "--dry-run", "client"),
    ("vm", "attach", "v1", "--dry-run", "server"),
])
def test_a_mode_after_a_space_is_bad_input_and_sends_nothing(apiserver, args):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    apiserver.clear_requests()
    r = cli(*args, server=apiserver.url)
    assert r.exit_code == 2, r.stderr
    assert f"write the dry-run mode with '=': --dry-run={args[-1]}" in r.stderr
    assert apiserver.requests == []


def test_bare_dry_run_is_client_and_the_next_word_stays_an_argument(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "--dry-run", "Snapshot", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "HostDevices,Snapshot" in r.stdout  # Snapshot stayed a gate to enable
    assert apiserver.writes() == [] and "dry run: nothing was sent" in r.stderr


def test_the_mode_with_equals_still_works(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    apiserver.clear_requests()
    r = cli("kubevirt", "enable-gates", "--dry-run=server", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert [w.query.get("dryRun") for w in apiserver.writes()] == [["All"]]
