"""--restage tries a rule change on a recording; without it, recorded labels that disagree are counted."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, set_span_in_context

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget.export import OtlpJsonFileSpanExporter

from .conftest import run_cli

MS = 1_000_000
T0 = 1_700_000_000_000_000_000

RECORDED_WITH = """
version: 1
stages:
  retrieval: {budget_ms: 100, match: {name: kb.lookup}}
  model_call: {budget_ms: 800}
  tool_calls: {budget_ms: 200}
"""
# The rule change to try: kb.lookup is a tool call, not retrieval.
CHANGED = """
version: 1
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800}
  tool_calls: {budget_ms: 200, match: {name: kb.lookup}}
"""


def _record(path: Path, requests: int) -> None:
    """Requests of one kb.lookup and one chat call, through the live processor into the public exporter."""
    provider = TracerProvider()
    exporter = OtlpJsonFileSpanExporter(path, append=False)
    provider.add_span_processor(LatencyBudgetProcessor(load_budgets(text=RECORDED_WITH), SimpleSpanProcessor(exporter)))
    tracer = provider.get_tracer("app")
    for n in range(requests):
        start = T0 + n * 10_000 * MS
        root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=start)
        context = set_span_in_context(root)
        tracer.start_span("kb.lookup", context=context, start_time=start + MS).end(end_time=start + 51 * MS)
        chat = tracer.start_span(
            "chat m", context=context, start_time=start + 60 * MS, attributes={"gen_ai.operation.name": "chat"}
        )
        chat.end(end_time=start + 400 * MS)
        root.end(end_time=start + 410 * MS)
    provider.shutdown()


def _counts(stdout: str) -> dict[str, int]:
    rows = json.loads(stdout)["rows"]
    return {r["stage"]: r["count"] for r in rows if r["metric"] == "duration" and r["profile"] == "default"}


def test_recorded_labels_decide_and_a_disagreement_is_counted(tmp_path: Path) -> None:
    """Without --restage the recorded labels decide, and one warning counts the spans the file's rules disagree on."""
    traces, budgets = tmp_path / "t.jsonl", tmp_path / "b.yaml"
    _record(traces, 3)
    budgets.write_text(CHANGED, encoding="utf-8")
    result = run_cli("report", traces, "-b", budgets, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert _counts(result.stdout)["retrieval"] == 3
    assert _counts(result.stdout).get("tool_calls", 0) == 0
    warnings = [line for line in result.stderr.splitlines() if "latency_budget.stage label" in line]
    assert len(warnings) == 1
    assert "3 spans carry" in warnings[0]
    assert "'kb.lookup' labelled retrieval, by the rules tool_calls" in warnings[0]
    assert "--restage" in warnings[0]


def test_restage_classifies_by_the_file_s_rules(tmp_path: Path) -> None:
    """With --restage every span is classified by the file's rules: the rule change shows, with no warning."""
    traces, budgets = tmp_path / "t.jsonl", tmp_path / "b.yaml"
    _record(traces, 3)
    budgets.write_text(CHANGED, encoding="utf-8")
    for command in ("report", "check"):
        result = run_cli(command, traces, "-b", budgets, "--format", "json", "--restage")
        assert result.returncode == 0, result.stderr
        assert "latency_budget.stage label" not in result.stderr
    result = run_cli("report", traces, "-b", budgets, "--format", "json", "--restage")
    counts = _counts(result.stdout)
    assert (counts["tool_calls"], counts.get("retrieval", 0)) == (3, 0)
    suggested = run_cli("suggest", traces, "-b", budgets, "--restage")
    assert suggested.returncode == 0, suggested.stderr
    tool_calls = suggested.stdout[suggested.stdout.index("  tool_calls:") :]
    assert "observed in 3 of 3 requests: p50 50ms" in tool_calls


def test_the_file_it_was_recorded_with_gives_no_warning(tmp_path: Path) -> None:
    """Judged by the file it was recorded with, a recording's labels agree with the rules: no warning."""
    traces, budgets = tmp_path / "t.jsonl", tmp_path / "b.yaml"
    _record(traces, 2)
    budgets.write_text(RECORDED_WITH, encoding="utf-8")
    result = run_cli("report", traces, "-b", budgets, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
