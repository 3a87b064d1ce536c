"""Per-stage latency budgets for AI requests, inside OpenTelemetry.

>>> from latency_budget import LatencyBudgetProcessor, load_budgets
>>> provider.add_span_processor(LatencyBudgetProcessor(load_budgets("budgets.yaml"), exporting_processor))
"""

from latency_budget._config import BudgetConfig, BudgetConfigError, load_budgets
from latency_budget._core.report import StageReport, TraceReport, Violation
from latency_budget._processor import LatencyBudgetProcessor
from latency_budget._tracker import LatencyBudget, LatencyBudgetTracker
from latency_budget._version import __version__

__all__ = [
    "BudgetConfig",
    "BudgetConfigError",
    "LatencyBudget",
    "LatencyBudgetProcessor",
    "LatencyBudgetTracker",
    "StageReport",
    "TraceReport",
    "Violation",
    "__version__",
    "load_budgets",
]
