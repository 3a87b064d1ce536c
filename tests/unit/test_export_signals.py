"""Violation log records, budget metrics and configure(), against the SDK's in-memory exporters."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

try:
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
except ImportError:  # SDK < 1.39 (tests/constraints-sdk-min.txt) names it InMemoryLogExporter
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogRecordExporter

import latency_budget
from latency_budget import _attributes as attr
from latency_budget import load_budgets
from latency_budget.export import BudgetMetrics, ViolationLogEmitter, configure
from latency_budget.export._otlp import resolve_protocol

from .helpers import TECHCORP_YAML, at, op, pipeline


def run_techcorp(**options: object) -> int:
    """Run the seed's over-budget request through a pipeline; return the root's span id."""
    p = pipeline(**options)
    root = p.start("request", 0)
    p.run("retrieve", 0, 45.2, parent=root, attributes=op("retrieval"))
    p.run("chat", 45.2, 1295.2, parent=root, attributes=op("chat"))
    p.run("tool", 1295.2, 1445.2, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(1445.2))
    return root.get_span_context().span_id


def test_one_log_record_per_violation_linked_to_the_root() -> None:
    """Each violation becomes a log record named latency_budget.violation, with the root's ids."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    root_id = run_techcorp(on_report=ViolationLogEmitter(provider))
    records = [item.log_record for item in exporter.get_finished_logs()]
    assert [r.attributes[attr.STAGE] for r in records if r.attributes] == ["model_call", "total"]
    model = records[0]
    assert model.event_name == "latency_budget.violation"
    assert model.attributes is not None
    assert model.attributes["event.name"] == "latency_budget.violation"
    assert model.attributes[attr.OVER_MS] == 450.0
    assert model.attributes[attr.KIND] == "duration"
    assert model.span_id == root_id
    assert model.timestamp == at(1445.2)
    assert model.severity_text == "ERROR"
    assert model.body == "model_call duration 1250ms > budget 800ms (+450ms)"


def test_metrics_carry_only_configured_names() -> None:
    """Stage, violation and trace metrics are recorded with stage/profile/kind attributes only."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    run_techcorp(on_report=BudgetMetrics(provider))
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[dict[str, object]]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = [dict(p.attributes or {}) for p in metric.data.data_points]
    assert {attr.STAGE: "model_call", attr.PROFILE: "default", attr.VIOLATED: True} in points[
        "latency_budget.stage.duration"
    ]
    assert {attr.STAGE: "retrieval", attr.PROFILE: "default", attr.VIOLATED: False} in points[
        "latency_budget.stage.duration"
    ]
    assert {attr.STAGE: "model_call", attr.KIND: "duration", attr.SEVERITY: "error"} in points[
        "latency_budget.violations"
    ]
    assert points["latency_budget.trace.duration"] == [{attr.PROFILE: "default", attr.VIOLATED: True}]
    assert {attr.STAGE: "model_call"} in points["latency_budget.stage.critical_duration"]
    assert {attr.STAGE: "model_call", attr.KIND: "stage", attr.PROFILE: "default", attr.WITHIN_BUDGET: False} in points[
        "latency_budget.requests"
    ]
    allowed = {attr.STAGE, attr.PROFILE, attr.VIOLATED, attr.KIND, attr.SEVERITY, attr.WITHIN_BUDGET}
    assert all(set(p) <= allowed for series in points.values() for p in series)


def test_configure_builds_a_checked_pipeline_with_a_custom_exporter() -> None:
    """configure() wires budgets, logs and metrics; spans reach its exporter annotated."""
    exporter = InMemorySpanExporter()
    telemetry = configure(
        load_budgets(text=TECHCORP_YAML),
        service_name="svc",
        endpoint="http://127.0.0.1:9",  # never contacted: the span exporter is replaced, logs/metrics off
        span_exporter=exporter,
        logs=False,
        metrics=False,
        set_global=False,
    )
    tracer = telemetry.tracer_provider.get_tracer("t")
    root = tracer.start_span("request", start_time=at(0), kind=SpanKind.SERVER)
    root.end(end_time=at(10))
    telemetry.tracer_provider.force_flush()
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes[attr.VIOLATED] is False
    assert span.resource.attributes["service.name"] == "svc"
    assert telemetry.shutdown() is True
    assert telemetry.shutdown() is True  # a second call is harmless


@pytest.mark.parametrize(("value", "expected"), [("grpc", "grpc"), ("http/protobuf", "http/protobuf"), ("", "grpc")])
def test_protocol_from_environment(value: str, expected: str) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL selects grpc or http/protobuf; unset means grpc."""
    assert resolve_protocol(None, {"OTEL_EXPORTER_OTLP_PROTOCOL": value}) == expected


def test_bad_protocol_warns_once_and_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    """An unknown protocol logs one clear warning and falls back to grpc."""
    with caplog.at_level(logging.WARNING, logger="latency_budget"):
        assert resolve_protocol(None, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}) == "grpc"
    assert [r.getMessage() for r in caplog.records] == [
        "latency_budget: unsupported OTLP protocol 'http/json' (expected grpc or http/protobuf); using grpc"
    ]


def test_bad_endpoint_warns_and_the_app_keeps_running(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A malformed OTEL_EXPORTER_OTLP_ENDPOINT gives one warning; configure() still returns."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")
    with caplog.at_level(logging.WARNING, logger="latency_budget"):
        telemetry = configure(load_budgets(text=TECHCORP_YAML), set_global=False, metrics=False)
    telemetry.shutdown()
    warnings = [r.getMessage() for r in caplog.records if r.name == "latency_budget"]
    assert warnings == [
        "latency_budget: OTEL_EXPORTER_OTLP_ENDPOINT='collector:4317' is not an http(s)://host:port URL; "
        "exporting to http://localhost:4317 instead"
    ]


_SHUTDOWN_SCRIPT = """
import json, logging, socket, sys
from latency_budget import load_budgets
from latency_budget.export import configure

messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append(record.getMessage())
logging.getLogger("latency_budget").addHandler(handler)
closed = socket.socket()
closed.bind(("127.0.0.1", 0))
port = closed.getsockname()[1]
closed.close()  # nothing listens there: every export is refused and retried until its 60 s timeout
telemetry = configure(
    load_budgets(text="version: 1\\ntotal_ms: 1\\n"),
    endpoint=f"http://127.0.0.1:{port}",
    protocol="grpc",
    metric_interval_s=3600,
    set_global=False,
)
from opentelemetry.trace import SpanKind
root = telemetry.tracer_provider.get_tracer("t").start_span("request", start_time=10**18, kind=SpanKind.SERVER)
root.end(end_time=10**18 + 500_000_000)  # over total_ms: a span, a violation log record and metrics to send
print(json.dumps({"finished": telemetry.shutdown(timeout_s=1), "again": telemetry.shutdown(), "messages": messages}))
"""


def test_shutdown_with_the_collector_down_keeps_its_deadline_and_says_what_is_dropped() -> None:
    """With every export refused and retried for 60 s, shutdown(timeout_s=1) returns False after one deadline
    for all three providers together, warns once naming them, and the process then exits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_TIMEOUT="60", PYTHONPATH=str(Path(latency_budget.__file__).resolve().parents[1]))
    done = subprocess.run(
        [sys.executable, "-c", _SHUTDOWN_SCRIPT], capture_output=True, text=True, env=env, timeout=120, check=False
    )  # the 120 s only detects a hang: one exporter alone would retry for 60 s, three in a row for minutes
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["finished"] is False
    assert outcome["again"] is False  # a second call returns the first call's outcome at once
    # Traces and logs wait on their exporters' retries; metrics get the same deadline passed down, so they
    # may end just inside or just outside it.
    allowed = [
        [
            f"latency_budget: shutdown reached its 1 s deadline with {late} still exporting; "
            "what they had not sent yet is dropped (is the Collector reachable?)"
        ]
        for late in ("traces and logs", "traces, logs and metrics")
    ]
    assert outcome["messages"] in allowed


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf")])
def test_shutdown_timeout_must_be_positive(timeout: float) -> None:
    """shutdown(timeout_s=...) must be a positive, finite number of seconds."""
    telemetry = configure(
        load_budgets(text=TECHCORP_YAML),
        span_exporter=InMemorySpanExporter(),
        logs=False,
        metrics=False,
        set_global=False,
    )
    with pytest.raises(ValueError, match="timeout_s"):
        telemetry.shutdown(timeout_s=timeout)
    assert telemetry.shutdown() is True
