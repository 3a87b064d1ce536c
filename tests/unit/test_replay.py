"""Replaying recorded spans follows the live processor's recording rule (TraceState.end_span)."""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from latency_budget import load_budgets
from latency_budget._replay import SpanRecord, evaluate_spans

from .helpers import TECHCORP_YAML, at

CONFIG = load_budgets(text=TECHCORP_YAML)
TRACE = 0xABC


def span(
    span_id: int, parent_id: int | None, name: str, start_ms: float, end_ms: float, **attributes: object
) -> SpanRecord:
    """A recorded span of one trace, with times in ms after T0."""
    return SpanRecord(TRACE, span_id, parent_id, name, at(start_ms), at(end_ms), SpanKind.INTERNAL, "", attributes)


def test_a_label_naming_a_stage_of_the_file_decides_the_stage() -> None:
    """A span labelled latency_budget.stage=model_call at start counts as model_call, whatever its other attributes."""
    (report,) = evaluate_spans(
        CONFIG,
        [
            span(1, None, "request", 0, 1_000),
            span(
                2, 1, "search", 0, 900, **{"latency_budget.stage": "model_call", "gen_ai.operation.name": "retrieval"}
            ),
        ],
    )
    assert report.stage("model_call").count == 1
    assert report.stage("retrieval").count == 0
    assert report.over_budget_stages == ("model_call",)


def test_a_label_naming_no_stage_of_the_file_falls_back_to_the_rules() -> None:
    """A label from another budget file (a stage this file lacks) does not hide the span: the rules classify it."""
    (report,) = evaluate_spans(
        CONFIG,
        [
            span(1, None, "request", 0, 1_000),
            span(2, 1, "llm", 0, 900, **{"latency_budget.stage": "llm", "gen_ai.operation.name": "chat"}),
        ],
    )
    assert report.stage("model_call").count == 1
    assert report.over_budget_stages == ("model_call",)


def test_a_truncated_recording_still_accounts_its_root() -> None:
    """Past max_spans_per_trace the root is recorded all the same, as live: a stage root owns its critical time."""
    agent = span(1, None, "agent", 0, 60, **{"gen_ai.operation.name": "chat"})  # the root is a model call
    tools = [
        span(10 + n, 1, "tool", n * 10, n * 10 + 10, **{"gen_ai.operation.name": "execute_tool"}) for n in range(5)
    ]
    (report,) = evaluate_spans(CONFIG, [agent, *tools], max_spans_per_trace=2)
    assert report.stage("tool_calls").count == 5  # two remembered, three in the exact counters
    assert report.stage("model_call").count == 1
    # The two remembered tool calls (0-20 ms) are on the path; the rest of the window is the root's own.
    assert report.stage("tool_calls").critical_ms == 20.0
    assert report.stage("model_call").critical_ms == 40.0
    assert report.unattributed_ms == 0.0
