"""The API server's Warning headers: parsed as client-go parses them, handed out of the library, printed as kubectl
prints them (issue 27: KubeVirt's KubeVirt-CR webhook warns on deprecated and GA gates; rblnctl dropped them)."""

from __future__ import annotations

import io

import pytest
import urllib3

from rblnctl.kube import KUBEVIRTS, KubeOptions, connect
from rblnctl.kube.warning_headers import ServerWarning, parse_warning_headers, warnings_of
from tests.fakes import objects as o

LIVE_MIGRATION = ('feature gate LiveMigration is deprecated (feature state is "General Availability"), therefore it '
                  'can be safely removed and is redundant. For more info, please look at: '
                  'https://github.com/kubevirt/kubevirt/blob/main/docs/deprecation.md')


# k8s.io/apimachinery pkg/util/net/http_test.go TestParseWarningHeader's cases, restated
@pytest.mark.parametrize(("headers", "expected"), [
    (['299 - "text"'], [(299, "-", "text")]),
    (['299 - "escaped \\"quotes\\" and \\\\backslash"'], [(299, "-", 'escaped "quotes" and \\backslash')]),
    (['299 agent "a", 199 other "b" "Wed, 21 Oct 2015 07:28:00 GMT", 299 - "c"'],
     [(299, "agent", "a"), (199, "other", "b"), (299, "-", "c")]),
    (['299 - "one"', '299 - "two"'], [(299, "-", "one"), (299, "-", "two")]),
    (['299 - "ok", 99 - "bad code", 299 - "skipped"', '299 - "next header"'],  # invalid: the rest of its header goes
     [(299, "-", "ok"), (299, "-", "next header")]),
    (['299 - "unterminated'], []),
    (['299 - unquoted'], []),
    (['299 -'], []),
    (['299 - "x" trailing'], []),
    (['299 - "=?utf-8?q?caf=C3=A9?="'], [(299, "-", "café")]),  # RFC 2047 words are decoded, as client-go does
    (['299 - "a\tb"'], []),  # a control character: invalid
    ([], []),
])
def test_warning_headers_parse_as_client_go_parses_them(headers, expected):
    assert [(w.code, w.agent, w.text) for w in parse_warning_headers(headers)] == expected


def test_warnings_of_a_reply_without_headers_are_none():
    assert warnings_of(object()) == []
    resp = urllib3.HTTPResponse(body=b"", headers=urllib3.HTTPHeaderDict([("Warning", '299 - "a"'),
                                                                           ("Warning", '299 - "b"')]))
    assert [w.text for w in warnings_of(resp)] == ["a", "b"]


def test_every_write_reply_hands_its_warnings_to_on_warning(apiserver):
    apiserver.add(o.kubevirt(feature_gates=[]))
    kube = connect(KubeOptions(server=apiserver.url))
    got: list[ServerWarning] = []
    kube.on_warning = got.append
    patch = {"spec": {"configuration": {"developerConfiguration": {"featureGates": ["LiveMigration", "NUMA"]}}}}
    kube.patch(KUBEVIRTS, "kubevirt", patch, patch_type="merge", namespace="kubevirt", dry_run=True)
    assert [(w.code, w.agent) for w in got] == [(299, "-"), (299, "-")]
    assert got[0].text == LIVE_MIGRATION and got[1].text.startswith("feature gate NUMA is deprecated")
    kube.on_warning = None  # nobody listening: dropped, the request as before
    assert kube.patch(KUBEVIRTS, "kubevirt", patch, patch_type="merge", namespace="kubevirt")


def test_the_cli_prints_each_299_warning_once_as_kubectl(monkeypatch):
    """kubectl's NewWarningWriter(stderr, {Deduplicate: true}): code 299 with a text only, each text once."""
    from rblnctl.cli import console

    err = io.StringIO()
    monkeypatch.setattr(console, "_no_color", True)
    console.stderr.cache_clear()
    from rich.console import Console

    monkeypatch.setattr(console, "stderr", lambda: Console(file=err, color_system=None, width=80))
    sink = console.ServerWarnings()
    for w in (ServerWarning(299, "-", "deprecated [bold]x[/]"), ServerWarning(299, "-", "deprecated [bold]x[/]"),
              ServerWarning(199, "-", "not 299"), ServerWarning(299, "-", ""), ServerWarning(299, "agent", "y")):
        sink(w)
    # one line each, however long (no wrapping at the console's width), markup never interpreted
    assert err.getvalue() == "Warning: deprecated [bold]x[/]\nWarning: y\n"
    long = "z" * 200
    sink(ServerWarning(299, "-", long))
    assert err.getvalue().splitlines()[-1] == f"Warning: {long}"
