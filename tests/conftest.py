"""Shared test setup: internal errors in span hooks fail tests instead of being logged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from latency_budget import _guard


@pytest.fixture(autouse=True)
def _raise_internal_errors() -> Iterator[None]:
    """Make a bug in a processor hook raise in our own tests (users only get a log line)."""
    previous = _guard.raise_internal_errors
    _guard.raise_internal_errors = True
    yield
    _guard.raise_internal_errors = previous
