"""Pytest fixtures for the fake API server. tests/fakes/conftest.py imports them; a conftest
higher up can re-export them the same way (``from tests.fakes.fixtures import apiserver, kubeconfig``)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.fakes.apiserver import FakeApiServer


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A started FakeApiServer (Kubernetes v1.34.1, no deletion delay), stopped after the test."""
    fake = FakeApiServer().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def kubeconfig(apiserver: FakeApiServer, tmp_path: Path) -> Path:
    """Path of a kubeconfig (context ``fake``, namespace ``default``) pointing at ``apiserver``."""
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")
