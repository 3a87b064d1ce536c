"""Fixtures for the load tests: the scenarios of benchmarks/memory.py, each in its own interpreter.

All runs start together when the first load test asks for one, so the machine's cores
share the work; each test then waits for the runs it checks. A run's resident memory is
its own process's, so the baseline (the same downstream, no LatencyBudgetProcessor) and
the candidate are compared across two processes that did the same work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

MEMORY_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "memory.py"

# name -> arguments of benchmarks/memory.py
RUNS = {
    "million-baseline": ["million", "--variant", "baseline"],
    "million-candidate": ["million", "--variant", "candidate"],
    "leaks-candidate": ["leaks", "--variant", "candidate"],
}


class LoadRuns:
    """Scenario runs started in the background; ``result(name)`` waits for one and parses its summary."""

    def __init__(self) -> None:
        self._processes = {
            name: subprocess.Popen(
                [sys.executable, str(MEMORY_SCRIPT), *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name, argv in RUNS.items()
        }
        self._results: dict[str, dict[str, Any]] = {}

    def result(self, name: str) -> dict[str, Any]:
        if name not in self._results:
            process = self._processes[name]
            out, err = process.communicate()
            if process.returncode != 0:
                pytest.fail(f"benchmarks/memory.py {' '.join(RUNS[name])} exited {process.returncode}:\n{err[-4000:]}")
            self._results[name] = json.loads(out)
        return self._results[name]

    def stop(self) -> None:
        for process in self._processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()


@pytest.fixture(scope="session")
def load_runs() -> Iterator[LoadRuns]:
    """The load scenarios, started together in subprocesses (killed at the end if a test bailed out)."""
    runs = LoadRuns()
    yield runs
    runs.stop()
