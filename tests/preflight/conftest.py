"""Fixtures of the preflight tests: a connection to the fake API server."""

from __future__ import annotations

import pytest

from rblnctl.kube import KubeOptions, connect


@pytest.fixture
def kube(apiserver):
    return connect(KubeOptions(server=apiserver.url))
