"""Reading recorded traces: the golden OTLP and Jaeger fixtures give the processor's own verdicts."""

from __future__ import annotations

import json
from dataclasses import astuple, replace
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, set_span_in_context

from latency_budget._config import load_budgets
from latency_budget._core.report import TraceReport
from latency_budget._demo.otlp_json import encode_otlp_json
from latency_budget._replay import SpanRecord, evaluate_spans
from latency_budget.cli._inputs import TraceInputError, read_trace_files

from .conftest import BUDGETS, JAEGER_SEARCH, JAEGER_TRACE, OTLP, expected_reports

CONFIG = load_budgets(BUDGETS)


def _by_trace(reports: list[TraceReport]) -> dict[str, TraceReport]:
    return {f"{r.trace_id:032x}": r for r in reports}


def _assert_same_verdicts(reports: list[TraceReport], expected: list[dict[str, Any]], tolerance_ms: float) -> None:
    got = _by_trace(reports)
    assert sorted(got) == sorted(e["trace_id"] for e in expected)
    for want in expected:
        report = got[want["trace_id"]]
        assert report.profile == want["profile"]
        assert report.violated == want["violated"]
        assert list(report.over_budget_stages) == want["over_budget_stages"]
        assert list(report.warn_stages) == want["warn_stages"]
        assert sorted(f"{v.stage}:{v.kind}:{v.severity}" for v in report.violations) == want["violations"]
        assert report.total_actual_ms == pytest.approx(want["total_actual_ms"], abs=tolerance_ms)
        seen = {s.stage: s for s in report.stages if s.seen}
        assert sorted(seen) == sorted(want["stages"])
        for name, stage in want["stages"].items():
            # Each span's start and duration are rounded separately: the error grows with the spans.
            assert seen[name].actual_ms == pytest.approx(stage["actual_ms"], abs=tolerance_ms * stage["count"])
            assert seen[name].count == stage["count"]
            if stage["first_token_ms"] is None:
                assert seen[name].first_token_ms is None
            else:
                assert seen[name].first_token_ms == pytest.approx(stage["first_token_ms"], abs=tolerance_ms)


def test_otlp_fixture_reproduces_the_processor_verdicts_exactly() -> None:
    """Collector-style OTLP JSON lines, judged by evaluate_spans, give every request the verdict it got live."""
    traces = read_trace_files([str(OTLP)])
    _assert_same_verdicts(evaluate_spans(CONFIG, traces.spans), expected_reports(), tolerance_ms=1e-9)


def test_jaeger_search_fixture_reproduces_the_verdicts_within_microsecond_rounding() -> None:
    """Jaeger's /api/traces JSON (times in whole µs) gives the same verdicts, durations within 2 µs a span."""
    traces = read_trace_files([str(JAEGER_SEARCH)])
    _assert_same_verdicts(evaluate_spans(CONFIG, traces.spans), expected_reports(), tolerance_ms=0.002)


def test_jaeger_single_trace_fixture_is_the_slowest_request() -> None:
    """The /api/traces/{id} fixture holds one request, the slowest, with its verdict."""
    expected = max(expected_reports(), key=lambda r: r["total_actual_ms"])
    reports = evaluate_spans(CONFIG, read_trace_files([str(JAEGER_TRACE)]).spans)
    _assert_same_verdicts(reports, [expected], tolerance_ms=0.002)


def test_jaeger_tags_become_kind_scope_and_typed_attributes() -> None:
    """span.kind and otel.scope.name tags become kind and scope; int, float, bool and string tags keep their types."""
    spans = read_trace_files([str(JAEGER_TRACE)]).spans
    chat = next(s for s in spans if s.name.startswith("chat "))
    assert chat.kind is SpanKind.CLIENT
    assert chat.scope == "opentelemetry.instrumentation.openai_v2"
    assert isinstance(chat.attributes["gen_ai.usage.input_tokens"], int)
    assert isinstance(chat.attributes["gen_ai.request.temperature"], float)
    assert "span.kind" not in chat.attributes
    assert "otel.scope.name" not in chat.attributes
    root = next(s for s in spans if s.parent_id is None)
    assert root.kind is SpanKind.SERVER
    assert root.attributes["latency_budget.violated"] is True
    assert str(root.attributes["latency_budget.verdict"]).startswith("OVER BUDGET: ")  # captured under contract v2


def _spans_through_sdk() -> list[Any]:
    """A root with a streamed chat child (first-token event) and a child of a remote parent."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.inputs", "1.2.3")
    root = tracer.start_span("request", kind=SpanKind.SERVER, start_time=1_000_000_000, attributes={"tier": "gold"})
    chat = tracer.start_span(
        "chat",
        context=set_span_in_context(root),
        kind=SpanKind.CLIENT,
        start_time=1_010_000_000,
        attributes={"gen_ai.operation.name": "chat", "tags": ("a", "b"), "n": 3, "x": 0.5, "ok": True},
    )
    chat.add_event("gen_ai.first_token", {"index": 0}, timestamp=1_200_000_000)
    chat.end(end_time=1_500_000_000)
    root.end(end_time=1_600_000_000)
    remote = NonRecordingSpan(SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1)))
    downstream = tracer.start_span("worker", context=set_span_in_context(remote), start_time=1_100_000_000)
    downstream.end(end_time=1_300_000_000)
    return list(exporter.get_finished_spans())


def test_otlp_encoding_round_trips_through_the_reader(tmp_path: Path) -> None:
    """OTLP JSON reads back with the same ids, times, kind, scope, attributes, events and remote-parent flag."""
    sdk_spans = _spans_through_sdk()
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(encode_otlp_json(sdk_spans)) + "\n", encoding="utf-8")
    records = {r.name: r for r in read_trace_files([str(path)]).spans}
    for span in sdk_spans:
        record = records[span.name]
        assert (record.trace_id, record.span_id) == (span.context.trace_id, span.context.span_id)
        assert record.parent_id == (span.parent.span_id if span.parent else None)
        assert (record.start_ns, record.end_ns) == (span.start_time, span.end_time)
        assert record.kind is span.kind
        assert record.scope == "tests.inputs"
        assert dict(record.attributes) == dict(span.attributes)
        assert [(e.name, e.timestamp, dict(e.attributes or {})) for e in record.events] == [
            (e.name, e.timestamp, dict(e.attributes or {})) for e in span.events
        ]
    assert records["worker"].remote_parent is True
    assert records["chat"].remote_parent is False


def test_otlp_ids_are_hex_and_times_are_strings_as_the_collector_writes() -> None:
    """The encoder writes hex ids, integer kinds and int64 nanoseconds as strings (OTLP/JSON)."""
    span = encode_otlp_json(_spans_through_sdk()[:1])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32
    assert int(span["traceId"], 16) > 0
    assert len(span["spanId"]) == 16
    assert isinstance(span["startTimeUnixNano"], str)
    assert isinstance(span["kind"], int)


def test_parent_in_another_process_is_a_remote_parent_without_span_flags(tmp_path: Path) -> None:
    """Without span flags (older SDKs, Jaeger), a parent recorded by another resource makes the span a local root."""
    document = json.loads(OTLP.read_text(encoding="utf-8").splitlines()[0])
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    child, parent = spans[0], spans[1]
    for span in spans:
        span.pop("flags", None)
    child["parentSpanId"] = parent["spanId"]
    child["traceId"] = parent["traceId"]
    other = {
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "tool-server"}}]},
        "scopeSpans": [{"scope": {"name": "x"}, "spans": [child]}],
    }
    document["resourceSpans"][0]["scopeSpans"][0]["spans"] = spans[1:]
    document["resourceSpans"].append(other)
    path = tmp_path / "two-services.jsonl"
    path.write_text(json.dumps(document) + "\n", encoding="utf-8")
    records = {r.span_id: r for r in read_trace_files([str(path)]).spans}
    assert records[int(child["spanId"], 16)].remote_parent is True
    assert records[int(parent["spanId"], 16)].remote_parent is False


def test_pretty_printed_and_gzipped_jaeger_json_read_the_same(tmp_path: Path) -> None:
    """A Jaeger file reformatted with indentation, or gzip-compressed, gives the same spans."""
    import gzip  # noqa: PLC0415 - only this test needs it

    pretty = tmp_path / "trace.json"
    pretty.write_text(json.dumps(json.loads(JAEGER_TRACE.read_text(encoding="utf-8")), indent=2), encoding="utf-8")
    packed = tmp_path / "trace.json.gz"
    packed.write_bytes(gzip.compress(JAEGER_TRACE.read_bytes()))
    original = _plain(read_trace_files([str(JAEGER_TRACE)]).spans)
    assert _plain(read_trace_files([str(pretty)]).spans) == original
    assert _plain(read_trace_files([str(packed)]).spans) == original


def _plain(records: list[SpanRecord]) -> list[tuple[object, ...]]:
    """Records as comparable tuples (SDK events compare by identity)."""
    return [
        (*astuple(replace(r, events=())), [(e.name, e.timestamp, dict(e.attributes or {})) for e in r.events])
        for r in records
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"resourceSpans": []}\n{"resourceSpans": [{"scopeSp', r"bad\.jsonl:2: truncated JSON"),
        (
            '{"resourceSpans": []}\n{"resourceSpans": nope}\n',
            r"bad\.jsonl:2: invalid JSON: Expecting value at column 19",
        ),
        ('{"hello": "world"}\n', r"bad\.jsonl:1: unknown trace format"),
        ("", r"bad\.jsonl: the file is empty"),
        ("<html>not json</html>\n", r"bad\.jsonl:1: invalid JSON"),
        (
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"00f067aa0ba902b7"}]}]}]}\n',
            r"bad\.jsonl:1: resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[0\]\.traceId: not a valid 128-bit id",
        ),
        (
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736",'
            '"spanId":"00f067aa0ba902b7","name":"x","startTimeUnixNano":"12"}]}]}]}\n',
            r"bad\.jsonl:1: .*spans\[0\]\.endTimeUnixNano: missing",
        ),
        ('{"data": [{"traceID": "1", "spans": [{"spanID": "2"}]}]}', r"bad\.jsonl:1: data\[0\]\.spans\[0\]\.traceID"),
        (
            '{"data": null, "errors": [{"code": 404, "msg": "trace not found"}]}',
            r"Jaeger reported an error: trace not found",
        ),
    ],
)
def test_bad_input_names_the_file_line_and_problem(tmp_path: Path, content: str, message: str) -> None:
    """Each kind of bad input raises one TraceInputError naming the file, the line and what is wrong."""
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TraceInputError, match=message) as caught:
        read_trace_files([str(path)])
    assert caught.value.exit_code == 2
    assert "\n" not in str(caught.value)
