"""The ``OTEL_LATENCY_BUDGET_*`` environment variables of zero-code enablement.

Named and parsed the way OpenTelemetry's own variables are: booleans are ``true`` or
``false`` (any case), durations are milliseconds. An empty variable counts as unset. A bad
value logs one warning naming the variable and falls back to the default; it never stops
the application.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from latency_budget import _guard

__all__ = [
    "CONFIGURATOR_NAME",
    "ENV_ENABLED",
    "ENV_FILE",
    "ENV_IDLE_TTL",
    "ENV_LOGS_ENABLED",
    "ENV_MAX_ACTIVE_TRACES",
    "ENV_MAX_SPANS_PER_TRACE",
    "ENV_METRICS_ENABLED",
    "ENV_TRACES_FILE",
    "Settings",
    "read_settings",
]

# The name of the configurator entry point, for OTEL_PYTHON_CONFIGURATOR.
CONFIGURATOR_NAME = "latency_budget"

ENV_FILE = "OTEL_LATENCY_BUDGET_FILE"
ENV_ENABLED = "OTEL_LATENCY_BUDGET_ENABLED"
ENV_MAX_ACTIVE_TRACES = "OTEL_LATENCY_BUDGET_MAX_ACTIVE_TRACES"
ENV_MAX_SPANS_PER_TRACE = "OTEL_LATENCY_BUDGET_MAX_SPANS_PER_TRACE"
ENV_IDLE_TTL = "OTEL_LATENCY_BUDGET_IDLE_TTL"
ENV_LOGS_ENABLED = "OTEL_LATENCY_BUDGET_LOGS_ENABLED"
ENV_METRICS_ENABLED = "OTEL_LATENCY_BUDGET_METRICS_ENABLED"
# Also record the annotated spans to this file as OTLP JSON lines (what `latency-budget check` reads).
ENV_TRACES_FILE = "OTEL_LATENCY_BUDGET_TRACES_FILE"


@dataclass(frozen=True, slots=True)
class Settings:
    """What the environment asks for; the defaults are the processor's own."""

    file: str
    max_active_traces: int = 10_000
    max_spans_per_trace: int = 1_000
    idle_ttl_s: float = 300.0
    logs: bool = True
    metrics: bool = True
    traces_file: str | None = None


def read_settings(env: Mapping[str, str] | None = None) -> Settings | None:
    """The settings in ``env`` (default ``os.environ``), or ``None`` when budgets are off.

    Budgets are off when ``OTEL_LATENCY_BUDGET_FILE`` is unset or empty, or when
    ``OTEL_LATENCY_BUDGET_ENABLED`` is ``false``.
    """
    env = os.environ if env is None else env
    file = env.get(ENV_FILE, "").strip()
    if not file or not _boolean(env, ENV_ENABLED, default=True):
        return None
    defaults = Settings(file)
    return Settings(
        file=file,
        max_active_traces=_positive_int(env, ENV_MAX_ACTIVE_TRACES, defaults.max_active_traces),
        max_spans_per_trace=_positive_int(env, ENV_MAX_SPANS_PER_TRACE, defaults.max_spans_per_trace),
        idle_ttl_s=_positive_ms(env, ENV_IDLE_TTL, defaults.idle_ttl_s * 1000) / 1000,
        logs=_boolean(env, ENV_LOGS_ENABLED, default=defaults.logs),
        metrics=_boolean(env, ENV_METRICS_ENABLED, default=defaults.metrics),
        traces_file=env.get(ENV_TRACES_FILE, "").strip() or None,
    )


def _warn(name: str, value: str, expected: str, default: object) -> None:
    _guard.log_once(
        ("env", name, value),
        logging.WARNING,
        "latency_budget: %s=%r is not %s; using the default, %s",
        name,
        value,
        expected,
        default,
    )


def _boolean(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    value = env.get(name, "").strip()
    if not value:
        return default
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    _warn(name, value, "true or false", str(default).lower())
    return default


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        _warn(name, value, "a positive integer", default)
        return default
    return number


def _positive_ms(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        _warn(name, value, "a positive number of milliseconds", f"{default:g}")
        return default
    return number
