"""The rule for tests that need something this machine may lack (built binaries, a browser).

Outside CI they are skipped, so a developer without the tool still gets a green run of the
rest. Under ``CI=true`` (which ``.ci/run`` sets) a missing tool fails them instead: CI must
not go green by testing nothing.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["in_ci", "skip_or_fail_in_ci"]


def in_ci() -> bool:
    """Whether this run is CI: ``CI`` is ``1``, ``true`` or ``yes`` (any case)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def skip_or_fail_in_ci(reason: str) -> NoReturn:
    """Skip the test for lack of what ``reason`` names, or fail it under CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: these tests must run in CI)", pytrace=False)
    pytest.skip(reason)
