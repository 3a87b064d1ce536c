"""The public API as a user writes against it, type-checked by mypy --strict (pyproject's [tool.mypy] files) and run.

Only names from ``latency_budget`` and ``latency_budget.testing`` are imported: if a
type a public function returns or takes stopped being importable, or changed shape,
mypy fails here before a user's checker does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import latency_budget
from latency_budget import (
    Call,
    Hint,
    HintKind,
    LatencyBudgetProcessor,
    ProcessorStats,
    ReportCallback,
    StageReport,
    TraceReport,
    Violation,
    ViolationKind,
    load_budgets,
)

BUDGETS = """
version: 1
stages:
  model_call:
    match: {name: "chat *"}
    budget_ms: 100
total_ms: 150
"""


def _kinds(report: TraceReport) -> list[tuple[str, ViolationKind]]:
    return [(v.stage, v.kind) for v in report.violations]


def _hint_kinds(hints: tuple[Hint, ...]) -> list[HintKind]:
    return [hint.kind for hint in hints]


def _models(calls: Sequence[Call]) -> list[str | None]:
    return [call.model for call in calls]


def test_a_user_judges_a_request_and_reads_every_public_type(tmp_path: Path) -> None:
    """A processor with an on_report callback judges one request; its report, stats and calls have the public types."""
    path = tmp_path / "budgets.yaml"
    path.write_text(BUDGETS, encoding="utf-8")
    reports: list[TraceReport] = []
    callback: ReportCallback = reports.append
    exporter = InMemorySpanExporter()
    processor = LatencyBudgetProcessor(load_budgets(path), SimpleSpanProcessor(exporter), on_report=callback)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("POST /ask", start_time=0, end_on_exit=False) as root:
        tracer.start_span("chat gpt-4o", start_time=1_000_000, attributes={"gen_ai.request.model": "gpt-4o"}).end(
            end_time=201_000_000
        )
    root.end(end_time=210_000_000)
    processor.release_held()  # a root is held up to late_span_grace_ms for spans written after it ends

    (report,) = reports
    stage: StageReport = report.stage("model_call")
    violation: Violation = report.violations[0]
    stats: ProcessorStats = processor.stats()
    assert _kinds(report) == [("model_call", "duration"), ("total", "total")]
    assert report.broken_stages("error") == ("model_call", "total")
    assert violation.over_ms == 100.0
    assert stage.count == 1
    assert _models(report.calls) == ["gpt-4o"]
    assert _hint_kinds(report.hints) == []
    assert stats == ProcessorStats(active_traces=0, evicted_lru=0, evicted_idle=0, reports=1, truncated_traces=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.reports = 2  # type: ignore[misc]
    provider.shutdown()


def test_public_classes_name_the_module_users_import_them_from() -> None:
    """Every class in latency_budget.__all__ says __module__ == "latency_budget" (reprs, pickles, docs)."""
    classes = [getattr(latency_budget, name) for name in latency_budget.__all__]
    assert [c.__name__ for c in classes if isinstance(c, type) and c.__module__ != "latency_budget"] == []
    assert LatencyBudgetProcessor.__module__ == "latency_budget"
