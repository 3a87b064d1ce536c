"""Signals beyond the annotated trace: violation and hint log records, budget metrics, recordings, one-call setup."""

from latency_budget.export.file import OtlpJsonFileLogExporter, OtlpJsonFileSpanExporter, OtlpJsonLinesFile
from latency_budget.export.logs import HintLogEmitter, ViolationLogEmitter
from latency_budget.export.metrics import BudgetMetrics
from latency_budget.export.setup import Telemetry, configure
from latency_budget.export.sinks import ENV_HINT_LOGS_ENABLED, report_sinks

__all__ = [
    "ENV_HINT_LOGS_ENABLED",
    "BudgetMetrics",
    "HintLogEmitter",
    "OtlpJsonFileLogExporter",
    "OtlpJsonFileSpanExporter",
    "OtlpJsonLinesFile",
    "Telemetry",
    "ViolationLogEmitter",
    "configure",
    "report_sinks",
]
