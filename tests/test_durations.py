"""rblnctl.durations: kubectl's duration syntax, and refusal of anything that would wait forever by accident."""

from __future__ import annotations

import pytest

from rblnctl.durations import parse_duration
from rblnctl.errors import InvalidInput
from tests.helpers import cli


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30.0), ("30s", 30.0), ("1m", 60.0), ("1m30s", 90.0), ("500ms", 0.5), ("2h", 7200.0), ("2.5", 2.5)],
)
def test_kubectl_durations(text, seconds):
    assert parse_duration(text, what="--timeout") == seconds


@pytest.mark.parametrize("text", ["0", "0s"])
def test_zero_means_forever_only_where_asked(text):
    assert parse_duration(text, what="--request-timeout", zero_means_forever=True) is None
    with pytest.raises(InvalidInput, match="--timeout must be more than 0"):
        parse_duration(text, what="--timeout")


@pytest.mark.parametrize("text", ["", "abc", "10x", "-5", "1m-5s", "nan", "NaN", "inf", "-inf", "1e999", "1e9"])
def test_bad_durations_name_the_option(text):
    with pytest.raises(InvalidInput, match="--timeout"):
        parse_duration(text, what="--timeout")


@pytest.mark.parametrize("value", ["nan", "inf", "1e999"])
def test_request_timeout_nan_is_a_usage_error_not_a_bug(value):
    r = cli("--request-timeout", value, "node", "list")
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert r.stderr.startswith("error: ") and "--request-timeout" in r.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "1e999"])
def test_set_mode_timeout_that_never_ends_is_refused_before_connecting(apiserver, value):
    r = cli("node", "set-mode", "n1", "vm", "--yes", f"--timeout={value}", server=apiserver.url)
    assert r.exit_code == 2 and "--timeout" in r.stderr
    assert apiserver.requests == []
