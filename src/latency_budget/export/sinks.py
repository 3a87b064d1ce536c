"""The report sinks, built in one place for ``configure()``, zero-code set-up and the demo.

Violation log records, hint log records and budget metrics. Hint log records go wherever
violation log records go, unless ``hint_logs=False`` or
``OTEL_LATENCY_BUDGET_HINT_LOGS_ENABLED=false`` turns them off (the keyword wins).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from opentelemetry._logs import LoggerProvider
from opentelemetry.metrics import MeterProvider

from latency_budget import _guard
from latency_budget._processor import ReportCallback
from latency_budget.export.logs import HintLogEmitter, ViolationLogEmitter
from latency_budget.export.metrics import BudgetMetrics

__all__ = ["ENV_HINT_LOGS_ENABLED", "report_sinks"]

ENV_HINT_LOGS_ENABLED = "OTEL_LATENCY_BUDGET_HINT_LOGS_ENABLED"


def report_sinks(
    *,
    logs: bool = True,
    hint_logs: bool | None = None,
    metrics: bool = True,
    logger_provider: LoggerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    env: Mapping[str, str] | None = None,
) -> list[ReportCallback]:
    """The sinks asked for, on the given providers (the global ones by default).

    ``hint_logs`` ``None`` reads :data:`ENV_HINT_LOGS_ENABLED` from ``env`` (default
    ``os.environ``): on unless it says ``false``. Without ``logs`` there are no log
    records of either kind.
    """
    sinks: list[ReportCallback] = []
    if logs:
        sinks.append(ViolationLogEmitter(logger_provider))
        if hint_logs if hint_logs is not None else _hint_logs_from(os.environ if env is None else env):
            sinks.append(HintLogEmitter(logger_provider))
    if metrics:
        sinks.append(BudgetMetrics(meter_provider))
    return sinks


def _hint_logs_from(env: Mapping[str, str]) -> bool:
    value = env.get(ENV_HINT_LOGS_ENABLED, "").strip()
    if not value or value.lower() in ("true", "false"):
        return value.lower() != "false"
    _guard.log_once(
        ("env", ENV_HINT_LOGS_ENABLED, value),
        logging.WARNING,
        "latency_budget: %s=%r is not true or false; using the default, true",
        ENV_HINT_LOGS_ENABLED,
        value,
    )
    return True
