"""``configure()``: traces, violation logs and budget metrics over OTLP in one call.

For applications with no OpenTelemetry setup yet. Applications that already build
their providers add :class:`LatencyBudgetProcessor` (and, if they like, the log and
metric sinks) themselves, as the README shows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from opentelemetry import metrics as metrics_api
from opentelemetry import trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from latency_budget._config import BudgetConfig, as_config
from latency_budget._processor import LatencyBudgetProcessor, ReportCallback
from latency_budget.export._otlp import otlp_target
from latency_budget.export.logs import ViolationLogEmitter
from latency_budget.export.metrics import BudgetMetrics

__all__ = ["Telemetry", "configure"]


@dataclass(frozen=True)
class Telemetry:
    """What :func:`configure` built. ``shutdown()`` flushes and stops all three providers."""

    tracer_provider: TracerProvider
    logger_provider: LoggerProvider | None
    meter_provider: MeterProvider | None
    processor: LatencyBudgetProcessor

    def shutdown(self) -> None:
        """Flush pending data and stop exporting; safe to call twice."""
        self.tracer_provider.shutdown()
        if self.logger_provider is not None:
            self.logger_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def configure(
    budgets: BudgetConfig | str | os.PathLike[str] = "budgets.yaml",
    *,
    service_name: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    logs: bool = True,
    metrics: bool = True,
    metric_interval_s: float = 10.0,
    on_report: ReportCallback | None = None,
    set_global: bool = True,
    span_exporter: SpanExporter | None = None,
) -> Telemetry:
    """Build tracer, logger and meter providers that export over OTLP, with budgets checked.

    ``endpoint`` (for example ``http://localhost:4317``) overrides
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``protocol`` (``grpc`` or ``http/protobuf``) overrides
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` and its per-signal forms. Headers, timeouts and
    per-signal endpoints come from the standard ``OTEL_EXPORTER_OTLP_*`` variables, read by
    the OTLP exporters. A bad endpoint or protocol logs one warning and falls back; it never
    stops the app.
    ``span_exporter`` replaces the OTLP span exporter (tests, or another backend).
    """
    config = as_config(budgets)
    target = otlp_target(endpoint, protocol)
    span_out = span_exporter if span_exporter is not None else target.span_exporter()
    attributes = {SERVICE_NAME: service_name} if service_name else {}
    resource = Resource.create(attributes)  # OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES apply too

    sinks: list[ReportCallback] = []
    logger_provider = None
    if logs:
        logger_provider = LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(target.log_exporter()))
        sinks.append(ViolationLogEmitter(logger_provider))
    meter_provider = None
    if metrics:
        reader = PeriodicExportingMetricReader(
            target.metric_exporter(), export_interval_millis=metric_interval_s * 1000
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        sinks.append(BudgetMetrics(meter_provider))
    if on_report is not None:
        sinks.append(on_report)

    tracer_provider = TracerProvider(resource=resource)
    processor = LatencyBudgetProcessor(config, BatchSpanProcessor(span_out), on_report=sinks)
    tracer_provider.add_span_processor(processor)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        if logger_provider is not None:
            set_logger_provider(logger_provider)
        if meter_provider is not None:
            metrics_api.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, logger_provider, meter_provider, processor)
