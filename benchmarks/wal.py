"""The cost of serve's write-ahead log (``--wal-dir``): bytes per span on disk, and intake CPU with and without it.

Run from the repository root with the package importable:

    python benchmarks/wal.py                       # both shapes, 5,000 traces, 5 rounds
    python benchmarks/wal.py --case standard --traces 2000 --rounds 3

What is measured, in this process, on the requests ``benchmarks/serve.py`` sends (the
real SDK's spans, 50 traces a request, encoded and parsed before any clock starts):

``disk``    every request taken by serve's own intake (decode, the log, the buffer), then
    every trace decided and settled in batches of 2,048 spans as the server settles
    them; the segment's size on disk over the spans. Nothing is deleted meanwhile (one
    segment), so it is every byte the log writes for these spans: the requests' protobuf
    bytes, their 17-byte record headers and the settled records (24 bytes a trace).
``cpu``     the process's CPU time to take every request into a fresh buffer as the gRPC
    receiver hands it over (the parsed request and the bytes it came as), without a
    log and with each ``--wal-fsync`` policy, rounds alternating the order, the garbage
    collector held off while the clock runs; the figure is the median over the rounds of
    each, per span, and its ratio to no log. ``always`` also shows wall time per
    request: its fsyncs wait for the disk, not the CPU.
``append``  the log's own part: CPU time of appending each request's bytes
    (``--wal-fsync never``), per span; and, for OTLP/JSON over HTTP, which is logged as
    protobuf, of encoding the parsed request again first.
``replay``  a log left holding every request (as a crash leaves it), read back by a real
    ``Server`` (the budgets of ``workloads.py``) at its start: wall time of ``start()``
    and spans replayed per second (decoded and put in the buffer, before any judging).

The log is written under ``--dir`` (default: a temporary directory), so the figure for
``always`` is that file system's.
"""

from __future__ import annotations

import argparse
import gc
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from latency_budget import load_budgets
from latency_budget._serve.assembly import Decided, Limits, TraceBuffer
from latency_budget._serve.intake import Intake
from latency_budget._serve.server import ServeOptions, Server
from latency_budget._serve.stats import Counters, EventLog
from latency_budget._serve.wal import Wal, WalOptions
from serve import CASE_NAMES, SHAPES, encode_requests
from workloads import BUDGETS

MODES: tuple[str | None, ...] = (None, "never", "interval", "always")
BATCH_SPANS = 2048  # as the server forwards and settles


def _intake(wal: Wal | None, counters: Counters) -> tuple[Intake, TraceBuffer]:
    limits = Limits(decision_wait_s=3600.0, max_wait_s=7200.0, max_traces=10**7, max_bytes=1 << 40)
    buffer = TraceBuffer(limits, time.monotonic)
    return Intake(buffer, counters, EventLog(io.StringIO()), lambda _: None, wal=wal), buffer


def _open_wal(directory: Path, fsync: str, counters: Counters) -> Wal:
    options = WalOptions(directory=str(directory), max_bytes=1 << 40, fsync=fsync, segment_bytes=1 << 40)  # type: ignore[arg-type]
    wal = Wal(options, counters, EventLog(io.StringIO()))
    wal.open()
    wal.recovered()
    return wal


def take_all(
    parsed: Sequence[tuple[ExportTraceServiceRequest, bytes]], mode: str | None, directory: Path
) -> tuple[float, float, Wal | None, TraceBuffer]:
    """CPU and wall seconds to take every request; the log (still open) and the buffer."""
    counters = Counters()
    wal = _open_wal(directory, mode, counters) if mode is not None else None
    intake, buffer = _intake(wal, counters)
    gc.collect()
    gc.disable()
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        for _, body in parsed:
            answer = intake.accept(body, protocol="grpc")
            if answer.status != "ok":
                raise RuntimeError(f"refused: {answer.message}")
        return time.process_time() - cpu, time.perf_counter() - wall, wal, buffer
    finally:
        gc.enable()


def append_all(parsed: Sequence[tuple[ExportTraceServiceRequest, bytes]], directory: Path, *, encode: bool) -> float:
    """CPU seconds to append every request to a log (fsync never): its bytes, or (``encode``) encoded again."""
    wal = _open_wal(directory, "never", Counters())
    ids = {1}
    cpu = time.process_time()
    for request, body in parsed:
        wal.append(request.SerializeToString() if encode else body, ids)
    spent = time.process_time() - cpu
    wal.settle([(1, 1 << 62)])
    wal.close()
    return spent


def settle_all(wal: Wal, decided: list[Decided]) -> None:
    """Settle the decided traces in batches of about BATCH_SPANS spans, as the server does."""
    batch: list[tuple[int, int]] = []
    spans = 0
    for item in decided:
        batch.append((item.trace_id, item.seq))
        spans += len(item.spans)
        if spans >= BATCH_SPANS:
            wal.settle(batch)
            batch, spans = [], 0
    wal.settle(batch)


class _Discard:
    """A next hop that takes everything."""

    def send(self, request: bytes) -> str:
        return "sent"

    def shutdown(self) -> None:
        return


def replay(parsed: Sequence[tuple[ExportTraceServiceRequest, bytes]], directory: Path) -> tuple[float, int]:
    """Wall seconds of a server's start on a log holding every request, and the spans it replayed."""
    _, _, wal, _ = take_all(parsed, "never", directory)
    assert wal is not None
    wal.close()  # nothing settled: every segment stays, as after kill -9
    limits = Limits(decision_wait_s=3600.0, max_wait_s=7200.0, max_traces=10**7, max_bytes=1 << 40)
    options = ServeOptions(
        grpc_endpoint="127.0.0.1:0",
        http_endpoint=None,
        health_endpoint="127.0.0.1:0",
        limits=limits,
        wal=WalOptions(directory=str(directory), max_bytes=1 << 40, fsync="never"),
    )
    server = Server(
        load_budgets(text=BUDGETS, source="workloads.py"),
        options,
        _Discard(),  # type: ignore[arg-type]
        destination="discard",
        log=EventLog(io.StringIO()),
    )
    wall = time.perf_counter()
    server.start()
    spent = time.perf_counter() - wall
    replayed = server.counters.snapshot()["wal_spans_replayed"]
    server.drain()
    return spent, replayed


def measure(case: str, traces: int, rounds: int, root: Path) -> dict[str, Any]:
    requests = encode_requests(case, traces)
    parsed = [(ExportTraceServiceRequest.FromString(body), body) for body in requests]
    spans = traces * SHAPES[case][1]
    protobuf = sum(len(body) for body in requests)

    directory = Path(tempfile.mkdtemp(prefix="disk-", dir=root))
    _, _, wal, buffer = take_all(parsed, "never", directory)
    assert wal is not None
    logged = wal.held()["bytes"]
    settle_all(wal, buffer.drain())
    on_disk = wal.held()["bytes"]
    wal.close()

    cpu: dict[str, list[float]] = {str(mode): [] for mode in MODES}
    wall: dict[str, list[float]] = {str(mode): [] for mode in MODES}
    for index in range(rounds):
        order = MODES if index % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            directory = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=root))
            cpu_s, wall_s, wal, _ = take_all(parsed, mode, directory)
            if wal is not None:
                wal.close()
            cpu[str(mode)].append(cpu_s)
            wall[str(mode)].append(wall_s)
    appended = [
        append_all(parsed, Path(tempfile.mkdtemp(prefix="append-", dir=root)), encode=False) for _ in range(rounds)
    ]
    encoded = [
        append_all(parsed, Path(tempfile.mkdtemp(prefix="encode-", dir=root)), encode=True) for _ in range(rounds)
    ]
    replay_s, replayed = replay(parsed, Path(tempfile.mkdtemp(prefix="replay-", dir=root)))
    if replayed != spans:
        raise RuntimeError(f"replayed {replayed} spans of {spans}")
    base = statistics.median(cpu["None"])
    return {
        "case": CASE_NAMES[case],
        "traces": traces,
        "spans": spans,
        "requests": len(requests),
        "protobuf_bytes_per_span": protobuf / spans,
        "logged_bytes_per_span": logged / spans,
        "disk_bytes_per_span": on_disk / spans,
        "cpu_us_per_span": {mode: statistics.median(values) / spans * 1e6 for mode, values in cpu.items()},
        "cpu_ratio": {mode: statistics.median(values) / base for mode, values in cpu.items()},
        "append_us_per_span": statistics.median(appended) / spans * 1e6,
        "encode_append_us_per_span": statistics.median(encoded) / spans * 1e6,
        "replay_s": replay_s,
        "replay_spans_per_s": spans / replay_s,
        "wall_ms_per_request": {mode: statistics.median(values) / len(requests) * 1e3 for mode, values in wall.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(SHAPES), help="shape (repeatable; default: both)")
    parser.add_argument("--traces", type=int, default=5000, help="traces per case (default 5000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the CPU measurement (default 5)")
    parser.add_argument("--dir", type=Path, default=None, help="where the logs are written (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wal-bench-", dir=args.dir) as root:
        for case in args.case or sorted(SHAPES, reverse=True):
            result = measure(case, args.traces, args.rounds, Path(root))
            counts = f"{result['traces']} traces, {result['spans']} spans, {result['requests']} requests"
            print(f"{result['case']}: {counts}")
            print(
                f"  on disk: {result['disk_bytes_per_span']:.1f} bytes a span "
                f"(requests {result['logged_bytes_per_span']:.1f}, of which OTLP protobuf "
                f"{result['protobuf_bytes_per_span']:.1f}; the rest settled records)"
            )
            for mode in MODES:
                name = str(mode)
                label = "no log" if mode is None else f"--wal-fsync {mode}"
                print(
                    f"  {label:22} intake CPU {result['cpu_us_per_span'][name]:6.2f} us a span "
                    f"(x{result['cpu_ratio'][name]:.3f}), wall {result['wall_ms_per_request'][name]:.3f} ms a request"
                )
            print(
                f"  the log's own part: append {result['append_us_per_span']:.2f} us a span; "
                f"encode again and append (OTLP/JSON) {result['encode_append_us_per_span']:.2f}"
            )
            print(
                f"  replay at start: {result['replay_s']:.2f} s for {result['spans']} spans "
                f"({result['replay_spans_per_s']:,.0f} spans a second)"
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
