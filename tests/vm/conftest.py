from __future__ import annotations

import pytest

from rblnctl.kube import KubeOptions, connect


@pytest.fixture
def kube(apiserver):
    return connect(KubeOptions(server=apiserver.url, request_timeout_s=5))
