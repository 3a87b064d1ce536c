"""Trace assembly: spans grouped by trace id until the trace can be decided, within fixed bounds.

A trace is ready to judge once its root (the span with no parent) has arrived and no
span of it has arrived for ``decision_wait`` seconds, as the Collector's tail sampling
decides; one whose root has not arrived ``max_wait`` seconds after its first span is
given up (forwarded unjudged). Memory is bounded by open traces, spans per trace and
bytes: a request that would pass the first or the last first makes room by forwarding
unjudged the quiet traces that still have no root (least recently active first), and is
refused whole (the sender retries it) only when those are not enough; a trace that grows
past the spans bound is evicted, forwarded unjudged. The ids of decided traces are
remembered (a bounded number), so a span that arrives after its trace was decided is
forwarded at once, never judged on part of it: marked late (:mod:`.partial`), unless its
trace was evicted. Each remembered trace also remembers whether it was already counted
as partial here (:meth:`TraceBuffer.first_partial`), so that it is counted once.

With a write-ahead log, each request is logged while the buffer's lock is held, after the
bounds let it in and before any of it joins a trace: logged and taken, or neither. Each
trace remembers the sequence number of the last request that added to it, which the
forwarder settles in the log once the trace's spans have left.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from latency_budget._core.wording import plural
from latency_budget._serve.otlp import Received

__all__ = ["Decided", "Limits", "Refused", "TraceBuffer", "settling_groups"]

Outcome = Literal["judge", "no_root", "evicted", "late", "shutdown", "handover"]


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds and waits of assembly (seconds and counts, all positive)."""

    decision_wait_s: float = 5.0
    max_wait_s: float = 60.0
    max_traces: int = 50_000
    max_spans_per_trace: int = 10_000
    max_bytes: int = 256 * 1024 * 1024
    remembered_traces: int = 200_000  # decided trace ids kept, to forward late spans as they are


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a request was refused (the buffer is full): the sender should retry after ``retry_after_s``."""

    reason: str
    retry_after_s: float


@dataclass(slots=True)
class Decided:
    """Spans of one trace leaving the buffer, and why."""

    trace_id: int
    spans: list[Received]
    outcome: Outcome
    seq: int = 0  # the write-ahead log's sequence number of the last request these spans came in
    # Late spans: whether to mark them (False: their trace was evicted), and whether their
    # trace is counted as partial now (the first time it is found partial here).
    mark_late: bool = False
    count_partial: bool = False


WriteAhead = Callable[[set[int]], "int | str"]
"""Logs one request, given its trace ids: its sequence number, or why it is refused."""


class _Open:
    __slots__ = ("first_at", "last_at", "rooted", "seq", "size", "spans")

    def __init__(self, now: float) -> None:
        self.spans: list[Received] = []
        self.first_at = now
        self.last_at = now
        self.rooted = False
        self.size = 0
        self.seq = 0


class TraceBuffer:
    """Open traces, oldest activity first. Thread-safe; ``clock`` is monotonic seconds."""

    def __init__(self, limits: Limits, clock: Callable[[], float], *, handover: bool = False) -> None:
        """``handover``: a quiet rootless trace leaves as ``handover`` (once per trace id here), see :meth:`due`."""
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self._open: OrderedDict[int, _Open] = OrderedDict()
        self._handover = handover
        # Trace ids handed over from here, the latest ``remembered_traces``: a part of one that
        # comes back (the ring did not change) is held until --max-wait, never handed over again.
        self._handed: OrderedDict[int, None] = OrderedDict()
        # Decided trace ids -> whether counted as partial here (None: evicted, never counted or marked).
        self._decided: OrderedDict[int, bool | None] = OrderedDict()
        self._bytes = 0
        self._spans = 0

    def open_ids(self) -> list[int]:
        """The ids of the traces held now."""
        with self._lock:
            return list(self._open)

    def held(self) -> tuple[int, int, int]:
        """Open traces, spans and bytes held now."""
        with self._lock:
            return len(self._open), self._spans, self._bytes

    def add(
        self, spans: list[Received], *, write_ahead: WriteAhead | None = None, seq: int = 0
    ) -> tuple[Refused | None, list[Decided]]:
        """Take the spans of one request, all or none; what must leave at once (late spans, evicted traces).

        Refused when the request's new traces would pass ``max_traces`` or its bytes
        ``max_bytes``, or when ``write_ahead`` refuses it: nothing of it is kept, and the
        caller says so in its protocol. ``seq`` is the request's sequence number when it
        is replayed from the log (``write_ahead`` gives it otherwise).
        """
        limits = self.limits
        now = self._clock()
        size = sum(item.size for item in spans)
        leaving: list[Decided] = []
        with self._lock:
            open_traces, decided = self._open, self._decided
            ids = {item.trace_id for item in spans}
            new_ids = {trace_id for trace_id in ids if trace_id not in open_traces and trace_id not in decided}
            over_traces = len(open_traces) + len(new_ids) - limits.max_traces if open_traces else 0
            over_bytes = self._bytes + size - limits.max_bytes if self._bytes else 0
            room: list[int] = []
            if over_traces > 0 or over_bytes > 0:
                room = self._rootless_to_forward(over_traces, over_bytes, now)
                if not room:
                    if over_traces > 0:
                        reason = f"{plural(len(open_traces), 'trace')} open (--max-traces {limits.max_traces})"
                    else:
                        reason = f"{self._bytes} bytes held (--max-bytes {limits.max_bytes})"
                    return Refused(reason, _retry(limits)), []
            if write_ahead is not None:
                logged = write_ahead(ids)
                if isinstance(logged, str):
                    return Refused(logged, _retry(limits)), []
                seq = logged
            for trace_id in room:  # before the request joins: a span of one of them is late
                trace_seq = open_traces[trace_id].seq
                leaving.append(Decided(trace_id, self._close(trace_id), "no_root", trace_seq))
            late: dict[int, list[Received]] = {}
            for item in spans:
                trace_id = item.trace_id
                trace = open_traces.get(trace_id)
                if trace is None:
                    if trace_id in decided:
                        late.setdefault(trace_id, []).append(item)
                        continue
                    trace = open_traces[trace_id] = _Open(now)
                else:
                    open_traces.move_to_end(trace_id)
                trace.spans.append(item)
                trace.last_at = now
                trace.seq = seq
                trace.size += item.size
                if item.parent_id is None:
                    trace.rooted = True
                self._bytes += item.size
                self._spans += 1
                if len(trace.spans) > limits.max_spans_per_trace:
                    leaving.append(Decided(trace_id, self._close(trace_id, evicted=True), "evicted", seq))
            for trace_id, items in late.items():
                counted = decided[trace_id]
                if counted is False:
                    decided[trace_id] = True
                leaving.append(Decided(trace_id, items, "late", seq, counted is not None, counted is False))
        return None, leaving

    def _rootless_to_forward(self, traces: int, size: int, now: float) -> list[int]:
        """Quiet rootless traces, least recently active first, whose leaving frees ``traces`` traces and ``size`` bytes.

        Empty when those are not enough: then nothing leaves and the request is refused.
        A trace is quiet when no span of it arrived for ``decision_wait``, as for judging:
        one whose root has not come by then is the likeliest never to get it, and held
        until ``max_wait`` it would crowd out the traces that can be judged.
        """
        quiet_before = now - self.limits.decision_wait_s
        chosen: list[int] = []
        freed_traces = freed_bytes = 0
        for trace_id, trace in self._open.items():  # oldest activity first
            if freed_traces >= traces and freed_bytes >= size:
                return chosen
            if trace.last_at > quiet_before:
                break
            if not trace.rooted:
                chosen.append(trace_id)
                freed_traces += 1
                freed_bytes += trace.size
        return chosen if freed_traces >= traces and freed_bytes >= size else []

    def where(self, trace_id: int) -> Literal["open", "decided"] | None:
        """Whether ``trace_id`` is held open here, was decided here (of the latest remembered), or neither."""
        with self._lock:
            if trace_id in self._open:
                return "open"
            return "decided" if trace_id in self._decided else None

    def remember(self, trace_ids: Iterable[int]) -> None:
        """Count these traces as decided (by a previous run): their spans from now on are late."""
        with self._lock:
            decided = self._decided
            for trace_id in trace_ids:
                decided[trace_id] = False
            while len(decided) > self.limits.remembered_traces:
                decided.popitem(last=False)

    def due(self) -> list[Decided]:
        """The traces to decide now: quiet and rooted (to judge), or rootless past ``max_wait``.

        With ``handover``, a rootless trace quiet for ``decision_wait`` leaves as ``handover``
        (to be sent back through layer 1 to its trace's owner), unless it was handed over
        from here before: a part that came back is held until ``max_wait`` as without it.
        """
        limits = self.limits
        now = self._clock()
        quiet_before = now - limits.decision_wait_s
        given_up_before = now - limits.max_wait_s
        found: list[Decided] = []
        with self._lock:
            ready: list[tuple[int, Outcome]] = []
            for trace_id, trace in self._open.items():  # oldest activity first
                if trace.last_at > quiet_before:
                    break  # this one and all after it had a span within decision_wait
                if trace.rooted:
                    ready.append((trace_id, "judge"))
                elif self._handover and trace_id not in self._handed:
                    ready.append((trace_id, "handover"))
                elif trace.first_at <= given_up_before:
                    ready.append((trace_id, "no_root"))
            for trace_id, outcome in ready:
                seq = self._open[trace_id].seq
                found.append(Decided(trace_id, self._close(trace_id, handover=outcome == "handover"), outcome, seq))
        return found

    def drain(self) -> list[Decided]:
        """Every open trace, for shutdown: rooted ones to judge, the others to hand over (:meth:`due`) or forward."""
        with self._lock:
            found: list[Decided] = []
            for trace_id in list(self._open):
                trace = self._open[trace_id]
                outcome: Outcome = "judge" if trace.rooted else "shutdown"
                if outcome == "shutdown" and self._handover and trace_id not in self._handed:
                    outcome = "handover"
                spans = self._close(trace_id, handover=outcome == "handover")
                found.append(Decided(trace_id, spans, outcome, trace.seq))
            return found

    def first_partial(self, trace_id: int) -> bool:
        """Whether the decided trace ``trace_id`` is found partial here for the first time (then: count it)."""
        with self._lock:
            counted = self._decided.get(trace_id, False)
            if counted is False and trace_id in self._decided:
                self._decided[trace_id] = True
            return counted is False

    def _close(self, trace_id: int, *, evicted: bool = False, handover: bool = False) -> list[Received]:
        trace = self._open.pop(trace_id)
        self._bytes -= trace.size
        self._spans -= len(trace.spans)
        if handover:  # not decided here: its spans, this part come back included, join a trace held again
            handed = self._handed
            handed[trace_id] = None
            if len(handed) > self.limits.remembered_traces:
                handed.popitem(last=False)
            return trace.spans
        decided = self._decided
        decided[trace_id] = None if evicted else False
        if len(decided) > self.limits.remembered_traces:
            decided.popitem(last=False)
        return trace.spans


def settling_groups(decided: list[Decided], max_spans: int, max_bytes: int | None = None) -> list[list[Decided]]:
    """``decided`` cut into runs of whole traces, each within ``max_spans`` spans and ``max_bytes`` (or one trace).

    Each run is forwarded and settled in the write-ahead log on its own, so that a crash
    sends again at most the runs in flight, not every trace decided at the same moment.
    Bound them as the forwarded batches are, so that a run is about one request.
    """
    limit = max_bytes if max_bytes is not None else float("inf")
    groups: list[list[Decided]] = []
    current: list[Decided] = []
    spans = size = 0
    for item in decided:
        count = len(item.spans)
        held = sum(received.size for received in item.spans)
        if current and (spans + count > max_spans or size + held > limit):
            groups.append(current)
            current, spans, size = [], 0, 0
        current.append(item)
        spans += count
        size += held
    if current:
        groups.append(current)
    return groups


def _retry(limits: Limits) -> float:
    """How long a refused sender should wait: about when the oldest open traces are decided."""
    return max(1.0, min(limits.decision_wait_s, 30.0))
