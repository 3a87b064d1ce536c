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

import atexit
import logging
import os
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind

from latency_budget import _guard
from latency_budget._config import BudgetConfig
from latency_budget._config.genai_defaults import AI_KEYS, MODEL_KEYS, looks_like_a_call
from latency_budget._config.model import DEFAULT_PROFILE, BudgetSet
from latency_budget._config.reload import reload_interval, watch_budgets
from latency_budget._core.annotate import root_annotation, stage_span_attributes
from latency_budget._core.recent import RecentCalls
from latency_budget._core.report import TraceReport
from latency_budget._core.trace_state import LATE_SPAN_BOUND_MS, LATE_SPAN_GRACE_MS, TraceState
from latency_budget._release_timer import ReleaseTimer
from latency_budget._sdk_internals import (
    IS_REMOTE,
    SPAN_ID,
    TRACE_FLAGS,
    TRACE_ID,
    ContextTuple,
    annotated_copy,
    context_of,
    events_of,
    parent_of,
    set_label,
    view_of,
    view_of_any,
)
from latency_budget._trace_table import ProcessorStats, TraceTable

__all__ = ["LatencyBudgetProcessor", "ProcessorStats", "ReportCallback"]

ReportCallback = Callable[[TraceReport], object]
"""What ``on_report`` takes: a callable given each finished trace's report (its return value is ignored)."""
# What _end gives when a span is forwarded as an annotated copy: the copy, and the
# trace's report when the span is its local root; or (None, None) for a local root held
# back for its late children (forwarded when they end or the bound passes).
Annotated = tuple["ReadableSpan | None", "TraceReport | None"]
_HOLD: Annotated = (None, None)
# An ended stage span or local root as _end_root and _span_attributes read it: (name, kind,
# scope name, start ns, end ns, attributes). A plain tuple, built only for those spans: a
# NamedTuple costs about 4,200 instructions more each under callgrind (CPython 3.11).
Ended = tuple[str, SpanKind, str, int, int, "Mapping[str, Any]"]

# A span that matched no stage is looked at further only when it names a model: two dictionary
# probes per such span (scanning its keys for any AI key cost about 900 instructions a span).
_MODEL_KEY, _MODEL_NAME_KEY = MODEL_KEYS
# The W3C sampled bit; a plain int test is several times cheaper than TraceFlags.sampled.
_SAMPLED = 0x01
# The account of a local root that is not a request, in a trace that has a request's
# account here: it has no stages, so its spans count for nothing and are never copied.
_UNACCOUNTED = BudgetConfig("<not a request>", (), BudgetSet(DEFAULT_PROFILE, (), None))
# The release time when no root is held: after any monotonic clock reading.
_NEVER = 1 << 62


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
    ``idle_ttl_s`` (a trace none of whose spans ended for that long, in span timestamps,
    is dropped when new traces arrive: set it above the longest single span). Evicted
    traces are forwarded unannotated and counted.

    Live reload: with ``reload_interval_s`` (or ``OTEL_LATENCY_BUDGET_RELOAD_INTERVAL``)
    and budgets from a file (a path, or a config whose ``source`` is a file), a daemon
    thread re-reads the file at most every that many seconds and swaps in a changed one
    that loads, once it has settled (unchanged for 2 s, so a half-written file is never
    used); traces in flight finish under the budgets they started with. A broken file
    keeps the last good budgets and logs its error once. Reading never blocks (a FIFO or
    a device is refused). :meth:`reload_now` checks at once (from a SIGHUP handler,
    say); :meth:`shutdown` stops the thread.

    Late children: when a local root ends while stage spans that started under it are
    still open, its judgment (and its annotated copy) waits for them, up to
    ``late_span_wait_ms``: a child that ends within that many milliseconds after the root
    (span timestamps) is counted, up to the root's end. The root is held, never waited
    for: it is judged and forwarded, exactly once, from the thread that ends its last
    open child, or, once the bound has passed in span time or in wall-clock time, when a
    local root next starts or ends, at :meth:`force_flush`, at :meth:`shutdown`, or, in a
    quiet process, by a daemon thread (started at the first hold, gone 5 s after the last)
    that runs at most once a bound, so within two bounds (judged without the children
    still open, counted in ``stats().late_spans_missed``). 0 turns the wait off.

    ``late_span_grace_ms`` (default ``LATE_SPAN_GRACE_MS``, 50 ms; 0: off) holds every
    local root that long, in wall-clock time, whether or not a child is open, for
    instrumentations that start their spans after the call they describe (LiteLLM's
    callback writes ``litellm_request`` after the call, with its times, up to ~15 ms after
    the root on a loaded machine): a span of the trace that starts and ends meanwhile,
    within the root's times, is counted. The root is released as above, so every root
    reaches the downstream processor up to that much later (a flush forwards it at once).
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
        late_span_wait_ms: float = LATE_SPAN_BOUND_MS,
        late_span_grace_ms: float = LATE_SPAN_GRACE_MS,
    ) -> None:
        if max_active_traces < 1 or max_spans_per_trace < 1 or not idle_ttl_s > 0:
            raise ValueError("max_active_traces, max_spans_per_trace and idle_ttl_s must be positive")
        if not late_span_wait_ms >= 0 or not late_span_grace_ms >= 0:
            raise ValueError("late_span_wait_ms and late_span_grace_ms must be zero or positive")
        self._late_ns = int(late_span_wait_ms * 1e6)
        self._grace_ns = int(late_span_grace_ms * 1e6)
        # Every held root waits as long (so the held roots are in deadline order).
        self._hold_ns = max(self._late_ns, self._grace_ns)
        # Local roots held back for their late children, oldest (earliest deadline) first,
        # and those found ready (their last open child ended), under the table's lock.
        self._held: dict[TraceState, None] = {}
        self._ready: list[TraceState] = []
        # The oldest held root's deadline (_NEVER when none is held): a root's start or end
        # takes the lock to release held roots only once it has passed.
        self._release_at = _NEVER
        # Releases held roots when nothing else does (a quiet process), at most once a hold.
        self._timer = ReleaseTimer(self._release_due, period_ns=self._hold_ns)
        self._late_spans = self._late_missed = 0
        self._reload_interval = reload_interval(reload_interval_s)
        self._config, self._watcher = watch_budgets(budgets, self._use_config)
        if isinstance(downstream, SpanExporter):
            downstream = BatchSpanProcessor(downstream)
        self._downstream: SpanProcessor = downstream
        self._forward_start = downstream.on_start
        self._forward_end = downstream.on_end
        # The SDK's private hook for a span that is ending (newer SDKs): nothing of ours to
        # do there, so the provider calls downstream's own method, with no frame of ours.
        ending = getattr(downstream, "_on_ending", None)
        if ending is not None:
            self._on_ending = ending  # type: ignore[method-assign]
        if on_report is None:
            self._on_report: tuple[ReportCallback, ...] = ()
        elif callable(on_report):
            self._on_report = (on_report,)
        else:
            self._on_report = tuple(on_report)
        self._max_spans = max_spans_per_trace
        self._table = TraceTable(max_active_traces, int(idle_ttl_s * 1e9))
        self._unstaged_ai = 0
        self._recent = RecentCalls(on_error=partial(_guard.log_internal_error, "lever hints"))  # bounded
        self._by_trace = self._table.by_trace  # read on every span, with no call and no lock
        self._shutdown = False
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._reset_after_fork)
            os.register_at_fork(after_in_child=lambda: (method := ref()) is not None and method())
        self._exit_hook = False  # registered at the first hold (see _hold)
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
        logged once), changed too recently to be sure it is whole (a follow-up check loads
        it once it has settled) or the budgets did not come from a file. Never raises and
        never blocks on the file.
        """
        return self._watcher.check() if self._watcher is not None else False

    def _use_config(self, config: BudgetConfig) -> None:
        # One reference assignment: _start reads self._config once per span, so a new
        # trace sees the old or the new budgets whole, never a mix.
        self._config = config

    def stats(self) -> ProcessorStats:
        """Counters: active traces, evictions by LRU and idle TTL, reports, truncated traces,
        and spans that look like AI calls but are in no stage."""
        return replace(
            self._table.stats(),
            unstaged_ai_spans=self._unstaged_ai,
            late_spans=self._late_spans,
            late_spans_missed=self._late_missed,
            held_roots=len(self._held),
        )

    def _count_unstaged_ai(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Count a span that looks like an AI call but is in no stage; the first one of the process is named."""
        self._unstaged_ai += 1  # unlocked: a lost update under threads only undercounts a diagnostic
        if self._unstaged_ai > 1:  # said at most once per process, for the first processor's first span
            return
        key = next((k for k in attributes if k in AI_KEYS), "")
        _guard.log_once(
            "unstaged AI span",
            logging.WARNING,
            "latency_budget: span %r looks like an AI call (it has %s) but is in no stage; "
            "`latency-budget doctor` on recorded traces prints the match rule that would stage it",
            name,
            key,
        )

    # -- hooks -------------------------------------------------------------------------
    #
    # Both hooks read the span's context first: an unsampled span, or one of a trace we
    # do not account, costs one C-level read and a dictionary probe.

    # After shutdown() the hooks are _passed_start and _passed_end (instance attributes set
    # there): spans pass through untouched, as the SDK's processors let them.

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            ctx = context_of(span)
            if ctx is not None and ctx[TRACE_FLAGS] & _SAMPLED:
                self._start(span, ctx)
        except Exception as exc:  # never let our bugs reach the host application
            if not isinstance(span, ReadableSpan):
                _wrong_type("on_start", span)
                return
            _guard.log_internal_error("on_start", exc)
        self._forward_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        forward: ReadableSpan | None = span
        report = None
        try:
            ctx = context_of(span)
            if ctx is not None and ctx[TRACE_FLAGS] & _SAMPLED:
                state = self._by_trace.get(ctx[TRACE_ID])
                if state is not None:  # else not a trace we account: pass through untouched
                    annotated = self._end(span, ctx, state)
                    if annotated is not None:
                        forward, report = annotated
        except Exception as exc:
            if not isinstance(span, ReadableSpan):
                _wrong_type("on_end", span)
                return
            _guard.log_internal_error("on_end", exc)
        if forward is not None:  # None: a local root held back for its late children
            self._forward_end(forward)
        if report is not None:
            self._tell(report)

    def _tell(self, report: TraceReport) -> None:
        """Give a finished trace's report to each ``on_report`` callback; their exceptions are logged once."""
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

    def _release_at_exit(self) -> None:
        """At interpreter exit: stop the timer (letting a release in progress finish) and forward every held root."""
        self._timer.stop()
        if self._held:
            self._release(everything=True)

    def _release_due(self) -> int | None:
        """The timer's call: release the held roots that are due; the earliest deadline still held, or None."""
        self._release(everything=False)
        release_at = self._release_at
        return None if release_at == _NEVER else release_at

    def _release(self, *, everything: bool) -> None:
        """Judge and forward the held roots that are ready, whose deadline passed, or (``everything``) all.

        Each is taken out of the held roots under the lock, so exactly one caller forwards it.
        """
        due: list[TraceState] = []
        try:
            now = time.monotonic_ns()
            with self._table.lock:
                held = self._held
                ready = self._ready
                while ready:  # pop, not clear: a thread may append meanwhile, without the lock
                    state = ready.pop()
                    if state in held:
                        del held[state]
                        due.append(state)
                passed = len(due)
                for state in held:  # held in deadline order: stop at the first one not due
                    if not everything and state.deadline > now:
                        self._release_at = state.deadline
                        break
                    due.append(state)
                else:
                    self._release_at = _NEVER
                for state in due[passed:]:
                    del held[state]
        except Exception as exc:
            _guard.log_internal_error("late spans", exc)
        for state in due:
            self._judge_held(state)

    def _judge_held(self, state: TraceState) -> None:
        """Judge a held root with the children that ended in time, and forward its copy (the root itself on error)."""
        assert state.held is not None
        root, stage, ended = state.held
        forward: ReadableSpan | None = root
        report = None
        try:
            missed = _still_open(state)
            if missed:
                self._late_missed += missed  # unlocked: a lost update only undercounts a diagnostic
            annotated = self._end_root(root, state, stage, ended)
            if annotated is not None:
                forward, report = annotated
        except Exception as exc:
            _guard.log_internal_error("on_end", exc)
        if forward is not None:
            self._forward_end(forward)
        if report is not None:
            self._tell(report)

    def shutdown(self) -> None:
        """Stop accounting and reloading, and shut the downstream processor down; a second call does nothing.

        From then on every span is forwarded untouched (traces in flight unjudged).
        """
        if self._shutdown:
            return
        self._shutdown = True
        self.on_start = self._passed_start  # type: ignore[method-assign]
        self.on_end = self._passed_end  # type: ignore[method-assign]
        self._timer.stop()
        self._release(everything=True)  # held roots first: downstream still takes them
        if self._watcher is not None:
            self._watcher.stop()
        try:
            self._downstream.shutdown()
        except Exception as exc:
            _guard.log_once(("shutdown", type(exc)), logging.ERROR, "latency_budget: downstream shutdown: %r", exc)

    def release_held(self) -> None:
        """Judge and forward every root held for late spans now, without flushing downstream.

        What ``shutdown`` and ``force_flush`` do first; ``configure()``'s shutdown calls it
        before it stops the logger and meter providers that the held roots' reports go to.
        """
        if self._held:
            self._release(everything=True)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush the downstream processor within ``timeout_millis``; False when it could not, or got no number."""
        if not isinstance(timeout_millis, int | float):
            _wrong_type("force_flush", timeout_millis, "a timeout in milliseconds")
            return False
        if self._held:
            self._release(everything=True)  # judged without the children still open
        try:
            return self._downstream.force_flush(timeout_millis)
        except Exception as exc:
            _guard.log_once(("force_flush", type(exc)), logging.ERROR, "latency_budget: downstream flush: %r", exc)
            return False

    def _passed_start(self, span: Span, parent_context: Context | None = None) -> None:
        if not isinstance(span, ReadableSpan):
            _wrong_type("on_start", span)
            return
        self._forward_start(span, parent_context)

    def _passed_end(self, span: ReadableSpan) -> None:
        if not isinstance(span, ReadableSpan):
            _wrong_type("on_end", span)
            return
        self._forward_end(span)

    # -- accounting ------------------------------------------------------------------
    #
    # Bookkeeping is per trace, not per span: a span finds its account through its trace
    # id in the table of active traces (_trace_table), and an ended span is recorded by
    # appending to its trace's list, with no lock. The table's lock guards its maps: a
    # root's start and end, evictions, and traces with several local roots.

    def _start(self, span: Span, ctx: ContextTuple) -> None:
        state = self._by_trace.get(ctx[TRACE_ID])
        if state is None:
            # Not a trace we account (not a request, evicted, or started before us),
            # unless the span is a local root: a child of one leaves after one more read.
            try:
                parent = parent_of(span)
            except AttributeError:
                parent = None  # view_of_any below reads it
            if parent is not None and not parent[IS_REMOTE]:
                return
        try:
            parent, name, kind, scope, start, _, attributes = view_of(span)
        except AttributeError:  # no instrumentation scope, or attributes built by hand
            parent, name, kind, scope, start, _, attributes = view_of_any(span)
        # A local root: trace_state.is_local_root's rule, inlined for a live span (whose
        # parent in this process is always there): calling it at every span start ran 135
        # more bytecodes and 10 more calls per standard trace (counted with sys.settrace),
        # a few thousand instructions, with the other additions of its commit 1.254.
        if parent is None or parent[IS_REMOTE]:
            self._start_root(span, ctx, name, kind, scope, start or 0, attributes)
            return
        if state is None:
            return
        if state.shared:
            state = self._table.owner_of_new_span(state, ctx[SPAN_ID], parent[SPAN_ID])
        state.referenced = True  # unlocked: a benign race on an LRU hint
        stage = state.config.classifier.classify(name, kind, scope, attributes)
        if stage >= 0:
            set_label(span, state.budgets.stages[stage].label)
            state.opened.append(ctx[SPAN_ID])  # a late child, should the root end first

    def _start_root(
        self,
        span: Span,
        ctx: ContextTuple,
        name: str,
        kind: SpanKind,
        scope: str,
        start: int,
        attributes: Mapping[str, Any],
    ) -> None:
        if self._held and time.monotonic_ns() >= self._release_at:  # held roots whose wall-clock bound passed
            self._release(everything=False)
        config = self._config
        if config.resource_keys:  # rules that read the resource: settled for this provider's, once
            config = config.for_resource(span.resource.attributes)
        if config.requests is not None and not config.is_request(name, kind, scope, attributes):
            # Not a request: its spans find no account and pass through untouched. Only
            # when its trace has one here already (a request that called this process
            # back) must they be told apart from that account's: then they get one that
            # labels and judges nothing.
            if ctx[TRACE_ID] not in self._by_trace:
                return
            config = _UNACCOUNTED
        stage = config.classifier.classify(name, kind, scope, attributes)
        budgets = config.budgets_for_root(name, kind, scope, attributes)
        span_id, trace_id = ctx[SPAN_ID], ctx[TRACE_ID]
        state = TraceState(config, budgets, span_id, start, trace_id, self._max_spans, self._table.lock, events_of)
        self._table.open(state)
        if stage >= 0:
            set_label(span, budgets.stages[stage].label)

    def _end(self, span: ReadableSpan, ctx: ContextTuple, state: TraceState) -> Annotated | None:
        """Record an ended span of an accounted trace; the copy to forward, if it gains attributes."""
        try:
            parent, name, kind, scope, start, end, attributes = view_of(span)
        except AttributeError:  # no instrumentation scope, or attributes built by hand
            parent, name, kind, scope, start, end, attributes = view_of_any(span)
        span_id = ctx[SPAN_ID]
        if state.shared:
            state = self._table.owner_of_ended_span(state, span_id)
        # Spans built by hand may lack timestamps: they count as zero-length.
        start = start or 0
        end = end or start
        parent_id = parent[SPAN_ID] if parent is not None else None
        if state.held is not None:  # its root ended, held back for its late children
            return self._end_late(span, span_id, parent_id, state, name, kind, scope, start, end, attributes)
        stage = state.end_span(span_id, parent_id, name, kind, scope, start, end, attributes, span)
        if span_id == state.root_id:
            if self._held and time.monotonic_ns() >= self._release_at:  # other held roots whose bound passed
                self._release(everything=False)
            if state.config.default_rule_stage >= 0 and not state.judged_by_default(
                kind, parent is not None, attributes
            ):
                self._table.drop(state)  # start-up work, by the default requests rule: not judged
                return None
            ended = (name, kind, scope, start, end, attributes)
            if self._grace_ns or (self._late_ns and state.opened and _still_open(state)):
                self._hold(span, state, stage, ended)
                return _HOLD
            return self._end_root(span, state, stage, ended)
        if stage < 0:  # the common case: recorded, forwarded untouched
            if (_MODEL_KEY in attributes or _MODEL_NAME_KEY in attributes) and looks_like_a_call(attributes):
                self._count_unstaged_ai(name, attributes)
            return None
        state.closed.append(span_id)  # no longer open, had it started as a stage span
        extra = stage_span_attributes(state, stage, name, kind, scope, start, end, attributes)
        return (annotated_copy(span, extra), None) if extra else None

    def _hold(self, root: ReadableSpan, state: TraceState, stage: int, ended: Ended) -> None:
        """Hold a local root back (its trace stays open) until its open stage children end or the bound passes."""
        state.held = (root, stage, ended)
        lock = self._table.lock
        lock.acquire()  # not `with`: see TraceTable.open
        try:
            # The deadline read under the lock: the held roots stay in deadline order.
            state.deadline = deadline = time.monotonic_ns() + self._hold_ns
            held = self._held
            if not held:
                self._release_at = deadline
            held[state] = None
        finally:
            lock.release()
        self._timer.wake_by(deadline)  # in a quiet process, the timer releases it
        if not self._exit_hook:
            # At exit, held roots are judged before the providers shut down: registered at
            # the first hold, after every provider a configurator set up at start-up, this
            # runs before their own exit hooks (last registered, first run), so a report's
            # log record and metric points are still taken.
            self._exit_hook = True
            at_exit = weakref.WeakMethod(self._release_at_exit)
            atexit.register(lambda: (method := at_exit()) is not None and method())

    def _end_late(
        self,
        span: ReadableSpan,
        span_id: int,
        parent_id: int | None,
        state: TraceState,
        name: str,
        kind: SpanKind,
        scope: str,
        start: int,
        end: int,
        attributes: Mapping[str, Any],
    ) -> Annotated | None:
        """Record a span that ended after its held root: counted (up to the root's end) when within the bound."""
        assert state.held is not None
        root_end = state.held[2][4]
        if start > root_end or end > root_end + self._late_ns:
            # Past the bound (span time): the root is judged now, without it and the others still open.
            self._ready.append(state)
            self._release(everything=False)
            return None
        stage = state.end_span(span_id, parent_id, name, kind, scope, start, min(end, root_end), attributes, span)
        if stage < 0:
            return None
        self._late_spans += 1  # unlocked: a lost update only undercounts a diagnostic
        state.closed.append(span_id)
        if not self._grace_ns and not _still_open(state):
            self._ready.append(state)  # its last open child: judge it now (with a grace, at its deadline)
        self._release(everything=False)  # this one if ready, and any whose wall-clock bound passed
        extra = stage_span_attributes(state, stage, name, kind, scope, start, end, attributes)
        return (annotated_copy(span, extra), None) if extra else None

    def _end_root(self, root: ReadableSpan, state: TraceState, stage: int, ended: Ended) -> Annotated | None:
        """Detach the trace of a local root that ended (and was recorded), judge it and annotate the root."""
        if state.config is _UNACCOUNTED:  # not a request: forwarded untouched, not judged
            self._table.drop(state)
            return None
        if not self._table.close(state):
            return None  # evicted meanwhile: forwarded untouched
        if state.truncated:
            self._table.count_truncated()
        name, _, _, start, end, _ = ended
        # The function, not the bound method: partial calls it in one step (about 150 instructions fewer).
        levers = partial(RecentCalls.lever_hints, self._recent, state.names, state.budgets)  # never raises
        if state.quality is not None:  # what its spans said of answers' quality (rare: only then the keyword)
            levers = partial(levers, quality=state.quality)
        report = state.report(start, end, trace_id=state.trace_id, root_name=name, levers=levers)
        root_extra, events = root_annotation(state, report, stage, *ended)
        return annotated_copy(root, root_extra, events), report

    def _reset_after_fork(self) -> None:
        # The child starts with no traces in flight: the parent's spans end in the parent.
        self._table.reset_after_fork()
        self._held.clear()
        self._ready.clear()
        self._release_at = _NEVER
        self._timer.reset_after_fork()


def _still_open(state: TraceState) -> int:
    """How many stage spans that started under the trace's root have not ended (read when the root ends)."""
    return len(set(state.opened).difference(state.closed))


def _wrong_type(hook: str, value: object, expected: str = "an OpenTelemetry SDK span") -> None:
    """Tell once that a caller passed a hook something it cannot take (it is ignored, not forwarded)."""
    _guard.log_once(
        (hook, "wrong type", type(value)),
        logging.ERROR,
        "latency_budget: %s was given %s, not %s; ignored (logged once)",
        hook,
        type(value).__qualname__,
        expected,
    )
