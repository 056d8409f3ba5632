"""Shared fixtures: the loopback fake API server, a kubeconfig for it, and isolation from any real cluster."""

from __future__ import annotations

import pytest

from tests.fakes.fixtures import apiserver, kubeconfig, tls_apiserver, tls_files  # noqa: F401  (re-exported)


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
