"""serve's write-ahead log under faults: a small bound, a small disk, a damaged record, files that are not its own.

Every case checks the one invariant by span id: what ``serve`` acknowledged is forwarded
once, still held in the log, or counted by the rule that says why not.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from latency_budget._serve.assembly import Decided, Limits, settling_groups
from latency_budget._serve.otlp import decode_request
from latency_budget._serve.wal import WalOptions
from tests.ci import skip_or_fail_in_ci
from tests.e2e.services import poll

from .harness import NextHop, record, running
from .test_command import BUDGET_FILE
from .test_judging import BUDGETS, agent_trace

SPANS = 4  # agent_trace: a root, a retrieval and two model calls
BOUNDED_S = 20.0  # the longest any case here may take to make its point


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _padded(first_trace: int, pad: int) -> trace_service_pb2.ExportTraceServiceRequest:
    """agent_trace's request for trace ``first_trace``, its root carrying ``pad`` bytes more."""
    request = encode_spans(record(agent_trace, first_trace=first_trace))
    for span in request.resource_spans[0].scope_spans[0].spans:
        if not span.parent_span_id and pad:
            extra = span.attributes.add()
            extra.key = "pad"
            extra.value.string_value = "p" * pad
    return request


def _ids(request: trace_service_pb2.ExportTraceServiceRequest) -> list[tuple[int, int]]:
    return [
        (int.from_bytes(span.trace_id, "big"), int.from_bytes(span.span_id, "big"))
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


def _forwarded(hop: NextHop) -> Counter[tuple[int, int]]:
    """How many times each (trace id, span id) reached the next hop."""
    return Counter((int.from_bytes(s.trace_id, "big"), int.from_bytes(s.span_id, "big")) for _, _, s in hop.spans())


def _export_retrying(stub: trace_service_pb2_grpc.TraceServiceStub, request: object) -> None:
    """Export as a sender's retry queue does: again after each RESOURCE_EXHAUSTED, within BOUNDED_S."""

    def attempt() -> bool | None:
        try:
            stub.Export(request, timeout=10)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            return None
        return True

    poll(attempt, timeout=BOUNDED_S, what="the request accepted (the sender retrying RESOURCE_EXHAUSTED)")


def test_a_log_far_below_16_mib_keeps_taking_requests_while_the_hop_takes_them(hop: NextHop, tmp_path: Path) -> None:
    """--wal-max-bytes 1000000: 2 MB of requests go through, each span forwarded once, the log never jammed."""
    wal = WalOptions(directory=str(tmp_path / "wal"), max_bytes=1_000_000)
    acknowledged: list[tuple[int, int]] = []
    with running(BUDGETS, hop.url, limits=Limits(decision_wait_s=0.05, max_wait_s=30.0), wal=wal) as serve:
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(serve.grpc_endpoint))
        for trace_id in range(1, 41):  # 40 requests of about 50 KB
            request = _padded(trace_id, 50_000)
            _export_retrying(stub, request)
            acknowledged += _ids(request)
        serve.wait_for(lambda c: c["spans_forwarded"] == len(acknowledged), "every acknowledged span forwarded")
        held = serve.health()[1]["held"]["wal"]
        assert held["bytes"] <= 1_000_000
    assert _forwarded(hop) == Counter(acknowledged)  # each once
    assert not list((tmp_path / "wal").glob("*.wal"))  # all settled: a clean stop leaves nothing


_SMALL_DISK = textwrap.dedent(
    """
    import io, json, os, subprocess, sys
    from pathlib import Path
    from latency_budget._serve.stats import Counters, EventLog
    from latency_budget._serve.wal import Wal, WalOptions

    mount = Path(sys.argv[1])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    counters = Counters()
    wal = Wal(WalOptions(directory=str(mount / "wal")), counters, EventLog(io.StringIO()))
    wal.open()
    wal.recovered()
    taken = refused = 0
    for trace_id in range(1, 101):  # 10 MB through a 2 MiB disk, each request settled once the hop took it
        seq = wal.append(b"x" * 100_000, {trace_id}, spans=1)
        if isinstance(seq, str):
            refused += 1
            continue
        taken += 1
        wal.settle([(trace_id, seq)])
    turned_over = wal.held()
    held, error = [], ""
    for trace_id in range(1000, 1100):  # the hop down: nothing settles, so the disk fills
        seq = wal.append(b"x" * 100_000, {trace_id}, spans=1)
        if isinstance(seq, str):
            error = seq
            break
        held.append((trace_id, seq))
    wal.settle(held)  # the hop back
    after = wal.append(b"x" * 100_000, {2000}, spans=1)
    print(json.dumps({
        "taken": taken, "refused": refused, "held": turned_over, "counters": counters.snapshot(),
        "held_when_full": len(held), "error": error, "after": after,
    }))
    wal.close()
    """
)


def test_a_log_on_a_2_mib_file_system_keeps_taking_requests_as_they_settle(tmp_path: Path) -> None:
    """On a 2 MiB tmpfs: 10 MB settled as it goes is all taken; full of unsettled requests, ENOSPC refuses, then not."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rm", "true"], check=False).returncode != 0:
        skip_or_fail_in_ci("a mount namespace (unshare -rm) to put the log on a 2 MiB tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        [unshare, "-rm", sys.executable, "-c", _SMALL_DISK, str(mount)],
        capture_output=True,
        text=True,
        timeout=BOUNDED_S,
        check=True,
        env={**os.environ},
    )
    found = json.loads(done.stdout)
    assert (found["taken"], found["refused"]) == (100, 0), found
    assert found["held"]["bytes"] < 2 * 1024 * 1024
    # Full of unsettled requests, the disk's error refuses (the sender retries), counted; settled, it goes on.
    assert found["held_when_full"] >= 10
    assert "No space left on device" in found["error"]
    assert found["counters"]["wal_write_errors"] >= 1
    assert isinstance(found["after"], int)


def _crash_copy(source: Path, target: Path) -> list[Path]:
    """What kill -9 leaves: the segment files as they are now."""
    target.mkdir()
    for segment in sorted(source.glob("*.wal")):
        shutil.copy(segment, target / segment.name)
    return sorted(target.glob("*.wal"))


def test_a_damaged_record_is_skipped_counted_and_the_replay_goes_on(hop: NextHop, tmp_path: Path) -> None:
    """One flipped byte in a middle record loses that record only: counted in records and spans, the rest replayed."""
    first_dir, crash_dir = tmp_path / "wal", tmp_path / "crashed"
    held = Limits(decision_wait_s=600.0, max_wait_s=600.0)
    acknowledged: list[tuple[int, int]] = []
    requests = [_padded(trace_id, 0) for trace_id in (1, 2, 3)]
    with running(BUDGETS, hop.url, limits=held, wal=WalOptions(directory=str(first_dir)), drain=False) as first:
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(first.grpc_endpoint))
        for request in requests:
            stub.Export(request, timeout=10)
            acknowledged += _ids(request)
        (segment,) = _crash_copy(first_dir, crash_dir)
    data = bytearray(segment.read_bytes())
    second = requests[1].SerializeToString()
    where = data.find(second)
    assert where > 0
    data[where + len(second) // 2] ^= 0x01  # one flipped bit in the middle of trace 2's request
    segment.write_bytes(bytes(data))
    second_hop = NextHop()
    try:
        limits = Limits(decision_wait_s=0.05, max_wait_s=600.0)
        with running(BUDGETS, second_hop.url, limits=limits, wal=WalOptions(directory=str(crash_dir))) as again:
            counters = again.wait_for(lambda c: c["spans_forwarded"] == 2 * SPANS, "traces 1 and 3 forwarded")
            assert counters["wal_records_corrupt"] == 1
            assert counters["wal_spans_corrupt"] == SPANS
        forwarded = _forwarded(second_hop)
        lost = [pair for pair in acknowledged if pair[0] == 2]
        assert forwarded == Counter(pair for pair in acknowledged if pair[0] != 2)  # once each
        assert len(lost) == counters["wal_spans_corrupt"]  # acknowledged = forwarded + counted
        (line,) = [e for e in again.events() if e["event"] == "wal_replayed"]
        assert (line["records_corrupt"], line["spans_corrupt"]) == (1, SPANS)
    finally:
        second_hop.stop()


def test_files_that_are_not_the_logs_own_are_ignored_with_one_line(hop: NextHop, tmp_path: Path) -> None:
    """A segment name with a huge number, garbage under a segment name, other names: one line, never a failure."""
    directory = tmp_path / "wal"
    directory.mkdir()
    foreign = {
        "9" * 30 + ".wal": b"",
        "99999999999999999999.wal": b"not a segment",
        f"{5:020d}.wal": b"garbage, not records" * 10,
        "notes.txt": b"someone's notes",
    }
    for name, content in foreign.items():
        (directory / name).write_bytes(content)
    acknowledged: list[tuple[int, int]] = []
    wal = WalOptions(directory=str(directory), max_bytes=1_000_000, segment_bytes=2_000)  # rolls often
    with running(BUDGETS, hop.url, wal=wal) as serve:
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(serve.grpc_endpoint))
        for trace_id in range(1, 21):
            request = _padded(trace_id, 1_000)
            stub.Export(request, timeout=10)  # never UNKNOWN, never refused
            acknowledged += _ids(request)
        serve.wait_for(lambda c: c["spans_forwarded"] == len(acknowledged), "every acknowledged span forwarded")
        lines = [e for e in serve.events() if e["event"] == "wal_foreign_files"]
        assert len(lines) == 1
        assert lines[0]["files"] == len(foreign)
    assert _forwarded(hop) == Counter(acknowledged)
    for name, content in foreign.items():
        assert (directory / name).read_bytes() == content  # left as they were


class _GatedHop(trace_service_pb2_grpc.TraceServiceServicer):
    """A real OTLP/gRPC next hop that takes the first ``taken`` requests and then holds every later one unanswered."""

    def __init__(self, taken: int) -> None:
        self.taken = taken
        self.lock = threading.Lock()
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.release = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            keep = len(self.requests) < self.taken
            if keep:
                self.requests.append(request)
        if not keep:
            self.release.wait(BOUNDED_S)
            context.abort(grpc.StatusCode.UNAVAILABLE, "held by the test")
        return trace_service_pb2.ExportTraceServiceResponse()

    def stop(self) -> None:
        self.release.set()
        self.server.stop(0).wait()


def _serve(budgets: Path, wal_dir: Path, hop_url: str, decision_wait: str) -> tuple[subprocess.Popen[str], str, str]:
    """A real serve process on ``wal_dir``: the process, its gRPC endpoint and its health URL (once it listens)."""
    argv = [sys.executable, "-m", "latency_budget", "serve", "--budgets", str(budgets), "--wal-dir", str(wal_dir)]
    env = {
        **os.environ,
        "LATENCY_BUDGET_SERVE_GRPC_ENDPOINT": "127.0.0.1:0",
        "LATENCY_BUDGET_SERVE_HTTP_ENDPOINT": "none",
        "LATENCY_BUDGET_SERVE_HEALTH_ENDPOINT": "127.0.0.1:0",
        "LATENCY_BUDGET_SERVE_REPORTS": "none",
        "LATENCY_BUDGET_SERVE_DECISION_WAIT": decision_wait,
        "OTEL_EXPORTER_OTLP_ENDPOINT": hop_url,
    }
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stderr is not None
    while True:  # the replay line (if any) comes before the listening line
        line = process.stderr.readline()
        assert line, "serve exited before listening"
        event = json.loads(line)
        if event["event"] == "listening":
            threading.Thread(target=process.stderr.read, daemon=True).start()  # keep its pipe drained
            return process, str(event["grpc"]), f"http://{event['health']}/health"


def _counters_of(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url, timeout=5) as response:
        counters: dict[str, int] = json.loads(response.read())["counters"]
    return counters


def _kill_9(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=BOUNDED_S) == -signal.SIGKILL


def _stopped(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def test_kill_9_while_forwarding_a_replay_sends_again_at_most_the_batches_in_flight(tmp_path: Path) -> None:
    """Killed while replayed traces go out, a restart resends none the hop took: each span once, none lost."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGET_FILE)
    wal_dir = tmp_path / "wal"
    acknowledged: list[tuple[int, int]] = []
    nowhere = NextHop()  # the first run decides nothing, so forwards nothing
    process, grpc_endpoint, health = _serve(budgets, wal_dir, nowhere.url, "600")
    try:
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(grpc_endpoint))
        for first in range(1, 5_001, 500):  # 5,000 traces, 20,000 spans: several batches
            request = trace_service_pb2.ExportTraceServiceRequest()
            for trace_id in range(first, first + 500):
                request.MergeFrom(_padded(trace_id, 0))
            stub.Export(request, timeout=10)
            acknowledged += _ids(request)
        _kill_9(process)
    finally:
        _stopped(process)
        nowhere.stop()
    gated = _GatedHop(taken=2)  # takes two requests, then holds the rest unanswered
    try:
        process, _, health = _serve(budgets, wal_dir, f"http://127.0.0.1:{gated.port}", "0.05")
        try:
            poll(
                lambda: (
                    True
                    if len(gated.requests) == 2
                    and _counters_of(health)["spans_forwarded"] == sum(len(_ids(r)) for r in gated.requests)
                    else None
                ),
                timeout=BOUNDED_S,
                what="two batches taken by the hop and counted",
            )
            _kill_9(process)  # while the third is in flight
        finally:
            _stopped(process)
    finally:
        gated.stop()
    first_run = Counter(pair for request in gated.requests for pair in _ids(request))
    assert first_run
    assert max(first_run.values()) == 1
    hop = NextHop()
    try:
        process, _, health = _serve(budgets, wal_dir, hop.url, "0.05")
        try:
            poll(
                lambda: True if len(first_run + _forwarded(hop)) == len(acknowledged) else None,
                timeout=BOUNDED_S,
                what="every acknowledged span forwarded",
            )
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=BOUNDED_S) == 0
        finally:
            _stopped(process)
        again = _forwarded(hop)
    finally:
        hop.stop()
    assert first_run + again == Counter(acknowledged)  # each acknowledged span once across the two runs


def test_settling_groups_cut_whole_traces_within_the_bounds() -> None:
    """Runs of whole traces within the span and byte bounds; a trace larger than either goes alone, never cut."""

    def decided(trace_id: int, pad: int) -> Decided:
        spans, _, _ = decode_request(_padded(trace_id, pad).SerializeToString(), wanted=None)
        return Decided(trace_id, spans, "judge", trace_id)

    small = [decided(trace_id, 0) for trace_id in range(1, 7)]  # 4 spans each
    assert [[d.trace_id for d in group] for group in settling_groups(small, 8)] == [[1, 2], [3, 4], [5, 6]]
    big = decided(7, 50_000)
    groups = settling_groups([small[0], big, small[1]], 100, max_bytes=10_000)
    assert [[d.trace_id for d in group] for group in groups] == [[1], [7], [2]]
    assert settling_groups([], 8) == []
