"""``configure()``: traces, violation and hint logs and budget metrics over OTLP in one call.

For applications with no OpenTelemetry setup yet. Applications that already build
their providers add :class:`LatencyBudgetProcessor` (and, if they like, the log and
metric sinks) themselves, as the README shows.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
from latency_budget.export.file import OtlpJsonFileLogExporter, OtlpJsonFileSpanExporter, OtlpJsonLinesFile
from latency_budget.export.sinks import report_sinks

__all__ = ["SHUTDOWN_TIMEOUT_S", "Telemetry", "configure"]

logger = logging.getLogger("latency_budget")


SHUTDOWN_TIMEOUT_S = 5.0
"""Default deadline of :meth:`Telemetry.shutdown`: well within the 30 s most containers get after SIGTERM."""


@dataclass(frozen=True)
class Telemetry:
    """What :func:`configure` built. ``shutdown()`` flushes and stops all three providers."""

    tracer_provider: TracerProvider
    logger_provider: LoggerProvider | None
    meter_provider: MeterProvider | None
    processor: LatencyBudgetProcessor
    _outcome: list[bool] = field(default_factory=list, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> bool:
        """Flush pending data and stop exporting, within ``timeout_s`` seconds in all; safe to call twice.

        The three providers shut down at once, each on its own daemon thread, so an
        unreachable Collector costs the deadline once, not each exporter's retries one
        after another. Returns True when all of them finished in time; otherwise one
        warning names the signals still exporting, whose pending data is dropped (their
        threads are left to end on their own and never keep the process alive).
        """
        if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s < math.inf):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        with self._lock:
            if self._outcome:
                return self._outcome[0]
            deadline = time.monotonic() + timeout_s
            millis = timeout_s * 1000
            # Roots held for late spans first: their reports go to the logger and meter
            # providers, which the concurrent shutdowns below would otherwise close before them.
            self.processor.release_held()
            jobs: list[tuple[str, Callable[[], object]]] = [("traces", self.tracer_provider.shutdown)]
            if self.logger_provider is not None:
                jobs.append(("logs", self.logger_provider.shutdown))
            if self.meter_provider is not None:
                meters = self.meter_provider
                jobs.append(("metrics", lambda: meters.shutdown(timeout_millis=millis)))
            late = shutdown_within(jobs, deadline)
            if late:
                logger.warning(
                    "latency_budget: shutdown reached its %g s deadline with %s still exporting; "
                    "what they had not sent yet is dropped (is the Collector reachable?)",
                    timeout_s,
                    ", ".join(late[:-1]) + " and " + late[-1] if len(late) > 1 else late[0],
                )
            self._outcome.append(not late)
            return not late


def shutdown_within(jobs: Sequence[tuple[str, Callable[[], object]]], deadline: float) -> list[str]:
    """Run the ``(name, shutdown)`` jobs at once, each on a daemon thread; the names still running at ``deadline``.

    ``deadline`` is a ``time.monotonic()`` instant. A job that raises is logged and counts as done.
    """
    threads = [(name, _start_shutdown(name, job)) for name, job in jobs]
    for _, thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [name for name, thread in threads if thread.is_alive()]


def _start_shutdown(name: str, job: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        try:
            job()
        except Exception as exc:  # a provider's failure must not escape into the application's exit
            logger.warning("latency_budget: shutting down %s failed: %r", name, exc)

    thread = threading.Thread(target=run, name=f"latency-budget-shutdown-{name}", daemon=True)
    thread.start()
    return thread


def configure(
    budgets: BudgetConfig | str | os.PathLike[str] = "budgets.yaml",
    *,
    service_name: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    logs: bool = True,
    hint_logs: bool | None = None,
    metrics: bool | None = None,
    metric_interval_s: float = 10.0,
    on_report: ReportCallback | None = None,
    set_global: bool = True,
    span_exporter: SpanExporter | None = None,
    traces_file: str | os.PathLike[str] | None = None,
) -> Telemetry:
    """Build tracer, logger and meter providers that export over OTLP, with budgets checked.

    ``endpoint`` (for example ``http://localhost:4317``) overrides
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``protocol`` (``grpc`` or ``http/protobuf``) overrides
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` and its per-signal forms. Headers, timeouts and
    per-signal endpoints come from the standard ``OTEL_EXPORTER_OTLP_*`` variables, read by
    the OTLP exporters. A bad endpoint or protocol logs one warning and falls back; it never
    stops the app.
    ``logs`` exports a log record per violation and, unless ``hint_logs=False`` or
    ``OTEL_LATENCY_BUDGET_HINT_LOGS_ENABLED=false``, one per hint.
    ``span_exporter`` replaces the OTLP span exporter (tests, or another backend).
    ``traces_file`` records instead of exporting over OTLP: the annotated spans, and the
    log records when ``logs`` is on, are appended to that file as OTLP JSON lines, the
    format ``latency-budget check`` and ``report`` read (``OtlpJsonFileSpanExporter``). The
    budget metrics are then off unless ``metrics=True`` asks for them over OTLP.
    """
    if traces_file is not None and span_exporter is not None:
        raise ValueError("configure() takes traces_file or span_exporter, not both")
    config = as_config(budgets)
    target = otlp_target(endpoint, protocol)
    recording = OtlpJsonLinesFile(traces_file) if traces_file is not None else None
    if metrics is None:
        metrics = recording is None
    if recording is not None:
        span_out: SpanExporter = OtlpJsonFileSpanExporter(recording)
    else:
        span_out = span_exporter if span_exporter is not None else target.span_exporter()
    attributes = {SERVICE_NAME: service_name} if service_name else {}
    resource = Resource.create(attributes)  # OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES apply too

    logger_provider = None
    if logs:
        logger_provider = LoggerProvider(resource=resource)
        log_out = OtlpJsonFileLogExporter(recording) if recording is not None else target.log_exporter()
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_out))
    meter_provider = None
    if metrics:
        reader = PeriodicExportingMetricReader(
            target.metric_exporter(), export_interval_millis=metric_interval_s * 1000
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    sinks = report_sinks(
        logs=logs, hint_logs=hint_logs, metrics=metrics, logger_provider=logger_provider, meter_provider=meter_provider
    )
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
