"""serve's counters and gauges in a real Prometheus, by both roads: scraped from GET /metrics, and over OTLP
through a real Collector's ``prometheus`` exporter.

One serve judges and forwards a trace of known spans to the Collector (collector-config.yaml),
sending its metrics there every second; one Prometheus scrapes serve (job ``serve``) and the
Collector's exporter (job ``otelcol``). Both jobs must show every row of the table under the
same series name, with the same type and help, and the counts the test sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from latency_budget._serve.exposition import prometheus_name
from latency_budget._serve.stats import METRICS

from .services import (
    CollectorService,
    ServeService,
    poll,
    start_prometheus,
    start_serve,
)

pytestmark = pytest.mark.e2e

BUDGETS = """\
version: 1
total_ms: 300
stages:
  model_call:
    budget_ms: 100
    match: {name: "chat*"}
"""
MS = 1_000_000
T0 = 1_700_000_000_000_000_000
CHATS = 3  # a root and three model calls: 4 spans
SPANS = CHATS + 1
MAX_BYTES = 64 * 1024 * 1024
WAIT_S = 60.0
JOBS = ("serve", "otelcol")


@pytest.fixture
def serve(tmp_path: Path, private_collector: CollectorService) -> Iterator[ServeService]:
    """serve forwarding its traces, and its logs and metrics every second, to the Collector."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGETS, encoding="utf-8")
    service = start_serve(
        tmp_path,
        name="serve",
        budgets=budgets,
        forward_endpoint=private_collector.otlp_grpc_endpoint,
        args=["--decision-wait", "0.2", "--metric-interval", "1", "--max-bytes", str(MAX_BYTES)],
        extra_env={"OTEL_SERVICE_NAME": "latency-budget-serve"},
    )
    try:
        yield service
    finally:
        service.process.stop()


def _send_trace(endpoint: str) -> None:
    """A request of 400 ms with three model calls, exported by the SDK's OTLP/gRPC exporter."""
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://{endpoint}", insecure=True)))
    tracer = provider.get_tracer("tests.e2e")
    root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=T0)
    context = trace.set_span_in_context(root)
    for index in range(CHATS):
        start = T0 + (10 + 120 * index) * MS
        tracer.start_span("chat model", context=context, start_time=start).end(end_time=start + 110 * MS)
    root.end(end_time=T0 + 400 * MS)
    provider.shutdown()


def test_serves_metrics_reach_prometheus_scraped_and_through_the_collector(
    serve: ServeService, private_collector: CollectorService, prometheus_binary: str, tmp_path: Path
) -> None:
    """Each row is one series in both jobs under one name, with the table's type and help and the counts sent."""
    _send_trace(serve.grpc_endpoint)
    poll(
        lambda: True if serve.counters()["spans_forwarded"] == SPANS else None,
        timeout=WAIT_S,
        what="serve forwarding the trace",
    )
    metrics_url = serve.health_url.removesuffix("/health") + "/metrics"
    prometheus = start_prometheus(
        prometheus_binary,
        tmp_path / "prometheus",
        scrape_urls={"serve": metrics_url, "otelcol": private_collector.prometheus_url},
    )
    try:

        def both(expr: str) -> dict[str, float] | None:
            found = {labels["job"]: value for labels, value in prometheus.query(expr)}
            return found if set(found) == set(JOBS) else None

        received = poll(
            lambda: (
                found
                if (found := both("latency_budget_serve_spans_received_total")) and set(found.values()) == {SPANS}
                else None
            ),
            timeout=WAIT_S,
            what="spans_received from both jobs",
        )
        judged = both("latency_budget_serve_traces_judged_total")
        limit = both("latency_budget_serve_held_limit_bytes")
        names = {job: set(prometheus.api("label/__name__/values", **{"match[]": f'{{job="{job}"}}'})) for job in JOBS}
        metadata = prometheus.api("metadata")
    finally:
        prometheus.process.stop()

    expected = {prometheus_name(row) for row in METRICS}
    assert received == dict.fromkeys(JOBS, float(SPANS))
    assert judged == dict.fromkeys(JOBS, 1.0)
    assert limit == dict.fromkeys(JOBS, float(MAX_BYTES))
    for job in JOBS:
        served = {name for name in names[job] if name.startswith("latency_budget_serve_")}
        assert served == expected, (job, sorted(served ^ expected))
    for row in METRICS:
        # serve's HELP as Prometheus' own parser read it back (and the Collector's, under the same family name).
        seen = {(item["type"], item["help"]) for item in metadata[prometheus_name(row)]}
        assert seen == {(row.kind, row.description.replace("`", ""))}, row.name
