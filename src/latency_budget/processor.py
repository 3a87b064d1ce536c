"""The span processor: classify spans into stages, account each local-root trace, annotate.

Add it in front of the processor that exports::

    provider.add_span_processor(
        LatencyBudgetProcessor(load_budgets("budgets.yaml"), BatchSpanProcessor(OTLPSpanExporter()))
    )

Every span is forwarded to ``downstream`` exactly once. Spans that gain annotations at
their end (the local root, and stage spans over their own budget) are forwarded as
annotated copies; all others pass through untouched.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from latency_budget import _guard
from latency_budget import attributes as attr
from latency_budget._sdk_internals import attributes_of
from latency_budget._spancopy import annotated_copy
from latency_budget._trace_state import TraceState
from latency_budget.annotate import hint_attributes, root_attributes, violation_attributes
from latency_budget.config import BudgetConfig, load_budgets
from latency_budget.first_token import time_to_first_token_ns
from latency_budget.matching import AttributeDecision
from latency_budget.report import TraceReport

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

__all__ = ["LatencyBudgetProcessor", "ProcessorStats"]

ReportCallback = Callable[[TraceReport], object]

# The W3C sampled bit; a plain int test is several times cheaper than TraceFlags.sampled.
_SAMPLED = 0x01


class ProcessorStats:
    """Counters a caller can read to see how the processor is coping (read-only snapshot)."""

    __slots__ = ("active_traces", "evicted_idle", "evicted_lru", "reports", "truncated_traces")

    def __init__(self, active_traces: int, evicted_lru: int, evicted_idle: int, reports: int, truncated: int) -> None:
        self.active_traces = active_traces
        self.evicted_lru = evicted_lru
        self.evicted_idle = evicted_idle
        self.reports = reports
        self.truncated_traces = truncated

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in self.__slots__)
        return f"ProcessorStats({fields})"


class LatencyBudgetProcessor(SpanProcessor):
    """Checks per-stage latency budgets on every local-root trace and annotates it.

    ``budgets`` is a loaded :class:`BudgetConfig` or the path of a budget file.
    ``downstream`` is the processor that exports; a bare ``SpanExporter`` is wrapped
    in a ``BatchSpanProcessor``. ``on_report`` (a callable, or a sequence of them,
    such as :class:`~latency_budget.export.ViolationLogEmitter` and
    :class:`~latency_budget.export.BudgetMetrics`) receives each finished trace's
    :class:`TraceReport`, after the root span is forwarded; exceptions are logged,
    never raised.

    Memory is bounded by ``max_active_traces`` (least recently used traces are evicted
    first), ``max_spans_per_trace`` (stage spans remembered per trace) and
    ``idle_ttl_s`` (a trace with no span activity for that long is dropped when new
    traces arrive). Evicted traces are forwarded unannotated and counted.
    """

    def __init__(
        self,
        budgets: BudgetConfig | str | os.PathLike[str],
        downstream: SpanProcessor | SpanExporter,
        *,
        on_report: ReportCallback | Sequence[ReportCallback] | None = None,
        max_active_traces: int = 10_000,
        max_spans_per_trace: int = 1_000,
        idle_ttl_s: float = 300.0,
    ) -> None:
        if max_active_traces < 1 or max_spans_per_trace < 1 or not idle_ttl_s > 0:
            raise ValueError("max_active_traces, max_spans_per_trace and idle_ttl_s must be positive")
        self._config = budgets if isinstance(budgets, BudgetConfig) else load_budgets(budgets)
        if isinstance(downstream, SpanExporter):
            downstream = BatchSpanProcessor(downstream)
        self._downstream: SpanProcessor = downstream
        if on_report is None:
            self._on_report: tuple[ReportCallback, ...] = ()
        elif callable(on_report):
            self._on_report = (on_report,)
        else:
            self._on_report = tuple(on_report)
        self._max_traces = max_active_traces
        self._max_spans = max_spans_per_trace
        self._ttl_ns = int(idle_ttl_s * 1e9)
        self._lock = threading.Lock()
        self._traces: dict[int, TraceState] = {}  # root span id -> state, oldest first
        self._owners: dict[int, TraceState] = {}  # open span id -> state of its local root
        self._evicted_lru = self._evicted_idle = self._reports = self._truncated = 0
        self._shutdown = False
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._reset_after_fork)
            os.register_at_fork(after_in_child=lambda: (method := ref()) is not None and method())

    @property
    def config(self) -> BudgetConfig:
        """The budget configuration in force."""
        return self._config

    def stats(self) -> ProcessorStats:
        """Counters: active traces, evictions by LRU and idle TTL, reports, truncated traces."""
        with self._lock:
            return ProcessorStats(
                len(self._traces), self._evicted_lru, self._evicted_idle, self._reports, self._truncated
            )

    # -- hooks -------------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            self._start(span)
        except Exception as exc:  # never let our bugs reach the host application
            _guard.log_internal_error("on_start", exc)
        self._downstream.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        forward = span
        report = None
        try:
            forward, report = self._end(span)
        except Exception as exc:
            _guard.log_internal_error("on_end", exc)
        self._downstream.on_end(forward)
        if report is not None:
            for callback in self._on_report:
                try:
                    callback(report)
                except Exception as exc:
                    _guard.log_once(
                        ("on_report", type(exc), getattr(callback, "__qualname__", type(callback).__qualname__)),
                        logging.ERROR,
                        "latency_budget: on_report callback %r raised %r; ignored (logged once)",
                        callback,
                        exc,
                    )

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        self._downstream.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._downstream.force_flush(timeout_millis)

    # -- accounting ------------------------------------------------------------------

    def _start(self, span: Span) -> None:
        ctx = span.context
        if ctx is None or not ctx.trace_flags & _SAMPLED:
            return
        parent = span.parent
        config = self._config
        scope = span.instrumentation_scope
        scope_name = scope.name if scope is not None else ""
        attributes = attributes_of(span)
        stage, pending = _classify_at_start(config, span, scope_name, attributes)
        start = span.start_time or 0
        if parent is None or parent.is_remote:
            budgets = config.budgets_for_root(span.name, span.kind, scope_name, attributes)
            state = TraceState(config, budgets, ctx.span_id, start)
            with self._lock:
                self._admit(state, start)
                self._traces[ctx.span_id] = state
                self._owners[ctx.span_id] = state
                state.open[ctx.span_id] = pending
        else:
            with self._lock:
                owner = self._owners.get(parent.span_id)
                if owner is None:
                    return  # not a trace we account (evicted, or started before us)
                if len(owner.open) >= self._max_spans:
                    owner.truncated = True  # this span goes uncounted: the report must say it is partial
                    return
                if owner.config is not config:
                    # The budgets were reloaded while this trace was in flight: it keeps
                    # the configuration it started with (rare, so done under the lock).
                    stage, pending = _classify_at_start(owner.config, span, scope_name, attributes)
                self._owners[ctx.span_id] = owner
                owner.open[ctx.span_id] = pending
            budgets = owner.budgets
        if stage >= 0:
            budget = budgets.stages[stage]
            if budget.budget_ms is None:
                span.set_attribute(attr.STAGE, budget.name)
            else:
                span.set_attributes({attr.STAGE: budget.name, attr.BUDGET_MS: float(budget.budget_ms)})

    def _admit(self, state: TraceState, now: int) -> None:
        """Make room for a new trace: drop idle traces, then the least recently used. Holds the lock."""
        traces = self._traces
        for _ in range(2):  # a short clock sweep for idle traces, amortised over new roots
            if not traces:
                break
            root_id = next(iter(traces))
            head = traces.pop(root_id)
            if now - head.last_seen > self._ttl_ns:
                self._forget(head)
                self._evicted_idle += 1
                _guard.log_once(
                    "evict-idle",
                    logging.WARNING,
                    "latency_budget: dropped traces idle for over %.0f s; they are forwarded unannotated (see stats())",
                    self._ttl_ns / 1e9,
                )
            else:
                traces[root_id] = head
        while len(traces) >= self._max_traces:
            root_id = next(iter(traces))
            head = traces.pop(root_id)
            if head.referenced:  # second chance: recently active traces go to the back
                head.referenced = False
                traces[root_id] = head
                continue
            self._forget(head)
            self._evicted_lru += 1
            _guard.log_once(
                "evict-lru",
                logging.WARNING,
                "latency_budget: over %d active traces; the least recently used are forwarded "
                "unannotated (see stats())",
                self._max_traces,
            )

    def _forget(self, state: TraceState) -> None:
        owners = self._owners
        for span_id in state.open:
            owners.pop(span_id, None)
        state.open.clear()

    def _end(self, span: ReadableSpan) -> tuple[ReadableSpan, TraceReport | None]:
        ctx = span.context
        if ctx is None or not ctx.trace_flags & _SAMPLED:
            return span, None
        span_id = ctx.span_id
        # Spans built by hand may lack timestamps: they count as zero-length.
        start = span.start_time or 0
        end = span.end_time or start
        late_match = False
        with self._lock:
            state = self._owners.pop(span_id, None)
            if state is None:
                return span, None  # not a trace we account: pass through untouched
            pending = state.open.pop(span_id, -1)
            config = state.config
            if pending.__class__ is int:
                stage: int = pending
            else:
                # Attributes set after start may make the span a stage span now.
                stage = pending.decide(attributes_of(span))  # type: ignore[union-attr]
                late_match = stage >= 0
            is_root = span_id == state.root_id
            if is_root:
                state.finished = True
                self._traces.pop(span_id, None)
                self._forget(state)
            # Recorded under the same lock hold as the pop, so a root ending on another
            # thread either sees this span or never saw it open.
            ttft = None
            if stage >= 0:
                ttft = time_to_first_token_ns(
                    config.stages[stage].first_token, start, attributes_of(span), lambda: span.events
                )
            parent = span.parent
            state.record(
                span_id, parent.span_id if parent is not None else None, stage, start, end, ttft, self._max_spans
            )
        if stage < 0:
            if is_root:
                return self._annotate_root(state, span, {})
            return span, None
        budget = state.budgets.stages[stage]
        extra: dict[str, AttributeValue] = {}
        if late_match:
            extra[attr.STAGE] = budget.name
            if budget.budget_ms is not None:
                extra[attr.BUDGET_MS] = float(budget.budget_ms)
        own_ms = (end - start) / 1e6
        if budget.budget_ms is not None and own_ms > budget.budget_ms:
            extra[attr.VIOLATED if budget.severity == "error" else attr.WARNED] = True
            extra[attr.ACTUAL_MS] = own_ms
        if is_root:
            return self._annotate_root(state, span, extra)
        if extra:
            return annotated_copy(span, extra), None
        return span, None

    def _annotate_root(
        self, state: TraceState, root: ReadableSpan, extra: dict[str, AttributeValue]
    ) -> tuple[ReadableSpan, TraceReport]:
        report = self._finish(state, root)
        attributes = {**extra, **root_attributes(report, truncated=state.truncated)}
        end = root.end_time or state.root_start
        events = [Event(attr.VIOLATION_EVENT, violation_attributes(v), timestamp=end) for v in report.violations]
        events.extend(Event(attr.HINT_EVENT, hint_attributes(h), timestamp=end) for h in report.hints)
        return annotated_copy(root, attributes, events), report

    def _finish(self, state: TraceState, root: ReadableSpan) -> TraceReport:
        """Evaluate a trace whose local root has ended. The state is no longer shared."""
        start = root.start_time or state.root_start
        with self._lock:
            self._reports += 1
            if state.truncated:
                self._truncated += 1
        return state.report(
            start,
            root.end_time or start,
            trace_id=root.context.trace_id if root.context is not None else None,
            root_name=root.name,
        )

    def _reset_after_fork(self) -> None:
        # The child starts with no traces in flight: the parent's spans end in the parent.
        self._lock = threading.Lock()
        self._traces = {}
        self._owners = {}


def _classify_at_start(
    config: BudgetConfig, span: Span, scope_name: str, attributes: Mapping[str, object]
) -> tuple[int, int | AttributeDecision]:
    """The span's stage at start, and what to remember for its end.

    A span that matches nothing yet, but could through attributes set later, keeps the
    attribute rules that are left, to ask them again with its final attributes.
    """
    decision = config.classifier.prepare(span.name, span.kind, scope_name)
    if decision.__class__ is int:
        return decision, decision
    stage = decision.decide(attributes)  # type: ignore[union-attr]
    return stage, (stage if stage >= 0 else decision)
