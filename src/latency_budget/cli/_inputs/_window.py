"""Spans as they are read, grouped into whole traces, each handed back once its window has passed.

A recording is mostly in order: a Collector writes a service's spans in batches as they
end, so the spans of one trace lie close together, a few batches apart at most. A trace
is *closed* when ``window`` spans of the input have been read since its last span, or at
the end of the input: it is then assembled (:func:`assemble_located`: duplicates, remote
parents and parent cycles are all within one trace) and handed back to be judged and
forgotten. What is held is the traces still open and the window, not the file. A span of
a trace already closed is *late*: it starts a new group of that trace id, judged on its
own, and is counted so that the CLI can say to raise ``--window``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from latency_budget._replay import SpanRecord

from ._spans import ParsedSpan, Repairs, assemble_located

__all__ = ["TraceWindow"]


class TraceWindow:
    """Groups spans by trace id in reading order, and hands back each trace's records when it closes.

    Besides the open traces, it keeps the ids of the closed ones (:attr:`closed_ids`,
    for the count of traces and to find late spans: about 70 bytes a trace) and the
    repairs so far.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.read = 0  # spans read so far
        self.late_spans = 0
        self.first_late: str | None = None
        self.closed_ids: set[int] = set()
        # trace id -> (reading number of its last span, its spans with their reading numbers),
        # the trace whose last span is oldest first.
        self._open: dict[int, tuple[int, list[tuple[int, ParsedSpan]]]] = {}
        self._duplicates = self._cycles = 0
        self._first_duplicate: tuple[int, str] | None = None
        self._first_cycle: tuple[int, str] | None = None

    def add(self, spans: Iterable[ParsedSpan]) -> Iterator[list[SpanRecord]]:
        """Take the spans of one document; then the records of each trace that closed meanwhile."""
        traces = self._open
        read = self.read
        for span in spans:
            trace_id = span.record.trace_id
            read += 1
            found = traces.pop(trace_id, None)
            if found is None:
                members: list[tuple[int, ParsedSpan]] = []
                if trace_id in self.closed_ids:
                    self.late_spans += 1
                    self.first_late = self.first_late or span.where
            else:
                members = found[1]
            members.append((read, span))
            traces[trace_id] = (read, members)  # to the back: its last span is the newest
        self.read = read
        horizon = read - self.window
        while traces:
            trace_id = next(iter(traces))
            last, members = traces[trace_id]
            if last > horizon:
                break
            del traces[trace_id]
            yield self._close(trace_id, members)

    def finish(self) -> Iterator[list[SpanRecord]]:
        """At the end of the input: the records of every trace still open."""
        traces = self._open
        while traces:
            trace_id = next(iter(traces))
            yield self._close(trace_id, traces.pop(trace_id)[1])

    @property
    def open_traces(self) -> int:
        """Traces read and not yet closed."""
        return len(self._open)

    @property
    def trace_count(self) -> int:
        """Distinct trace ids closed so far (all of them, after :meth:`finish`)."""
        return len(self.closed_ids)

    def repairs(self) -> Repairs:
        """What assembling the closed traces mended, the first of each kind in reading order."""
        duplicate = self._first_duplicate[1] if self._first_duplicate else None
        cycle = self._first_cycle[1] if self._first_cycle else None
        return Repairs(self._duplicates, duplicate, self._cycles, cycle)

    def _close(self, trace_id: int, members: list[tuple[int, ParsedSpan]]) -> list[SpanRecord]:
        self.closed_ids.add(trace_id)
        records, repairs, (duplicate_at, cycle_at) = assemble_located(span for _, span in members)
        if repairs.duplicate_spans:
            self._duplicates += repairs.duplicate_spans
            first = (members[duplicate_at][0], repairs.first_duplicate or "")
            if self._first_duplicate is None or first < self._first_duplicate:
                self._first_duplicate = first
        if repairs.parent_cycles:
            self._cycles += repairs.parent_cycles
            first = (members[cycle_at][0], repairs.first_cycle or "")
            if self._first_cycle is None or first < self._first_cycle:
                self._first_cycle = first
        return records
