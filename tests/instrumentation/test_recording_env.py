"""Zero-code recording: OTEL_LATENCY_BUDGET_TRACES_FILE writes what `latency-budget check` reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .fake_openai import FakeOpenAIServer
from .running import AGENT_APP, clean_environment, run_with_console_exporters


@pytest.mark.parametrize("configurator", ["latency_budget", "configurator"], ids=["ours", "distro-then-hook"])
def test_traces_file_variable_records_the_annotated_spans(
    fake_openai: FakeOpenAIServer, totals_only: Path, tmp_path: Path, configurator: str
) -> None:
    """The variable records every span once, annotated as exported, and check gives the live verdict."""
    recording = tmp_path / "traces.jsonl"
    run = run_with_console_exporters(
        AGENT_APP,
        fake_openai.base_url,
        totals_only,
        cwd=tmp_path,
        OTEL_PYTHON_CONFIGURATOR=configurator,
        OTEL_LATENCY_BUDGET_TRACES_FILE=str(recording),
    )
    live_root = run.root()
    assert live_root["attributes"]["latency_budget.violated"] is True
    lines = [json.loads(line) for line in recording.read_text(encoding="utf-8").splitlines()]
    recorded = [
        span
        for line in lines
        for resource in line["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    assert sorted(s["spanId"] for s in recorded) == sorted(s["context"]["span_id"][2:] for s in run.spans)
    [root] = [s for s in recorded if s["spanId"] == live_root["context"]["span_id"][2:]]
    assert {"key": "latency_budget.violated", "value": {"boolValue": True}} in root["attributes"]

    checked = subprocess.run(
        [sys.executable, "-m", "latency_budget", "check", str(recording), "-b", str(totals_only), "--format", "json"],
        env=clean_environment(),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert checked.returncode == 1, checked.stderr
    assert json.loads(checked.stdout)["violated_requests"] == 1
