"""Hand-built OpenTelemetry providers exporting over OTLP/gRPC to a test Collector, as a user builds them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from .services import CollectorService


@dataclass(frozen=True)
class OtlpProviders:
    """Traces, logs and metrics for one service name, each with a batching OTLP exporter."""

    tracer: TracerProvider
    logger: LoggerProvider
    meter: MeterProvider
    endpoint: str

    def span_exporting_processor(self) -> BatchSpanProcessor:
        """The downstream a budget processor forwards to: a batch processor with an OTLP exporter."""
        return BatchSpanProcessor(OTLPSpanExporter(endpoint=self.endpoint, insecure=True))


@contextmanager
def otlp_providers(collector: CollectorService, service: str) -> Iterator[OtlpProviders]:
    """The three providers, shut down (so flushed) in that order when the block ends."""
    endpoint = collector.otlp_grpc_endpoint
    resource = Resource.create({"service.name": service})
    logger = LoggerProvider(resource=resource)
    logger.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=endpoint, insecure=True)))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint, insecure=True))
    meter = MeterProvider(resource=resource, metric_readers=[reader])
    tracer = TracerProvider(resource=resource)
    try:
        yield OtlpProviders(tracer, logger, meter, endpoint)
    finally:
        tracer.shutdown()
        logger.shutdown()
        meter.shutdown()
