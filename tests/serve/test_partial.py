"""A trace split over two serve instances (as a scale event splits it): marked partial, counted, out of the metrics."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, Tracer

from latency_budget import _attributes as attr
from latency_budget._serve.assembly import Limits
from latency_budget._serve.otlp import Received, attributes_of
from latency_budget._serve.partial import gaps

from .harness import NextHop, at, record, running, send_grpc
from .test_judging import BUDGETS, agent_trace

PARTIAL_KEYS = (attr.PARTIAL, attr.PARTIAL_REASON)


def nested_trace(tracer: Tracer) -> None:
    """A request of 500 ms whose agent step (the middle span) holds a retrieval of 60 ms and a model call of 120 ms."""
    root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=at(0))
    step = tracer.start_span("agent step", context=trace.set_span_in_context(root), start_time=at(5))
    inner = trace.set_span_in_context(step)
    tracer.start_span("retrieve docs", context=inner, start_time=at(10)).end(end_time=at(70))
    tracer.start_span("chat gpt-4o", context=inner, kind=SpanKind.CLIENT, start_time=at(80)).end(end_time=at(200))
    step.end(end_time=at(450))
    root.end(end_time=at(500))


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _forwarded(hop: NextHop) -> dict[tuple[int, int], dict[str, object]]:
    """Every span the next hop received, by (trace id, span id): its attributes."""
    return {
        (int.from_bytes(span.trace_id, "big"), int.from_bytes(span.span_id, "big")): attributes_of(span.attributes)
        for _, _, span in hop.spans()
    }


def _key(span: ReadableSpan) -> tuple[int, int]:
    return span.context.trace_id, span.context.span_id


def _trace_durations(hop: NextHop) -> list[tuple[int, float]]:
    """The final (count, sum) of each latency_budget.trace.duration point the next hop received."""
    points: list[Any] = []
    cumulative = True
    for request in hop.metric_requests:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == "latency_budget.trace.duration":
                        cumulative = (
                            metric.histogram.aggregation_temporality
                            == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
                        )
                        points.extend(metric.histogram.data_points)
    if cumulative:  # each export repeats the total so far: the last one of each series is the total
        last: dict[tuple[tuple[str, object], ...], tuple[int, float]] = {}
        for point in points:
            last[tuple(sorted(attributes_of(point.attributes).items()))] = (point.count, point.sum)
        return sorted(last.values())
    return sorted((point.count, point.sum) for point in points)


@pytest.mark.parametrize("other_ends", ["drained", "max_wait"])
def test_middle_span_on_another_instance_marks_both_parts_and_keeps_the_trace_out_of_metrics(
    hop: NextHop, other_ends: str
) -> None:
    """Middle span sent to instance B: A marks the root missing_parent, B marks the middle no_root; both count it."""
    split = record(nested_trace)
    whole = record(agent_trace, first_trace=2, first_span=100)  # the null control, on A too
    middle = [s for s in split if s.name == "agent step"]
    rest = [s for s in split if s.name != "agent step"]
    b_limits = Limits(decision_wait_s=0.05, max_wait_s=0.3 if other_ends == "max_wait" else 30.0)
    with running(BUDGETS, hop.url, reports=True) as a, running(BUDGETS, hop.url, limits=b_limits) as b:
        assert send_grpc(rest, a.grpc_endpoint).name == "SUCCESS"
        assert send_grpc(middle, b.grpc_endpoint).name == "SUCCESS"
        assert send_grpc(whole, a.grpc_endpoint).name == "SUCCESS"
        a_counters = a.wait_for(lambda c: c["spans_forwarded"] == 7, "A forwarded 7 spans")
        if other_ends == "max_wait":
            b.wait_for(lambda c: c["spans_forwarded"] == 1, "B forwarded the middle span after --max-wait")
        else:
            b.wait_for(lambda c: c["spans_received"] == 1, "B holds the middle span")
    b_counters = b.server.counters.snapshot()  # B drained (a scale-down) or gave up on the root
    assert a_counters["traces_judged"] == 2
    assert a_counters["traces_partial"] == 1
    assert b_counters["traces_partial"] == 1
    assert b_counters["traces_forwarded_unjudged"] == 1
    forwarded = _forwarded(hop)
    assert set(forwarded) == {_key(s) for s in split + whole}  # every span forwarded once
    root = next(s for s in split if s.parent is None)
    assert forwarded[_key(root)][attr.PARTIAL] is True
    assert forwarded[_key(root)][attr.PARTIAL_REASON] == "missing_parent"
    assert attr.VERDICT in forwarded[_key(root)]  # still judged: the verdict stands, marked
    assert forwarded[_key(middle[0])][attr.PARTIAL_REASON] == "no_root"
    marked = {key for key, attributes in forwarded.items() if attr.PARTIAL in attributes}
    assert marked == {_key(root), _key(middle[0])}  # nothing of the whole trace, no other span
    whole_root = next(s for s in whole if s.parent is None)
    assert attr.VERDICT in forwarded[_key(whole_root)]
    # A drained when its block ended: the metrics were flushed. Only the whole trace's 400 ms is in them.
    assert _trace_durations(hop) == [(1, 400.0)]
    violation_logs = [
        attributes_of(r.attributes)
        for request in hop.log_requests
        for rl in request.resource_logs
        for sl in rl.scope_logs
        for r in sl.log_records
        if attributes_of(r.attributes).get("event.name") == attr.VIOLATION_EVENT
    ]
    partial_logs = [log for log in violation_logs if log.get(attr.PARTIAL_REASON) == "missing_parent"]
    assert partial_logs  # the split trace is over its total (500/300 ms): its violation is logged, marked
    assert len(partial_logs) < len(violation_logs)  # the whole trace's violations are not marked


def test_partial_in_metrics_counts_the_partial_trace_too(hop: NextHop) -> None:
    """With --partial-in-metrics yes, the trace judged on part of its spans is in the budget metrics."""
    split = record(nested_trace)
    with running(BUDGETS, hop.url, reports=True, partial_in_metrics=True) as a:
        assert send_grpc([s for s in split if s.name != "agent step"], a.grpc_endpoint).name == "SUCCESS"
        counters = a.wait_for(lambda c: c["spans_forwarded"] == 3, "3 spans forwarded")
    assert counters["traces_partial"] == 1
    assert _trace_durations(hop) == [(1, 500.0)]


def test_whole_trace_in_pieces_is_not_partial(hop: NextHop) -> None:
    """Null control: a nested trace whose spans come in three requests to one instance is judged whole, unmarked."""
    spans = record(nested_trace)
    with running(BUDGETS, hop.url) as serve:
        for part in ([spans[0]], spans[1:3], spans[3:]):
            assert send_grpc(part, serve.grpc_endpoint).name == "SUCCESS"
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 4, "4 spans forwarded")
    assert counters["traces_judged"] == 1
    assert counters["traces_partial"] == 0
    assert not any(attr.PARTIAL in attributes for attributes in _forwarded(hop).values())


def test_spans_after_the_decision_are_marked_late_and_the_trace_counted_once(hop: NextHop) -> None:
    """Spans of a judged trace that arrive after its decision go on marked late_spans; the trace counts once."""
    retrieve, chat, step, root = record(nested_trace)  # in the order they ended
    with running(BUDGETS, hop.url) as serve:
        assert send_grpc([step, root], serve.grpc_endpoint).name == "SUCCESS"
        serve.wait_for(lambda c: c["traces_judged"] == 1 and c["spans_forwarded"] == 2, "the trace judged")
        assert send_grpc([retrieve], serve.grpc_endpoint).name == "SUCCESS"
        serve.wait_for(lambda c: c["spans_forwarded"] == 3, "the first late span forwarded")
        assert send_grpc([chat], serve.grpc_endpoint).name == "SUCCESS"
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 4, "the second late span forwarded")
    assert counters["spans_late"] == 2
    assert counters["traces_partial"] == 1  # one trace, however many late batches
    forwarded = _forwarded(hop)
    for span in (retrieve, chat):
        assert forwarded[_key(span)][attr.PARTIAL_REASON] == "late_spans"
        assert forwarded[_key(span)][attr.PARTIAL] is True
    assert attr.PARTIAL not in forwarded[_key(root)]  # it left before them, judged on what it had


@given(st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=30), st.data())
def test_gaps_are_the_spans_whose_parent_did_not_arrive(parents: list[int], data: st.DataObject) -> None:
    """On a random tree with random spans gone, gaps() is each span whose parent is among the gone, and only those."""
    # Span n + 1's parent is a span before it (parents[n] % (n + 1), 0 meaning none): a tree rooted at span 1.
    tree = {n + 1: (parents[n] % (n + 1)) or None for n in range(len(parents))}
    gone = data.draw(st.sets(st.sampled_from(sorted(tree))))
    arrived = [SimpleNamespace(span_id=span, parent_id=parent) for span, parent in tree.items() if span not in gone]
    expected = {item.span_id for item in arrived if item.parent_id is not None and item.parent_id in gone}
    assert gaps(cast("list[Received]", arrived)) == expected
