"""The collector tier end to end, in two languages: a Python agent calls a Node retrieval service.

The agent is a real OpenTelemetry Python SDK with the real OTLP/gRPC exporter and the
real `requests` instrumentation (W3C trace context into the call's headers); the
retrieval service runs Node's `@opentelemetry/sdk-node` with its HTTP instrumentation
and OTLP/HTTP exporter (tests/e2e/node). Both send to a real Collector running
collector-tier.yaml, whose load-balancing exporter routes each trace, by id, to one of two
`latency-budget serve` processes; they judge the whole trace (the retrieval stage is
the Node service's spans, matched by its service.name resource) and forward every span to
a real Jaeger. Neither application has a LatencyBudgetProcessor: the tier judges alone.

Span times are explicit where the test decides durations: the Node service writes its
retrieval span with the start and duration the agent sends in headers, so which traces
break the retrieval budget is the test's choice, not the machine's speed. Waiting is
polling with deadlines, never sleeping.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

from ..binaries import require_program
from ..ci import skip_or_fail_in_ci
from .services import (
    NODE_SERVICE_DIR,
    JaegerService,
    ManagedProcess,
    NodeService,
    ServeService,
    TierCollectorService,
    Tools,
    poll,
    start_retrieval_service,
    start_serve,
    start_tier_collector,
)
from .signals import jaeger_root, jaeger_spans, jaeger_tags

pytestmark = pytest.mark.e2e

RETRIEVAL_SERVICE = "retrieval-service"
BUDGETS = f"""\
version: 1
total_ms: 10000
stages:
  retrieval:
    budget_ms: 300
    # The retrieval stage is the Node service's retrieval spans: its resource, not its attributes.
    match: {{resource: {{service.name: {RETRIEVAL_SERVICE}}}, name: "retrieve*"}}
  model_call:
    budget_ms: 2000
"""
MS = 1_000_000
OVER_MS, WITHIN_MS = 800, 40  # retrieval durations: over and within its 300 ms budget
# Spans per trace: the agent's root, its HTTP client span and model call; the Node
# service's HTTP server span and retrieval span.
SPANS_PER_TRACE = 5
PHASE_TRACES = 16  # per phase; each trace goes to either instance, so both see some
DECISION_WAIT_S = "3"  # longer than the Collector's retry interval: a retried trace arrives whole
DELIVERY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Sent:
    """A request the agent made: its trace id (hex, as Jaeger spells it) and retrieval time."""

    trace_id: str
    retrieval_ms: int

    @property
    def over(self) -> bool:
        return self.retrieval_ms == OVER_MS


class Agent:
    """The Python side: an AI request that retrieves over HTTP from the Node service, then calls a model."""

    def __init__(self, service_name: str, otlp_endpoint: str, retrieval_url: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True)))
        self.tracer = self.provider.get_tracer("e2e.agent")
        self.retrieval_url = retrieval_url
        self.session = requests.Session()

    def answer(self, retrieval_ms: int) -> Sent:
        """One request: root span, the HTTP call to the Node service, a model call; explicit times."""
        start = time.time_ns()
        root = self.tracer.start_span(
            "POST /v1/answer",
            kind=SpanKind.SERVER,
            start_time=start,
            attributes={"http.request.method": "POST", "http.route": "/v1/answer"},
        )
        with trace.use_span(root, end_on_exit=False):
            response = self.session.get(
                f"{self.retrieval_url}/retrieve",
                headers={
                    "x-retrieval-start-unix-nano": str(start + 5 * MS),
                    "x-retrieval-duration-ms": str(retrieval_ms),
                },
                timeout=30,
            )
            response.raise_for_status()
            model_start = start + (retrieval_ms + 20) * MS
            model = self.tracer.start_span(
                "chat gpt-4o-mini",
                kind=SpanKind.CLIENT,
                start_time=model_start,
                attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini"},
            )
            model.end(end_time=model_start + 400 * MS)
        # 2 s after the start, unless the HTTP call itself took longer: far within total_ms.
        root.end(end_time=max(start + 2000 * MS, time.time_ns()))
        return Sent(trace_id=format(root.get_span_context().trace_id, "032x"), retrieval_ms=retrieval_ms)

    def send(self, count: int, first: int) -> list[Sent]:
        """``count`` requests, every third over the retrieval budget; flushed to the Collector."""
        sent = [self.answer(OVER_MS if (first + i) % 3 == 0 else WITHIN_MS) for i in range(count)]
        assert self.provider.force_flush(30_000)
        return sent

    def shutdown(self) -> None:
        self.session.close()
        self.provider.shutdown()


@dataclass
class Tier:
    collector: TierCollectorService
    serves: list[ServeService]
    retrieval: NodeService


@pytest.fixture
def node_binary() -> str:
    """Node and the installed packages of tests/e2e/node; skip (or fail under CI=true) without them."""
    node = require_program("node", install="install Node.js 20 or later")
    if not (NODE_SERVICE_DIR / "node_modules" / "@opentelemetry" / "sdk-node").is_dir():
        skip_or_fail_in_ci(f"{NODE_SERVICE_DIR}/node_modules is missing: run `npm ci` there")
    return node


@pytest.fixture
def tier(
    otel_tools: Tools,
    node_binary: str,
    jaeger: JaegerService,
    tmp_path: Path,
    attach_log: Callable[[ManagedProcess], None],
) -> Iterator[Tier]:
    """Two serve instances forwarding to Jaeger, the tier Collector routing to them, and the Node service."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGETS, encoding="utf-8")
    serves: list[ServeService] = []
    started: list[ManagedProcess] = []
    try:
        for index in range(2):
            serve = start_serve(
                tmp_path,
                name=f"serve-{index}",
                budgets=budgets,
                forward_endpoint=f"http://{jaeger.otlp_grpc_endpoint}",
                # Jaeger takes traces only; serve's own tests check its logs and metrics.
                args=["--decision-wait", DECISION_WAIT_S, "--max-wait", "60", "--reports", "none"],
            )
            serves.append(serve)
            started.append(serve.process)
            attach_log(serve.process)
        collector = start_tier_collector(
            otel_tools,
            tmp_path,
            backends=[serve.grpc_endpoint for serve in serves],
            # Retry a down instance often, so a restarted one gets its queue back quickly.
            extra_env={"OTELCOL_TIER_RETRY_INITIAL_INTERVAL": "200ms", "OTELCOL_TIER_RETRY_MAX_INTERVAL": "1s"},
        )
        started.append(collector.process)
        attach_log(collector.process)
        retrieval = start_retrieval_service(
            node_binary, tmp_path, otlp_http_endpoint=collector.otlp_http_endpoint, service_name=RETRIEVAL_SERVICE
        )
        started.append(retrieval.process)
        attach_log(retrieval.process)
        yield Tier(collector=collector, serves=serves, retrieval=retrieval)
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture
def agent(tier: Tier, service_name: str) -> Iterator[Agent]:
    """The Python agent, its `requests` calls instrumented (W3C trace context) for the test's duration."""
    agent = Agent(service_name, tier.collector.otlp_grpc_endpoint, tier.retrieval.url)
    RequestsInstrumentor().instrument(tracer_provider=agent.provider)
    try:
        yield agent
    finally:
        RequestsInstrumentor().uninstrument()
        agent.shutdown()


def _judged(serves: list[ServeService]) -> int:
    return sum(serve.counters()["traces_judged"] for serve in serves)


def _stored(jaeger: JaegerService, sent: list[Sent]) -> dict[str, dict[str, Any]] | None:
    """Every sent trace as Jaeger holds it, once each has all its spans; None before."""
    traces = {}
    for item in sent:
        stored = jaeger.get_trace(item.trace_id)
        if stored is None or len(jaeger_spans(stored)) < SPANS_PER_TRACE:
            return None
        if not any("latency_budget.verdict" in jaeger_tags(s.get("tags")) for s in jaeger_spans(stored)):
            return None
        traces[item.trace_id] = stored
    return traces


def test_two_language_traces_are_judged_once_across_two_instances_and_a_restart(
    tier: Tier, agent: Agent, jaeger: JaegerService, service_name: str
) -> None:
    """Each trace is judged once by one instance, names the Node stage, and survives an instance's restart."""
    first, second = tier.serves
    sent = agent.send(PHASE_TRACES, first=0)
    poll(
        lambda: True if _judged(tier.serves) == PHASE_TRACES else None,
        timeout=DELIVERY_TIMEOUT_S,
        what=f"{PHASE_TRACES} traces judged by the two serve instances",
    )
    # Stop one instance (SIGTERM: it drains and exits 0) with nothing left open in it, send
    # the second half while it is down, then start it again on the same port: the
    # Collector's queue for it holds its share until then.
    before_restart = second.counters()
    assert second.process.stop() == 0
    sent += agent.send(PHASE_TRACES, first=PHASE_TRACES)
    second.process.start()

    stored = poll(lambda: _stored(jaeger, sent), timeout=DELIVERY_TIMEOUT_S, what="every trace whole in Jaeger")
    after = [first.counters(), second.counters()]
    total = 2 * PHASE_TRACES

    # Judged exactly once: the instances' counts add up to the traces sent, nothing went
    # through unjudged, and the restarted instance judged what waited for it in the queue.
    assert after[0]["traces_judged"] + after[1]["traces_judged"] + before_restart["traces_judged"] == total
    assert after[1]["traces_judged"] > 0
    for counters in [*after, before_restart]:
        assert counters["traces_forwarded_unjudged"] == 0, counters
        assert counters["traces_already_annotated"] == 0, counters
        assert counters["spans_dropped"] == 0, counters
        assert counters["spans_late"] == 0, counters
    assert sum(c["spans_received"] for c in [*after, before_restart]) == total * SPANS_PER_TRACE

    for item in sent:
        spans = jaeger_spans(stored[item.trace_id])
        processes = stored[item.trace_id]["processes"]
        # Every span once: five distinct span ids, from the two services.
        assert len(spans) == SPANS_PER_TRACE
        assert len({span["spanID"] for span in spans}) == SPANS_PER_TRACE
        services = {span["operationName"]: processes[span["processID"]]["serviceName"] for span in spans}
        assert services["retrieve documents"] == RETRIEVAL_SERVICE
        assert services["POST /v1/answer"] == service_name
        # One verdict per trace, on its root; the retrieval stage is the Node service's span.
        annotated = [span for span in spans if "latency_budget.verdict" in jaeger_tags(span.get("tags"))]
        assert annotated == [jaeger_root(stored[item.trace_id])]
        tags = jaeger_tags(annotated[0]["tags"])
        assert tags["latency_budget.stages.retrieval.actual_ms"] == pytest.approx(item.retrieval_ms)
        assert tags["latency_budget.violated"] is item.over
        if item.over:
            assert str(tags["latency_budget.verdict"]).startswith("OVER BUDGET: retrieval +500")
            assert json.loads(str(tags["latency_budget.over_budget_stages"])) == ["retrieval"]
        else:
            assert tags["latency_budget.verdict"] == "within budget"

    # Jaeger's tag search (docs/jaeger.md) finds exactly the violating traces.
    found = jaeger.find_traces(service=service_name, limit="100", tags=json.dumps({"latency_budget.violated": "true"}))
    assert {str(t["traceID"]) for t in found} == {item.trace_id for item in sent if item.over}
