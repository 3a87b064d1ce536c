"""Hand-measured stages: the tracker API for code that times its own stages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from latency_budget._config.model import DEFAULT_PROFILE, BudgetSet, StageBudget
from latency_budget._core.accounting import StageMeasurement, evaluate
from latency_budget._core.report import TraceReport

__all__ = ["LatencyBudget", "LatencyBudgetTracker"]


@dataclass(slots=True)
class LatencyBudget:
    """One stage's budget and, once recorded, its actual latency in milliseconds."""

    stage: str
    budget_ms: float
    actual_ms: float | None = None

    @property
    def within_budget(self) -> bool:
        """True until a recorded actual exceeds the budget."""
        return self.actual_ms is None or self.actual_ms <= self.budget_ms

    @property
    def over_ms(self) -> float:
        """How far the actual exceeds the budget (0 when within or not yet recorded)."""
        return 0.0 if self.actual_ms is None else max(0.0, self.actual_ms - self.budget_ms)


class LatencyBudgetTracker:
    """Record stage latencies by hand and judge them with the same core as the processor.

    Stages recorded more than once add up, as sequential calls do. The request's total
    is the sum of the recorded stages, since hand measurements carry no timeline.
    """

    def __init__(self, budgets: Mapping[str, float], *, total_ms: float | None = None) -> None:
        if not budgets:
            raise ValueError("LatencyBudgetTracker needs at least one stage budget")
        for stage, budget in budgets.items():
            if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
                raise ValueError(f"budget for stage {stage!r} must be a positive number, got {budget!r}")
        self.budgets: dict[str, LatencyBudget] = {
            stage: LatencyBudget(stage, budget) for stage, budget in budgets.items()
        }
        self._counts: dict[str, int] = dict.fromkeys(budgets, 0)
        self._budget_set = BudgetSet(
            profile=DEFAULT_PROFILE,
            stages=tuple(StageBudget(stage, budget) for stage, budget in budgets.items()),
            total_ms=total_ms if total_ms is not None else sum(budgets.values()),
        )

    def record(self, stage: str, actual_ms: float) -> None:
        """Add ``actual_ms`` to ``stage`` (``KeyError`` for a stage with no budget)."""
        if stage not in self.budgets:
            raise KeyError(f"no budget for stage {stage!r}; known stages: {', '.join(self.budgets)}")
        entry = self.budgets[stage]
        entry.actual_ms = actual_ms if entry.actual_ms is None else entry.actual_ms + actual_ms
        self._counts[stage] += 1

    def evaluate(self) -> TraceReport:
        """The full report, as the span processor would produce it."""
        measurements = {
            stage: StageMeasurement(entry.actual_ms, entry.actual_ms, self._counts[stage])
            for stage, entry in self.budgets.items()
            if entry.actual_ms is not None
        }
        total = sum(m.actual_ms for m in measurements.values())
        return evaluate(self._budget_set, measurements, total_actual_ms=total)

    def report(self) -> dict[str, Any]:
        """A plain-dict summary: totals, ``over_budget_stages`` and one entry per stage."""
        result = self.evaluate()
        return {
            "total_budget_ms": result.total_budget_ms,
            "total_actual_ms": result.total_actual_ms,
            "within_budget": not result.violated,
            "over_budget_stages": list(result.over_budget_stages),
            "stages": {
                stage.stage: {
                    "budget_ms": stage.budget_ms,
                    "actual_ms": stage.actual_ms if stage.seen else None,
                    "within_budget": stage.within_budget,
                    "over_ms": stage.over_ms,
                }
                for stage in result.stages
            },
        }
