"""Load scenarios for memory and bounds: run one in this process, print a JSON summary.

Run:  python benchmarks/memory.py million  --variant candidate
      python benchmarks/memory.py leaks    --variant candidate --idle-ttl 5
      python benchmarks/memory.py million  --compare        (baseline and candidate, side by side)

``million``: 1,000,000 spans in 100,000 standard traces (10 spans each), one after another.
``leaks``: 200,000 traces whose local roots never end (a leak in the host application);
each has a stage span and a query that end at once, and every fourth an HTTP call that
ends 2,000 or 15,000 traces later (by then its trace may have been evicted). Span
timestamps are explicit and advance 1 ms per trace in busy phases and 60 ms in quiet
ones (20,000 traces each), so with the default bounds (10,000 active traces, 300 s idle
TTL) both the LRU bound and the TTL evict, judged on span time as in production.

The downstream is a SimpleSpanProcessor with an exporter that counts, so "every span is
forwarded" is an exact count. Memory is the resident set size of this process after a
full garbage collection (``/proc/self/statm``), sampled every tenth of the run; the
tests in tests/load compare a baseline process (the same downstream, no
LatencyBudgetProcessor) with a candidate one. RSS rather than tracemalloc: it includes
everything the process holds (allocator arenas, the SDK's objects) and tracemalloc would
slow the run several times over.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import json
import logging
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from latency_budget import _guard
from workloads import CASES, DB, HTTP_CLIENT, HTTP_SERVER, TOOL, CountingExporter, provider, seed_ids

HERE = Path(__file__).resolve().parent
STATS = ("active_traces", "evicted_lru", "evicted_idle", "reports", "truncated_traces")  # of processor.stats()
MS = 1_000_000
T0 = 1_700_000_000_000_000_000
# leaks: every LATE_EVERY-th trace has an HTTP call that ends LATE traces later (the two
# delays in turn): after 2,000 its trace is still active, after 15,000 it has been evicted.
LATE_EVERY = 4
LATE = (2_000, 15_000)
# leaks: span time between traces, in phases of PHASE traces: busy (10,000 traces arrive
# well within the idle TTL, so max_active_traces binds) and quiet (the TTL binds first).
PHASE = 20_000
STEPS_MS = (1.0, 60.0)


def rss_mb() -> float:
    """This process's resident set size in MB, after a full collection."""
    gc.collect()
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: the peak is the best there is
        return peak_rss_mb()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class LogCounter(logging.Handler):
    """Counts the package's log records by level name, and keeps the first few messages."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: collections.Counter[str] = collections.Counter()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] += 1
        if len(self.messages) < 10:
            self.messages.append(f"{record.levelname}: {record.getMessage()}")


def run_million(tracer: trace.Tracer, traces: int, sample: Callable[[int], None]) -> int:
    """``traces`` standard traces; returns the number of spans ended."""
    standard = CASES["standard"].run
    tenth = max(1, traces // 10)
    for done in range(0, traces, tenth):
        standard(tracer, min(tenth, traces - done))
        sample(min(done + tenth, traces))
    return traces * CASES["standard"].spans_per_unit


def run_leaks(tracer: trace.Tracer, traces: int, sample: Callable[[int], None]) -> int:
    """``traces`` traces whose roots never end; returns the number of spans ended."""
    # One queue per delay, so each stays in due order.
    pending: tuple[collections.deque[tuple[int, trace.Span]], ...] = tuple(collections.deque() for _ in LATE)
    tenth = max(1, traces // 10)
    ended = 0
    now = T0
    for i in range(traces):
        now += round(STEPS_MS[(i // PHASE) % len(STEPS_MS)] * MS)
        for queue in pending:
            while queue and queue[0][0] <= i:
                queue.popleft()[1].end(end_time=now)
                ended += 1
        root = tracer.start_span("POST /v1/answer", kind=SpanKind.SERVER, attributes=HTTP_SERVER, start_time=now)
        parent = trace.set_span_in_context(root)
        tool = tracer.start_span("execute_tool lookup_order", parent, attributes=TOOL, start_time=now + MS)
        tool.end(end_time=now + 2 * MS)
        query = tracer.start_span("SELECT tickets", parent, SpanKind.CLIENT, DB, start_time=now + 2 * MS)
        query.end(end_time=now + 3 * MS)
        ended += 2
        if i % LATE_EVERY == 0:
            which = (i // LATE_EVERY) % len(LATE)
            late = tracer.start_span("GET order", parent, SpanKind.CLIENT, HTTP_CLIENT, start_time=now + 3 * MS)
            pending[which].append((i + LATE[which], late))
        del root, parent  # the application drops its leaked root: only our state could keep it alive
        if (i + 1) % tenth == 0:
            sample(i + 1)
    for queue in pending:
        while queue:
            queue.popleft()[1].end(end_time=now)
            ended += 1
    return ended


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run one scenario in this process and summarise it."""
    seed_ids()
    _guard.raise_internal_errors = True  # an internal error fails the run instead of being logged
    logs = LogCounter()
    logging.getLogger("latency_budget").addHandler(logs)
    exporter = CountingExporter()

    def downstream() -> SpanProcessor:
        return SimpleSpanProcessor(exporter)

    options: dict[str, Any] = {"max_active_traces": args.max_active_traces}
    if args.idle_ttl is not None:
        options["idle_ttl_s"] = args.idle_ttl
    case = dataclasses.replace(CASES["standard"], processor_options=options)
    tracer_provider, processor = provider(case, candidate=args.variant == "candidate", downstream=downstream)
    tracer = tracer_provider.get_tracer("load", "1.0")
    samples: list[dict[str, float]] = []

    def sample(done: int) -> None:
        stats = processor.stats() if processor is not None else None
        active = stats.active_traces if stats is not None else 0
        held = stats.held_roots if stats is not None else 0  # ended roots waiting late_span_grace_ms
        samples.append({"traces": done, "rss_mb": round(rss_mb(), 2), "active_traces": active, "held_roots": held})

    sample(0)
    started = time.perf_counter()
    if args.scenario == "million":
        ended = run_million(tracer, args.traces, sample)
    else:
        ended = run_leaks(tracer, args.traces, sample)
    seconds = time.perf_counter() - started
    if processor is not None:
        processor.release_held()  # the last root waits up to late_span_grace_ms for late spans
    stats = processor.stats() if processor is not None else None
    tracer_provider.shutdown()
    return {
        "scenario": args.scenario,
        "variant": args.variant,
        "traces": args.traces,
        "spans_ended": ended,
        "exported": exporter.count,
        "seconds": round(seconds, 1),
        "rss_mb": round(rss_mb(), 2),
        "peak_rss_mb": round(peak_rss_mb(), 2),
        "samples": samples,
        "stats": {name: getattr(stats, name, None) for name in STATS} if stats is not None else None,
        "logs": dict(logs.counts),
        "log_messages": logs.messages,
        "options": options,
    }


def spawn(argv: Sequence[str]) -> subprocess.Popen[str]:
    """Start this script with ``argv`` in a fresh interpreter (its RSS is its own)."""
    return subprocess.Popen(
        [sys.executable, str(HERE / "memory.py"), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def collect(process: subprocess.Popen[str]) -> dict[str, Any]:
    """The JSON summary a spawned run printed; raises with its stderr when it failed."""
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, process.args))} exited {process.returncode}:\n{err[-4000:]}")
    result: dict[str, Any] = json.loads(out)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=["million", "leaks"])
    parser.add_argument("--variant", choices=["baseline", "candidate"], default="candidate")
    parser.add_argument("--compare", action="store_true", help="run baseline and candidate in two subprocesses")
    parser.add_argument("--traces", type=int, help="default: 100,000 (million), 200,000 (leaks)")
    parser.add_argument("--max-active-traces", type=int, default=10_000)
    parser.add_argument("--idle-ttl", type=float, default=None, help="idle_ttl_s (default: the processor's)")
    args = parser.parse_args(argv)
    if args.traces is None:
        args.traces = 100_000 if args.scenario == "million" else 200_000
    if not args.compare:
        print(json.dumps(run(args)))
        return 0
    passed = [a for a in (argv if argv is not None else sys.argv[1:]) if a not in ("--compare",)]
    runs = [spawn([*passed, "--variant", variant]) for variant in ("baseline", "candidate")]
    base, cand = (collect(p) for p in runs)
    for result in (base, cand):
        curve = " ".join(f"{s['rss_mb']:.0f}" for s in result["samples"])
        print(
            f"{result['variant']:<9} rss {result['rss_mb']:7.1f} MB (peak {result['peak_rss_mb']:.1f})  "
            f"exported {result['exported']:,}/{result['spans_ended']:,}  {result['seconds']} s  "
            f"samples MB: {curve}  stats: {result['stats']}  logs: {result['logs']}"
        )
    print(f"candidate - baseline: {cand['rss_mb'] - base['rss_mb']:+.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
