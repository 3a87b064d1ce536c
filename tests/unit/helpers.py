"""Building blocks for processor tests: a real SDK pipeline and spans with explicit times."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.types import AttributeValue

from latency_budget import BudgetConfig, LatencyBudgetProcessor, TraceReport, load_budgets

MS = 1_000_000
T0 = 1_700_000_000_000_000_000  # an arbitrary, fixed epoch instant in ns

TECHCORP_YAML = """
version: 1
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800}
  tool_calls: {budget_ms: 200}
"""


def at(ms: float) -> int:
    """The instant ``ms`` milliseconds after T0, in ns."""
    return T0 + round(ms * MS)


class RecordingProcessor(SpanProcessor):
    """A downstream processor that keeps the very objects and calls it receives."""

    def __init__(self, *, flush_result: bool = True) -> None:
        self.started: list[ReadableSpan] = []
        self.ending: list[Span] = []
        self.ended: list[ReadableSpan] = []
        self.shutdowns = 0
        self.flushes: list[int] = []
        self._flush_result = flush_result

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started.append(span)

    def _on_ending(self, span: Span) -> None:  # the SDK's private hook before on_end (newer SDKs)
        self.ending.append(span)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)

    def shutdown(self) -> None:
        self.shutdowns += 1

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self.flushes.append(timeout_millis)
        return self._flush_result


@dataclass
class Pipeline:
    """A TracerProvider whose spans go through LatencyBudgetProcessor into memory."""

    provider: TracerProvider
    processor: LatencyBudgetProcessor
    exporter: InMemorySpanExporter
    reports: list[TraceReport] = field(default_factory=list)
    # Registered before the processor: holds the very objects the SDK hands to processors.
    handed: RecordingProcessor = field(default_factory=RecordingProcessor)

    @property
    def tracer(self) -> trace.Tracer:
        return self.provider.get_tracer("tests")

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def passed_untouched(self, span: ReadableSpan) -> bool:
        """Whether the exported ``span`` is the very object the SDK handed to the processor."""
        return any(span is handed for handed in self.handed.ended)

    def span(self, name: str) -> ReadableSpan:
        matches = [s for s in self.finished() if s.name == name]
        assert len(matches) == 1, f"expected one exported span named {name!r}, got {len(matches)}"
        return matches[0]

    def run(
        self,
        name: str,
        start_ms: float,
        end_ms: float,
        *,
        parent: trace.Span | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> trace.Span:
        """Start and end one span with explicit times, under ``parent`` (a new root when None)."""
        span = self.start(name, start_ms, parent=parent, attributes=attributes)
        span.end(end_time=at(end_ms))
        return span

    def start(
        self,
        name: str,
        start_ms: float,
        *,
        parent: trace.Span | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        kind: trace.SpanKind | None = None,
    ) -> trace.Span:
        """Start a span at ``start_ms``: under ``parent``, else a new root.

        A root is a ``server`` span unless ``kind`` says otherwise: it stands for an
        incoming request, which the default ``requests`` rule judges whatever it contains.
        """
        if kind is None:
            kind = trace.SpanKind.SERVER if parent is None else trace.SpanKind.INTERNAL
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(name, context=context, attributes=attributes, start_time=at(start_ms), kind=kind)


def pipeline(config: BudgetConfig | str = TECHCORP_YAML, **options: object) -> Pipeline:
    """A fresh pipeline; ``config`` is a loaded config or YAML text.

    No ``late_span_grace_ms`` unless a test gives one: each root is judged as it ends, so a
    test reads its verdict right after ending it (the grace's own tests set it).
    """
    options.setdefault("late_span_grace_ms", 0.0)
    budgets = config if isinstance(config, BudgetConfig) else load_budgets(text=config)
    exporter = InMemorySpanExporter()
    reports: list[TraceReport] = []
    processor = LatencyBudgetProcessor(
        budgets,
        SimpleSpanProcessor(exporter),
        on_report=[reports.append, *([options.pop("on_report")] if "on_report" in options else [])],  # type: ignore[list-item]
        **options,  # type: ignore[arg-type]
    )
    provider = TracerProvider()
    handed = RecordingProcessor()
    provider.add_span_processor(handed)
    provider.add_span_processor(processor)
    return Pipeline(provider, processor, exporter, reports, handed)


def op(name: str) -> dict[str, AttributeValue]:
    """GenAI semconv attributes for an operation name."""
    return {"gen_ai.operation.name": name}


def violation_events(span: ReadableSpan) -> Sequence[Mapping[str, object]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == "latency_budget.violation"]


def in_forked_child(work: Callable[[], dict[str, object]]) -> dict[str, object]:
    """Run ``work`` in a forked child and return the dict it returned (sent back as JSON).

    The child never returns into pytest: it exits at once, and an exception in it comes
    back as ``{"error": repr(exc)}``. Fails when the child did not exit with status 0.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read_fd)
            os.write(write_fd, json.dumps(work()).encode())
            status = 0
        except BaseException as exc:
            os.write(write_fd, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        payload = pipe.read()
    _, wait_status = os.waitpid(pid, 0)
    assert os.WIFEXITED(wait_status), payload
    assert os.WEXITSTATUS(wait_status) == 0, payload
    result = json.loads(payload)
    assert isinstance(result, dict)
    return result
