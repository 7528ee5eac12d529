"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernel import Kernel
from kernel.testing import memory_kernel


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    """An in-memory kernel, closed after the test (a module may give its own ``kernel``)."""
    opened = memory_kernel()
    try:
        yield opened
    finally:
        opened.close()
