"""The verdicts' way out: violation and hint logs and the budget metrics, over OTLP, as in process.

The same sinks as :func:`latency_budget.export.configure` (:class:`ViolationLogEmitter`,
:class:`HintLogEmitter`, :class:`BudgetMetrics`) on providers of their own, exporting to
the same OTLP settings as the forwarded traces, so the alerting rules of
``latency-budget rules`` read the tier's metrics as they read an application's. The
resource's ``service.name`` is ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``'),
else ``latency-budget-serve``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource

from latency_budget._core.report import TraceReport
from latency_budget.export._otlp import OtlpTarget
from latency_budget.export.logs import HintLogEmitter, ViolationLogEmitter
from latency_budget.export.metrics import BudgetMetrics
from latency_budget.export.setup import shutdown_within

__all__ = ["DEFAULT_SERVICE_NAME", "open_report_sinks"]

DEFAULT_SERVICE_NAME = "latency-budget-serve"


def open_report_sinks(
    target: OtlpTarget, *, metric_interval_s: float = 10.0
) -> tuple[list[Callable[[TraceReport], object]], Callable[[float], bool]]:
    """The report sinks, and how to flush and stop them within a number of seconds (True: in time)."""
    resource = Resource.create({})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    # shutdown_on_exit=False: flush() below shuts both down within the drain deadline; the SDK's
    # own exit hook would shut them down a second time (logging "shutdown can only be called
    # once", not JSON, on serve's stderr) and, for metrics, wait up to 30 s past the deadline.
    logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(target.log_exporter()))
    reader = PeriodicExportingMetricReader(target.metric_exporter(), export_interval_millis=metric_interval_s * 1000)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    sinks: list[Callable[[TraceReport], object]] = [
        ViolationLogEmitter(logger_provider),
        HintLogEmitter(logger_provider),
        BudgetMetrics(meter_provider),
    ]

    def flush(timeout_s: float) -> bool:
        # Both at once, on daemon threads: an unreachable endpoint costs the deadline once,
        # and never holds the process past it (what is unsent then is dropped).
        jobs: list[tuple[str, Callable[[], object]]] = [
            ("logs", logger_provider.shutdown),
            ("metrics", lambda: meter_provider.shutdown(timeout_millis=timeout_s * 1000)),
        ]
        return not shutdown_within(jobs, time.monotonic() + timeout_s)

    return sinks, flush
