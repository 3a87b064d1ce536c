"""Recording your own traces: the public file exporter writes what check reads; other formats get one line."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, set_span_in_context

from latency_budget import TraceReport, load_budgets
from latency_budget._demo import otlp_json
from latency_budget.export import OtlpJsonFileSpanExporter, configure
from latency_budget.export.file import encode_otlp_json

from .conftest import assert_one_line_error, run_cli

MS = 1_000_000
T0 = 1_700_000_000_000_000_000

BUDGETS = """
version: 1
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800}
"""


def _one_request(provider: TracerProvider, offset_ms: int, model_ms: int) -> None:
    """A request whose one chat call lasts ``model_ms``: explicit times, no sleeping."""
    tracer = provider.get_tracer("app")
    start = T0 + offset_ms * MS
    root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=start)
    context = set_span_in_context(root)
    call = tracer.start_span(
        "chat gpt-4o",
        context=context,
        kind=SpanKind.CLIENT,
        start_time=start + MS,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
    )
    call.end(end_time=start + (1 + model_ms) * MS)
    root.end(end_time=start + (2 + model_ms) * MS)


def test_configure_traces_file_records_what_check_reads_with_the_live_verdict(tmp_path: Path) -> None:
    """configure(traces_file=...) writes spans and violation logs; check reads them and fails as the processor did."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGETS, encoding="utf-8")
    recording = tmp_path / "traces.jsonl"
    live: list[TraceReport] = []
    telemetry = configure(
        load_budgets(budgets), traces_file=recording, set_global=False, on_report=live.append, hint_logs=False
    )
    for i, model_ms in enumerate((300, 1200, 400)):
        _one_request(telemetry.tracer_provider, i * 5000, model_ms)
    assert telemetry.shutdown() is True
    assert telemetry.meter_provider is None, "a recording run exports no metrics unless asked"

    lines = [json.loads(line) for line in recording.read_text(encoding="utf-8").splitlines()]
    assert {key for line in lines for key in line} == {"resourceSpans", "resourceLogs"}
    assert [r.violated for r in sorted(live, key=lambda r: r.total_actual_ms)] == [False, False, True]

    result = run_cli("check", recording, "-b", budgets, "--format", "json")
    assert result.returncode == 1, result.stderr
    checked = json.loads(result.stdout)
    assert (checked["requests"], checked["violated_requests"]) == (3, 1)
    model = next(c for c in checked["checks"] if c["stage"] == "model_call" and c["metric"] == "duration")
    assert (model["count"], model["outcome"]) == (3, "fail")


def test_file_exporter_appends_and_shares_a_file(tmp_path: Path) -> None:
    """The exporter appends by default (a restarted app adds to its recording) and writes one line per export."""
    path = tmp_path / "t.jsonl"
    for _ in range(2):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(path)))
        _one_request(provider, 0, 10)
        provider.shutdown()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4  # SimpleSpanProcessor: one export, one line, per span
    result = run_cli("report", path, "--format", "json")
    assert result.returncode == 0, result.stderr


def _console_output(tmp_path: Path) -> Path:
    """What ConsoleSpanExporter prints: one pretty-printed span after another (the SDK's own to_json)."""
    exporter_out = tmp_path / "console.txt"
    provider = TracerProvider()
    captured: list[str] = []

    class Keep(SimpleSpanProcessor):
        def on_end(self, span: object) -> None:
            captured.append(span.to_json() + "\n")  # type: ignore[attr-defined]

    provider.add_span_processor(Keep(OtlpJsonFileSpanExporter(tmp_path / "unused.jsonl")))
    _one_request(provider, 0, 10)
    exporter_out.write_text("".join(captured), encoding="utf-8")
    return exporter_out


def test_console_exporter_output_is_named_with_how_to_record(tmp_path: Path) -> None:
    """Console exporter output gets one line naming it and how to record OTLP JSON lines, exit 2."""
    result = run_cli("report", _console_output(tmp_path))
    assert_one_line_error(result, "console exporter output", "configure(traces_file=...)", "Record your traces")


def test_zipkin_file_is_named(tmp_path: Path) -> None:
    """A Zipkin v2 JSON file gets one line naming Zipkin, exit 2."""
    path = tmp_path / "zipkin.json"
    span = {"traceId": "4bf92f3577b34da6", "id": "00f067aa0ba902b7", "name": "get", "timestamp": 1, "duration": 5}
    path.write_text(json.dumps([span]), encoding="utf-8")
    assert_one_line_error(run_cli("report", path), "Zipkin JSON", "OtlpJsonFileSpanExporter")


def test_bare_span_list_is_named(tmp_path: Path) -> None:
    """A list of OTLP spans without resourceSpans around them gets one line saying so, exit 2."""
    provider = TracerProvider()
    spans: list[object] = []
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(tmp_path / "x.jsonl")))
    _one_request(provider, 0, 10)
    provider.shutdown()
    line = json.loads((tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()[0])
    spans = line["resourceSpans"][0]["scopeSpans"][0]["spans"]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(spans), encoding="utf-8")
    assert_one_line_error(run_cli("suggest", path), "bare list of OTLP spans")


def test_demo_writer_is_the_public_exporter() -> None:
    """The demo's --save-traces and the public exporter are one writer with one encoder."""
    assert otlp_json.OtlpJsonLinesExporter is OtlpJsonFileSpanExporter
    assert otlp_json.encode_otlp_json is encode_otlp_json
