"""One function builds the report sinks: hint log records go wherever violation log records go, unless turned off."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from latency_budget import load_budgets
from latency_budget._instrument.install import report_sinks as zero_code_sinks
from latency_budget._instrument.settings import Settings
from latency_budget.export import (
    ENV_HINT_LOGS_ENABLED,
    BudgetMetrics,
    HintLogEmitter,
    ViolationLogEmitter,
    configure,
    report_sinks,
)

BUDGETS = load_budgets(text="version: 1\nstages:\n  model_call: {budget_ms: 100}\n")


def kinds(sinks: object) -> list[type]:
    return [type(sink) for sink in sinks]  # type: ignore[attr-defined]


def test_hint_logs_are_on_wherever_violation_logs_are() -> None:
    """By default the sinks are violation logs, hint logs and metrics; without logs, neither kind of record."""
    assert kinds(report_sinks(env={})) == [ViolationLogEmitter, HintLogEmitter, BudgetMetrics]
    assert kinds(report_sinks(logs=False, env={})) == [BudgetMetrics]


@pytest.mark.parametrize("value", ["false", "FALSE", " false "])
def test_the_environment_variable_turns_hint_logs_off_and_the_keyword_wins(value: str) -> None:
    """OTEL_LATENCY_BUDGET_HINT_LOGS_ENABLED=false drops hint records; hint_logs=True brings them back."""
    env = {ENV_HINT_LOGS_ENABLED: value}
    assert kinds(report_sinks(env=env)) == [ViolationLogEmitter, BudgetMetrics]
    assert kinds(report_sinks(hint_logs=True, env=env)) == [ViolationLogEmitter, HintLogEmitter, BudgetMetrics]
    assert kinds(report_sinks(hint_logs=False, env={})) == [ViolationLogEmitter, BudgetMetrics]
    assert kinds(report_sinks(env={ENV_HINT_LOGS_ENABLED: "maybe"})) == [
        ViolationLogEmitter,
        HintLogEmitter,
        BudgetMetrics,
    ]  # a bad value logs and keeps the default


def test_configure_and_zero_code_set_up_emit_hint_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure() and zero-code set-up both build their sinks with report_sinks: hint logs included."""
    monkeypatch.delenv(ENV_HINT_LOGS_ENABLED, raising=False)
    telemetry = configure(BUDGETS, span_exporter=InMemorySpanExporter(), set_global=False, metric_interval_s=60)
    try:
        assert kinds(telemetry.processor._on_report) == [ViolationLogEmitter, HintLogEmitter, BudgetMetrics]
    finally:
        telemetry.shutdown(timeout_s=1)
    telemetry = configure(
        BUDGETS, span_exporter=InMemorySpanExporter(), set_global=False, hint_logs=False, metric_interval_s=60
    )
    try:
        assert kinds(telemetry.processor._on_report) == [ViolationLogEmitter, BudgetMetrics]
    finally:
        telemetry.shutdown(timeout_s=1)
    assert kinds(zero_code_sinks(Settings(file="budgets.yaml"))) == [ViolationLogEmitter, HintLogEmitter, BudgetMetrics]
    monkeypatch.setenv(ENV_HINT_LOGS_ENABLED, "false")
    assert kinds(zero_code_sinks(Settings(file="budgets.yaml"))) == [ViolationLogEmitter, BudgetMetrics]
