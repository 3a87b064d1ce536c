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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from latency_budget import _guard
from latency_budget import attributes as attr
from latency_budget._sdk_internals import annotated_copy, attributes_of, events_of, fields_of
from latency_budget._trace_state import TraceState
from latency_budget.annotate import hint_attributes, root_attributes, violation_attributes
from latency_budget.config import BudgetConfig
from latency_budget.config.reload import reload_interval, watch_budgets
from latency_budget.first_token import time_to_first_token_ns
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

    Live reload: with ``reload_interval_s`` (or ``OTEL_LATENCY_BUDGET_RELOAD_INTERVAL``)
    and budgets from a file (a path, or a config whose ``source`` is a file), a daemon
    thread re-reads the file at most every that many seconds and swaps in a changed one
    that loads; traces in flight finish under the budgets they started with. A broken
    file keeps the last good budgets and logs its error once. :meth:`reload_now` checks
    at once (from a SIGHUP handler, say); :meth:`shutdown` stops the thread.
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
        reload_interval_s: float | None = None,
    ) -> None:
        if max_active_traces < 1 or max_spans_per_trace < 1 or not idle_ttl_s > 0:
            raise ValueError("max_active_traces, max_spans_per_trace and idle_ttl_s must be positive")
        self._reload_interval = reload_interval(reload_interval_s)
        self._config, self._watcher = watch_budgets(budgets, self._use_config)
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
        self._traces: dict[int, TraceState] = {}  # root span id -> state, oldest first (LRU order)
        self._by_trace: dict[int, TraceState] = {}  # trace id -> its first active local root
        self._owners: dict[int, TraceState] = {}  # span id -> state, for traces with several local roots
        self._evicted_lru = self._evicted_idle = self._reports = self._truncated = 0
        self._shutdown = False
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._reset_after_fork)
            os.register_at_fork(after_in_child=lambda: (method := ref()) is not None and method())
        if self._reload_interval is not None:
            if self._watcher is not None:
                self._watcher.start(self._reload_interval)
            else:
                _guard.log_once(
                    (id(self), "reload-without-file"),
                    logging.WARNING,
                    "latency_budget: live reload needs budgets loaded from a file (%s); reload stays off",
                    self._config.source,
                )

    @property
    def config(self) -> BudgetConfig:
        """The budget configuration in force (new traces use it; traces in flight keep theirs)."""
        return self._config

    @property
    def reload_interval_s(self) -> float | None:
        """Seconds between checks of the budget file, or None when live reload is off."""
        return self._reload_interval if self._watcher is not None else None

    def reload_now(self) -> bool:
        """Re-read the budget file now; True when a changed file was loaded and swapped in.

        False when the file is unchanged, broken (the last good budgets stay; the error is
        logged once) or the budgets did not come from a file. Never raises.
        """
        return self._watcher.check() if self._watcher is not None else False

    def _use_config(self, config: BudgetConfig) -> None:
        # One reference assignment: _start reads self._config once per span, so a new
        # trace sees the old or the new budgets whole, never a mix.
        self._config = config

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
        if self._watcher is not None:
            self._watcher.stop()
        self._downstream.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._downstream.force_flush(timeout_millis)

    # -- accounting ------------------------------------------------------------------
    #
    # Bookkeeping is per trace, not per span: a span finds its account through its trace
    # id. Only while two local roots of one trace are active in this process (a service
    # calling itself) are that trace's later spans registered one by one, in _owners.

    def _start(self, span: Span) -> None:
        trace_id, span_id, flags, parent_id, parent_remote, name, kind, scope, start, _ = fields_of(span)
        if not flags & _SAMPLED:
            return
        attributes = attributes_of(span)
        if parent_id is None or parent_remote:
            config = self._config
            stage = config.classifier.classify(name, kind, scope, attributes)
            budgets = config.budgets_for_root(name, kind, scope, attributes)
            state = TraceState(config, budgets, span_id, start, trace_id)
            with self._lock:
                self._admit(state, start)
                self._traces[span_id] = state
                first = self._by_trace.setdefault(trace_id, state)
                if first is not state:
                    # A second local root of an active trace: from now on, spans of this
                    # trace are registered one by one so each finds its own root.
                    first.shared.append(state)
                    self._owners[span_id] = state
                    state.owned.append(span_id)
        else:
            # A dict read needs no lock; the write below is for the shared case only.
            found = self._by_trace.get(trace_id)
            if found is None:
                return  # not a trace we account (evicted, or started before us)
            state = found
            if state.shared:
                with self._lock:
                    state = self._owners.get(parent_id, state)
                    if state is not self._by_trace.get(trace_id):
                        self._owners[span_id] = state
                        state.owned.append(span_id)
            # Unlocked: benign races on the LRU and idle-TTL hints.
            state.referenced = True
            state.last_seen = max(state.last_seen, start)
            stage = state.config.classifier.classify(name, kind, scope, attributes)
            budgets = state.budgets
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
                    (id(self), "evict-idle"),
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
                (id(self), "evict-lru"),
                logging.WARNING,
                "latency_budget: over %d active traces; the least recently used are forwarded "
                "unannotated (see stats())",
                self._max_traces,
            )

    def _forget(self, state: TraceState) -> None:
        """Detach a trace whose root ended or that was evicted. Holds the lock."""
        state.finished = True
        self._traces.pop(state.root_id, None)
        owners = self._owners
        for span_id in state.owned:
            owners.pop(span_id, None)
        first = self._by_trace.get(state.trace_id)
        if first is state:
            if state.shared:  # promote the next active local root of this trace
                successor = state.shared[0]
                successor.shared = state.shared[1:]
                self._by_trace[state.trace_id] = successor
            else:
                del self._by_trace[state.trace_id]
        elif first is not None and state in first.shared:
            first.shared.remove(state)

    def _end(self, span: ReadableSpan) -> tuple[ReadableSpan, TraceReport | None]:
        trace_id, span_id, flags, parent_id, _, name, kind, scope, start, end = fields_of(span)
        if not flags & _SAMPLED:
            return span, None
        state = self._by_trace.get(trace_id)
        if state is None:
            return span, None  # not a trace we account: pass through untouched
        # Spans built by hand may lack timestamps: they count as zero-length.
        end = end or start
        attributes = attributes_of(span)
        if state.shared:
            with self._lock:
                state = self._owners.get(span_id, state)
        config = state.config
        # The stage set at start, or (for attributes set later) the stage the final attributes give.
        late_match = False
        named = attributes.get(attr.STAGE)
        stage = config.stage_index.get(named, -1) if named.__class__ is str else -1
        if stage < 0:
            stage = config.classifier.classify(name, kind, scope, attributes)
            late_match = stage >= 0
        ttft = None
        if stage >= 0:
            ttft = time_to_first_token_ns(config.stages[stage].first_token, start, attributes, lambda: events_of(span))
        is_root = span_id == state.root_id
        with self._lock:
            if state.finished:
                return span, None  # its root ended (or it was evicted) meanwhile: never counted
            state.record(span_id, parent_id, stage, start, end, ttft, self._max_spans)
            if is_root:
                self._forget(state)
                self._reports += 1
                if state.truncated:
                    self._truncated += 1
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
        """Evaluate a trace whose local root has ended (its state is no longer shared) and annotate the root."""
        start = root.start_time or state.root_start
        end = root.end_time or start
        report = state.report(start, end, trace_id=state.trace_id, root_name=root.name)
        attributes = {**extra, **root_attributes(report, truncated=state.truncated)}
        events = [Event(attr.VIOLATION_EVENT, violation_attributes(v), timestamp=end) for v in report.violations]
        events.extend(Event(attr.HINT_EVENT, hint_attributes(h), timestamp=end) for h in report.hints)
        return annotated_copy(root, attributes, events), report

    def _reset_after_fork(self) -> None:
        # The child starts with no traces in flight: the parent's spans end in the parent.
        self._lock = threading.Lock()
        self._traces = {}
        self._by_trace = {}
        self._owners = {}
        self._evicted_lru = self._evicted_idle = self._reports = self._truncated = 0
