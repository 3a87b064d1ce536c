"""The attribute and event names this package writes: a public contract.

Dashboards, Jaeger searches and alerts are built on these names, so they change only
with a major version.
"""

from __future__ import annotations

__all__ = [
    "ACTUAL_MS",
    "BUDGET_MS",
    "CALLS",
    "CRITICAL_STAGE",
    "FIRST_TOKEN_MS",
    "HINT_EVENT",
    "HINT_KIND",
    "HINT_SAVINGS_MS",
    "HINT_SPAN_COUNT",
    "KIND",
    "MAX_CALLS",
    "OVER_BUDGET_STAGES",
    "OVER_MS",
    "PROFILE",
    "SEVERITY",
    "STAGE",
    "TOTAL_ACTUAL_MS",
    "TOTAL_BUDGET_MS",
    "TRUNCATED",
    "UNATTRIBUTED_MS",
    "VIOLATED",
    "VIOLATION_EVENT",
    "WARNED",
    "WARN_STAGES",
    "WITHIN_BUDGET",
    "stage_key",
]

PREFIX = "latency_budget."

# On every stage span (set at start) and on violation events.
STAGE = "latency_budget.stage"
BUDGET_MS = "latency_budget.budget_ms"
ACTUAL_MS = "latency_budget.actual_ms"

# On the local root (and, for VIOLATED/WARNED, on a stage span over its own budget).
VIOLATED = "latency_budget.violated"
WARNED = "latency_budget.warned"
OVER_BUDGET_STAGES = "latency_budget.over_budget_stages"
WARN_STAGES = "latency_budget.warn_stages"
TOTAL_BUDGET_MS = "latency_budget.total.budget_ms"
TOTAL_ACTUAL_MS = "latency_budget.total.actual_ms"
PROFILE = "latency_budget.profile"
FIRST_TOKEN_MS = "latency_budget.first_token_ms"
TRUNCATED = "latency_budget.truncated"
UNATTRIBUTED_MS = "latency_budget.unattributed_ms"
CRITICAL_STAGE = "latency_budget.critical_stage"

# The span event for each place where time could be won.
HINT_EVENT = "latency_budget.hint"
HINT_KIND = "latency_budget.hint.kind"
HINT_SPAN_COUNT = "latency_budget.hint.span_count"
HINT_SAVINGS_MS = "latency_budget.hint.potential_savings_ms"

# The span event (and log record) for each violation.
VIOLATION_EVENT = "latency_budget.violation"
KIND = "latency_budget.kind"
SEVERITY = "latency_budget.severity"
OVER_MS = "latency_budget.over_ms"
MAX_CALLS = "latency_budget.max_calls"
CALLS = "latency_budget.calls"

# Metric attribute only (latency_budget.requests): whether the request stayed within the budget.
WITHIN_BUDGET = "latency_budget.within_budget"


def stage_key(stage: str, field: str) -> str:
    """``latency_budget.stages.<stage>.<field>``, e.g. ``...stages.model_call.actual_ms``."""
    return f"latency_budget.stages.{stage}.{field}"
