"""The processor's table of active traces: bounded, least recently used first, found by trace id.

A trace enters when its local root starts (:meth:`TraceTable.open`) and leaves when the
root ends (:meth:`TraceTable.close`), or earlier, to make room: when it has been idle
for longer than the TTL (in span timestamps, never wall-clock reads), or when the table
is full and it is the least recently used. Evicted traces are counted, and their spans
pass through the processor unannotated.

The hot path finds a span's trace by reading :attr:`TraceTable.by_trace` directly, with
no call and no lock (reads of a dict are atomic in CPython). The lock guards every change
to the table, and the reads that must agree with one: in a trace with several local
roots active in this process (a service calling itself), spans are registered one by one
in an owners map, so that each finds its own root.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from latency_budget import _guard
from latency_budget._core.trace_state import TraceState

__all__ = ["ProcessorStats", "TraceTable"]

# The idle sweep looks at up to _SWEEP traces from the head of the LRU order, when a root
# starts and the head is idle, and every _ROTATE_EVERY roots (2 per root on average).
_SWEEP = 16
_ROTATE_EVERY = 8


@dataclass(frozen=True, slots=True)
class ProcessorStats:
    """How the processor is coping: one consistent snapshot of its table of active traces.

    ``active_traces`` are open now; ``evicted_lru`` and ``evicted_idle`` were dropped to
    make room (their spans forwarded unannotated); ``reports`` were judged when their
    root ended (one report each); ``truncated_traces`` of those had more spans than
    ``max_spans_per_trace``. The table keeps its counters under these names.
    ``unstaged_ai_spans`` (the processor's, not the table's) counts spans of accounted
    traces that name a model and look like AI calls but matched no stage: a dialect the
    built-in table does not know (``latency-budget doctor`` prints the rule to add).
    ``late_spans`` (the processor's too) counts stage spans that ended after their local
    root and were still counted in its judgment (the root was held back for them, within
    ``LATE_SPAN_BOUND_MS``); ``late_spans_missed`` counts those the judgment went without:
    still open when the bound passed (in span time or wall-clock time), or at
    ``force_flush`` or ``shutdown``. ``held_roots`` are local roots ended and held back
    now, for late spans (``late_span_wait_ms``, ``late_span_grace_ms``), not yet forwarded.
    """

    active_traces: int
    evicted_lru: int
    evicted_idle: int
    reports: int
    truncated_traces: int
    unstaged_ai_spans: int = 0
    late_spans: int = 0
    late_spans_missed: int = 0
    held_roots: int = 0


class TraceTable:
    """The active traces of one processor, at most ``max_traces`` of them.

    ``by_trace`` maps a trace id to its first active local root's state; read it freely.
    Every other access goes through the methods, which take :attr:`lock`.
    """

    __slots__ = (
        "_countdown",
        "_owners",
        "_traces",
        "by_trace",
        "evicted_idle",
        "evicted_lru",
        "lock",
        "max_traces",
        "reports",
        "truncated_traces",
        "ttl_ns",
    )

    def __init__(self, max_traces: int, ttl_ns: int) -> None:
        self.max_traces = max_traces
        self.ttl_ns = ttl_ns
        self.lock = threading.Lock()
        # Active traces, oldest first (LRU order), keyed by the state itself: root span ids
        # need not be unique across traces (a deterministic id generator may repeat them).
        self._traces: dict[TraceState, None] = {}
        self.by_trace: dict[int, TraceState] = {}  # trace id -> its first active local root
        self._owners: dict[int, TraceState] = {}  # span id -> state, for traces with several local roots
        self.evicted_lru = self.evicted_idle = self.reports = self.truncated_traces = 0
        self._countdown = _ROTATE_EVERY  # roots until the next idle sweep

    def stats(self) -> ProcessorStats:
        """The counters, as one consistent snapshot."""
        with self.lock:
            active = len(self._traces)
            return ProcessorStats(active, self.evicted_lru, self.evicted_idle, self.reports, self.truncated_traces)

    def open(self, state: TraceState) -> None:
        """Add the trace of a local root that started, making room first when the table is full or a sweep is due."""
        traces, by_trace = self._traces, self.by_trace
        start = state.root_start
        # Decided before taking the lock (reads of a dict are atomic; a stale answer only
        # moves a sweep to the next root): whether to drop an idle head or rotate the
        # clock. Most roots need neither.
        try:
            head = next(iter(traces), None)
        except RuntimeError:  # another thread changed the table between iter() and next()
            head = None  # the next root looks again
        self._countdown -= 1  # unlocked: a lost update only shifts the next rotation
        sweep = self._countdown <= 0 or (head is not None and start - head.last_seen > self.ttl_ns)
        # acquire() and release() in try/finally, not `with`: the same lock, held the same way,
        # for about 1,100 instructions less under callgrind (CPython 3.11: a lock's __exit__
        # takes its three arguments as a tuple). Here and in close(): once per trace each.
        lock = self.lock
        lock.acquire()
        try:
            # Without a sweep, no Python-level call runs here but the length check, so the
            # thread holding the lock is hardly ever switched out for one that waits on it.
            if sweep or len(traces) >= self.max_traces:
                self._make_room(start)
            traces[state] = None
            trace_id = state.trace_id
            if trace_id in by_trace:
                # A second local root of an active trace: from now on, spans of this
                # trace are registered one by one so each finds its own root.
                by_trace[trace_id].shared.append(state)
                self._owners[state.root_id] = state
                state.owned.append(state.root_id)
            else:
                by_trace[trace_id] = state
        finally:
            lock.release()

    def owner_of_new_span(self, first: TraceState, span_id: int, parent_id: int) -> TraceState:
        """The state a span that starts belongs to, when its trace has several local roots: its parent's."""
        with self.lock:
            state = self._owners.get(parent_id, first)
            if state is not self.by_trace.get(first.trace_id):
                self._owners[span_id] = state
                state.owned.append(span_id)
        return state

    def owner_of_ended_span(self, first: TraceState, span_id: int) -> TraceState:
        """The state a span that ends belongs to, when its trace has several local roots."""
        with self.lock:
            return self._owners.get(span_id, first)

    def close(self, state: TraceState) -> bool:
        """Remove the trace of a local root that ended; False when it was evicted meanwhile."""
        by_trace = self.by_trace
        lock = self.lock
        lock.acquire()  # not `with`: see open()
        try:
            if state.finished:
                return False
            if state.shared or state.owned or by_trace[state.trace_id] is not state:
                self._forget(state)
            else:  # the common case, as _forget would do it, with no Python call under the lock
                state.finished = True
                del self._traces[state]
                del by_trace[state.trace_id]
            self.reports += 1
        finally:
            lock.release()
        return True

    def drop(self, state: TraceState) -> None:
        """Remove the trace of a local root that ended unjudged (not a request): no count."""
        with self.lock:
            if not state.finished:
                self._forget(state)

    def count_truncated(self) -> None:
        """Count a closed trace that had more spans than it could remember."""
        with self.lock:
            self.truncated_traces += 1

    def reset_after_fork(self) -> None:
        """Empty the table in a forked child: the parent's spans end in the parent.

        The maps are cleared in place, so references to ``by_trace`` stay valid.
        """
        self.lock = threading.Lock()
        self._traces.clear()
        self.by_trace.clear()
        self._owners.clear()
        self.evicted_lru = self.evicted_idle = self.reports = self.truncated_traces = 0

    def _make_room(self, now: int) -> None:
        """Drop idle traces, then the least recently used while the table is full. Holds the lock."""
        traces = self._traces
        self._countdown = _ROTATE_EVERY
        # A clock sweep for idle traces: when the head is idle, and every _ROTATE_EVERY
        # roots, so that idle traces behind a long-lived one are found too.
        for _ in range(min(_SWEEP, len(traces))):
            head = next(iter(traces))
            del traces[head]
            if now - head.last_seen > self.ttl_ns:
                self._forget(head)
                self.evicted_idle += 1
                _guard.log_once(
                    (id(self), "evict-idle"),
                    logging.WARNING,
                    "latency_budget: dropped traces idle for over %.0f s; they are forwarded unannotated (see stats())",
                    self.ttl_ns / 1e9,
                )
            else:
                traces[head] = None
        while len(traces) >= self.max_traces:
            head = next(iter(traces))
            del traces[head]
            if head.referenced:  # second chance: recently active traces go to the back
                head.referenced = False
                traces[head] = None
                continue
            self._forget(head)
            self.evicted_lru += 1
            _guard.log_once(
                (id(self), "evict-lru"),
                logging.WARNING,
                "latency_budget: over %d active traces; the least recently used are forwarded "
                "unannotated (see stats())",
                self.max_traces,
            )

    def _forget(self, state: TraceState) -> None:
        """Detach a trace whose root ended or that was evicted. Holds the lock."""
        state.finished = True
        self._traces.pop(state, None)
        owners = self._owners
        for span_id in state.owned:
            owners.pop(span_id, None)
        first = self.by_trace.get(state.trace_id)
        if first is state:
            if state.shared:  # promote the next active local root of this trace
                successor = state.shared[0]
                successor.shared = state.shared[1:]
                self.by_trace[state.trace_id] = successor
            else:
                del self.by_trace[state.trace_id]
        elif first is not None and state in first.shared:
            first.shared.remove(state)
