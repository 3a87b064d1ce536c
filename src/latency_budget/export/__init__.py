"""Signals beyond the annotated trace: violation and hint log records, budget metrics, one-call setup."""

from latency_budget.export.logs import HintLogEmitter, ViolationLogEmitter
from latency_budget.export.metrics import BudgetMetrics
from latency_budget.export.setup import Telemetry, configure

__all__ = ["BudgetMetrics", "HintLogEmitter", "Telemetry", "ViolationLogEmitter", "configure"]
