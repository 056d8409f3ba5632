"""No secret is ever printed (issue 38): the bearer token, given as --token or in the kubeconfig, never appears on
stdout or stderr, in any format, in any scenario of the suite's -o json worlds, in errors, hints or -v=8's traces.

The scenarios are test_output_schema's (every kind's world, each read and mutating command); the fake API server is
made to require the fixture's token (so a command that ran used it), and each runs with -o json and as a table.
"""

from __future__ import annotations

import pytest

from tests.cli.test_output_schema import SCENARIOS, Scenario, cluster  # noqa: F401 - the fixture
from tests.helpers import cli, closed_port_url

SECRET = "s3cr3t-b34r3r-t0k3n-9f2c"  # the fixture secret: a string nothing else prints
CLUSTER = [s for s in SCENARIOS if s.cluster]


def _id(scenario: Scenario) -> str:
    setup = getattr(scenario.setup, "__name__", "")
    return " ".join(scenario.args) + (f" [{setup.strip('_')}]" if setup else "")


def _clean(r, what: str) -> None:
    for name, out in (("stdout", r.stdout), ("stderr", r.stderr)):
        assert SECRET not in out, f"{what}: the token on {name}:\n{out}"


@pytest.mark.parametrize("given", ["flag", "kubeconfig"])
@pytest.mark.parametrize("scenario", CLUSTER, ids=_id)
def test_the_token_is_never_printed(scenario, given, request, tmp_path):
    apiserver = request.getfixturevalue("cluster")
    if scenario.setup:
        scenario.setup(apiserver)
    apiserver.token, apiserver.require_token = SECRET, True
    if given == "flag":
        auth = ["--server", apiserver.url, "--token", SECRET]
    else:
        auth = ["--kubeconfig", str(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))]
    writes = "--yes" in scenario.args and "--dry-run" not in scenario.args
    for fmt in (["-o", "json"],) if writes else (["-o", "json"], []):
        r = cli(*auth, *scenario.args, *fmt)
        assert r.exit_code == scenario.exit_code or fmt == [], r.stderr  # a table run after a write: a no-op or not
        _clean(r, " ".join([*scenario.args, *fmt]))


def test_the_token_is_not_in_an_error_a_refusal_or_a_v8_trace(apiserver):
    """The paths that print most of a request: a server that refuses the token (401), one that cannot be reached, and
    -v=8's request lines and bodies (a body's secret keys masked: rblnctl.kube.client; headers not printed)."""
    apiserver.token, apiserver.require_token = "another-token", True
    refused = cli("--server", apiserver.url, "--token", SECRET, "node", "list")
    assert refused.exit_code == 4
    _clean(refused, "401")
    unreachable = cli("--server", closed_port_url(), "--token", SECRET, "status", "-o", "json")
    assert unreachable.exit_code == 3
    _clean(unreachable, "unreachable")
    apiserver.token = SECRET
    traced = cli("--server", apiserver.url, "--token", SECRET, "-v=8", "node", "list")
    assert traced.exit_code == 0 and "response body:" in traced.stderr, traced.stderr
    _clean(traced, "-v=8")
