"""Signals beyond the annotated trace: violation log records, budget metrics, one-call setup."""

from latency_budget.export.logs import ViolationLogEmitter
from latency_budget.export.metrics import BudgetMetrics
from latency_budget.export.setup import Telemetry, configure

__all__ = ["BudgetMetrics", "Telemetry", "ViolationLogEmitter", "configure"]
