"""Budget metrics, with attributes drawn only from configured names (bounded cardinality)."""

from __future__ import annotations

from opentelemetry.metrics import MeterProvider, get_meter_provider

from latency_budget import _attributes as attr
from latency_budget._core.report import TraceReport
from latency_budget._version import __version__

__all__ = ["BudgetMetrics"]

# Latency buckets in ms: fine below a second, where budgets of AI stages usually sit.
_BUCKETS_MS = (5, 10, 25, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10000, 20000, 60000)


class BudgetMetrics:
    """An ``on_report`` sink that records, per finished trace:

    - ``latency_budget.stage.duration`` (histogram, ms): stage, profile, violated;
    - ``latency_budget.stage.critical_duration`` (histogram, ms): stage;
    - ``latency_budget.violations`` (counter): stage, kind, severity;
    - ``latency_budget.trace.duration`` (histogram, ms): profile, violated.

    Stage and profile values come from the budget file, never from span data.
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter = (meter_provider or get_meter_provider()).get_meter("latency_budget", __version__)
        self._stage = meter.create_histogram(
            "latency_budget.stage.duration",
            unit="ms",
            description="Wall-clock time of each stage per request (union of its spans).",
            explicit_bucket_boundaries_advisory=_BUCKETS_MS,
        )
        self._critical = meter.create_histogram(
            "latency_budget.stage.critical_duration",
            unit="ms",
            description="Time each stage spent on the request's critical path.",
            explicit_bucket_boundaries_advisory=_BUCKETS_MS,
        )
        self._violations = meter.create_counter(
            "latency_budget.violations",
            unit="{violation}",
            description="Budget violations by stage, kind and severity.",
        )
        self._trace = meter.create_histogram(
            "latency_budget.trace.duration",
            unit="ms",
            description="End-to-end time of each request (its local root span).",
            explicit_bucket_boundaries_advisory=_BUCKETS_MS,
        )

    def __call__(self, report: TraceReport) -> None:
        profile = report.profile
        for stage in report.stages:
            if stage.seen:
                self._stage.record(
                    stage.actual_ms,
                    {attr.STAGE: stage.stage, attr.PROFILE: profile, attr.VIOLATED: stage.over_budget},
                )
            if stage.critical_ms:
                self._critical.record(stage.critical_ms, {attr.STAGE: stage.stage})
        for violation in report.violations:
            self._violations.add(
                1, {attr.STAGE: violation.stage, attr.KIND: violation.kind, attr.SEVERITY: violation.severity}
            )
        self._trace.record(report.total_actual_ms, {attr.PROFILE: profile, attr.VIOLATED: report.violated})
