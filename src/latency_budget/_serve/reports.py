"""The verdicts' way out: violation and hint logs and the budget metrics, over OTLP, as in process.

The same sinks as :func:`latency_budget.export.configure` (:class:`ViolationLogEmitter`,
:class:`HintLogEmitter`, :class:`BudgetMetrics`), exporting to the same OTLP settings as
the forwarded traces: the logs on an SDK logger provider of their own, the metrics
aggregated in a :class:`~latency_budget.export._bank.MetricBank` (a tenth of the SDK's
cost a record) and pushed by its own timer, so the alerting rules of
``latency-budget rules`` read the tier's metrics as they read an application's. The
resource's ``service.name`` is ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``'),
else ``latency-budget-serve``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource

from latency_budget._core.report import TraceReport
from latency_budget._sdk_internals import preferred_temporality
from latency_budget.export._bank import MetricBank, MetricPusher
from latency_budget.export._otlp import OtlpTarget
from latency_budget.export.logs import HintLogEmitter, ViolationLogEmitter
from latency_budget.export.metrics import BudgetMetrics
from latency_budget.export.setup import shutdown_within

__all__ = ["DEFAULT_SERVICE_NAME", "Reports", "open_report_sinks"]

DEFAULT_SERVICE_NAME = "latency-budget-serve"


@dataclass(frozen=True)
class Reports:
    """The report sinks; how to flush and stop them within a number of seconds (True: in time); the metric bank.

    The bank is pushed with the budget metrics: serve puts its own counters and gauges in it.
    """

    sinks: list[Callable[[TraceReport], object]]
    flush: Callable[[float], bool]
    bank: MetricBank


def open_report_sinks(
    target: OtlpTarget, *, metric_interval_s: float = 10.0, partial_in_metrics: bool = False
) -> Reports:
    """The report sinks over OTLP, by the same settings as the forwarded traces.

    ``partial_in_metrics``: the budget metrics count traces judged on part of their spans too.
    """
    resource = Resource.create({})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    # shutdown_on_exit=False: flush() below shuts the logs down within the drain deadline; the SDK's
    # own exit hook would shut them down a second time (logging "shutdown can only be called
    # once", not JSON, on serve's stderr) and, for metrics, wait up to 30 s past the deadline.
    logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(target.log_exporter()))
    exporter = target.metric_exporter()
    bank = MetricBank(resource, preferred_temporality(exporter))
    pusher = MetricPusher(bank, exporter, metric_interval_s)
    sinks: list[Callable[[TraceReport], object]] = [
        ViolationLogEmitter(logger_provider),
        HintLogEmitter(logger_provider),
        BudgetMetrics(bank=bank, partial_traces=partial_in_metrics),
    ]

    def flush(timeout_s: float) -> bool:
        # Both at once, on daemon threads: an unreachable endpoint costs the deadline once,
        # and never holds the process past it (what is unsent then is dropped).
        jobs: list[tuple[str, Callable[[], object]]] = [
            ("logs", logger_provider.shutdown),
            ("metrics", lambda: pusher.shutdown(timeout_s)),
        ]
        return not shutdown_within(jobs, time.monotonic() + timeout_s)

    return Reports(sinks, flush, bank)
