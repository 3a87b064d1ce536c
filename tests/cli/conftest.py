"""Helpers for the CLI tests: run ``latency-budget`` as a subprocess, and the recorded fixtures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BUDGETS = FIXTURES / "budgets.yaml"
OTLP = FIXTURES / "otlp" / "traces.jsonl"
JAEGER_SEARCH = FIXTURES / "jaeger" / "search.json"
JAEGER_TRACE = FIXTURES / "jaeger" / "trace.json"


def run_cli(
    *args: str | os.PathLike[str],
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m latency_budget ARGS`` and capture its exit code, stdout and stderr."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "latency_budget", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def expected_reports() -> list[dict[str, Any]]:
    """The processor's verdict on each request of the fixture recording, as make_fixtures.py kept it."""
    data: dict[str, Any] = json.loads((FIXTURES / "expected-reports.json").read_text(encoding="utf-8"))
    return list(data["reports"])


@pytest.fixture
def fixtures_dir() -> Path:
    """The folder of recorded trace fixtures."""
    return FIXTURES


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """A usage or input error: exit 2, nothing on stdout, one ``latency-budget`` line holding every fragment."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == "", "a failed run must not print a partial result"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("latency-budget")
    for fragment in fragments:
        assert fragment in lines[0]


DEMO_REQUESTS = 200


@pytest.fixture(scope="session")
def demo_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spans of a default demo run (200 requests, seed 7), saved as OTLP JSON lines by ``demo --save-traces``."""
    path = tmp_path_factory.mktemp("demo-traces") / "traces.jsonl"
    result = run_cli("demo", "-n", str(DEMO_REQUESTS), "--show", "0", "--save-traces", path)
    assert result.returncode == 0, result.stderr
    return path
