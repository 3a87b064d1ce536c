"""Per-stage latency budgets for AI requests, inside OpenTelemetry.

>>> from latency_budget import LatencyBudgetProcessor, load_budgets
>>> provider.add_span_processor(LatencyBudgetProcessor(load_budgets("budgets.yaml"), exporting_processor))

Everything a user imports is here (and in ``latency_budget.testing`` and
``latency_budget.export``): the processor and its ``on_report`` callback type, what
``stats()`` returns, the reports and what they hold (violations, hints, calls).
"""

from latency_budget._config import BudgetConfig, BudgetConfigError, load_budgets
from latency_budget._core.call_facts import Call
from latency_budget._core.hints import Hint, HintKind
from latency_budget._core.report import StageReport, TraceReport, Violation, ViolationKind
from latency_budget._evaluation_logs import EvaluationLogProcessor
from latency_budget._processor import LatencyBudgetProcessor, ReportCallback
from latency_budget._trace_table import ProcessorStats
from latency_budget._tracker import LatencyBudget, LatencyBudgetTracker
from latency_budget._version import __version__

__all__ = [
    "BudgetConfig",
    "BudgetConfigError",
    "Call",
    "EvaluationLogProcessor",
    "Hint",
    "HintKind",
    "LatencyBudget",
    "LatencyBudgetProcessor",
    "LatencyBudgetTracker",
    "ProcessorStats",
    "ReportCallback",
    "StageReport",
    "TraceReport",
    "Violation",
    "ViolationKind",
    "__version__",
    "load_budgets",
]

# The public classes name this module, where users import them from (reprs, pickles, docs).
for _public in (
    BudgetConfig,
    BudgetConfigError,
    Call,
    EvaluationLogProcessor,
    Hint,
    LatencyBudget,
    LatencyBudgetProcessor,
    LatencyBudgetTracker,
    ProcessorStats,
    StageReport,
    TraceReport,
    Violation,
):
    _public.__module__ = __name__
del _public
