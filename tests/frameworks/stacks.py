"""What every framework test checks, on what the real framework exported.

Each stack's tests build a budget pipeline from a file with NO ``match`` rules (the
built-in dialect table decides), run the framework offline, and then check through
:class:`Outcome`: which spans landed in which stage, the per-stage counts on the request,
time to first token, no false ``max_calls`` violation or hint, and that every span the SDK
ended was exported exactly once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from latency_budget import LatencyBudgetProcessor, load_budgets

from ..unit.helpers import Pipeline, RecordingProcessor

STAGES = ("retrieval", "model_call", "tool_calls")


def budgets(max_model_calls: int, requests: str | None = None) -> str:
    """A budget file with generous budgets, no ``match`` rules, and ``max_calls`` at the real number of calls.

    ``requests``, when given, is the file's ``requests`` rule (YAML flow text).
    """
    return (
        (f"requests: {requests}\n" if requests else "")
        + f"""
version: 1
total_ms: 600000
stages:
  retrieval: {{budget_ms: 600000}}
  model_call: {{budget_ms: 600000, max_calls: {max_model_calls}}}
  tool_calls: {{budget_ms: 600000}}
"""
    )


class WatchedExporter(InMemorySpanExporter):
    """Keeps exported spans in memory, and lets a test wait for the ones a framework exports from its own threads."""

    def __init__(self) -> None:
        super().__init__()
        self._exported = threading.Condition()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        with self._exported:
            self._exported.notify_all()
        return result

    def wait_until(self, done: Callable[[list[ReadableSpan]], bool], timeout_s: float = 30.0) -> bool:
        """Wait until ``done(exported spans)`` holds (checked at each export), at most ``timeout_s``: whether it did."""
        with self._exported:
            return self._exported.wait_for(lambda: done(list(self.get_finished_spans())), timeout_s)


class SettledPipeline(Pipeline):
    """A pipeline whose exported spans are read once no local root is held back for late spans."""

    def settle(self) -> bool:
        """Wait (bounded) until no local root is held for late spans: the processor forwards them within its grace."""
        exporter = self.exporter
        assert isinstance(exporter, WatchedExporter)
        return exporter.wait_until(lambda _: self.processor.stats().held_roots == 0)

    def finished(self) -> list[ReadableSpan]:
        """The exported spans, once no local root is held."""
        self.settle()
        return super().finished()


def budget_pipeline(
    max_model_calls: int, *, before: Sequence[SpanProcessor] = (), requests: str | None = None
) -> SettledPipeline:
    """A real SDK pipeline through LatencyBudgetProcessor into memory, judged by :func:`budgets`.

    ``before`` are processors of the stack itself that must see spans ahead of the exporting
    one, as their documentation sets them up (OpenInference's span processors, for one).
    """
    exporter = WatchedExporter()
    config = load_budgets(text=budgets(max_model_calls, requests))
    processor = LatencyBudgetProcessor(config, SimpleSpanProcessor(exporter))
    provider = TracerProvider()
    handed = RecordingProcessor()
    for added in (handed, *before, processor):
        provider.add_span_processor(added)
    return SettledPipeline(provider, processor, exporter, handed=handed)


@dataclass
class Outcome:
    """The exported spans of one request, and what the processor wrote on them."""

    pipe: Pipeline
    root_name: str = "request"

    @property
    def spans(self) -> list[ReadableSpan]:
        return self.pipe.finished()

    @property
    def root(self) -> ReadableSpan:
        return self.pipe.span(self.root_name)

    @property
    def root_attributes(self) -> dict[str, Any]:
        return dict(self.root.attributes or {})

    @property
    def request_spans(self) -> list[ReadableSpan]:
        """The exported spans of the request's trace (background work, such as indexing, left out)."""
        trace_id = self.root.context.trace_id if self.root.context else None
        return [s for s in self.spans if s.context is not None and s.context.trace_id == trace_id]

    def in_stage(self, stage: str) -> list[ReadableSpan]:
        """The request's exported spans labelled with ``stage``, in start order."""
        found = [s for s in self.request_spans if (s.attributes or {}).get("latency_budget.stage") == stage]
        return sorted(found, key=lambda s: s.start_time or 0)

    def stage_names(self) -> dict[str, Counter[str]]:
        """stage -> how many spans of each name it holds (stages with none are left out)."""
        names = {stage: Counter(s.name for s in self.in_stage(stage)) for stage in STAGES}
        return {stage: counter for stage, counter in names.items() if counter}

    def counts(self) -> dict[str, int]:
        """stage -> ``latency_budget.stages.<stage>.count`` on the request (absent stages left out)."""
        root = self.root_attributes
        return {
            s: root[f"latency_budget.stages.{s}.count"] for s in STAGES if f"latency_budget.stages.{s}.count" in root
        }

    def violation_kinds(self) -> list[tuple[str, str]]:
        """(stage, kind) of every violation event on the request."""
        return [
            (str(attrs.get("latency_budget.stage")), str(attrs.get("latency_budget.kind")))
            for attrs in (dict(e.attributes or {}) for e in self.root.events if e.name == "latency_budget.violation")
        ]

    def hints(self) -> list[tuple[str, str]]:
        """(kind, stage) of every hint event on the request."""
        return [
            (str(attrs.get("latency_budget.hint.kind")), str(attrs.get("latency_budget.stage")))
            for attrs in (dict(e.attributes or {}) for e in self.root.events if e.name == "latency_budget.hint")
        ]

    def assert_exported_once(self) -> None:
        """Every span the SDK ended was exported exactly once, the request's included."""
        ended = Counter(s.context.span_id for s in self.pipe.handed.ended if s.context is not None)
        exported = Counter(s.context.span_id for s in self.spans if s.context is not None)
        assert exported == ended
        assert set(exported.values()) == {1}
        assert self.root.context is not None
        assert self.root.context.span_id in exported

    def assert_all_calls_in_the_request(self) -> None:
        """Every exported stage span belongs to the request's trace (none started a trace of its own)."""
        staged = [s for s in self.spans if "latency_budget.stage" in (s.attributes or {})]
        assert staged
        assert {s.context.trace_id for s in staged if s.context} == {
            self.root.context.trace_id if self.root.context else 0
        }

    def first_token_ms(self) -> tuple[float | None, float | None]:
        """(model_call's worst first token from its spans' starts, the request's first token from its start)."""
        root = self.root_attributes
        return root.get("latency_budget.stages.model_call.worst_first_token_ms"), root.get(
            "latency_budget.total.first_token_ms"
        )

    def expected_first_token_ms(self, ttft_ns: Mapping[int, int]) -> tuple[float, float]:
        """What :meth:`first_token_ms` should be, given model spans' first tokens (span id -> ns after start)."""
        spans = {s.context.span_id: s for s in self.in_stage("model_call") if s.context is not None}
        assert ttft_ns
        assert set(ttft_ns) <= set(spans)
        worst = max(ttft_ns.values()) / 1e6
        earliest = min((spans[i].start_time or 0) + ns for i, ns in ttft_ns.items())
        return worst, (earliest - (self.root.start_time or 0)) / 1e6


def event_offset_ns(span: ReadableSpan, name: str) -> int | None:
    """Nanoseconds from the span's start to its first event called ``name``, or None."""
    for event in span.events:
        if event.name == name:
            return event.timestamp - (span.start_time or 0)
    return None
