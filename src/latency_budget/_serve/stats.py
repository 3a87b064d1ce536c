"""The server's counters and gauges, one table (:data:`METRICS`), and its one-line JSON event log.

Every reader of serve's numbers reads :data:`METRICS`: the health endpoint's JSON, the
Prometheus text on ``GET /metrics`` (:mod:`.exposition`), the OTLP metrics pushed with the
budget metrics (:func:`.exposition.observe`) and docs/collector-tier.md's table
(:func:`.exposition.render_doc_table`; tests/unit/test_serve_metrics.py checks each of them
against it). A new counter is one name in :data:`Counter` and one row in :data:`METRICS`
(the test names what is missing), then ``python -m tests.unit.test_serve_metrics`` writes
the docs' table again.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Literal, get_args

__all__ = [
    "COUNTERS",
    "GAUGES",
    "METRICS",
    "Counter",
    "Counters",
    "EventLog",
    "Gauge",
    "MetricKind",
    "ServeMetric",
]

Counter = Literal[
    "requests_received",
    "requests_refused",
    "bad_requests",
    "spans_received",
    "spans_rejected",
    "spans_late",
    "log_requests_forwarded",
    "log_requests_refused",
    "evaluations_joined",
    "evaluations_late",
    "evaluations_unjoined",
    "traces_judged",
    "traces_not_requests",
    "traces_forwarded_unjudged",
    "traces_already_annotated",
    "traces_evicted",
    "spans_evicted",
    "traces_partial",
    "spans_forwarded",
    "traces_handed_over",
    "spans_handed_over",
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
"""The counters' names, for the type checker: each is a row of :data:`METRICS`."""

Gauge = Literal[
    "held",
    "held_limit",
    "open_traces",
    "open_spans",
    "buffered",
    "judging",
    "queued_spans",
    "queued",
    "wal",
    "wal_segments",
    "http_connections",
]
"""The gauges' names (what is held now), for the type checker: each is a row of :data:`METRICS`."""

MetricKind = Literal["counter", "gauge"]


@dataclass(frozen=True, slots=True)
class ServeMetric:
    """One of serve's numbers: a counter (monotonic since the start) or a gauge (now)."""

    name: str  # the health endpoint's key; latency_budget.serve.<name> over OTLP
    kind: MetricKind
    unit: str  # UCUM, as OpenTelemetry writes units: "By", "{span}"
    description: str  # one sentence (Markdown code spans allowed): --help-like, the docs and HELP


# fmt: off
METRICS: tuple[ServeMetric, ...] = (
    ServeMetric("requests_received", "counter", "{request}", "OTLP export requests received, refused ones included."),
    ServeMetric("requests_refused", "counter", "{request}",
                "Requests refused because serve was full or draining: the sender was told to retry."),
    ServeMetric("bad_requests", "counter", "{request}",
                "Requests that were not an OTLP trace export: broken, too large, a wrong content type."),
    ServeMetric("spans_received", "counter", "{span}", "Spans accepted."),
    ServeMetric("spans_rejected", "counter", "{span}",
                "Spans refused for bad ids, told to the sender as a partial success."),
    ServeMetric("spans_late", "counter", "{span}",
                "Spans that arrived after their trace was decided: forwarded as they are."),
    ServeMetric("log_requests_forwarded", "counter", "{request}",
                "OTLP log export requests (`/v1/logs`) the next hop took, as they came (not in the write-ahead log)."),
    ServeMetric("log_requests_refused", "counter", "{request}",
                "Log export requests refused because the next hop was down or busy: the sender was told to retry."),
    ServeMetric("evaluations_joined", "counter", "{evaluation}",
                "Evaluation result log records for a trace held open: joined to the call they name when it is judged."),
    ServeMetric("evaluations_late", "counter", "{evaluation}",
                "Evaluation result log records that arrived after their trace was decided: forwarded, not joined."),
    ServeMetric("evaluations_unjoined", "counter", "{evaluation}",
                "Evaluation result log records for a trace this instance never saw: forwarded, not joined."),
    ServeMetric("traces_judged", "counter", "{trace}", "Requests judged (a trace with two roots counts twice)."),
    ServeMetric("traces_not_requests", "counter", "{trace}",
                "Traces whose root is not a request of the budget file: forwarded unjudged."),
    ServeMetric("traces_forwarded_unjudged", "counter", "{trace}",
                "Traces forwarded unjudged: the root never arrived, or room was needed, or shutdown came first."),
    ServeMetric("traces_already_annotated", "counter", "{trace}",
                "Traces whose root was judged in process: forwarded untouched."),
    ServeMetric("traces_evicted", "counter", "{trace}",
                "Traces past `--max-spans-per-trace`: forwarded unjudged."),
    ServeMetric("spans_evicted", "counter", "{span}", "The spans of the evicted traces."),
    ServeMetric("traces_partial", "counter", "{trace}",
                "Traces judged or forwarded here on part of their spans (a parent missing, spans after the "
                "decision, no root): marked, once per trace."),
    ServeMetric("spans_forwarded", "counter", "{span}", "Spans the next hop took."),
    ServeMetric("traces_handed_over", "counter", "{trace}",
                "Rootless parts of traces sent back through layer 1 to their trace's owner (`--handover-endpoint`)."),
    ServeMetric("spans_handed_over", "counter", "{span}",
                "Spans of handed-over parts that layer 1 took (`--handover-endpoint`)."),
    ServeMetric("spans_dropped", "counter", "{span}",
                "Spans the next hop refused for good, or, without a write-ahead log, not taken by the shutdown "
                "deadline."),
    ServeMetric("spans_truncated", "counter", "{span}",
                "Spans alone over `--forward-batch-bytes`: their attribute values cut to fit, then forwarded."),
    ServeMetric("spans_too_large", "counter", "{span}",
                "Spans that could not be cut to fit, or that the next hop refused alone as too large: dropped by "
                "rule."),
    ServeMetric("spans_kept_in_wal", "counter", "{span}",
                "Spans not taken by the next hop by the shutdown deadline: left in the write-ahead log for the "
                "next run."),
    ServeMetric("forward_batches_split", "counter", "{request}",
                "Forwarded requests the next hop refused as too large, sent again in halves."),
    ServeMetric("reports_failed", "counter", "{report}", "Reports a log or metric sink raised on."),
    ServeMetric("budget_reloads", "counter", "{reload}",
                "Changed budget files taken: traces judged from then on use them."),
    ServeMetric("budget_reloads_failed", "counter", "{reload}",
                "Changed budget files that did not load: the last good one stays."),
    ServeMetric("http_clients_gone", "counter", "{connection}",
                "HTTP clients that reset or closed their connection mid-request, or stopped reading the answer."),
    ServeMetric("http_connections_evicted", "counter", "{connection}",
                "HTTP connections closed at `--http-max-connections` to make room: the one that waited longest "
                "for its request."),
    ServeMetric("wal_requests_replayed", "counter", "{request}",
                "Requests read back from the write-ahead log at start and put in the buffer again."),
    ServeMetric("wal_spans_replayed", "counter", "{span}", "Spans read back from the write-ahead log at start."),
    ServeMetric("wal_traces_replayed", "counter", "{trace}", "Traces read back from the write-ahead log at start."),
    ServeMetric("wal_spans_deduplicated", "counter", "{span}",
                "Spans read back but forwarded before the crash: not sent again."),
    ServeMetric("wal_records_corrupt", "counter", "{record}", "Damaged records of the write-ahead log, skipped."),
    ServeMetric("wal_spans_corrupt", "counter", "{span}",
                "Spans in damaged records whose header survived: acknowledged, lost."),
    ServeMetric("wal_records_torn", "counter", "{record}",
                "Segments' last records cut short: a crash's last write, never acknowledged."),
    ServeMetric("wal_spans_lost", "counter", "{span}",
                "Spans read back but not taken again: a span the crash lost for good."),
    ServeMetric("wal_requests_refused", "counter", "{request}",
                "Requests refused because the log was full or failing (also in `requests_refused`)."),
    ServeMetric("wal_write_errors", "counter", "{error}", "Writes or syncs of the log that failed: ENOSPC, EIO."),
    ServeMetric("wal_segments_deleted", "counter", "{segment}", "Log segments deleted once all in them was settled."),
    ServeMetric("held", "gauge", "By",
                "Bytes held, as `--max-bytes` counts them: open traces, traces being judged and the forward queue."),
    ServeMetric("held_limit", "gauge", "By", "`--max-bytes`: past it requests are refused."),
    ServeMetric("open_traces", "gauge", "{trace}", "Open traces held, waiting to be judged."),
    ServeMetric("open_spans", "gauge", "{span}", "Spans of the open traces."),
    ServeMetric("buffered", "gauge", "By", "Bytes of the open traces."),
    ServeMetric("judging", "gauge", "By", "Bytes of the traces out of the buffer, being judged."),
    ServeMetric("queued_spans", "gauge", "{span}", "Spans waiting for the next hop, or on their way."),
    ServeMetric("queued", "gauge", "By", "Bytes waiting for the next hop, or on their way."),
    ServeMetric("wal", "gauge", "By", "Bytes of the write-ahead log on disk (0 without `--wal-dir`)."),
    ServeMetric("wal_segments", "gauge", "{segment}", "Segments of the write-ahead log on disk."),
    ServeMetric("http_connections", "gauge", "{connection}", "OTLP/HTTP connections open."),
)
# fmt: on

COUNTERS: tuple[Counter, ...] = get_args(Counter)
GAUGES: tuple[Gauge, ...] = get_args(Gauge)


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
