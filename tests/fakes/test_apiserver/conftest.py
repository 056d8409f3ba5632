"""Clients of the ``apiserver`` fixture: the real kubernetes client (v37), without retries."""

from __future__ import annotations

import pytest
from kubernetes import client


@pytest.fixture
def api(apiserver):
    cfg = client.Configuration(host=apiserver.url)
    cfg.retries = False  # see each failure as it happens
    with client.ApiClient(cfg) as c:
        yield c


@pytest.fixture
def core(api):
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api):
    return client.CustomObjectsApi(api)
