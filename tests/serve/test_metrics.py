"""serve's counters and gauges, from one table, on the health endpoint, on GET /metrics and over OTLP."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from latency_budget._serve.assembly import Limits
from latency_budget._serve.exposition import CONTENT_TYPE, otel_name, prometheus_name
from latency_budget._serve.stats import COUNTERS, GAUGES, METRICS

from .harness import NextHop, record, running, send_grpc
from .test_judging import BUDGETS, agent_trace

SPANS = 4  # agent_trace: the root, a retrieval and two model calls


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _scrape(health_url: str) -> tuple[str, dict[str, int]]:
    """GET /metrics next to the health endpoint: its content type and each sample's value by name."""
    url = health_url.rsplit("/", 1)[0] + "/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        content_type = response.headers["Content-Type"]
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            name, value = line.split(" ")
            samples[name] = int(value)
    return content_type, samples


def _otlp_values(hop: NextHop) -> dict[str, tuple[str, Any]]:
    """The last point of each metric the next hop received: name -> (point kind, value)."""
    found: dict[str, tuple[str, Any]] = {}
    with hop.lock:
        requests = list(hop.metric_requests)
    for request in requests:
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    points = getattr(metric, kind).data_points
                    monotonic = getattr(getattr(metric, kind), "is_monotonic", None)
                    value = points[-1].as_int if kind in ("sum", "gauge") else None
                    found[metric.name] = (f"{kind}{'/monotonic' if monotonic else ''}", value)
    return found


def test_the_health_endpoint_and_metrics_endpoint_read_every_row_alike(hop: NextHop) -> None:
    """/health's counters and gauges and /metrics' samples are the table's rows, with the same values."""
    with running(BUDGETS, hop.url) as serve:
        assert send_grpc(record(agent_trace), serve.grpc_endpoint).name == "SUCCESS"
        serve.wait_for(lambda c: c["spans_forwarded"] == SPANS, "the trace forwarded")
        status, health = serve.health()
        content_type, samples = _scrape(serve.health_url)
        status_after, health_after = serve.health()

    assert status == status_after == 200
    assert health["counters"] == health_after["counters"]  # nothing moved while it was scraped
    assert tuple(health["counters"]) == COUNTERS
    assert tuple(health["gauges"]) == GAUGES
    assert content_type == CONTENT_TYPE
    assert list(samples) == [prometheus_name(row) for row in METRICS]
    for row in METRICS:
        shown = health["counters"][row.name] if row.kind == "counter" else health["gauges"][row.name]
        assert samples[prometheus_name(row)] == shown, row.name
    assert samples["latency_budget_serve_spans_received_total"] == SPANS
    assert samples["latency_budget_serve_spans_forwarded_total"] == SPANS
    assert samples["latency_budget_serve_traces_judged_total"] == 1
    assert samples["latency_budget_serve_open_traces"] == 0
    assert samples["latency_budget_serve_held_limit_bytes"] == serve.server.options.limits.max_bytes


def test_held_gauges_show_an_open_trace_until_it_is_judged(hop: NextHop) -> None:
    """While a trace waits for --decision-wait, open_traces, open_spans, buffered and held count it."""
    with running(BUDGETS, hop.url, limits=Limits(decision_wait_s=30.0, max_wait_s=60.0)) as serve:
        assert send_grpc(record(agent_trace), serve.grpc_endpoint).name == "SUCCESS"
        _, samples = _scrape(serve.health_url)
        gauges = serve.health()[1]["gauges"]

    assert (samples["latency_budget_serve_open_traces"], samples["latency_budget_serve_open_spans"]) == (1, SPANS)
    assert 0 < samples["latency_budget_serve_buffered_bytes"] <= samples["latency_budget_serve_held_bytes"]
    assert gauges["open_traces"] == 1


def test_the_counters_and_gauges_go_out_over_otlp_with_the_budget_metrics(hop: NextHop) -> None:
    """With reports, every row reaches the next hop as latency_budget.serve.<name>, next to the budget metrics."""
    with running(BUDGETS, hop.url, reports=True) as serve:
        assert send_grpc(record(agent_trace), serve.grpc_endpoint).name == "SUCCESS"
        serve.wait_for(lambda c: c["spans_forwarded"] == SPANS, "the trace forwarded")
    # drained: the last collection was pushed before the server stopped
    received = _otlp_values(hop)

    for row in METRICS:
        kind, _ = received[otel_name(row)]
        assert kind == ("sum/monotonic" if row.kind == "counter" else "gauge"), row.name
    assert received["latency_budget.serve.spans_received"][1] == SPANS
    assert received["latency_budget.serve.traces_judged"][1] == 1
    assert received["latency_budget.serve.held_limit"][1] == serve.server.options.limits.max_bytes
    assert "latency_budget.stage.duration" in received  # the same push as the budget metrics


def test_held_is_what_the_refusal_counted_against_held_limit(hop: NextHop) -> None:
    """Sent until refused (--max-bytes), the held gauge is the very figure the refusal named, under held_limit."""
    limit = 60_000
    with running(BUDGETS, hop.url, limits=Limits(decision_wait_s=60.0, max_wait_s=60.0, max_bytes=limit)) as serve:
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(serve.grpc_endpoint))
        refused = None
        for trace in range(1, 200):  # each trace stays open: nothing leaves for 60 s
            try:
                stub.Export(encode_spans(record(agent_trace, first_trace=trace)), timeout=10)
            except grpc.RpcError as error:
                refused = error
                break
        gauges = serve.health()[1]["gauges"]
        events = [e for e in serve.events() if e["event"] == "refused"]

    assert refused is not None
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    (event,) = events
    named = re.match(r"(\d+) bytes held, (\d+) more", event["reason"])
    assert named is not None, event
    assert gauges["held"] == int(named.group(1))
    assert gauges["held"] <= gauges["held_limit"] == limit < gauges["held"] + int(named.group(2))
    assert gauges["open_traces"] == trace - 1
