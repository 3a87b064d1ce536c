"""``latency-budget check --jaeger`` against the real Jaeger query service of the session.

Requests go through LatencyBudgetProcessor and the real OTLP exporter into Jaeger, and the
same spans are saved as OTLP JSON lines: the live search must judge the recent ones exactly
as the saved file is judged. Then what the query's parameters do in a real Jaeger: the
lookback window (older requests fall outside it), the limit (at most that many traces),
and the answers a real Jaeger gives to a search it cannot serve. The two failures a real
Jaeger cannot be made to produce (no answer at all, a body cut short) are tested against
local stand-ins in tests/cli/test_check.py.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SynchronousMultiSpanProcessor, Tracer, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, set_span_in_context

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget._demo.otlp_json import encode_otlp_json

from ..cli.conftest import assert_one_line_error, run_cli
from .services import JaegerService, poll

pytestmark = pytest.mark.e2e

BUDGETS_YAML = """\
version: 1
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800}
  tool_calls: {budget_ms: 200}
"""
RECENT = 6  # requests in the last ten minutes
OLD = 3  # requests three hours ago
MS = 1_000_000
HOUR_MS = 3_600_000
JAEGER_MAX_TRACES = 100_000  # jaeger-config.yaml's default for JAEGER_MAX_TRACES
DELIVERY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Stored:
    """Requests stored in Jaeger under ``service``, and the recent ones saved as OTLP JSON."""

    service: str
    budgets: Path
    recent_file: Path


def _request(tracer: Tracer, start_ms: int, *, slow: bool) -> None:
    """One request: retrieval, a model call (1,200 ms when slow, else 500 ms), a tool call; times in whole ms."""
    model_ms = 1_200 if slow else 500
    root = tracer.start_span("POST /v1/chat", kind=SpanKind.SERVER, start_time=start_ms * MS)
    context = set_span_in_context(root)
    cursor = start_ms
    for name, operation, length in (
        ("retrieve", "retrieval", 40),
        ("chat", "chat", model_ms),
        ("lookup_order", "execute_tool", 100),
    ):
        child = tracer.start_span(
            name, context=context, start_time=cursor * MS, attributes={"gen_ai.operation.name": operation}
        )
        cursor += length
        child.end(end_time=cursor * MS)
    root.end(end_time=(cursor + 10) * MS)


@pytest.fixture(scope="module")
def stored(jaeger: JaegerService, tmp_path_factory: pytest.TempPathFactory) -> Stored:
    """RECENT requests (every other one slow) in the last ten minutes, OLD slow ones three hours ago."""
    service = f"e2e-check-live-{uuid.uuid4().hex[:8]}"
    work = tmp_path_factory.mktemp("check-live-jaeger")
    budgets = work / "budgets.yaml"
    budgets.write_text(BUDGETS_YAML, encoding="utf-8")
    saved = InMemorySpanExporter()
    downstream = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]
    downstream.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://{jaeger.otlp_grpc_endpoint}", insecure=True))
    )
    downstream.add_span_processor(SimpleSpanProcessor(saved))
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(LatencyBudgetProcessor(load_budgets(budgets), downstream))
    tracer = provider.get_tracer("e2e.check_live_jaeger")
    now_ms = time.time_ns() // MS
    for n in range(RECENT):
        _request(tracer, now_ms - 600_000 + n * 10_000, slow=n % 2 == 0)
    for n in range(OLD):
        _request(tracer, now_ms - 3 * HOUR_MS + n * 10_000, slow=True)
    provider.shutdown()

    recent = [s for s in saved.get_finished_spans() if (s.start_time or 0) >= (now_ms - HOUR_MS) * MS]
    recent_file = work / "recent.jsonl"
    recent_file.write_text(json.dumps(encode_otlp_json(recent)) + "\n", encoding="utf-8")

    window = {"start": str((now_ms - 4 * HOUR_MS) * 1000), "end": str((now_ms + 60_000) * 1000), "limit": "100"}
    poll(
        lambda: True if len(jaeger.find_traces(service=service, **window)) == RECENT + OLD else None,
        timeout=DELIVERY_TIMEOUT_S,
        what=f"{RECENT + OLD} traces of {service} in Jaeger",
    )
    return Stored(service, budgets, recent_file)


def _live(jaeger: JaegerService, stored: Stored, *options: str) -> list[str]:
    return ["check", "--jaeger", jaeger.query_url, "--service", stored.service, "-b", str(stored.budgets), *options]


def test_live_search_judges_the_stored_requests_as_the_saved_file(jaeger: JaegerService, stored: Stored) -> None:
    """--lookback 1h finds the six recent requests, and judges them exactly as their saved OTLP JSON is judged."""
    live = run_cli(*_live(jaeger, stored, "--lookback", "1h"))
    saved = run_cli("check", stored.recent_file, "-b", stored.budgets)
    assert live.returncode == saved.returncode == 1, live.stderr  # the slow model calls break model_call's p95
    intro = live.stdout.splitlines()[0]
    assert intro.startswith(f"latency-budget check: {RECENT} requests ({RECENT} traces, {RECENT * 4} spans)")
    assert f"from {jaeger.query_url} (service {stored.service}, last 1h)" in intro
    assert live.stdout.split("\n", 1)[1] == saved.stdout.split("\n", 1)[1]


def test_a_longer_lookback_reaches_the_older_requests(jaeger: JaegerService, stored: Stored) -> None:
    """--lookback 4h widens Jaeger's start..end window to the requests of three hours ago as well."""
    result = run_cli(*_live(jaeger, stored, "--lookback", "4h"))
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[0].startswith(
        f"latency-budget check: {RECENT + OLD} requests ({RECENT + OLD} traces"
    )


def test_limit_caps_the_traces_jaeger_returns(jaeger: JaegerService, stored: Stored) -> None:
    """--limit 2 is Jaeger's own limit: two traces come back and are judged, out of the nine stored."""
    result = run_cli(*_live(jaeger, stored, "--lookback", "4h", "--limit", "2"))
    assert result.stdout.splitlines()[0].startswith("latency-budget check: 2 requests (2 traces, 8 spans)"), (
        result.stderr
    )


def test_a_service_jaeger_has_no_traces_of_is_exit_2(jaeger: JaegerService, stored: Stored) -> None:
    """A search that Jaeger answers with no trace is unusable input: one line naming the URL, exit 2."""
    result = run_cli("check", "--jaeger", jaeger.query_url, "--service", f"{stored.service}-none", "-b", stored.budgets)
    assert_one_line_error(result, jaeger.query_url, "Jaeger returned no traces")


def test_jaegers_own_error_answer_is_shown_in_the_one_line(jaeger: JaegerService, stored: Stored) -> None:
    """A limit above the in-memory store's max_traces: Jaeger answers HTTP 500 with its reason; the line quotes it."""
    result = run_cli(*_live(jaeger, stored, "--limit", str(2 * JAEGER_MAX_TRACES)))
    assert_one_line_error(
        result,
        f"{jaeger.query_url}/api/traces?service={stored.service}",
        "Jaeger answered HTTP 500",
        "search depth must be greater than 0 and less than max traces",
    )


def test_a_url_below_the_query_service_gets_its_html_page_and_says_so(jaeger: JaegerService, stored: Stored) -> None:
    """Under a path prefix Jaeger serves its UI page, not JSON: exit 2, with a hint at the query service's URL."""
    result = run_cli(
        "check", "--jaeger", f"{jaeger.query_url}/prefix", "--service", stored.service, "-b", stored.budgets
    )
    assert_one_line_error(result, f"{jaeger.query_url}/prefix/api/traces", "the answer is not JSON")


def test_a_jaeger_port_that_is_not_the_query_service_answers_404(jaeger: JaegerService, stored: Stored) -> None:
    """Jaeger's health-check port knows no /api/traces: its 404 and body are in the one line."""
    health = jaeger.process.health_url.removesuffix("/status")
    result = run_cli("check", "--jaeger", health, "--service", stored.service, "-b", stored.budgets)
    assert_one_line_error(result, f"{health}/api/traces", "Jaeger answered HTTP 404", "404 page not found")


def test_compare_reads_each_side_from_its_own_time_window(jaeger: JaegerService, stored: Stored) -> None:
    """compare's windows are Jaeger's start..end: 4h..1h holds the three old requests, 1h..now the six recent ones."""
    result = run_cli(
        "compare", "--jaeger", jaeger.query_url, "--service", stored.service, "-b", stored.budgets,
        "4h..1h", "1h..now", "-f", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["before"]["requests"], document["after"]["requests"]) == (OLD, RECENT)
    assert document["before"]["sources"] == [f"{jaeger.query_url} (service {stored.service}, from 4h to 1h ago)"]
    assert document["after"]["sources"] == [f"{jaeger.query_url} (service {stored.service}, last 1h)"]
    model = next(row for row in document["rows"] if row["stage"] == "model_call" and row["model"] is None)
    assert model["before"]["p50_ms"] == pytest.approx(1_200.0)  # the old requests were all slow
    assert model["change"] is None  # fewer than 10 requests a side: figures, no verdict
