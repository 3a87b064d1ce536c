"""What happens to one received export request, whichever receiver took it.

It is decoded, its spans join their traces in the buffer (all or none) and, with a
write-ahead log, the request is logged first (:mod:`.wal`), and the receiver is told in
one :class:`Answer` what to say: accepted (with how many spans were rejected, as an OTLP
partial success), refused because the server or its log is full or draining (retry
later), or bad input. Nothing is acknowledged that the log does not hold.

Memory is bounded before the decode: the request's decoded cost is estimated from its
bytes and its span count (:func:`~latency_budget._serve.otlp.decode_estimate`) and
reserved while it is decoded; ``pressure`` (the server's) says whether what is held, in
the buffer and waiting for the next hop, leaves room for it. Once :meth:`Intake.close`
has returned, no request joins the buffer any more: one still being read or decoded then
is answered ``draining`` (retry), never acknowledged and left behind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
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
        pressure: Callable[[int], str | None] | None = None,
        retry_after_s: float = 1.0,
    ) -> None:
        self._buffer = buffer
        self._wal = wal
        self._counters = counters
        self._log = log
        self._leave = leave  # spans that leave at once: late spans, evicted traces
        self._wanted = wanted  # see decode_request
        # Traces some of whose spans were decoded with a narrower ``wanted`` than the one in force
        # (a reloaded budget file reads more keys): read again in full before they are judged.
        self._stale: set[int] = set()
        self._pressure = pressure
        self._retry_after = retry_after_s
        self._gate = threading.Condition()
        self._closed = False
        self._active = 0  # requests between their first check and their answer
        self._reserved = 0  # the estimated cost of the requests being decoded

    @property
    def draining(self) -> bool:
        return self._closed

    def use_wanted(self, wanted: frozenset[str] | None, held: Callable[[], Iterable[int]]) -> None:
        """Decode with ``wanted`` from now on; when it reads more keys, the traces ``held`` now become stale.

        Joins happen under the same lock, so every span decoded with the old keys is in a
        trace that is held now or joins later with the old keys (then marked stale too).
        """
        with self._gate:
            if not _covers(self._wanted, wanted):
                self._stale.update(held())
            self._wanted = wanted

    def stale(self, trace_id: int) -> bool:
        """Whether the trace leaving now had spans decoded with fewer keys than are wanted now (asked once)."""
        if not self._stale:  # the common case: no reload widened the keys
            return False
        with self._gate:
            if trace_id in self._stale:
                self._stale.discard(trace_id)
                return True
            return False

    def close(self, timeout_s: float) -> None:
        """Take nothing more; wait up to ``timeout_s`` for requests in progress to be answered."""
        with self._gate:
            self._closed = True
            self._gate.wait_for(lambda: not self._active, timeout_s)

    def bad(self, message: str, *, protocol: str) -> Answer:
        """Count and log a request that is not usable input; the answer to give."""
        self._counters.add("bad_requests")
        self._log.event("bad_request", protocol=protocol, reason=message)
        return Answer("bad", message)

    def accept(self, body: bytes, *, protocol: str) -> Answer:
        """Take the spans of ``body`` (an encoded ``ExportTraceServiceRequest``) or say why not."""
        counters = self._counters
        with self._gate:
            if self._closed:
                counters.add("requests_received")
                counters.add("requests_refused")
                return Answer("draining", "shutting down", retry_after_s=1.0)
            self._active += 1
        reserved = [0]
        try:
            return self._accept(body, protocol, reserved)
        finally:
            with self._gate:
                self._active -= 1
                self._reserved -= reserved[0]
                self._gate.notify_all()

    def _admit(self, cost: int, reserved: list[int]) -> None:
        """Reserve ``cost`` bytes for the decode, or raise :class:`_Full` with the reason."""
        with self._gate:
            if self._pressure is not None:
                reason = self._pressure(cost + self._reserved)
                if reason is not None:
                    raise _Full(reason)
            self._reserved += cost
            reserved[0] = cost

    def _accept(self, body: bytes, protocol: str, reserved: list[int]) -> Answer:
        counters = self._counters
        wanted = self._wanted
        try:
            spans, rejected, reason = decode_request(
                body, wanted=wanted, admit=lambda cost: self._admit(cost, reserved)
            )
        except BadRequest as exc:  # counted as a bad request, not as one received
            return self.bad(str(exc), protocol=protocol)
        except _Full as full:
            return self._refuse(str(full), protocol)
        except MemoryError:  # valid data, no room now: the sender retries
            return self._refuse("out of memory while decoding", protocol)
        counters.add("requests_received")
        if rejected:
            counters.add("spans_rejected", rejected)
            self._log.event("spans_rejected", protocol=protocol, spans=rejected, reason=reason)
        if not spans:
            return Answer("ok", reason, rejected)
        wal = self._wal
        with self._gate:  # joins the buffer only while not closed, whatever close()'s wait
            if self._closed:
                counters.add("requests_refused")
                return Answer("draining", "shutting down", retry_after_s=1.0)
            if wanted is not self._wanted and not _covers(wanted, self._wanted):  # a reload during the decode
                self._stale.update(item.trace_id for item in spans)
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

    def _refuse(self, reason: str, protocol: str) -> Answer:
        counters = self._counters
        counters.add("requests_received")
        counters.add("requests_refused")
        self._log.event("refused", protocol=protocol, reason=reason)
        return Answer("full", reason, retry_after_s=self._retry_after)


def _covers(used: frozenset[str] | None, wanted: frozenset[str] | None) -> bool:
    """Whether spans decoded with ``used`` hold every key ``wanted`` reads (None: every key)."""
    return used is None or (wanted is not None and wanted <= used)


class _Full(Exception):
    """No room for a request's decode now (the message says what is held)."""
