"""Fixtures for the instrumentation tests: the fake OpenAI server and budget files.

fake_openai     FakeOpenAIServer: an OpenAI-compatible chat-completions server on
                127.0.0.1, in a thread, for the whole session (see fake_openai.py).
totals_only     Path: a budget file with ``version: 1`` and a violated ``total_ms`` only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .fake_openai import FakeOpenAIServer, serve
from .running import TOTALS_ONLY_YAML


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the session."""
    with serve() as server:
        yield server


@pytest.fixture
def totals_only(tmp_path: Path) -> Path:
    """A budget file with no ``stages:``, whose tiny ``total_ms`` every request breaks."""
    path = tmp_path / "budgets.yaml"
    path.write_text(TOTALS_ONLY_YAML, encoding="utf-8")
    return path
