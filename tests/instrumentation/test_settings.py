"""The OTEL_LATENCY_BUDGET_* environment variables: names, defaults, parsing, bad values."""

from __future__ import annotations

import logging

import pytest

from latency_budget import LatencyBudgetProcessor
from latency_budget._instrument import Settings, read_settings


def test_budgets_are_off_without_a_file() -> None:
    """No OTEL_LATENCY_BUDGET_FILE, or an empty one, means no budgets, whatever else is set."""
    assert read_settings({}) is None
    assert read_settings({"OTEL_LATENCY_BUDGET_FILE": "  ", "OTEL_LATENCY_BUDGET_ENABLED": "true"}) is None


@pytest.mark.parametrize("value", ["false", "FALSE", " False "])
def test_enabled_false_turns_budgets_off(value: str) -> None:
    """OTEL_LATENCY_BUDGET_ENABLED=false (any case, spaces trimmed) turns budgets off."""
    assert read_settings({"OTEL_LATENCY_BUDGET_FILE": "b.yaml", "OTEL_LATENCY_BUDGET_ENABLED": value}) is None


def test_defaults_are_the_processors_own() -> None:
    """With only the file set, the limits are LatencyBudgetProcessor's defaults and both sinks are on."""
    settings = read_settings({"OTEL_LATENCY_BUDGET_FILE": "b.yaml", "OTEL_LATENCY_BUDGET_ENABLED": ""})
    assert settings == Settings("b.yaml", max_active_traces=10_000, max_spans_per_trace=1_000, idle_ttl_s=300.0)
    assert (settings.logs, settings.metrics) == (True, True)
    defaults = LatencyBudgetProcessor.__init__.__kwdefaults__
    assert defaults is not None
    assert (defaults["max_active_traces"], defaults["max_spans_per_trace"], defaults["idle_ttl_s"]) == (
        settings.max_active_traces,
        settings.max_spans_per_trace,
        settings.idle_ttl_s,
    )


def test_every_variable_is_read() -> None:
    """Each variable sets its setting; the idle TTL is in milliseconds, as OpenTelemetry's durations are."""
    settings = read_settings(
        {
            "OTEL_LATENCY_BUDGET_FILE": " conf/budgets.yaml ",
            "OTEL_LATENCY_BUDGET_ENABLED": "True",
            "OTEL_LATENCY_BUDGET_MAX_ACTIVE_TRACES": "500",
            "OTEL_LATENCY_BUDGET_MAX_SPANS_PER_TRACE": "64",
            "OTEL_LATENCY_BUDGET_IDLE_TTL": "1500",
            "OTEL_LATENCY_BUDGET_LOGS_ENABLED": "false",
            "OTEL_LATENCY_BUDGET_METRICS_ENABLED": "FALSE",
        }
    )
    assert settings == Settings(
        "conf/budgets.yaml", max_active_traces=500, max_spans_per_trace=64, idle_ttl_s=1.5, logs=False, metrics=False
    )


@pytest.mark.parametrize(
    ("name", "value", "field", "default", "expected"),
    [
        ("OTEL_LATENCY_BUDGET_MAX_ACTIVE_TRACES", "ten", "max_active_traces", 10_000, "a positive integer"),
        ("OTEL_LATENCY_BUDGET_MAX_ACTIVE_TRACES", "-3", "max_active_traces", 10_000, "a positive integer"),
        ("OTEL_LATENCY_BUDGET_MAX_SPANS_PER_TRACE", "2.5", "max_spans_per_trace", 1_000, "a positive integer"),
        ("OTEL_LATENCY_BUDGET_IDLE_TTL", "5m", "idle_ttl_s", 300.0, "a positive number of milliseconds"),
        ("OTEL_LATENCY_BUDGET_IDLE_TTL", "nan", "idle_ttl_s", 300.0, "a positive number of milliseconds"),
        ("OTEL_LATENCY_BUDGET_IDLE_TTL", "0", "idle_ttl_s", 300.0, "a positive number of milliseconds"),
        ("OTEL_LATENCY_BUDGET_LOGS_ENABLED", "yes", "logs", True, "true or false"),
        ("OTEL_LATENCY_BUDGET_METRICS_ENABLED", "0", "metrics", True, "true or false"),
    ],
)
def test_bad_value_warns_once_and_falls_back(
    caplog: pytest.LogCaptureFixture, name: str, value: str, field: str, default: object, expected: str
) -> None:
    """A malformed value logs one warning naming the variable, however often it is read, and uses the default."""
    env = {"OTEL_LATENCY_BUDGET_FILE": "b.yaml", name: value}
    with caplog.at_level(logging.WARNING, logger="latency_budget"):
        first = read_settings(env)
        second = read_settings(env)
    assert first is not None
    assert first == second
    assert getattr(first, field) == default
    messages = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert len(messages) == 1
    assert f"{name}={value!r} is not {expected}; using the default" in messages[0]


def test_bad_enabled_value_keeps_budgets_on(caplog: pytest.LogCaptureFixture) -> None:
    """OTEL_LATENCY_BUDGET_ENABLED=off is not a boolean: one warning, and the default (on) applies."""
    with caplog.at_level(logging.WARNING, logger="latency_budget"):
        settings = read_settings({"OTEL_LATENCY_BUDGET_FILE": "b.yaml", "OTEL_LATENCY_BUDGET_ENABLED": "off"})
    assert settings == Settings("b.yaml")
    assert [r.getMessage() for r in caplog.records] == [
        "latency_budget: OTEL_LATENCY_BUDGET_ENABLED='off' is not true or false; using the default, true"
    ]
