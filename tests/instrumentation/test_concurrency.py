"""Stage spans from asyncio tasks and thread pools: parallel accounting and attribution to the right root.

Spans are started as the current span (so context really propagates through tasks and
copied contexts) but carry explicit timestamps, so the timing assertions are exact.
Concurrency is forced with events and barriers, never with sleeps.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from ..unit.helpers import Pipeline, at, op, pipeline

BUDGETS = """
version: 1
stages:
  model_call: {budget_ms: 1000}
  tool_calls: {budget_ms: 1000}
"""
TOOL = op("execute_tool")
CHAT = op("chat")
WAIT_S = 30.0  # only ever reached when a test is broken


def root_report(p: Pipeline, name: str) -> dict[str, Any]:
    return dict(p.span(name).attributes or {})


def children_of(p: Pipeline, parent: ReadableSpan) -> set[str]:
    return {s.name for s in p.finished() if s.parent is not None and s.parent.span_id == parent.context.span_id}


def hints(span: ReadableSpan) -> list[Mapping[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == "latency_budget.hint"]


class Countdown:
    """An asyncio latch: ``arrive()`` waits until ``parties`` tasks have arrived."""

    def __init__(self, parties: int) -> None:
        self._left = parties
        self._all = asyncio.Event()

    async def arrive(self) -> None:
        self._left -= 1
        if self._left == 0:
            self._all.set()
        await asyncio.wait_for(self._all.wait(), WAIT_S)


def test_tool_calls_in_gathered_tasks_are_accounted_as_parallel() -> None:
    """Three tool spans open at once in asyncio.gather tasks: union 150 ms, busy 300 ms, no sequential hint."""
    p = pipeline(BUDGETS)
    tracer = p.tracer
    times = [(0, 100), (20, 150), (50, 120)]

    async def tool(n: int, all_open: Countdown) -> None:
        start, end = times[n]
        with tracer.start_as_current_span(f"tool {n}", attributes=TOOL, start_time=at(start), end_on_exit=False) as s:
            await all_open.arrive()  # every tool span is open before any ends
        s.end(end_time=at(end))

    async def request() -> None:
        with tracer.start_as_current_span(
            "request", kind=trace.SpanKind.SERVER, start_time=at(0), end_on_exit=False
        ) as root:
            all_open = Countdown(len(times))
            await asyncio.gather(*(tool(n, all_open) for n in range(len(times))))
        root.end(end_time=at(200))

    asyncio.run(request())
    root = p.span("request")
    assert children_of(p, root) == {"tool 0", "tool 1", "tool 2"}
    report = root_report(p, "request")
    assert report["latency_budget.stages.tool_calls.count"] == 3
    assert report["latency_budget.stages.tool_calls.actual_ms"] == 150.0
    assert report["latency_budget.stages.tool_calls.busy_ms"] == 300.0
    assert report["latency_budget.stages.tool_calls.critical_ms"] == 150.0
    assert report["latency_budget.unattributed_ms"] == 50.0
    assert hints(root) == []


def test_the_same_tool_calls_awaited_one_by_one_are_sequential() -> None:
    """Awaited in turn, the tool spans add up and earn a sequential_calls hint: the contrast to gather."""
    p = pipeline(BUDGETS)
    tracer = p.tracer

    async def tool(n: int, start: float, end: float) -> None:
        span = tracer.start_span(f"tool {n}", attributes=TOOL, start_time=at(start))
        span.end(end_time=at(end))

    async def request() -> None:
        with tracer.start_as_current_span(
            "request", kind=trace.SpanKind.SERVER, start_time=at(0), end_on_exit=False
        ) as root:
            await tool(0, 0, 100)
            await tool(1, 100, 230)
            await tool(2, 230, 300)
        root.end(end_time=at(300))

    asyncio.run(request())
    report = root_report(p, "request")
    assert (
        report["latency_budget.stages.tool_calls.actual_ms"],
        report["latency_budget.stages.tool_calls.busy_ms"],
    ) == (
        300.0,
        300.0,
    )
    [hint] = hints(p.span("request"))
    assert hint["latency_budget.hint.kind"] == "sequential_calls"
    assert hint["latency_budget.hint.span_count"] == 3
    assert hint["latency_budget.hint.potential_savings_ms"] == 170.0


def test_two_requests_interleaved_on_one_event_loop_are_attributed_to_their_own_root() -> None:
    """Requests A and B, started, running and ending interleaved on one loop, each account only their spans."""
    p = pipeline(BUDGETS)
    tracer = p.tracer
    # The global order of events, each (request, what, time in ms); each step waits for the one before.
    script = [
        ("A", "root starts", 0),
        ("B", "root starts", 10),
        ("A", "chat starts", 20),
        ("B", "chat starts", 30),
        ("B", "chat ends", 60),
        ("A", "chat ends", 90),
        ("B", "root ends", 100),
        ("A", "root ends", 120),
    ]

    async def request(name: str, turns: list[asyncio.Event]) -> None:
        steps = [(n, what, ms) for n, (who, what, ms) in enumerate(script) if who == name]

        async def step(index: int) -> tuple[str, int]:
            n, what, ms = steps[index]
            await asyncio.wait_for(turns[n].wait(), WAIT_S)
            if n + 1 < len(turns):
                turns[n + 1].set()  # runs once this coroutine next yields to the loop
            return what, ms

        _, root_start = await step(0)
        with tracer.start_as_current_span(
            f"request {name}", kind=trace.SpanKind.SERVER, start_time=at(root_start), end_on_exit=False
        ) as root:
            _, chat_start = await step(1)
            with tracer.start_as_current_span(
                f"chat {name}", attributes=CHAT, start_time=at(chat_start), end_on_exit=False
            ) as chat:
                _, chat_end = await step(2)
            chat.end(end_time=at(chat_end))
            _, root_end = await step(3)
        root.end(end_time=at(root_end))

    async def main() -> None:
        turns = [asyncio.Event() for _ in script]
        turns[0].set()
        await asyncio.gather(request("A", turns), request("B", turns))

    asyncio.run(main())
    for name, chat_ms, total_ms in (("A", 70.0, 120.0), ("B", 30.0, 90.0)):
        root = p.span(f"request {name}")
        assert children_of(p, root) == {f"chat {name}"}
        report = root_report(p, f"request {name}")
        assert report["latency_budget.stages.model_call.count"] == 1
        assert report["latency_budget.stages.model_call.actual_ms"] == chat_ms
        assert report["latency_budget.total.actual_ms"] == total_ms
    assert p.span("request A").context.trace_id != p.span("request B").context.trace_id


def _tool_in_worker(tracer: trace.Tracer, name: str, start: float, end: float, all_open: threading.Barrier) -> None:
    with tracer.start_as_current_span(name, attributes=TOOL, start_time=at(start), end_on_exit=False) as span:
        all_open.wait()  # every tool span is open before any ends
    span.end(end_time=at(end))


def test_tool_calls_in_a_thread_pool_with_the_context_passed_are_parallel() -> None:
    """Worker threads given the caller's context (copy_context().run) add their spans to the request, in parallel."""
    p = pipeline(BUDGETS)
    tracer = p.tracer
    times = [(10, 110), (10, 60), (40, 140)]
    all_open = threading.Barrier(len(times), timeout=WAIT_S)
    with (
        tracer.start_as_current_span(
            "request", kind=trace.SpanKind.SERVER, start_time=at(0), end_on_exit=False
        ) as root,
        ThreadPoolExecutor(max_workers=len(times)) as pool,
    ):
        futures = [
            pool.submit(contextvars.copy_context().run, _tool_in_worker, tracer, f"tool {n}", start, end, all_open)
            for n, (start, end) in enumerate(times)
        ]
        for future in futures:
            future.result()
    root.end(end_time=at(150))
    assert children_of(p, p.span("request")) == {"tool 0", "tool 1", "tool 2"}
    report = root_report(p, "request")
    assert report["latency_budget.stages.tool_calls.count"] == 3
    assert report["latency_budget.stages.tool_calls.actual_ms"] == 130.0
    assert report["latency_budget.stages.tool_calls.busy_ms"] == 250.0


def test_thread_pool_without_the_context_starts_new_traces() -> None:
    """Plain executor.submit does not carry the context: worker spans become roots of their own, not the request's.

    A lone tool span as a root is a request of one tool call by the default rule (a root
    with a tool call is a request, issue 45 item 5): each worker root is judged on its own.
    """
    p = pipeline(BUDGETS)
    tracer = p.tracer
    all_open = threading.Barrier(2, timeout=WAIT_S)
    with (
        tracer.start_as_current_span(
            "request", kind=trace.SpanKind.SERVER, start_time=at(0), end_on_exit=False
        ) as root,
        ThreadPoolExecutor(max_workers=2) as pool,
    ):
        futures = [pool.submit(_tool_in_worker, tracer, f"tool {n}", 10, 50, all_open) for n in range(2)]
        for future in futures:
            future.result()
    root.end(end_time=at(100))
    report = root_report(p, "request")
    assert "latency_budget.stages.tool_calls.count" not in report
    for n in range(2):
        worker = p.span(f"tool {n}")
        assert worker.parent is None
        assert dict(worker.attributes or {})["latency_budget.stage"] == "tool_calls"
        assert dict(worker.attributes or {})["latency_budget.stages.tool_calls.count"] == 1


def test_two_requests_sharing_a_thread_pool_are_attributed_to_their_own_root() -> None:
    """Two request threads fan out into one pool, all four tool spans open at once: each root counts its own two."""
    p = pipeline(BUDGETS)
    tracer = p.tracer
    pool = ThreadPoolExecutor(max_workers=4)
    all_open = threading.Barrier(4, timeout=WAIT_S)
    plans = {"A": ((0, 200), [(10, 100), (20, 150)]), "B": ((5, 190), [(30, 60), (40, 180)])}

    def request(name: str) -> None:
        (start, end), tools = plans[name]
        with tracer.start_as_current_span(
            f"request {name}", kind=trace.SpanKind.SERVER, start_time=at(start), end_on_exit=False
        ) as root:
            futures = [
                pool.submit(contextvars.copy_context().run, _tool_in_worker, tracer, f"tool {name}{n}", s, e, all_open)
                for n, (s, e) in enumerate(tools)
            ]
            for future in futures:
                future.result()
        root.end(end_time=at(end))

    with pool, ThreadPoolExecutor(max_workers=len(plans)) as requests:
        # result() re-raises what a request thread raised, and fails if one never finished.
        for running in [requests.submit(request, name) for name in plans]:
            running.result(timeout=WAIT_S)
    for name, actual, busy in (("A", 140.0, 220.0), ("B", 150.0, 170.0)):
        root = p.span(f"request {name}")
        assert children_of(p, root) == {f"tool {name}0", f"tool {name}1"}
        report = root_report(p, f"request {name}")
        assert report["latency_budget.stages.tool_calls.count"] == 2
        assert (
            report["latency_budget.stages.tool_calls.actual_ms"],
            report["latency_budget.stages.tool_calls.busy_ms"],
        ) == (
            actual,
            busy,
        )
