"""benchmarks/serve.py, small: the runs behind benchmarks/README.md's serve figures do what they say.

The figures themselves are not asserted (speed is never a test's business); what is checked
is that each measurement moved the traffic it claims to have measured: every trace judged
once, by one instance or split across two, and nothing refused or lost on the way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .services import REPO_DIR, Tools

pytestmark = pytest.mark.e2e

TRACES = 200


def test_serve_benchmark_judges_every_trace_it_measures(otel_tools: Tools) -> None:
    """Each run of benchmarks/serve.py forwards every span and judges every trace exactly once."""
    result = subprocess.run(
        [sys.executable, str(REPO_DIR / "benchmarks" / "serve.py"), "--traces", str(TRACES), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "LATENCY_BUDGET_TOOLS_DIR": str(otel_tools.otelcol.parents[1])},
        cwd=REPO_DIR,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout)
    assert set(results) == {"standard", "web"}
    for case, per_trace in (("standard", 10), ("web", 20)):
        row = results[case]
        assert row["spans"] == TRACES * per_trace
        assert row["serve"]["traces_judged"] == TRACES
        for run in (row["serve"], row["collector"], *row["tier"]):
            assert run["refused"] == 0
        one, two = row["tier"]
        assert one["traces_judged_per_instance"] == [TRACES]
        assert sum(two["traces_judged_per_instance"]) == TRACES
        assert min(two["traces_judged_per_instance"]) > 0
        assert row["bytes_per_open_trace"]["serve"] > 0
        assert row["bytes_per_open_trace"]["collector"] > 0
