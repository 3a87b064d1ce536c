"""The real promtool (Debian's ``prometheus`` package) for the tests of the generated rules."""

from __future__ import annotations

import pytest

from ..binaries import require_program


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool; skipped when missing, a failure under CI=true."""
    return require_program("promtool", install="apt-get install prometheus")
