"""Find a program the tests need: skipped when it is missing, a failure under ``CI=true`` (tests/ci.py)."""

from __future__ import annotations

import shutil

from .ci import in_ci, skip_or_fail_in_ci

__all__ = ["in_ci", "require_program"]


def require_program(name: str, *, install: str) -> str:
    """The path of program ``name`` on PATH; otherwise skip (or fail under CI) saying ``install``."""
    path = shutil.which(name)
    if path is None:
        skip_or_fail_in_ci(f"{name} not found on PATH ({install}; scripts/test installs it)")
    return path
