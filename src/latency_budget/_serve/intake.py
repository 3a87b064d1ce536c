"""What happens to one received export request, whichever receiver took it.

It is decoded, its spans join their traces in the buffer (all or none) and, with a
write-ahead log, the request is logged first (:mod:`.wal`), and the receiver is told in
one :class:`Answer` what to say: accepted (with how many spans were rejected, as an OTLP
partial success), refused because the server or its log is full or draining (retry
later), or bad input. Nothing is acknowledged that the log does not hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from latency_budget._serve.assembly import Decided, TraceBuffer
from latency_budget._serve.otlp import BadRequest, decode_request
from latency_budget._serve.stats import Counters, EventLog
from latency_budget._serve.wal import Wal

__all__ = ["Answer", "Intake"]


@dataclass(frozen=True, slots=True)
class Answer:
    """The outcome of one request, for its receiver to put in its protocol's words."""

    status: Literal["ok", "full", "draining", "bad"]
    message: str = ""
    rejected_spans: int = 0
    retry_after_s: float = 0.0


class Intake:
    """Takes decoded requests into the trace buffer; thread-safe (every receiver thread calls it)."""

    def __init__(
        self,
        buffer: TraceBuffer,
        counters: Counters,
        log: EventLog,
        leave: Callable[[list[Decided]], None],
        *,
        wanted: frozenset[str] | None = None,
        wal: Wal | None = None,
    ) -> None:
        self._buffer = buffer
        self._wal = wal
        self._counters = counters
        self._log = log
        self._leave = leave  # spans that leave at once: late spans, evicted traces
        self._wanted = wanted  # see decode_request
        self.draining = False

    def bad(self, message: str, *, protocol: str) -> Answer:
        """Count and log a request that is not usable input; the answer to give."""
        self._counters.add("bad_requests")
        self._log.event("bad_request", protocol=protocol, reason=message)
        return Answer("bad", message)

    def accept(self, body: bytes, *, protocol: str) -> Answer:
        """Take the spans of ``body`` (an encoded ``ExportTraceServiceRequest``) or say why not."""
        counters = self._counters
        if self.draining:
            counters.add("requests_received")
            counters.add("requests_refused")
            return Answer("draining", "shutting down", retry_after_s=1.0)
        try:
            spans, rejected, reason = decode_request(body, wanted=self._wanted)
        except BadRequest as exc:  # counted as a bad request, not as one received
            return self.bad(str(exc), protocol=protocol)
        counters.add("requests_received")
        if rejected:
            counters.add("spans_rejected", rejected)
            self._log.event("spans_rejected", protocol=protocol, spans=rejected, reason=reason)
        if not spans:
            return Answer("ok", reason, rejected)
        wal = self._wal
        if wal is None:
            refused, leaving = self._buffer.add(spans)
        else:
            refused, leaving = self._buffer.add(spans, write_ahead=lambda ids: wal.append(body, ids, len(spans)))
        if refused is not None:
            counters.add("requests_refused")
            self._log.event("refused", protocol=protocol, reason=refused.reason, spans=len(spans))
            return Answer("full", refused.reason, retry_after_s=refused.retry_after_s)
        counters.add("spans_received", len(spans))
        if leaving:
            self._leave(leaving)
        return Answer("ok", reason, rejected)
