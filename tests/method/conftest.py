"""Every simulated operator a method test started (support.cluster) is stopped after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.method.support import OPERATORS


@pytest.fixture(autouse=True)
def _stop_operators() -> Iterator[None]:
    yield
    while OPERATORS:
        OPERATORS.pop().stop()
