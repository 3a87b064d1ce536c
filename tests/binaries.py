"""Find a program the tests need: skipped when it is missing, a failure under ``CI=true``.

CI must not go green by testing nothing, so there a missing program fails the tests that
need it; elsewhere they are skipped with the command that installs it.
"""

from __future__ import annotations

import os
import shutil

import pytest


def in_ci() -> bool:
    """Whether the tests run under CI (``CI`` set to 1, true or yes)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def require_program(name: str, *, install: str) -> str:
    """The path of program ``name`` on PATH; otherwise skip (or fail under CI) saying ``install``."""
    path = shutil.which(name)
    if path is not None:
        return path
    reason = f"{name} not found on PATH ({install}; scripts/test installs it)"
    if in_ci():
        pytest.fail(f"{reason} (CI=true: these tests must run in CI)", pytrace=False)
    pytest.skip(reason)
