"""Soak: run a mixed workload through LatencyBudgetProcessor for minutes; memory and state must stay flat.

Run:  python benchmarks/soak.py --minutes 5        (not in CI: it takes the time it is given)

Worker threads loop over a mix until the time is up: standard AI traces, web requests
with no stage span, a wide trace (1,000 children) now and then, batches of concurrent
asyncio requests, and leaked traces whose roots never end (one in 50 iterations). The
processor runs with a 30 s idle TTL (``--idle-ttl``), so leaked traces are dropped as
they go idle and the active state should settle at a level, not climb.

Every ``--sample-every`` seconds the main thread prints resident memory (after a full
collection), active traces, evictions and spans forwarded. After the warm-up, the run
fails (exit 1) when the median of the last quarter of samples exceeds that of the first
quarter by more than ``--max-growth-mb`` of memory or by half again in active traces, when
a span that ended was not forwarded, or when a hook raised or logged an error.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from latency_budget import LatencyBudgetProcessor, _guard, load_budgets
from memory import LogCounter, rss_mb
from workloads import (
    BUDGETS,
    DB,
    HTTP_SERVER,
    TOOL,
    CountingExporter,
    async_requests,
    standard_trace,
    unmatched_trace,
    wide_trace,
)

LEAK_EVERY = 50
WIDE_EVERY = 500
ASYNC_EVERY = 100
ASYNC_BATCH = 100


@dataclass
class Sample:
    seconds: float
    rss_mb: float
    active_traces: int
    evicted_lru: int
    evicted_idle: int
    reports: int
    exported: int

    def line(self) -> str:
        return (
            f"{self.seconds:7.0f} s  rss {self.rss_mb:7.1f} MB  active {self.active_traces:6,}  "
            f"evicted lru {self.evicted_lru:,} idle {self.evicted_idle:,}  reports {self.reports:,}  "
            f"exported {self.exported:,}"
        )


class Worker(threading.Thread):
    """Loops over the mix until ``stop`` is set; counts the spans it ends."""

    def __init__(self, tracer: trace.Tracer, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.tracer = tracer
        self.stop = stop
        self.ended = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        tracer = self.tracer
        i = 0
        try:
            while not self.stop.is_set():
                standard_trace(tracer)
                self.ended += 10
                if i % 2:
                    unmatched_trace(tracer)
                    self.ended += 20
                if i % LEAK_EVERY == 0:
                    self.leak()
                if i % WIDE_EVERY == 0:
                    wide_trace(tracer, 1_000)
                    self.ended += 1_001
                if i % ASYNC_EVERY == 0:
                    async_requests(tracer, ASYNC_BATCH)
                    self.ended += 10 * ASYNC_BATCH
                i += 1
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def leak(self) -> None:
        """A trace whose root never ends: its children end and must still be forwarded."""
        root = self.tracer.start_span("POST /v1/answer", kind=SpanKind.SERVER, attributes=HTTP_SERVER)
        parent = trace.set_span_in_context(root)
        self.tracer.start_span("execute_tool lookup_order", parent, attributes=TOOL).end()
        self.tracer.start_span("SELECT tickets", parent, SpanKind.CLIENT, DB).end()
        self.ended += 2


def _quarters(values: list[float]) -> tuple[float, float]:
    """Medians of the first and the last quarter (a median, because a sample can land mid-burst)."""
    quarter = max(1, len(values) // 4)
    return statistics.median(values[:quarter]), statistics.median(values[-quarter:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=None, help="seconds (default: 20%% of the run, at least 60)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--idle-ttl", type=float, default=30.0, help="the processor's idle_ttl_s")
    parser.add_argument("--max-growth-mb", type=float, default=10.0)
    args = parser.parse_args(argv)
    duration = args.minutes * 60
    warmup = args.warmup if args.warmup is not None else min(duration / 2, max(60.0, duration / 5))

    _guard.raise_internal_errors = True  # a bug in a hook stops its worker, and the soak fails
    logs = LogCounter()
    logging.getLogger("latency_budget").addHandler(logs)
    exporter = CountingExporter()
    processor = LatencyBudgetProcessor(
        load_budgets(text=BUDGETS), SimpleSpanProcessor(exporter), idle_ttl_s=args.idle_ttl
    )
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("soak", "1.0")
    stop = threading.Event()
    workers = [Worker(tracer, stop) for _ in range(args.threads)]

    print(f"soak: {args.minutes} min, {args.threads} threads, idle TTL {args.idle_ttl} s, warm-up {warmup:.0f} s")
    samples: list[Sample] = []
    started = time.monotonic()

    def sample() -> None:
        stats = processor.stats()
        s = Sample(
            time.monotonic() - started,
            rss_mb(),
            stats.active_traces,
            stats.evicted_lru,
            stats.evicted_idle,
            stats.reports,
            exporter.count,
        )
        samples.append(s)
        print(s.line(), flush=True)

    for worker in workers:
        worker.start()
    while (elapsed := time.monotonic() - started) < duration and not any(w.error for w in workers):
        time.sleep(min(args.sample_every, max(0.0, duration - elapsed)))
        sample()
    stop.set()
    for worker in workers:
        worker.join()
    provider.shutdown()

    failures = [f"worker raised {w.error!r}" for w in workers if w.error is not None]
    ended = sum(w.ended for w in workers)
    if exporter.count != ended:
        failures.append(f"{ended:,} spans ended but {exporter.count:,} were forwarded")
    if logs.counts["ERROR"] or logs.counts["CRITICAL"]:
        failures.append(f"the processor logged errors: {dict(logs.counts)}")
    steady = [s for s in samples if s.seconds >= warmup]
    if len(steady) < 4:
        failures.append(f"only {len(steady)} samples after the warm-up: run longer or sample more often")
    else:
        first, last = _quarters([s.rss_mb for s in steady])
        print(f"rss after warm-up: first quarter {first:.1f} MB, last quarter {last:.1f} MB ({last - first:+.1f})")
        if last - first > args.max_growth_mb:
            failures.append(f"resident memory grew {last - first:.1f} MB after the warm-up")
        first, last = _quarters([float(s.active_traces) for s in steady])
        print(f"active traces after warm-up: first quarter {first:.0f}, last quarter {last:.0f}")
        # An asyncio batch in flight when a sample is taken adds up to ASYNC_BATCH per thread.
        if last > first * 1.5 + ASYNC_BATCH * args.threads:
            failures.append(f"active traces grew from {first:.0f} to {last:.0f} after the warm-up")
    print(f"spans ended {ended:,}, forwarded {exporter.count:,}; logs {dict(logs.counts)}")
    for message in logs.messages:
        print(f"  logged {message}")
    for failure in failures:
        print(f"soak FAILED: {failure}", file=sys.stderr)
    if not failures:
        print("soak passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
