"""Trace assembly on a clock the test moves: when a trace is decided, and what the bounds do."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from latency_budget._serve.assembly import Limits, TraceBuffer
from latency_budget._serve.otlp import Received, decode_request

from .harness import record
from .test_judging import agent_trace


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _spans(first_trace: int = 1, *, root: bool = True) -> list[Received]:
    spans = [s for s in record(agent_trace, first_trace=first_trace) if root or s.parent is not None]
    return decode_request(encode_spans(spans).SerializeToString())[0]


def test_rooted_trace_is_due_after_decision_wait_of_quiet() -> None:
    """A rooted trace is due once no span of it arrived for decision_wait, and not before."""
    clock = Clock()
    buffer = TraceBuffer(Limits(decision_wait_s=5.0, max_wait_s=60.0), clock)
    spans = _spans()
    buffer.add(spans[:2])
    clock.now = 4.0
    buffer.add(spans[2:])
    clock.now = 8.9
    assert buffer.due() == []
    clock.now = 9.0
    (decided,) = buffer.due()
    assert decided.outcome == "judge"
    assert len(decided.spans) == 4
    assert buffer.held() == (0, 0, 0)


def test_rootless_trace_is_given_up_after_max_wait() -> None:
    """A trace without its root stays past decision_wait and leaves unjudged at max_wait from its first span."""
    clock = Clock()
    buffer = TraceBuffer(Limits(decision_wait_s=1.0, max_wait_s=10.0), clock)
    buffer.add(_spans(root=False))
    clock.now = 9.9
    assert buffer.due() == []
    clock.now = 10.0
    (decided,) = buffer.due()
    assert decided.outcome == "no_root"


def test_span_after_its_trace_was_decided_leaves_as_late() -> None:
    """A span of a decided trace is not held again: it leaves at once as late."""
    clock = Clock()
    buffer = TraceBuffer(Limits(decision_wait_s=1.0), clock)
    spans = _spans()
    buffer.add(spans[1:])
    clock.now = 2.0
    assert [d.outcome for d in buffer.due()] == ["judge"]
    refused, leaving = buffer.add(spans[:1])
    assert refused is None
    assert [(d.outcome, len(d.spans)) for d in leaving] == [("late", 1)]
    assert buffer.held() == (0, 0, 0)


def test_full_buffer_refuses_whole_requests_and_keeps_nothing_of_them() -> None:
    """Past max_traces or max_bytes a request is refused whole; the spans held stay as they were."""
    clock = Clock()
    buffer = TraceBuffer(Limits(max_traces=1), clock)
    assert buffer.add(_spans(1))[0] is None
    held = buffer.held()
    refused, _ = buffer.add(_spans(2))
    assert refused is not None
    assert refused.retry_after_s >= 1
    assert buffer.held() == held
    assert buffer.add(_spans(1)[:1])[0] is None  # a span of a trace already held still fits

    by_bytes = TraceBuffer(Limits(max_bytes=held[2] + 1), clock)
    assert by_bytes.add(_spans(1))[0] is None
    assert by_bytes.add(_spans(2))[0] is not None


def test_trace_past_max_spans_is_evicted_whole_and_later_spans_pass_through() -> None:
    """A trace that grows past max_spans_per_trace leaves at once, evicted; its later spans leave as late."""
    clock = Clock()
    buffer = TraceBuffer(Limits(max_spans_per_trace=3), clock)
    spans = _spans()
    _, leaving = buffer.add(spans)
    assert [(d.outcome, len(d.spans)) for d in leaving] == [("evicted", 4)]
    assert buffer.held() == (0, 0, 0)
    _, again = buffer.add(spans[:1])
    assert [d.outcome for d in again] == ["late"]
    assert (again[0].mark_late, again[0].count_partial) == (False, False)  # evicted: not partial, passed on


def test_late_spans_are_marked_each_time_and_their_trace_counted_partial_once() -> None:
    """Late spans of a judged trace are marked every time; the trace is counted partial the first time only."""
    clock = Clock()
    buffer = TraceBuffer(Limits(decision_wait_s=1.0), clock)
    spans = _spans()
    buffer.add(spans[2:])
    clock.now = 2.0
    assert [d.outcome for d in buffer.due()] == ["judge"]
    _, first = buffer.add(spans[:1])
    _, second = buffer.add(spans[1:2])
    assert [(d.mark_late, d.count_partial) for d in first + second] == [(True, True), (True, False)]
    assert buffer.first_partial(spans[0].trace_id) is False  # already counted by the late spans


def test_a_decided_trace_is_found_partial_for_the_first_time_once() -> None:
    """first_partial is True once per decided trace (the judge's or the rootless path's count), then False."""
    clock = Clock()
    buffer = TraceBuffer(Limits(decision_wait_s=1.0, max_wait_s=2.0), clock)
    buffer.add(_spans(root=False))
    clock.now = 3.0
    (decided,) = buffer.due()
    assert decided.outcome == "no_root"
    assert [buffer.first_partial(decided.trace_id) for _ in range(2)] == [True, False]
    _, late = buffer.add(_spans()[:1])  # its root, after the trace left without it
    assert [(d.outcome, d.mark_late, d.count_partial) for d in late] == [("late", True, False)]


def test_drain_gives_rooted_traces_to_judge_and_the_rest_unjudged() -> None:
    """At shutdown every held trace leaves: rooted ones to be judged, rootless ones unjudged."""
    clock = Clock()
    buffer = TraceBuffer(Limits(decision_wait_s=60.0), clock)
    buffer.add(_spans(1))
    buffer.add(_spans(2, root=False))
    assert sorted(d.outcome for d in buffer.drain()) == ["judge", "shutdown"]
    assert buffer.held() == (0, 0, 0)


def test_remembered_decided_traces_are_bounded() -> None:
    """The ids of decided traces kept for late spans never pass remembered_traces."""
    clock = Clock()
    buffer = TraceBuffer(Limits(decision_wait_s=1.0, remembered_traces=3), clock)
    for trace in range(1, 6):
        buffer.add(_spans(trace))
    clock.now = 2.0
    assert len(buffer.due()) == 5
    _, leaving = buffer.add(_spans(1)[:1])  # forgotten: held again as a new trace
    assert leaving == []
    assert buffer.held()[0] == 1
