"""``latency-budget demo``: the simulated support assistant, its spans and what the command prints."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from latency_budget._core.kinds import HINT_KINDS
from latency_budget._core.recent import MIN_MODEL_CALLS_IN_PROCESS
from latency_budget._demo import example_budgets, run_demo
from latency_budget._demo.run import DemoRun
from latency_budget._demo.scenario import plan_request
from latency_budget.cli._levers import analyse_levers

from .conftest import run_cli

TABLE_HEADER = re.compile(r"^Stage\s+\| Budget\s+\| Actual\s+\| Within budget\?$", re.MULTILINE)


@pytest.fixture(scope="module")
def recorded() -> tuple[DemoRun, list[ReadableSpan]]:
    """One in-process demo run of 150 requests, with every exported span."""
    exporter = InMemorySpanExporter()
    run = run_demo(example_budgets(), requests=150, concurrency=6, seed=3, downstream=SimpleSpanProcessor(exporter))
    return run, list(exporter.get_finished_spans())


def _trace(spans: list[ReadableSpan], trace_id: int) -> list[ReadableSpan]:
    return [s for s in spans if s.context is not None and s.context.trace_id == trace_id]


def _op(span: ReadableSpan) -> object:
    return (span.attributes or {}).get("gen_ai.operation.name")


def test_every_request_gets_a_report_and_both_verdicts_occur(recorded: tuple[DemoRun, list[ReadableSpan]]) -> None:
    """The processor reports on all requests; some are within budget and some over it."""
    run, _ = recorded
    assert all(report is not None for report in run.reports)
    verdicts = {report.violated for report in run.reports if report is not None}
    assert verdicts == {True, False}


def test_tool_calls_overlap_in_parallel_requests_and_not_in_sequential_ones(
    recorded: tuple[DemoRun, list[ReadableSpan]],
) -> None:
    """Parallel tool calls of one agent step overlap in time; sequential ones never do."""
    run, spans = recorded
    modes_seen = set()
    for plan, trace_id in zip(run.requests, run.trace_ids, strict=True):
        tools = sorted(
            (s for s in _trace(spans, trace_id) if _op(s) == "execute_tool"), key=lambda s: s.start_time or 0
        )
        if len(tools) < 2:
            continue
        overlaps = any((b.start_time or 0) < (a.end_time or 0) for a, b in itertools.pairwise(tools))
        if plan.tool_mode == "sequential":
            assert not overlaps, plan.describe()
        elif plan.tool_mode == "parallel" and plan.tool_calls > plan.model_calls - 1:
            assert overlaps, plan.describe()  # some step ran more than one tool at once
        modes_seen.add(plan.tool_mode)
    assert modes_seen == {"parallel", "sequential"}


def test_cache_hits_skip_the_model_and_loops_vary(recorded: tuple[DemoRun, list[ReadableSpan]]) -> None:
    """A cache hit has no chat span; otherwise the agent loop makes between 1 and 5 model calls, not always the same."""
    run, spans = recorded
    calls_seen = set()
    for plan, trace_id in zip(run.requests, run.trace_ids, strict=True):
        chats = [s for s in _trace(spans, trace_id) if _op(s) == "chat"]
        if plan.cache_hit:
            assert chats == []
        else:
            assert 1 <= len(chats) == plan.model_calls <= 5
        calls_seen.add(len(chats))
    assert 0 in calls_seen
    assert len(calls_seen) >= 4


def test_spans_follow_the_genai_conventions(recorded: tuple[DemoRun, list[ReadableSpan]]) -> None:
    """Chat spans carry model, provider, streaming and token usage; only the last (streamed) call has a first chunk."""
    run, spans = recorded
    trace_id = next(t for p, t in zip(run.requests, run.trace_ids, strict=True) if p.model_calls >= 2 and p.streamed)
    chats = sorted((s for s in _trace(spans, trace_id) if _op(s) == "chat"), key=lambda s: s.start_time or 0)
    for chat in chats:
        attributes = chat.attributes or {}
        assert chat.name == f"chat {attributes['gen_ai.request.model']}"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert isinstance(attributes["gen_ai.usage.input_tokens"], int)
        assert isinstance(attributes["gen_ai.usage.output_tokens"], int)
    assert [("gen_ai.response.time_to_first_chunk" in (c.attributes or {})) for c in chats] == [False] * (
        len(chats) - 1
    ) + [True]
    assert [(c.attributes or {})["gen_ai.request.stream"] for c in chats] == [False] * (len(chats) - 1) + [True]
    first_chunk = (chats[-1].attributes or {})["gen_ai.response.time_to_first_chunk"]
    assert isinstance(first_chunk, float)
    assert 0 < first_chunk * 1e9 < (chats[-1].end_time or 0) - (chats[-1].start_time or 0)
    tools = [s for s in _trace(spans, trace_id) if _op(s) == "execute_tool"]
    assert all((t.attributes or {}).get("gen_ai.tool.name") for t in tools)
    assert all(str((t.attributes or {}).get("gen_ai.tool.call.arguments", "")).startswith("{") for t in tools)


def test_the_legacy_client_waits_for_whole_answers(recorded: tuple[DemoRun, list[ReadableSpan]]) -> None:
    """Requests of the legacy web client stream no model call, so they record no first token at all."""
    run, spans = recorded
    legacy = [(p, t) for p, t in zip(run.requests, run.trace_ids, strict=True) if not p.streamed and p.model_calls]
    assert legacy
    assert len(legacy) < sum(1 for p in run.requests if p.model_calls)
    for plan, trace_id in legacy:
        chats = [s for s in _trace(spans, trace_id) if _op(s) == "chat"]
        assert len(chats) == plan.model_calls
        assert all((c.attributes or {})["gen_ai.request.stream"] is False for c in chats)
        assert not any("gen_ai.response.time_to_first_chunk" in (c.attributes or {}) for c in chats)


def test_every_lever_shows_in_some_requests_and_not_in_others(recorded: tuple[DemoRun, list[ReadableSpan]]) -> None:
    """Each lever kind is hinted on some of the demo's traces, never on all, and each is estimated in the summary.

    But for model choice: in process it waits for a full window of calls of each model
    (MIN_MODEL_CALLS_IN_PROCESS), which the slower model does not reach in 150 requests; and
    reasoning, never: the demo's two GPT-4o models spend no reasoning tokens (the reasoning
    lever's planted cases are tests/unit/test_lever_reasoning.py and the chroma stack's).
    """
    run, _ = recorded
    reports = [r for r in run.reports if r is not None]
    kinds = [{hint.kind for hint in report.hints} for report in reports]
    expected = set(HINT_KINDS) - {"reasoning"}
    assert not any("reasoning" in found for found in kinds)
    for kind in expected - {"model_choice"}:
        having = sum(1 for found in kinds if kind in found)
        assert 0 < having < len(reports), kind
    assert not any("model_choice" in found for found in kinds)
    slower = sum(1 for report in reports for call in report.calls if call.model == "gpt-4o")
    assert 0 < slower < MIN_MODEL_CALLS_IN_PROCESS
    analysis = analyse_levers(reports)
    assert {lever.kind for lever in analysis.levers if lever.savings_ms} == expected
    models = {row.model for row in analysis.models if row.stage == "model_call"}
    assert models == {"gpt-4o", "gpt-4o-mini"}
    assert any(row.first_token_fit is not None for row in analysis.contexts if row.stage == "model_call")


def test_a_seed_gives_the_same_hint_events_on_the_same_traces() -> None:
    """Two demo runs with one seed write identical hint events (kind, stage, saving, basis, spans) on each trace."""

    def hint_events() -> list[tuple[str, list[dict[str, object]]]]:
        exporter = InMemorySpanExporter()
        run_demo(example_budgets(), requests=200, concurrency=4, seed=7, downstream=SimpleSpanProcessor(exporter))
        return sorted(
            (
                f"{span.context.trace_id:032x}" if span.context is not None else "",
                [dict(event.attributes or {}) for event in span.events if event.name == "latency_budget.hint"],
            )
            for span in exporter.get_finished_spans()
            if span.parent is None
        )

    first = hint_events()
    assert sum(len(events) for _, events in first) > 100
    assert first == hint_events()


def test_a_seed_replays_the_same_ids_and_durations() -> None:
    """Two runs with one seed have the same trace ids and verdicts, whatever the threads do."""
    first = run_demo(example_budgets(), requests=40, concurrency=5, seed=99)
    second = run_demo(example_budgets(), requests=40, concurrency=5, seed=99)
    assert first.trace_ids == second.trace_ids
    assert [r.total_actual_ms if r else None for r in first.reports] == [
        r.total_actual_ms if r else None for r in second.reports
    ]


def test_demo_command_prints_tables_and_the_summary() -> None:
    """`latency-budget demo` exits 0 and prints request tables with an over-budget stage marked, then p50/p95/p99."""
    result = run_cli("demo", timeout=60)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert len(TABLE_HEADER.findall(out)) == 3
    assert "NO  <-- over budget" in out
    assert re.search(r"^Profile \| Stage\s+\| Budget \|\s+n \|\s+p50 \|\s+p95 \|\s+p99 \| Over budget$", out, re.M)
    assert re.search(r"^default \| model_call\s+\| 3500ms \|", out, re.M)
    assert "Most often over budget: " in out
    assert result.stderr == ""


def test_the_readme_quotes_what_the_demo_prints() -> None:
    """Each line of the README's abridged demo output (`--seed 7`) is a line the demo prints, in that order."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    block = readme.split("What the demo prints (abridged; `latency-budget demo --seed 7`):", 1)[1]
    quoted = [line for line in block.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines() if line != "..."]
    result = run_cli("demo", "--seed", "7", timeout=60)
    assert result.returncode == 0, result.stderr
    printed = iter(result.stdout.splitlines())
    missing = [line for line in quoted if not any(line == out for out in printed)]  # in order: one pass
    assert missing == []
    assert len(quoted) >= 30  # the request table, the summary, where to win


def test_demo_output_is_reproducible_and_independent_of_concurrency() -> None:
    """The same seed prints the same report; with other concurrency only the first line changes."""
    one = run_cli("demo", "-n", "60", "--seed", "5", "-c", "1")
    same = run_cli("demo", "-n", "60", "--seed", "5", "-c", "1")
    many = run_cli("demo", "-n", "60", "--seed", "5", "-c", "8")
    assert one.returncode == same.returncode == many.returncode == 0
    assert one.stdout == same.stdout
    assert one.stdout.split("\n", 1)[1] == many.stdout.split("\n", 1)[1]
    other_seed = run_cli("demo", "-n", "60", "--seed", "6", "-c", "1")
    assert other_seed.stdout.split("\n", 1)[1] != one.stdout.split("\n", 1)[1]


def test_saved_traces_judge_the_same_as_the_live_run(tmp_path: Path) -> None:
    """`demo --save-traces` writes OTLP JSON lines that `report` judges, and finds levers in, as the demo did live."""
    saved = tmp_path / "traces.jsonl"
    demo = run_cli("demo", "-n", "80", "--save-traces", saved, "--show", "0")
    assert demo.returncode == 0, demo.stderr
    assert f"Exported {_spans_in(saved)} spans to {saved}" in demo.stderr
    report = run_cli("report", saved, "--budgets", Path(__file__).parents[2] / "budgets.example.yaml")
    assert report.returncode == 0, report.stderr
    live_summary = demo.stdout[demo.stdout.index("Profile | Stage") : demo.stdout.index("\nNext:") + 1]
    recorded_summary = report.stdout[report.stdout.index("Profile | Stage") :]
    # The same table, closing lines and levers (the report goes on with models and context size).
    assert "Where to win, estimated over 80 requests" in live_summary
    assert recorded_summary.startswith(live_summary)


def _spans_in(path: Path) -> int:
    import json  # noqa: PLC0415 - local to this helper

    count = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                count += len(scope["spans"])
    return count


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans = 0
        self.services: set[str] = set()
        self.lock = threading.Lock()

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context: object) -> object:
        with self.lock:
            for resource_spans in request.resource_spans:
                for attribute in resource_spans.resource.attributes:
                    if attribute.key == "service.name":
                        self.services.add(attribute.value.string_value)
                self.spans += sum(len(scope.spans) for scope in resource_spans.scope_spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def otlp_grpc_receiver() -> Iterator[tuple[str, _Receiver]]:
    """An OTLP/gRPC trace receiver on a free loopback port, counting what it gets."""
    receiver = _Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", receiver
    finally:
        server.stop(grace=None)


def test_otlp_endpoint_sends_every_span(otlp_grpc_receiver: tuple[str, _Receiver]) -> None:
    """--otlp-endpoint exports all spans over OTLP/gRPC, as the compose `demo` service does."""
    url, receiver = otlp_grpc_receiver
    result = run_cli("demo", "-n", "30", "--show", "0", "--otlp-endpoint", url)
    assert result.returncode == 0, result.stderr
    reported = re.search(r"Exported (\d+) spans to (\S+) \(OTLP grpc\)", result.stderr)
    assert reported is not None, result.stderr
    assert int(reported.group(1)) == receiver.spans > 30 * 5
    assert receiver.services == {"support-assistant"}


def test_standard_otel_environment_variables_select_the_exporter(otlp_grpc_receiver: tuple[str, _Receiver]) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME work without flags."""
    url, receiver = otlp_grpc_receiver
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_SERVICE_NAME": "shop-bot"}
    result = run_cli("demo", "-n", "10", "--show", "0", env=env)
    assert result.returncode == 0, result.stderr
    assert receiver.spans > 10 * 5
    assert receiver.services == {"shop-bot"}


def test_unreachable_collector_fails_with_one_clear_line() -> None:
    """When spans cannot be exported the demo still prints its results, then says so and exits 2 (not 1:
    that means a budget failed)."""
    env = {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "1"}
    result = run_cli("demo", "-n", "5", "--show", "0", "--otlp-endpoint", "http://127.0.0.1:9", env=env)
    assert result.returncode == 2
    assert "Summary of 5 requests" in result.stdout
    assert re.search(
        r"^latency-budget: could not export \d+ of \d+ spans to http://127\.0\.0\.1:9 ", result.stderr, re.M
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--otlp-endpoint", "collector:4317"], "--otlp-endpoint: expected a URL such as http://localhost:4317"),
        (["--requests", "0"], "argument --requests/-n: expected at least 1, got 0"),
        (["--budgets", "/nonexistent/budgets.yaml"], "/nonexistent/budgets.yaml: cannot read budget file"),
    ],
)
def test_demo_user_errors_are_one_line(args: list[str], message: str) -> None:
    """Bad options print one line on stderr, no traceback, and exit 2."""
    result = run_cli("demo", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_applying_streaming_changes_only_whether_answers_stream() -> None:
    """--apply streaming draws the same requests (names, times, tokens): only stream flags and first chunks change."""
    stream_keys = {"gen_ai.request.stream", "gen_ai.response.time_to_first_chunk"}
    newly_streamed = 0
    for index in range(120):
        before, after = plan_request(7, index), plan_request(7, index, frozenset({"streaming"}))
        assert after.info.streamed
        newly_streamed += not before.info.streamed
        for one, two in zip(before.root.walk(), after.root.walk(), strict=True):
            assert (one.name, one.start_ns, one.end_ns) == (two.name, two.start_ns, two.end_ns)
            unchanged = {k: v for k, v in one.attributes.items() if k not in stream_keys}
            assert unchanged == {k: v for k, v in two.attributes.items() if k not in stream_keys}
    assert newly_streamed > 5  # the legacy web client's requests
