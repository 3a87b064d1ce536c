"""Late children: a stage span that started under the root and ends just after it is counted, within a bound.

The shape is opentelemetry-instrumentation-openai-v2 (2.1b0) on a streamed chat: the span
starts with ``gen_ai.operation.name`` ``chat`` and the request model, and ends when the
stream is closed, which an application may do after its request handler (the root) has
returned. LiteLLM's callback span (litellm 1.7x, ``litellm_request``) reaches the processor
after the root too, with times inside it. Explicit timestamps throughout; the wall-clock
side of the bound is released by ``force_flush`` and ``shutdown``, never waited for.
"""

from __future__ import annotations

import os
import threading
from collections import Counter

import pytest

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget import _attributes as attr
from latency_budget._core.trace_state import LATE_SPAN_BOUND_MS, LATE_SPAN_GRACE_MS
from latency_budget._replay import SpanRecord, evaluate_spans

from .helpers import TECHCORP_YAML, RecordingProcessor, at, pipeline

CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", "gen_ai.system": "openai"}


def test_a_chat_that_started_under_the_root_and_ends_2_ms_after_it_is_counted() -> None:
    """The root's judgment waits for a started stage child: it ends 2 ms after the root and is counted."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    p.run("chat 1", 10, 300, parent=root, attributes=CHAT)
    late = p.start("chat 2", 310, parent=root, attributes=CHAT)
    root.end(end_time=at(500))
    assert p.reports == []  # held: a started model call is still open
    late.end(end_time=at(502))
    (report,) = p.reports
    assert report.stage("model_call").count == 2
    roots = [s for s in p.finished() if s.name == "POST /ask"]
    assert len(roots) == 1  # forwarded exactly once, as the annotated copy
    assert roots[0].attributes is not None
    assert roots[0].attributes[attr.stage_key("model_call", "count")] == 2
    assert [s.name for s in p.finished()].count("chat 2") == 1
    assert p.processor.stats().late_spans == 1


def test_a_late_child_time_is_counted_only_up_to_the_root_end() -> None:
    """A late child's time after the root's end is outside the request: the stage's union stops at the root's end."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    late = p.start("chat", 300, parent=root, attributes=CHAT)
    root.end(end_time=at(500))
    late.end(end_time=at(502))
    (report,) = p.reports
    assert report.stage("model_call").actual_ms == 200


def test_a_child_ending_past_the_bound_is_not_counted_and_is_counted_as_missed() -> None:
    """A started child that ends past the bound (span time): the root is judged without it, and that is counted."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    late = p.start("chat", 300, parent=root, attributes=CHAT)
    root.end(end_time=at(500))
    late.end(end_time=at(500 + LATE_SPAN_BOUND_MS + 1))
    (report,) = p.reports
    assert report.stage("model_call").count == 0
    stats = p.processor.stats()
    assert (stats.late_spans, stats.late_spans_missed) == (0, 1)
    assert [s.name for s in p.finished()].count("POST /ask") == 1
    assert [s.name for s in p.finished()].count("chat") == 1


def test_force_flush_forwards_a_held_root_judged_without_its_open_child() -> None:
    """force_flush releases a held root at once: annotated, forwarded once, the open child counted as missed."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    late = p.start("chat", 300, parent=root, attributes=CHAT)
    root.end(end_time=at(500))
    assert p.processor.force_flush()
    (report,) = p.reports
    assert report.stage("model_call").count == 0
    assert p.span("POST /ask").attributes[attr.VERDICT] == "within budget"  # type: ignore[index]
    late.end(end_time=at(501))  # after the release: forwarded untouched, not counted again
    assert len(p.reports) == 1
    assert [s.name for s in p.finished()] == ["POST /ask", "chat"]
    assert p.processor.stats().late_spans_missed == 1


def test_shutdown_forwards_a_held_root_before_shutting_downstream() -> None:
    """shutdown releases every held root (annotated, once) before the downstream processor shuts down."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    p.start("chat", 300, parent=root, attributes=CHAT)
    root.end(end_time=at(500))
    p.processor.shutdown()
    assert [s.name for s in p.finished()] == ["POST /ask"]
    assert attr.VERDICT in (p.span("POST /ask").attributes or {})


def test_a_root_with_no_open_stage_child_is_forwarded_at_once() -> None:
    """Nothing open under the root: it is judged and forwarded when it ends, as before (no hold)."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    p.run("chat", 10, 300, parent=root, attributes=CHAT)
    p.start("log flush", 400, parent=root)  # open, but no stage span: nothing to wait for
    root.end(end_time=at(500))
    assert len(p.reports) == 1
    assert p.processor.stats().late_spans == 0


def test_a_span_starting_while_the_root_is_held_is_counted() -> None:
    """LiteLLM's callback span starts after the root ended (times inside it): counted while the root is held.

    The wait is a minute: a span ends between the root's end and its last child's, so a wall-clock bound could pass.
    """
    p = pipeline(late_span_wait_ms=60_000)
    root = p.start("POST /ask", 0)
    first = p.start("chat", 10, parent=root, attributes=CHAT)
    root.end(end_time=at(500))
    litellm = {"gen_ai.operation.name": "acompletion", "llm.request.type": "acompletion", "gen_ai.request.model": "m"}
    p.run("litellm_request", 320, 480, parent=root, attributes=litellm)
    first.end(end_time=at(501))
    (report,) = p.reports
    assert report.stage("model_call").count == 2


def test_held_roots_keep_every_span_forwarded_exactly_once() -> None:
    """Two held requests, released one by a late child and one by force_flush: every span reaches downstream once."""
    p = pipeline()
    roots, lates = [], []
    for n in range(2):
        root = p.start(f"req {n}", 0)
        lates.append(p.start(f"chat {n}", 100, parent=root, attributes=CHAT))
        root.end(end_time=at(200))
        roots.append(root)
    lates[0].end(end_time=at(201))
    p.processor.force_flush()
    lates[1].end(end_time=at(201))
    names = sorted(s.name for s in p.finished())
    assert names == ["chat 0", "chat 1", "req 0", "req 1"]
    assert len(p.reports) == 2


def test_force_flush_still_reaches_downstream_when_nothing_is_held() -> None:
    """force_flush passes through to downstream (the hold adds nothing when no root is held)."""
    downstream = RecordingProcessor()
    processor = LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), downstream)
    assert processor.force_flush(1234)
    assert downstream.flushes == [1234]


def _record(span_id: int, parent: int | None, name: str, start: float, end: float, **attributes: object) -> SpanRecord:
    """A recorded span with times in ms after T0."""
    return SpanRecord(0xABC, span_id, parent, name, at(start), at(end), attributes=attributes)


def test_replay_counts_a_child_ending_2_ms_after_its_root_as_live() -> None:
    """Offline, the same rule: a child that started before the root ended and ended 2 ms after is counted."""
    config = load_budgets(text=TECHCORP_YAML)
    spans = [
        _record(1, None, "POST /ask", 0, 500),
        _record(2, 1, "chat 1", 10, 300, **CHAT),
        _record(3, 1, "chat 2", 310, 502, **CHAT),
        _record(4, 1, "chat 3", 320, 500 + LATE_SPAN_BOUND_MS + 1, **CHAT),  # past the bound
        _record(5, 1, "chat 4", 501, 502, **CHAT),  # started after the root ended
    ]
    (report,) = evaluate_spans(config, spans)
    assert report.stage("model_call").count == 2


def test_with_a_grace_a_span_written_after_the_call_by_a_callback_is_counted() -> None:
    """late_span_grace_ms: LiteLLM's litellm_request, started and ended after the root with times inside it, counts."""
    litellm = {"gen_ai.operation.name": "acompletion", "llm.request.type": "acompletion", "gen_ai.request.model": "m"}
    counted = []
    for grace in (0.0, 5.0):
        p = pipeline(late_span_grace_ms=grace)
        root = p.start("POST /ask", 0)
        p.run("litellm_request", 10, 300, parent=root, attributes=litellm)
        root.end(end_time=at(400))
        p.run("litellm_request", 310, 390, parent=root, attributes=litellm)  # the callback of the last call
        p.processor.force_flush()
        (report,) = p.reports
        counted.append(report.stage("model_call").count)
        assert [s.name for s in p.finished()].count("POST /ask") == 1
    assert counted == [1, 2]


def test_held_roots_released_from_many_threads_are_forwarded_once_each() -> None:
    """Eight requests whose late children end at once on eight threads: every root and child reaches downstream once.

    The wait is a minute, so the wall-clock side of the bound never passes however slowly the threads run.
    """
    p = pipeline(late_span_wait_ms=60_000)
    barrier = threading.Barrier(8)

    def request(n: int) -> None:
        root = p.start(f"req {n}", 0)
        late = p.start(f"chat {n}", 100, parent=root, attributes=CHAT)
        root.end(end_time=at(200))
        barrier.wait()
        late.end(end_time=at(201))

    threads = [threading.Thread(target=request, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    p.processor.force_flush()
    names = Counter(s.name for s in p.finished())
    assert names == Counter({**{f"req {n}": 1 for n in range(8)}, **{f"chat {n}": 1 for n in range(8)}})
    assert sorted(r.stage("model_call").count for r in p.reports) == [1] * 8


def test_holding_a_root_for_the_grace_returns_at_once_and_shutdown_forwards_it() -> None:
    """The root's end returns with the root held (a minute's grace), not judged inline; shutdown forwards it once."""
    p = pipeline(late_span_grace_ms=60_000)
    root = p.start("POST /ask", 0)
    p.run("chat", 10, 300, parent=root, attributes=CHAT)
    root.end(end_time=at(400))
    assert p.reports == []
    assert p.processor.stats().held_roots == 1
    p.processor.shutdown()
    assert [s.name for s in p.finished()].count("POST /ask") == 1
    assert p.processor.stats().held_roots == 0


def _quiet_request(grace_ms: float) -> bool:
    """One request whose root is held for ``grace_ms``, then nothing: whether its root was forwarded (bounded wait)."""
    reported = threading.Event()
    p = pipeline(late_span_grace_ms=grace_ms, on_report=lambda report: reported.set())
    root = p.start("POST /ask", 0)
    p.run("chat", 10, 300, parent=root, attributes=CHAT)
    root.end(end_time=at(400))
    if not reported.wait(timeout=30):  # no span, flush or shutdown follows: only the timer can release it
        return False
    (report,) = p.reports
    return report.stage("model_call").count == 1 and [s.name for s in p.finished()].count("POST /ask") == 1


def test_a_held_root_in_a_quiet_process_is_forwarded_by_the_timer() -> None:
    """With the default grace and nothing after the request, the root is still judged and forwarded, by the timer."""
    assert LatencyBudgetProcessor.__init__.__kwdefaults__["late_span_grace_ms"] == LATE_SPAN_GRACE_MS > 0
    assert _quiet_request(LATE_SPAN_GRACE_MS)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_after_a_fork_the_child_releases_its_held_roots_too() -> None:
    """A fork while the parent's timer waits: the child starts a timer of its own and forwards its quiet request."""
    parent = pipeline(late_span_grace_ms=60_000)
    root = parent.start("POST /ask", 0)
    root.end(end_time=at(10))
    assert parent.processor.stats().held_roots == 1  # the parent's timer thread waits a minute
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when its quiet request was forwarded
        os._exit(0 if _quiet_request(5.0) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    parent.processor.shutdown()
