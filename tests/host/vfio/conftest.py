"""Every vfio test runs with the real sysfs writer and the real modprobe out of reach."""

from __future__ import annotations

import pytest

from tests.fakes.sysfs import guard_real_host


@pytest.fixture(autouse=True)
def _no_real_host(monkeypatch):
    guard_real_host(monkeypatch)
