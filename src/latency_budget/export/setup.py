"""``configure()``: traces, violation logs and budget metrics over OTLP in one call.

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
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from opentelemetry import metrics as metrics_api
from opentelemetry import trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from latency_budget._config import BudgetConfig, load_budgets
from latency_budget._processor import LatencyBudgetProcessor, ReportCallback
from latency_budget.export.logs import ViolationLogEmitter
from latency_budget.export.metrics import BudgetMetrics

if TYPE_CHECKING:  # named LogExporter before SDK 1.39; only the type checker needs the name
    from opentelemetry.sdk._logs.export import LogRecordExporter

__all__ = ["SHUTDOWN_TIMEOUT_S", "Protocol", "Telemetry", "configure", "resolve_protocol"]

logger = logging.getLogger("latency_budget")

Protocol = Literal["grpc", "http/protobuf"]
_PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")
_DEFAULT_PROTOCOL: Protocol = "grpc"
_HTTP_PATHS = {"traces": "/v1/traces", "logs": "/v1/logs", "metrics": "/v1/metrics"}


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
            jobs: list[tuple[str, Callable[[], object]]] = [("traces", self.tracer_provider.shutdown)]
            if self.logger_provider is not None:
                jobs.append(("logs", self.logger_provider.shutdown))
            if self.meter_provider is not None:
                meters = self.meter_provider
                jobs.append(("metrics", lambda: meters.shutdown(timeout_millis=millis)))
            threads = [(name, _start_shutdown(name, job)) for name, job in jobs]
            for _, thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            late = [name for name, thread in threads if thread.is_alive()]
            if late:
                logger.warning(
                    "latency_budget: shutdown reached its %g s deadline with %s still exporting; "
                    "what they had not sent yet is dropped (is the Collector reachable?)",
                    timeout_s,
                    ", ".join(late[:-1]) + " and " + late[-1] if len(late) > 1 else late[0],
                )
            self._outcome.append(not late)
            return not late


def _start_shutdown(name: str, job: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        try:
            job()
        except Exception as exc:  # a provider's failure must not escape into the application's exit
            logger.warning("latency_budget: shutting down %s failed: %r", name, exc)

    thread = threading.Thread(target=run, name=f"latency-budget-shutdown-{name}", daemon=True)
    thread.start()
    return thread


def resolve_protocol(explicit: str | None = None, env: Mapping[str, str] | None = None) -> Protocol:
    """The OTLP protocol: argument, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else grpc.

    An unknown value logs one warning and falls back to grpc.
    """
    env = os.environ if env is None else env
    value = explicit if explicit is not None else env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
    if not value:
        return _DEFAULT_PROTOCOL
    for protocol in _PROTOCOLS:
        if value == protocol:
            return protocol
    logger.warning(
        "latency_budget: unsupported OTLP protocol %r (expected grpc or http/protobuf); using %s",
        value,
        _DEFAULT_PROTOCOL,
    )
    return _DEFAULT_PROTOCOL


def _endpoint(endpoint: str | None, env: Mapping[str, str], protocol: Protocol) -> str | None:
    """The endpoint to hand to the exporters, or None to let them read the environment.

    A malformed endpoint (argument or ``OTEL_EXPORTER_OTLP_ENDPOINT``) logs one warning
    and is replaced by the local default for ``protocol``.
    """
    explicit = endpoint is not None
    value = (endpoint if explicit else env.get("OTEL_EXPORTER_OTLP_ENDPOINT")) or ""
    value = value.strip()
    if not value:
        return None
    parsed = urllib.parse.urlsplit(value)
    try:
        port_ok = parsed.port is not None or parsed.scheme in ("http", "https")
    except ValueError:
        port_ok = False
    if parsed.scheme in ("http", "https") and parsed.hostname and port_ok:
        return value if explicit else None
    fallback = "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"
    logger.warning(
        "latency_budget: %s=%r is not an http(s)://host:port URL; exporting to %s instead",
        "endpoint" if explicit else "OTEL_EXPORTER_OTLP_ENDPOINT",
        value,
        fallback,
    )
    return fallback


def _exporters(protocol: Protocol, endpoint: str | None) -> tuple[SpanExporter, LogRecordExporter, MetricExporter]:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter  # noqa: PLC0415
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter  # noqa: PLC0415
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter  # noqa: PLC0415

        if endpoint:
            return (
                OTLPSpanExporter(endpoint=endpoint),
                OTLPLogExporter(endpoint=endpoint),
                OTLPMetricExporter(endpoint=endpoint),
            )
        return OTLPSpanExporter(), OTLPLogExporter(), OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs  # noqa: PLC0415
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics  # noqa: PLC0415
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans  # noqa: PLC0415

    if endpoint:
        base = endpoint.rstrip("/")
        return (
            HttpSpans(endpoint=base + _HTTP_PATHS["traces"]),
            HttpLogs(endpoint=base + _HTTP_PATHS["logs"]),
            HttpMetrics(endpoint=base + _HTTP_PATHS["metrics"]),
        )
    return HttpSpans(), HttpLogs(), HttpMetrics()


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
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``protocol`` overrides ``OTEL_EXPORTER_OTLP_PROTOCOL``
    (``grpc`` or ``http/protobuf``). Headers, timeouts and per-signal endpoints come from
    the standard ``OTEL_EXPORTER_OTLP_*`` variables, read by the OTLP exporters. A bad
    endpoint or protocol logs one warning and falls back; it never stops the app.
    ``span_exporter`` replaces the OTLP span exporter (tests, or another backend).
    """
    config = budgets if isinstance(budgets, BudgetConfig) else load_budgets(budgets)
    env = os.environ
    chosen = resolve_protocol(protocol, env)
    span_out, log_out, metric_out = _exporters(chosen, _endpoint(endpoint, env, chosen))
    if span_exporter is not None:
        span_out = span_exporter
    attributes = {SERVICE_NAME: service_name} if service_name else {}
    resource = Resource.create(attributes)  # OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES apply too

    sinks: list[ReportCallback] = []
    logger_provider = None
    if logs:
        logger_provider = LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_out))
        sinks.append(ViolationLogEmitter(logger_provider))
    meter_provider = None
    if metrics:
        reader = PeriodicExportingMetricReader(metric_out, export_interval_millis=metric_interval_s * 1000)
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
