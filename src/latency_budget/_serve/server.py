"""The ``serve`` process: receivers, trace assembly, the judge, the forwarder and the report sinks, wired.

One decider thread moves traces out of the buffer (:mod:`.assembly`) when they are
due, judges them (:mod:`.judge`), hands the reports to the OTLP log and metric sinks and
queues the spans for the next hop (:mod:`.forwarder`). The receivers only decode and
buffer. :meth:`Server.drain` is the SIGTERM path: refuse new data, judge every rooted
trace, forward the rest unjudged (or hand it over), flush, all within the shutdown deadline.

With a handover sender (``--handover-endpoint``), a rootless part quiet for the decision
wait is sent back through layer 1, which routes it by trace id to the trace's owner now,
through a second :class:`~.forwarder.Forwarder` (same retries, same settling in the log).

With a write-ahead log (:mod:`.wal`), :meth:`Server.start` first replays what a previous
run acknowledged and did not forward, before the receivers take anything new, and every
forwarded batch settles its traces in the log once it has left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from latency_budget import _attributes as attr
from latency_budget._config.errors import BudgetConfigError
from latency_budget._config.model import BudgetConfig
from latency_budget._core.report import TraceReport
from latency_budget._core.wording import plural
from latency_budget._serve import exposition
from latency_budget._serve.assembly import Decided, Limits, TraceBuffer, settling_groups
from latency_budget._serve.forwarder import DEFAULT_BATCH_BYTES, DEFAULT_WORKERS, FORWARD_BATCH_SPANS, Forwarder, Sender
from latency_budget._serve.grpc_receiver import GrpcReceiver
from latency_budget._serve.http_receiver import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MAX_CONNECTIONS,
    HealthServer,
    HttpReceiver,
)
from latency_budget._serve.intake import Answer, Intake
from latency_budget._serve.judge import Judge, Roots
from latency_budget._serve.logs import evaluations_in
from latency_budget._serve.otlp import BadRequest, decode_in_full, decode_request
from latency_budget._serve.partial import PartialReason, mark, mark_tops
from latency_budget._serve.stats import Counters, EventLog, Gauge
from latency_budget._serve.wal import Wal, WalOptions
from latency_budget.export._bank import MetricBank

__all__ = ["ServeOptions", "Server"]

ReportSink = Callable[[TraceReport], object]
# What a span waiting for the next hop costs beyond its bytes: its (origin, bytes) pair and list slot.
_QUEUED_SPAN_COST = 100


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """Where to listen and how to assemble and judge (the command line's options, parsed)."""

    grpc_endpoint: str = "localhost:4317"
    http_endpoint: str | None = "localhost:4318"
    health_endpoint: str = "localhost:13133"
    limits: Limits = field(default_factory=Limits)
    roots: Roots = "trace"
    queue_spans: int = 100_000
    max_request_bytes: int = 16 * 1024 * 1024
    shutdown_timeout_s: float = 10.0
    wal: WalOptions | None = None
    http_max_connections: int = MAX_CONNECTIONS
    http_header_timeout_s: float = HEADER_TIMEOUT_S
    http_body_timeout_s: float = BODY_TIMEOUT_S
    forward_batch_bytes: int = DEFAULT_BATCH_BYTES
    forward_workers: int = DEFAULT_WORKERS
    handover_endpoint: str | None = None  # layer 1's OTLP address; the command opens the sender


class Server:
    """A running ``serve``: :meth:`start`, then :meth:`drain` (once)."""

    def __init__(
        self,
        config: BudgetConfig,
        options: ServeOptions,
        sender: Sender,
        *,
        destination: str,
        sinks: Sequence[ReportSink] = (),
        flush_sinks: Callable[[float], bool] | None = None,
        log: EventLog | None = None,
        clock: Callable[[], float] = time.monotonic,
        metric_bank: MetricBank | None = None,
        handover: Sender | None = None,
        handover_destination: str = "",
        logs_sender: Sender | None = None,
    ) -> None:
        """``metric_bank``: where serve's own counters and gauges go out with the budget metrics (over OTLP).

        ``handover``: the sender to layer 1 (``--handover-endpoint``); None: rootless parts
        are forwarded unjudged after ``--max-wait``, as before.
        """
        self.options = options
        self.counters = Counters()
        self.log = log if log is not None else EventLog()
        self._clock = clock
        self._sinks = tuple(sinks)
        self._flush = flush_sinks
        self._buffer = TraceBuffer(options.limits, clock, handover=handover is not None)
        self._judge = Judge(config, roots=options.roots, max_spans_per_trace=options.limits.max_spans_per_trace)
        self._forwarder = Forwarder(
            sender,
            counters=self.counters,
            log=self.log,
            destination=destination,
            max_batch_bytes=options.forward_batch_bytes,
            workers=options.forward_workers,
        )
        self._handover = (
            Forwarder(
                handover,
                counters=self.counters,
                log=self.log,
                destination=handover_destination,
                max_batch_bytes=options.forward_batch_bytes,
                workers=1,
                sent="spans_handed_over",
                name="handover",
            )
            if handover is not None
            else None
        )
        self._logs_sender = logs_sender
        self._wanted = _wanted_keys(config, options)
        self._wal = Wal(options.wal, self.counters, self.log) if options.wal is not None else None
        if self._wal is not None:
            self._wal.open()  # WalError: a bad --wal-dir, before any port is taken
        self._intake = Intake(
            self._buffer,
            self.counters,
            self.log,
            self._leave,
            wanted=self._wanted,
            wal=self._wal,
            pressure=self._pressure,
            retry_after_s=max(1.0, min(options.limits.decision_wait_s, 30.0)),
        )
        self._decide_lock = threading.Lock()  # the judge and its recent calls: one trace at a time
        # Bytes of the traces out of the buffer and not yet in the forward queue (being judged).
        self._moving = threading.Lock()
        self._deciding = 0
        self._stopping = threading.Event()
        self._draining = False
        self._decider = threading.Thread(target=self._decide_loop, name="latency-budget-decide", daemon=True)
        self.grpc = GrpcReceiver(
            self._intake, options.grpc_endpoint, max_request_bytes=options.max_request_bytes, logs=self.take_logs
        )
        self.http = (
            HttpReceiver(
                self._intake,
                options.http_endpoint,
                max_request_bytes=options.max_request_bytes,
                max_connections=options.http_max_connections,
                header_timeout_s=options.http_header_timeout_s,
                body_timeout_s=options.http_body_timeout_s,
                counters=self.counters,
                log=self.log,
                logs=self.take_logs,
            )
            if options.http_endpoint is not None
            else None
        )
        self.health = HealthServer(
            options.health_endpoint,
            self._health,
            metrics=lambda: exposition.exposition(self.metric_values()),
            header_timeout_s=options.http_header_timeout_s,
            counters=self.counters,
            log=self.log,
        )
        if metric_bank is not None:
            exposition.observe(metric_bank, self.metric_values)

    def start(self) -> dict[str, object]:
        """Start serving (after replaying the write-ahead log); the ``listening`` log line's fields."""
        self._forwarder.start()
        if self._handover is not None:
            self._handover.start()
        if self._wal is not None:
            self._replay(self._wal)
        self._decider.start()
        self.grpc.start()
        if self.http is not None:
            self.http.start()
        self.health.start()
        fields: dict[str, object] = {
            "grpc": self.grpc.address,
            "http": self.http.address if self.http is not None else None,
            "health": self.health.address,
            "roots": self.options.roots,
            "decision_wait_s": self.options.limits.decision_wait_s,
            "handover": self.options.handover_endpoint,
        }
        self.log.event("listening", always=True, **fields)
        return fields

    def reload(self, config: BudgetConfig, source: str = "") -> None:
        """Judge with ``config`` from now on (its budget file changed), the traces held now included.

        Spans already held that the old budgets had no need to decode (a rule of the new
        file reads a key the old did not) are decoded again before their trace is judged.
        """
        wanted = _wanted_keys(config, self.options)
        with self._decide_lock:  # between two traces: each is judged under one budget file
            self._intake.use_wanted(wanted, self._buffer.open_ids)
            self._wanted = wanted
            self._judge.config = config
        self.counters.add("budget_reloads")
        self.log.event("budgets_reloaded", always=True, file=source or config.source)

    def reload_failed(self, error: Exception) -> None:
        """A changed budget file that cannot be used: the last good one stays; one line for this version."""
        self.counters.add("budget_reloads_failed")
        fields: dict[str, object] = {"error": str(error)}
        if isinstance(error, BudgetConfigError):
            fields = {"file": error.source, "line": error.line, "key": error.path, **fields}
        self.log.event("budget_reload_failed", always=True, action="kept the last good budgets", **fields)

    def drain(self) -> bool:
        """Stop accepting, judge every rooted trace, hand over or forward the rest; True when all was sent in time."""
        deadline = self._clock() + self.options.shutdown_timeout_s
        self._draining = True
        self.log.event("draining", always=True)
        # Nothing joins the buffer from now on: a request still being read or decoded is refused (retry).
        self._intake.close(min(1.0, self.options.shutdown_timeout_s / 4))
        if self.http is not None:
            self.http.stop()
        self.grpc.stop(min(1.0, self.options.shutdown_timeout_s / 4))
        self._stopping.set()
        self._decider.join(max(0.0, deadline - self._clock()))
        with self._decide_lock:
            self._decide(self._buffer.drain())
        kept = self._wal is not None
        handover_left: list[int] = []
        closing = None
        if self._handover is not None:  # both close at once: layer 1 down must not eat the next hop's time
            handover = self._handover
            closing = threading.Thread(
                target=lambda: handover_left.append(handover.close(deadline - 0.2, kept=kept)),
                name="latency-budget-handover-close",
            )
            closing.start()
        left = self._forwarder.close(deadline - 0.2, kept=kept)
        if closing is not None:
            closing.join()
            left += sum(handover_left)
        flushed = self._flush_sinks(deadline)
        counters = self.counters.snapshot()
        if self._wal is not None:
            self._wal.close()
        self.log.event("shutdown", always=True, counters=counters, reports_done_in_time=flushed)
        self.health.stop()
        return flushed and not left and counters["spans_dropped"] == 0

    # -- internals -----------------------------------------------------------------------

    def _pressure(self, cost: int) -> str | None:
        """Why a request that costs ``cost`` bytes decoded cannot be taken now, or None (the intake asks)."""
        with self._moving:  # one moment: no trace counted twice or missed as it moves on
            buffered = self._buffer.held()[2] + self._deciding
            spans, queued_bytes = self._queued()
        options = self.options
        if spans >= options.queue_spans:
            return f"{plural(spans, 'span')} waiting for the next hop (--queue-size {options.queue_spans})"
        held = buffered + queued_bytes + spans * _QUEUED_SPAN_COST
        limit = options.limits.max_bytes
        if held + cost > limit and (held or cost > limit):
            return f"{held} bytes held, {cost} more to decode this request (--max-bytes {limit})"
        return None

    def _queued(self) -> tuple[int, int]:
        """Spans and bytes waiting for the next hop or for layer 1 (handed over)."""
        spans, size = self._forwarder.held()
        if self._handover is not None:
            more_spans, more_size = self._handover.held()
            spans, size = spans + more_spans, size + more_size
        return spans, size

    def gauges(self) -> dict[Gauge, int]:
        """What is held now, every gauge of the table (stats.METRICS), from one moment."""
        with self._moving:
            traces, spans, buffered = self._buffer.held()
            judging = self._deciding
            queued_spans, queued = self._queued()
        wal = self._wal.held() if self._wal is not None else {"bytes": 0, "segments": 0}
        return {
            # As _pressure counts against --max-bytes.
            "held": buffered + judging + queued + queued_spans * _QUEUED_SPAN_COST,
            "held_limit": self.options.limits.max_bytes,
            "open_traces": traces,
            "open_spans": spans,
            "buffered": buffered,
            "judging": judging,
            "queued_spans": queued_spans,
            "queued": queued,
            "wal": wal["bytes"],
            "wal_segments": wal["segments"],
            "http_connections": self.http.connections() if self.http is not None else 0,
        }

    def metric_values(self) -> dict[str, int]:
        """Every counter and gauge of the table by name: what /metrics and the OTLP metrics send."""
        values: dict[str, int] = dict(self.counters.snapshot().items())
        values.update(self.gauges().items())
        return values

    def take_logs(self, body: bytes, *, protocol: str) -> Answer:
        """Pass an encoded ``ExportLogsServiceRequest`` to the next hop as it is; then read its evaluation results.

        It is sent before it is answered (not queued, not in the write-ahead log): the
        sender hears what the next hop said, so nothing is acknowledged that did not go
        on. Of a request the next hop took, each evaluation result for a trace held open
        here waits to be joined to the call it names when the trace is judged (the
        in-process rule, :meth:`Judge.add_evaluation`); one for a trace decided here is
        counted late, one for a trace this instance never saw (or no trace) unjoined.
        """
        counters = self.counters
        if self._intake.draining:
            return Answer("draining", "shutting down", retry_after_s=1.0)
        if self._logs_sender is None:
            return self._intake.bad("this serve forwards no logs", protocol=protocol)
        try:
            found = evaluations_in(body)
        except BadRequest as exc:
            return self._intake.bad(str(exc), protocol=protocol)
        outcome = self._logs_sender.send(body)
        if outcome in ("down", "busy"):
            counters.add("log_requests_refused")
            return Answer("full", f"the next hop is {outcome} for logs", retry_after_s=1.0)
        if outcome != "sent":
            return self._intake.bad(f"the next hop refused the logs ({outcome})", protocol=protocol)
        counters.add("log_requests_forwarded")
        for trace_id, span_id, response, evaluation in found:
            where = self._buffer.where(trace_id) if trace_id is not None else None
            if where == "open" and trace_id is not None:
                self._judge.add_evaluation(trace_id, span_id, response, evaluation)
                counters.add("evaluations_joined")
            elif where == "decided":
                counters.add("evaluations_late")
            else:
                counters.add("evaluations_unjoined")
        return Answer("ok")

    def _health(self) -> tuple[bool, dict[str, object]]:
        gauges = self.gauges()
        # held: the gauges under their earlier names, for readers of the document before the gauges.
        held: dict[str, object] = {
            "traces": gauges["open_traces"],
            "spans": gauges["open_spans"],
            "bytes": gauges["buffered"],
            "judging_bytes": gauges["judging"],
            "forward_queue_spans": gauges["queued_spans"],
            "forward_queue_bytes": gauges["queued"],
        }
        if self._wal is not None:
            held["wal"] = self._wal.held()
        if self.http is not None:
            held["http_connections"] = gauges["http_connections"]
        document: dict[str, object] = {"counters": self.counters.snapshot(), "gauges": gauges, "held": held}
        if self._draining:
            return False, {"status": "draining", **document}
        return True, {"status": "serving", **document}

    def _decide_loop(self) -> None:
        tick = min(0.25, max(0.005, self.options.limits.decision_wait_s / 5))
        while not self._stopping.wait(tick):
            try:
                with self._decide_lock:
                    with self._moving:  # counted as held while they are judged
                        decided = self._buffer.due()
                        self._deciding = sum(received.size for item in decided for received in item.spans)
                    try:
                        self._decide(decided, judged=True)
                    finally:
                        with self._moving:
                            self._deciding = 0
            except Exception as exc:  # a bug of ours: logged, and the loop goes on
                self.log.event("internal_error", where="decide", error=repr(exc)[:300])

    def _leave(self, decided: list[Decided]) -> None:
        """Late spans and evicted traces, on the receiving thread: forwarded as they are."""
        for item in decided:
            self._intake.stale(item.trace_id)  # never judged: no longer stale
            if item.outcome == "evicted":
                self.counters.add("traces_evicted")
                self.counters.add("spans_evicted", len(item.spans))
                self.log.event(
                    "trace_evicted",
                    reason="--max-spans-per-trace",
                    limit=self.options.limits.max_spans_per_trace,
                )
            elif item.outcome == "no_root":  # quiet and rootless, forwarded to make room (assembly.py)
                self.counters.add("traces_forwarded_unjudged")
                self.log.event("forwarded_unjudged", reason="rootless, to make room (--max-traces, --max-bytes)")
                self._mark_partial(item)
            else:
                self.counters.add("spans_late", len(item.spans))
                self._mark_partial(item)
        self._forward(decided)

    def _mark_partial(self, item: Decided) -> None:
        """Mark and count a trace leaving unjudged on part of its spans: late spans, or (``--roots trace``) no root.

        A failure to mark is logged; the spans go on as they are.
        """
        try:
            if item.outcome == "late":
                if item.mark_late:
                    mark(item.spans, "late_spans")
                    if item.count_partial:
                        self._partial("late_spans", len(item.spans))
            elif item.outcome in ("no_root", "shutdown") and self.options.roots == "trace":
                mark_tops(item.spans, "no_root")
                if self._buffer.first_partial(item.trace_id):
                    self._partial("no_root", len(item.spans))
        except Exception as exc:
            self.log.event("internal_error", where="mark_partial", error=repr(exc)[:300])

    def _partial(self, reason: PartialReason, spans: int) -> None:
        """Count a trace found partial here (once per trace), and log it (at most a line a second)."""
        self.counters.add("traces_partial")
        self.log.event("trace_partial", reason=reason, spans=spans)

    def _decide(self, decided: list[Decided], *, judged: bool = False) -> None:
        if not decided:
            return
        counters = self.counters
        reports: list[TraceReport] = []
        # With --roots local a trace whose root never came still has its services' local roots.
        local = self.options.roots == "local"
        for item in decided:
            stale = self._intake.stale(item.trace_id)  # held across a reload that reads more keys
            if item.outcome == "handover":  # judged where its root is, with it
                counters.add("traces_handed_over")
                continue
            if item.outcome != "judge" and not local:
                counters.add("traces_forwarded_unjudged")
                self._mark_partial(item)
                continue
            try:
                if stale:
                    for received in item.spans:
                        decode_in_full(received)
                verdicts = self._judge.judge(item.spans)
            except Exception as exc:  # forwarded unjudged: the worst case is a span without a verdict
                counters.add("traces_forwarded_unjudged")
                self.log.event("internal_error", where="judge", error=repr(exc)[:300])
                continue
            if verdicts.partial and self._buffer.first_partial(item.trace_id):
                self._partial("missing_parent", len(item.spans))
            if item.outcome != "judge" and not verdicts.judged:
                counters.add("traces_forwarded_unjudged")
            counters.add("traces_judged", verdicts.judged)
            counters.add("traces_already_annotated", verdicts.already_annotated)
            counters.add("traces_not_requests", verdicts.not_requests)
            reports.extend(verdicts.reports)
        unjudged = sum(1 for item in decided if item.outcome == "no_root")
        if unjudged:
            self.log.event("forwarded_unjudged", reason="root never arrived (--max-wait)", traces=unjudged)
        handed = sum(1 for item in decided if item.outcome == "handover")
        if handed:
            self.log.event("handed_over", reason="rootless, quiet for --decision-wait", traces=handed)
        self._forward(decided, judged=judged)
        for report in reports:
            for sink in self._sinks:
                try:
                    sink(report)
                except Exception as exc:
                    counters.add("reports_failed")
                    self.log.event("report_failed", sink=type(sink).__name__, error=repr(exc)[:300])

    def _forward(self, decided: list[Decided], *, judged: bool = False) -> None:
        """Queue the ``decided`` traces a request's worth at a time, each run settled in the log once it has left.

        Runs of whole traces (:func:`settling_groups`, bounded as a forwarded request is) so that
        a crash sends again at most the runs in flight. ``judged``: they are the decider's
        (counted in ``_deciding`` until they are queued).
        """
        handover = self._handover
        queues: list[tuple[Forwarder, list[Decided]]] = [(self._forwarder, decided)]
        if handover is not None:
            queues = [
                (self._forwarder, [item for item in decided if item.outcome != "handover"]),
                (handover, [item for item in decided if item.outcome == "handover"]),
            ]
        batch = self.options.forward_batch_bytes
        groups = [
            (queue, group) for queue, items in queues for group in settling_groups(items, FORWARD_BATCH_SPANS, batch)
        ]
        if not judged:
            for queue, group in groups:
                self._forward_group(group, queue)
            return
        with self._moving:  # from being judged to queued, in one step for the bounds
            for queue, group in groups:
                self._forward_group(group, queue)
            self._deciding = 0

    def _forward_group(self, decided: list[Decided], forwarder: Forwarder) -> None:
        """Queue the spans of the ``decided`` traces; once they have all left, they are settled in the log."""
        wal = self._wal
        pairs = [(received.origin, received.encoded) for item in decided for received in item.spans]
        done: Callable[[], object] | None = None
        traces: frozenset[int] = frozenset()
        if wal is not None:
            settled = [(item.trace_id, item.seq) for item in decided]
            traces = frozenset(trace_id for trace_id, _ in settled)
            done = lambda: wal.settle(settled)  # noqa: E731
        forwarder.put(pairs, done, traces)

    def _replay(self, wal: Wal) -> None:
        """Put back in the buffer what a previous run logged and did not forward; counted, logged once."""
        settled = wal.settled_before
        self._buffer.remember(settled)  # their late spans stay late, as before the restart
        counters = self.counters
        requests = spans_replayed = deduplicated = lost = 0
        traces: set[int] = set()
        for record in wal.recover():
            try:  # as the intake decodes a request: the spans held as the bytes they came as
                spans, _, _ = decode_request(record.body, wanted=self._wanted)
            except BadRequest:  # its CRC held: written so by a bug, not a crash
                counters.add("wal_records_corrupt")
                continue
            kept = [item for item in spans if settled.get(item.trace_id, 0) < record.seq]
            deduplicated += len(spans) - len(kept)
            if not kept:
                continue
            ids = {item.trace_id for item in kept}
            wal.track(record, ids)
            refused, leaving = self._buffer.add(kept, seq=record.seq)
            if refused is not None:  # more than the buffer holds: decide what is held, then retry
                self.log.event("wal_replay_overflow", reason=refused.reason)
                with self._decide_lock:
                    self._decide(self._buffer.drain())
                refused, leaving = self._buffer.add(kept, seq=record.seq)
            if refused is not None:
                lost += len(kept)
                wal.settle((trace_id, record.seq) for trace_id in ids)
                continue
            if leaving:
                self._leave(leaving)
            requests += 1
            spans_replayed += len(kept)
            traces |= ids
        wal.recovered()
        counters.add("wal_requests_replayed", requests)
        counters.add("wal_spans_replayed", spans_replayed)
        counters.add("wal_traces_replayed", len(traces))
        counters.add("wal_spans_deduplicated", deduplicated)
        counters.add("wal_records_corrupt", wal.corrupt_records)
        counters.add("wal_spans_corrupt", wal.corrupt_spans)
        counters.add("wal_records_torn", wal.torn_records)
        counters.add("wal_spans_lost", lost)
        self.log.event(
            "wal_replayed",
            always=True,
            directory=wal.options.directory,
            requests=requests,
            spans=spans_replayed,
            traces=len(traces),
            spans_deduplicated=deduplicated,
            records_corrupt=counters.snapshot()["wal_records_corrupt"],
            spans_corrupt=wal.corrupt_spans,
            records_torn=wal.torn_records,
            spans_lost=lost,
            fsync=wal.options.fsync,
        )

    def _flush_sinks(self, deadline: float) -> bool:
        if self._flush is None:
            return True
        try:
            return self._flush(max(0.1, deadline - self._clock()))
        except Exception as exc:
            self.log.event("report_flush_failed", error=repr(exc)[:300])
            return False


def _wanted_keys(config: BudgetConfig, options: ServeOptions) -> frozenset[str] | None:
    """The attribute keys a non-root span needs for any rule to match it, or None: decode every span whole.

    Whole traces only: with ``--roots local`` any span may be a local root, whose every
    attribute the ``requests`` and profile rules may read.
    """
    gate = config.classifier.late_gate
    if gate is None or options.roots != "trace":
        return None
    return gate | {attr.STAGE, attr.VERDICT}
