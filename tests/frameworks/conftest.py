"""Each folder here is one stack, tested in its own virtual environment by scripts/test-frameworks.

A folder holds ``requirements.in`` (the framework and instrumentation packages, pinned),
``requirements.txt`` (the full lock the venv is built from) and its tests. Its tests are
collected only in its own environment, named by ``LATENCY_BUDGET_FRAMEWORK_ENV`` (set by
scripts/test-frameworks): the main test run, whose environment has none of these
frameworks, collects none of them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ENV_VARIABLE = "LATENCY_BUDGET_FRAMEWORK_ENV"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip collecting every stack folder but the one this environment was built for."""
    path = Path(collection_path).resolve()
    if path.parent != HERE or not path.is_dir() or not (path / "requirements.in").exists():
        return None
    return path.name != os.environ.get(ENV_VARIABLE)


@pytest.fixture(autouse=True)
def _loopback_without_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to the fake OpenAI server on 127.0.0.1 never go through a proxy the machine may set."""
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
