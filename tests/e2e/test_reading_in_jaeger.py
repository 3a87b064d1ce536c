"""End to end: reading violations in the real Jaeger, on a few hundred demo requests.

The demo's traces go through LatencyBudgetProcessor and the real OTLP exporter into the
Collector (keeping every trace) and Jaeger v2, which are read back through Jaeger's HTTP
API in Jaeger's own values: whole microseconds, start and duration truncated apart.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from latency_budget._demo import example_budgets, run_demo
from latency_budget._demo.run import DemoRun

from .services import JAEGER_UI_CONFIG, CollectorService, JaegerService, http_get, poll
from .signals import jaeger_root, jaeger_spans, jaeger_tags

pytestmark = pytest.mark.e2e

REQUESTS = 300
SEED = 14  # no other e2e test uses it: Jaeger would merge traces that share an id
DELIVERY_TIMEOUT_S = 120.0
PREFIX = "latency_budget."


@dataclass(frozen=True)
class Stored:
    """The demo run, and Jaeger's answer for each of its traces (by hex trace id)."""

    run: DemoRun
    traces: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def stored(otel_collector_keep_all: CollectorService, jaeger: JaegerService) -> Stored:
    """REQUESTS demo requests under a service name of their own, once all their spans are in Jaeger."""
    service = f"e2e-jaeger-reading-{uuid.uuid4().hex[:8]}"
    exporter = OTLPSpanExporter(endpoint=otel_collector_keep_all.otlp_grpc_endpoint, insecure=True)
    run = run_demo(
        example_budgets(),
        requests=REQUESTS,
        seed=SEED,
        downstream=BatchSpanProcessor(exporter, max_queue_size=REQUESTS * 40),
        resource=Resource.create({"service.name": service}),
    )
    spans = sum(request.span_count for request in run.requests)
    query = {
        "service": service,
        "limit": str(2 * REQUESTS),
        "start": str(run.start_ns // 1000 - 60_000_000),
        "end": str(time.time_ns() // 1000 + 600_000_000),
    }

    def all_stored() -> dict[str, dict[str, Any]] | None:
        found = jaeger.find_traces(**query)
        if sum(len(jaeger_spans(t)) for t in found) != spans:
            return None
        return {str(t["traceID"]): t for t in found}

    traces = poll(all_stored, timeout=DELIVERY_TIMEOUT_S, what=f"all {spans} spans of {REQUESTS} requests in Jaeger")
    assert set(traces) == {f"{trace_id:032x}" for trace_id in run.trace_ids}
    return Stored(run, traces)


def _our_logs(span: dict[str, Any]) -> list[dict[str, Any]]:
    """The span's logs that the package added (latency_budget.violation and .hint)."""
    return [
        log for log in span.get("logs") or [] if str(jaeger_tags(log.get("fields")).get("event", "")).startswith(PREFIX)
    ]


def test_every_event_lies_inside_its_span_as_jaeger_stores_it(stored: Stored) -> None:
    """Each latency_budget.* log's timestamp is within [startTime, startTime + duration] in Jaeger's own values."""
    outside: list[tuple[str, str, int, int, int]] = []
    checked = 0
    for trace_id, trace in stored.traces.items():
        for span in jaeger_spans(trace):
            start, duration = int(span["startTime"]), int(span["duration"])
            for log in _our_logs(span):
                checked += 1
                if not start <= int(log["timestamp"]) <= start + duration:
                    outside.append((trace_id, span["operationName"], start, duration, int(log["timestamp"])))
    assert checked >= REQUESTS // 2, "the demo's requests should break budgets and earn hints"
    assert outside == []


def test_the_run_holds_roots_whose_true_end_jaeger_shows_after_the_span(stored: Stored) -> None:
    """The check above means something: on some roots with events, the true end lies after the span in Jaeger."""
    beyond = 0
    for report in stored.run.reports:
        assert report is not None
        assert report.start_time_ns is not None
        assert report.end_time_ns is not None
        if not (report.violations or report.hints):
            continue
        root = jaeger_root(stored.traces[f"{report.trace_id:032x}"])
        assert int(root["startTime"]) == report.start_time_ns // 1000
        if report.end_time_ns // 1000 > int(root["startTime"]) + int(root["duration"]):
            beyond += 1
    assert beyond > 0


def test_the_verdict_tag_says_first_whether_and_what_broke(stored: Stored) -> None:
    """On every root, the verdict tag starts OVER BUDGET exactly when it is violated, and names each broken stage."""
    violated = 0
    for trace in stored.traces.values():
        tags = jaeger_tags(jaeger_root(trace)["tags"])
        verdict = str(tags["latency_budget.verdict"])
        over = (
            json.loads(tags["latency_budget.over_budget_stages"]) if "latency_budget.over_budget_stages" in tags else []
        )
        assert verdict.startswith("OVER BUDGET: ") is (tags["latency_budget.violated"] is True)
        assert (over != []) is (tags["latency_budget.violated"] is True)
        if over:
            violated += 1
            broken = verdict.split("; warn: ", maxsplit=1)[0]  # the error-level part
            for stage in over:
                said = ("total +", "first token +") if stage == "total" else (f"{stage} ",)
                assert any(words in broken for words in said) or broken.endswith(" more"), (stage, verdict)
        for key, value in tags.items():
            if key.startswith(PREFIX) and key.endswith("_ms"):
                assert round(float(value), 3) == float(value), (key, value)
    assert violated > 0


def test_hints_name_spans_of_their_trace(stored: Stored) -> None:
    """Each hint's span ids are spans of its trace, with the names the hint gives, at most five of them."""
    hints = 0
    for trace in stored.traces.values():
        names = {str(span["spanID"]): str(span["operationName"]) for span in jaeger_spans(trace)}
        for log in _our_logs(jaeger_root(trace)):
            fields = jaeger_tags(log["fields"])
            if fields["event"] != "latency_budget.hint":
                continue
            hints += 1
            ids = str(fields["latency_budget.hint.span_ids"]).split(" ")
            named = json.loads(fields["latency_budget.hint.span_names"])  # Jaeger: arrays as JSON
            assert 1 <= len(ids) <= min(5, int(fields["latency_budget.hint.span_count"]))
            assert [names[span_id] for span_id in ids] == named
    assert hints > 0


def test_jaeger_serves_the_ui_settings_that_put_the_verdict_first(jaeger: JaegerService) -> None:
    """The page Jaeger serves carries jaeger-ui.json's settings: topTagPrefixes, the verdict first."""
    status, body = http_get(jaeger.query_url + "/search")
    assert status == 200
    found = re.search(r"JAEGER_CONFIG = (\{.*?\});", body.decode())
    assert found is not None, "Jaeger did not substitute the UI configuration"
    served = json.loads(found.group(1))
    assert served == json.loads(JAEGER_UI_CONFIG.read_text())
    assert served["topTagPrefixes"][0] == "latency_budget.verdict"
