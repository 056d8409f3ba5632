"""Shared fixtures: the loopback fake API server, a kubeconfig for it, and isolation from any real cluster."""

from __future__ import annotations

import pytest

from tests.envtest.fixtures import (  # noqa: F401  (re-exported)
    ENVTEST_FIXTURES,
    _bare_session,
    _real_session,
    backend,
    bare,
    bare_control_plane,
    control_plane,
    later_policy_crd_installed,
    operator_cluster,
    operator_stack,
    real,
)
from tests.fakes.fixtures import apiserver, kubeconfig, tls_apiserver, tls_files  # noqa: F401  (re-exported)


_ENVTEST_IDS: set[str] = set()


def pytest_collection_modifyitems(config, items):
    """Every test that runs on a real control plane carries the `envtest` marker (`pytest -m envtest`)."""
    for item in items:
        if ENVTEST_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.envtest)
        if item.get_closest_marker("envtest") is not None:
            _ENVTEST_IDS.add(item.nodeid)


def pytest_terminal_summary(terminalreporter):
    """One line on the real-API-server tier: how many tests ran against it, and how they ended."""
    counts = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for rep in terminalreporter.stats.get(outcome, []):
            if getattr(rep, "nodeid", None) in _ENVTEST_IDS and (rep.when == "call" or outcome != "passed"):
                counts[outcome] = counts.get(outcome, 0) + 1
    if counts:
        terminalreporter.write_line("envtest (real kube-apiserver): " +
                                    ", ".join(f"{n} {k}" for k, n in counts.items()))


@pytest.fixture(autouse=True)
def _no_real_cluster(tmp_path_factory, monkeypatch):
    """Point KUBECONFIG at an empty file and HOME at a temp dir: no test can reach a real cluster."""
    home = tmp_path_factory.mktemp("home")
    empty = home / "empty-kubeconfig"
    empty.write_text("")
    monkeypatch.setenv("KUBECONFIG", str(empty))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
