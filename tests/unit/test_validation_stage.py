"""``validation``: guardrail and inline-evaluator spans of every dialect make a built-in stage, with no rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.util.types import AttributeValue

from latency_budget import TraceReport
from latency_budget._config.genai_defaults import BUILTIN_STAGES, DIALECTS

from .helpers import at, pipeline
from .lever_traffic import Traffic

BUDGETS = """
version: 1
total_ms: 10000
stages:
  model_call: {budget_ms: 10000}
  validation: {budget_ms: 200}
"""
# Every (key, value) the dialect table reads as validation, with who writes it.
VALIDATION = [
    pytest.param(dialect.key, value, id=f"{dialect.source}: {value}")
    for dialect in DIALECTS
    for value in dialect.stages.get("validation", ())
]


def test_validation_is_a_built_in_stage_of_the_conventions_and_the_big_dialects() -> None:
    """The table reads guardrails of the conventions, OpenInference, Langfuse, MLflow and NeMo Guardrails."""
    assert "validation" in BUILTIN_STAGES
    sources = {dialect.source for dialect in DIALECTS if dialect.stages.get("validation")}
    assert {
        "OpenTelemetry GenAI semantic conventions",
        "OpenInference",
        "Langfuse SDK",
        "MLflow Tracing",
        "NeMo Guardrails",
    } <= sources


def _judged(budgets: str, attributes: dict[str, AttributeValue], duration_ms: float) -> TraceReport:
    """One request: a 500 ms model call, then a span with ``attributes``; its report."""
    reports: list[TraceReport] = []
    p = pipeline(budgets, on_report=reports.append)
    root = p.start("request", 0)
    p.run("chat m", 0, 500, parent=root, attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})
    p.run("check", 500, 500 + duration_ms, parent=root, attributes=attributes)
    root.end(end_time=at(500 + duration_ms))
    (report,) = reports
    return report


@pytest.mark.parametrize(("key", "value"), VALIDATION)
def test_each_dialects_guardrail_span_is_judged_against_the_validation_budget(key: str, value: str) -> None:
    """A 300 ms guardrail span of each spelling: validation's actual is 300 ms, over its 200 ms budget."""
    report = _judged(BUDGETS, {key: value}, 300)
    (stage,) = [s for s in report.stages if s.stage == "validation"]
    assert (stage.count, stage.actual_ms) == (1, 300.0)
    assert [(v.stage, v.kind, v.actual_ms) for v in report.violations] == [("validation", "duration", 300.0)]
    assert report.unattributed_ms == 0.0


def test_an_agent_span_is_no_validation() -> None:
    """Null control: the same span as an agent invocation is in no stage: its time is unattributed, nothing judged."""
    report = _judged(BUDGETS, {"gen_ai.operation.name": "invoke_agent"}, 300)
    (stage,) = [s for s in report.stages if s.stage == "validation"]
    assert stage.count == 0
    assert report.violations == ()
    assert report.unattributed_ms == 300.0


def test_a_file_without_stages_tracks_validation_too() -> None:
    """With no stages in the file, validation is tracked beside the other built-in stages, judged against nothing."""
    report = _judged("version: 1\n", {"openinference.span.kind": "GUARDRAIL"}, 300)
    assert [s.stage for s in report.stages] == list(BUILTIN_STAGES)
    (stage,) = [s for s in report.stages if s.stage == "validation"]
    assert (stage.count, stage.actual_ms, stage.budget_ms) == (1, 300.0, None)


def test_report_judges_validation_like_any_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``report`` on the exported spans: validation has its budget, actual and verdict beside model_call."""
    t = Traffic(BUDGETS)
    t.send(
        ("chat m", 500, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}),
        ("check", 300, {"gen_ai.operation.name": "apply_guardrail"}),
    )
    data = t.report(tmp_path, capsys)
    (row,) = [r for r in data["rows"] if r["stage"] == "validation" and r["metric"] == "duration"]
    assert (row["budget"], row["count"], row["p50"], row["over_budget"]) == (200.0, 1, 300.0, 1)
