"""The server's counters (served on the health endpoint) and its one-line JSON event log."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Literal, get_args

__all__ = ["COUNTERS", "Counter", "Counters", "EventLog"]

Counter = Literal[
    "requests_received",
    "requests_refused",
    "bad_requests",
    "spans_received",
    "spans_rejected",
    "spans_late",
    "traces_judged",
    "traces_not_requests",
    "traces_forwarded_unjudged",
    "traces_already_annotated",
    "traces_evicted",
    "spans_evicted",
    "traces_partial",
    "spans_forwarded",
    "spans_dropped",
    "spans_truncated",
    "spans_too_large",
    "spans_kept_in_wal",
    "forward_batches_split",
    "reports_failed",
    "budget_reloads",
    "budget_reloads_failed",
    "http_clients_gone",
    "http_connections_evicted",
    "wal_requests_replayed",
    "wal_spans_replayed",
    "wal_traces_replayed",
    "wal_spans_deduplicated",
    "wal_records_corrupt",
    "wal_spans_corrupt",
    "wal_records_torn",
    "wal_spans_lost",
    "wal_requests_refused",
    "wal_write_errors",
    "wal_segments_deleted",
]
"""Every counter, each a monotonic count since the start:

- ``requests_received``, ``requests_refused`` (full: the sender is told to retry),
  ``bad_requests`` (not an OTLP trace export, too large, wrong content type);
- ``spans_received`` (accepted), ``spans_rejected`` (bad ids, told to the sender as a
  partial success), ``spans_late`` (arrived after their trace was decided: forwarded as they are);
- ``traces_judged``, ``traces_not_requests`` (the root is not a request of the budget file),
  ``traces_forwarded_unjudged`` (the root never arrived, or shutdown came first),
  ``traces_already_annotated`` (judged in process: forwarded untouched),
  ``traces_evicted`` and ``spans_evicted`` (a trace past ``--max-spans-per-trace``: forwarded unjudged),
  ``traces_partial`` (judged or forwarded here on part of its spans: a parent missing, spans
  after the decision, no root; marked, once per trace; see :mod:`.partial`);
- ``spans_forwarded`` (the next hop took them), ``spans_dropped`` (the next hop refused them
  for good, or, without a write-ahead log, the shutdown deadline came first),
  ``spans_truncated`` (a span alone over ``--forward-batch-bytes``: its attribute values cut
  to fit, then forwarded), ``spans_too_large`` (a span that could not be cut to fit, or that
  the next hop refused alone as too large: dropped by rule), ``spans_kept_in_wal`` (not
  taken by the next hop by the shutdown deadline: left in the write-ahead log for the next
  run), ``forward_batches_split`` (requests the next hop refused as too large, sent again
  in halves), ``reports_failed`` (a log or metric sink raised);
- ``budget_reloads`` (a changed budget file taken: traces judged from then on use it),
  ``budget_reloads_failed`` (a changed budget file that does not load: the last good one stays);
- the HTTP receivers: ``http_clients_gone`` (a client reset or closed its connection
  mid-request, or stopped reading the answer), ``http_connections_evicted`` (the connection
  that waited longest for its request, closed at the connection limit to make room);
- the write-ahead log (``--wal-dir``), after a restart: ``wal_requests_replayed``,
  ``wal_spans_replayed`` and ``wal_traces_replayed`` (read back and put in the buffer again,
  judged when due), ``wal_spans_deduplicated`` (read back but already forwarded before the
  crash: not sent again), ``wal_records_corrupt`` and ``wal_spans_corrupt`` (damaged records skipped, and the
  spans they held where their header survived: acknowledged, lost), ``wal_records_torn`` (a
  segment's last record cut short: a crash's last write, never acknowledged), ``wal_spans_lost`` (read back but not
  taken again: a span the crash lost for good); while running: ``wal_requests_refused`` (the
  log full or failing: the sender is told to retry, also in ``requests_refused``),
  ``wal_write_errors`` (a write or fsync failed: ENOSPC, EIO) and ``wal_segments_deleted``.
"""

COUNTERS: tuple[Counter, ...] = get_args(Counter)


class Counters:
    """Thread-safe monotonic counters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[Counter, int] = dict.fromkeys(COUNTERS, 0)

    def add(self, name: Counter, amount: int = 1) -> None:
        if amount:
            with self._lock:
                self._values[name] += amount

    def snapshot(self) -> dict[Counter, int]:
        with self._lock:
            return dict(self._values)


class EventLog:
    """One JSON object per line on a stream; each event name at most once per ``interval_s``.

    A suppressed line is counted and reported as ``suppressed`` on the next line of the
    same event, so a flood of bad requests costs one line a second, not one per request.
    """

    def __init__(
        self, stream: IO[str] | None = None, *, interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._interval = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def event(self, name: str, *, always: bool = False, **fields: object) -> None:
        """Log ``name`` with ``fields`` (JSON values), unless the same event was logged within the interval."""
        now = self._clock()
        with self._lock:
            last = self._last.get(name)
            if not always and last is not None and now - last < self._interval:
                self._suppressed[name] = self._suppressed.get(name, 0) + 1
                return
            self._last[name] = now
            suppressed = self._suppressed.pop(name, 0)
            line: dict[str, object] = {"event": name, **fields}
            if suppressed:
                line["suppressed"] = suppressed
            text = json.dumps(line, default=str, separators=(",", ":"))  # ASCII: safe on any terminal
            try:
                self._stream.write(text + "\n")
                self._stream.flush()
            except (OSError, ValueError):
                pass
