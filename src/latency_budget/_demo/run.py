"""Replay planned requests as real OpenTelemetry spans through :class:`LatencyBudgetProcessor`.

Time is simulated: every span gets explicit start and end timestamps from its plan, so a
run takes a fraction of the time it describes. ``concurrency`` simulated users send
requests back to back (a closed loop): their requests overlap in time. One thread emits
them, each whole, in their start order, so the processor sees the same traces end in the
same order in every run. Trace and span ids come from the seed too: a seed reproduces a
run exactly, its lever hints included.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from latency_budget._config import BudgetConfig
from latency_budget._core.report import TraceReport
from latency_budget._demo.latency import Latency
from latency_budget._demo.scenario import PlannedSpan, RequestInfo, plan_request
from latency_budget._processor import LatencyBudgetProcessor, ReportCallback
from latency_budget._version import __version__

__all__ = ["DEMO_BUDGETS_ATTRIBUTE", "DEMO_SERVICE_NAME", "DemoRun", "demo_resource", "run_demo", "schedule"]

# A resource attribute of the demo's spans when it ran with its own budgets, naming them: `check` and
# `report` judge such a recording by those budgets when no -b is given.
DEMO_BUDGETS_ATTRIBUTE = "latency_budget.demo.budgets"

DEMO_SERVICE_NAME = "support-assistant"
THINK_TIME = Latency(25, 0.8, floor_ms=1)  # a simulated user's pause between two requests

ProgressCallback = Callable[[int, int], object]


@dataclass(frozen=True, slots=True)
class DemoRun:
    """What a demo run did: each request's kind, and the processor's report on it.

    ``reports[i]`` belongs to ``requests[i]``; it is ``None`` only if the processor made
    no report for that request (which would be a bug worth reporting).
    """

    config: BudgetConfig
    seed: int
    requests: tuple[RequestInfo, ...]
    reports: tuple[TraceReport | None, ...]
    trace_ids: tuple[int, ...]
    start_ns: int
    end_ns: int

    def judged(self) -> list[tuple[RequestInfo, TraceReport]]:
        """The requests that have a report, with it, in request order."""
        return [(req, rep) for req, rep in zip(self.requests, self.reports, strict=True) if rep is not None]


class _SeededIds(IdGenerator):
    """Trace and span ids drawn from the emitting request's own seeded generator."""

    def __init__(self) -> None:
        self.current: ContextVar[random.Random | None] = ContextVar("latency_budget_demo_ids", default=None)
        self._fallback = RandomIdGenerator()

    def generate_span_id(self) -> int:
        rng = self.current.get()
        if rng is None:
            return self._fallback.generate_span_id()
        while not (value := rng.getrandbits(64)):
            pass
        return value

    def generate_trace_id(self) -> int:
        rng = self.current.get()
        if rng is None:
            return self._fallback.generate_trace_id()
        while not (value := rng.getrandbits(128)):
            pass
        return value

    @contextmanager
    def seeded(self, seed: int, index: int) -> Iterator[None]:
        token = self.current.set(random.Random(f"latency-budget-demo-ids/{seed}/{index}"))
        try:
            yield
        finally:
            self.current.reset(token)


def demo_resource(budgets: str | None = None) -> Resource:
    """The SDK's default resource, named ``support-assistant`` unless the environment names the service.

    ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` apply, as in any SDK setup. ``budgets``
    names the demo's built-in budgets it ran with (:data:`DEMO_BUDGETS_ATTRIBUTE`).
    """
    own = {"service.version": __version__, "deployment.environment.name": "demo"}
    if budgets is not None:
        own[DEMO_BUDGETS_ATTRIBUTE] = budgets
    resource = Resource.create(own)
    service = resource.attributes.get("service.name")
    if not isinstance(service, str) or service.startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": DEMO_SERVICE_NAME}))
    return resource


def schedule(requests: list[RequestInfo], concurrency: int, seed: int) -> list[int]:
    """Start offsets (ns) of the requests, as ``concurrency`` users sending them back to back."""
    rng = random.Random(f"latency-budget-demo-schedule/{seed}")
    free_at = [0] * concurrency  # a heap of the instants the users become free
    starts: list[int] = []
    for request in requests:
        start = heapq.heappop(free_at) + THINK_TIME.sample_ns(rng)
        starts.append(start)
        heapq.heappush(free_at, start + request.duration_ns)
    return starts


def run_demo(
    config: BudgetConfig,
    *,
    requests: int = 200,
    concurrency: int = 4,
    seed: int = 7,
    downstream: SpanProcessor | None = None,
    resource: Resource | None = None,
    end_time_ns: int | None = None,
    on_progress: ProgressCallback | None = None,
    on_report: Sequence[ReportCallback] = (),
    applied: frozenset[str] = frozenset(),
) -> DemoRun:
    """Simulate ``requests`` support-assistant requests and judge them with ``config``.

    Spans go through a :class:`LatencyBudgetProcessor` into ``downstream`` (nothing is
    exported when it is ``None``), which is flushed and shut down before this returns.
    The run is laid out so that it ends at ``end_time_ns`` (default: now), which keeps
    its traces inside a tracing backend's default search window.
    ``on_progress(done, total)`` is called after each request is emitted. ``on_report`` adds
    sinks for the processor's reports, such as :class:`~latency_budget.export.ViolationLogEmitter`
    and :class:`~latency_budget.export.BudgetMetrics` (the caller flushes their providers).
    ``applied`` names the levers the simulated team has applied (``scenario.APPLIED_LEVERS``).
    """
    if requests < 1 or concurrency < 1:
        raise ValueError("requests and concurrency must be at least 1")
    # Plans are made twice, here and when emitted, rather than kept: a long run stays small.
    infos = [plan_request(seed, index, applied).info for index in range(requests)]
    starts = schedule(infos, concurrency, seed)
    makespan = max(start + info.duration_ns for start, info in zip(starts, infos, strict=True))
    end_ns = end_time_ns if end_time_ns is not None else time.time_ns()
    base_ns = end_ns - makespan

    reports: dict[int, TraceReport] = {}
    lock = threading.Lock()

    def keep(report: TraceReport) -> None:
        if report.trace_id is not None:
            with lock:
                reports[report.trace_id] = report

    ids = _SeededIds()
    provider = TracerProvider(resource=resource or demo_resource(), sampler=ALWAYS_ON, id_generator=ids)
    # Replayed traces have no late spans: no grace, so each root is judged as it ends, in
    # the seed's order (lever hints repeat from run to run).
    processor = LatencyBudgetProcessor(
        config, downstream or SpanProcessor(), on_report=[keep, *on_report], late_span_grace_ms=0.0
    )
    provider.add_span_processor(processor)
    tracers: dict[str, trace.Tracer] = {}

    def tracer(scope: str) -> trace.Tracer:
        with lock:
            if scope not in tracers:
                tracers[scope] = provider.get_tracer(scope, __version__ if scope.startswith("support") else None)
            return tracers[scope]

    trace_ids: list[int] = [0] * requests
    done = 0

    def emit(index: int) -> None:
        nonlocal done
        with ids.seeded(seed, index):
            trace_ids[index] = _replay(tracer, plan_request(seed, index, applied).root, base_ns + starts[index])
        if on_progress is not None:
            with lock:
                done += 1
                finished = done
            on_progress(finished, requests)

    try:
        # One thread, in the requests' start order: the processor sees the roots end in an
        # order that depends on the seed alone, so its recent-call statistics, and with them
        # every lever hint, repeat from run to run (threads would end them in any order).
        for index in sorted(range(requests), key=lambda i: (starts[i], i)):
            emit(index)
    finally:
        provider.force_flush()
        provider.shutdown()
    return DemoRun(
        config=config,
        seed=seed,
        requests=tuple(infos),
        reports=tuple(reports.get(trace_id) for trace_id in trace_ids),
        trace_ids=tuple(trace_ids),
        start_ns=base_ns,
        end_ns=end_ns,
    )


def _replay(tracer: Callable[[str], trace.Tracer], root: PlannedSpan, base_ns: int) -> int:
    """Start and end the spans of one request in timestamp order; return its trace id.

    Parallel spans are therefore open at the same time, as in a real service, and every
    child ends before its parent.
    """
    events: list[tuple[int, int, int, int, PlannedSpan, PlannedSpan | None]] = []
    order = 0

    def collect(span: PlannedSpan, parent: PlannedSpan | None, depth: int) -> None:
        nonlocal order
        order += 1
        events.append((span.start_ns, 0, depth, order, span, parent))  # parents start first
        events.append((span.end_ns, 1, -depth, order, span, parent))  # children end first
        for child in span.children:
            collect(child, span, depth + 1)

    collect(root, None, 0)
    events.sort(key=lambda event: event[:4])
    live: dict[int, trace.Span] = {}
    trace_id = 0
    for instant, is_end, _, _, planned, parent in events:
        if is_end:
            live.pop(id(planned)).end(end_time=base_ns + instant)
            continue
        # The root gets an empty context, so it is a root whatever the caller has active.
        context = trace.set_span_in_context(live[id(parent)]) if parent is not None else Context()
        live[id(planned)] = tracer(planned.scope).start_span(
            planned.name,
            context=context,
            kind=planned.kind,
            attributes=planned.attributes,
            start_time=base_ns + instant,
        )
        if parent is None:
            trace_id = live[id(planned)].get_span_context().trace_id
    return trace_id
