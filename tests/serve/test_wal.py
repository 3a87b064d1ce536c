"""serve's write-ahead log: framing, torn tails, settling, bounds, fsync, disk errors, replay after a crash."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from latency_budget._serve.assembly import Limits
from latency_budget._serve.stats import Counters, EventLog
from latency_budget._serve.wal import Wal, WalOptions, frame, read_records
from latency_budget.cli._main import main
from tests.e2e.services import poll

from .harness import WAIT_S, NextHop, record, running, send_grpc
from .test_command import BUDGET_FILE, _counters
from .test_judging import BUDGETS, agent_trace

SPANS = 4  # agent_trace: a root, a retrieval and two model calls


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _wal(directory: Path, *, replayed: bool = True, **options: object) -> tuple[Wal, Counters, io.StringIO]:
    """A log opened on ``directory``; with ``replayed``, past its replay (as the server leaves it)."""
    counters, stream = Counters(), io.StringIO()
    wal = Wal(WalOptions(directory=str(directory), **options), counters, EventLog(stream))  # type: ignore[arg-type]
    wal.open()
    if replayed:
        wal.recovered()
    return wal, counters, stream


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.wal"))


def _request(first_trace: int, *, rootless: bool = False) -> bytes:
    spans = record(agent_trace, first_trace=first_trace)
    if rootless:
        spans = [span for span in spans if span.parent is not None]
    return encode_spans(spans).SerializeToString()


def _trace_ids(hop: NextHop) -> list[int]:
    return [int.from_bytes(span.trace_id, "big") for _, _, span in hop.spans()]


def test_records_round_trip_and_a_torn_tail_is_found(tmp_path: Path) -> None:
    """Records read back as written; a last record cut short is a torn tail, not a damaged record."""
    records = [frame(1, 1, b"first", 3), frame(2, 1, b""), frame(3, 2, b"x" * 1000)]
    data = b"".join(records)
    read = read_records(data)
    assert [(seq, kind, data[start:stop]) for seq, kind, start, stop in read.records] == [
        (1, 1, b"first"),
        (2, 1, b""),
        (3, 2, b"x" * 1000),
    ]
    assert (read.corrupt_records, read.torn, read.found) == (0, False, True)
    for cut in (data[:-10], data[: len(records[0]) + len(records[1]) + 5]):  # in the payload, in the header
        read = read_records(cut)
        assert [seq for seq, *_ in read.records] == [1, 2]
        assert (read.corrupt_records, read.torn) == (0, True)


def test_a_damaged_payload_is_skipped_with_its_spans_and_reading_goes_on() -> None:
    """A flipped byte in a payload loses that record only, counted with the spans its header names."""
    records = [frame(1, 1, b"first", 3), frame(2, 1, b"second", 5), frame(3, 1, b"third", 7)]
    flipped = bytearray(b"".join(records))
    flipped[len(records[0]) + len(records[1]) - 1] ^= 0xFF  # the second record's last payload byte
    read = read_records(bytes(flipped))
    assert [seq for seq, *_ in read.records] == [1, 3]
    assert (read.corrupt_records, read.corrupt_spans, read.torn) == (1, 5, False)


def test_a_damaged_header_is_passed_over_to_the_next_good_one() -> None:
    """A flipped byte in a header (its length, say) resynchronises on the next marker; the gap in sequences counts."""
    records = [frame(seq, 1, b"r" * 50, 2) for seq in range(1, 6)]
    flipped = bytearray(b"".join(records))
    flipped[len(records[0]) + 9] ^= 0x40  # the second record's length
    flipped[2 * len(records[0]) + 9] ^= 0x40  # and the third's
    read = read_records(bytes(flipped))
    assert [seq for seq, *_ in read.records] == [1, 4, 5]
    assert read.corrupt_records == 2
    garbage = read_records(b"\x00" * 100 + records[0])  # garbage before a record: one damaged stretch
    assert [seq for seq, *_ in garbage.records] == [1]
    assert garbage.corrupt_records == 1
    assert read_records(b"no record in here at all").found is False


def test_a_torn_tail_after_a_crash_is_counted_and_the_rest_recovered(tmp_path: Path) -> None:
    """Reopened after a write cut short, the log yields the whole records before it and counts one torn record."""
    wal, _, _ = _wal(tmp_path)
    assert wal.append(b"one", {1}) == 1
    assert wal.append(b"two", {2}) == 2
    (segment,) = _segments(tmp_path)
    wal.close()  # traces 1 and 2 are unsettled: the segment stays
    with segment.open("ab") as file:
        file.write(frame(3, 1, b"three")[:-2])  # a crash in the middle of the third write
    again, _, _ = _wal(tmp_path, replayed=False)
    assert [(r.seq, r.body) for r in again.recover()] == [(1, b"one"), (2, b"two")]
    assert (again.torn_records, again.corrupt_records) == (1, 0)
    assert again.append(b"four", {4}) == 3  # numbering goes on after the last whole record


def test_a_crash_right_after_a_segment_was_made_leaves_an_empty_one_that_is_removed(tmp_path: Path) -> None:
    """An empty segment left by a crash holds nothing: removed at start, numbering goes on after the last record."""
    wal, _, _ = _wal(tmp_path)
    assert wal.append(b"one", {1}) == 1
    wal.close()
    (tmp_path / f"{2:020d}.wal").touch()  # rolled, then killed before the first write
    again, _, _ = _wal(tmp_path, replayed=False)
    assert [(r.seq, r.body) for r in again.recover()] == [(1, b"one")]
    assert (again.corrupt_records, again.torn_records) == (0, 0)
    for recovered in again.recover():
        again.track(recovered, {1})
    again.recovered()
    assert again.append(b"two", {2}) == 2
    assert [path.name for path in _segments(tmp_path)] == [f"{n:020d}.wal" for n in (1, 2)]
    again.settle([(1, 1)])
    assert [path.name for path in _segments(tmp_path)] == [f"{2:020d}.wal"]


def test_a_segment_is_deleted_once_everything_in_it_and_before_it_is_settled(tmp_path: Path) -> None:
    """Segments roll at their size and go oldest first, only when every trace they hold has been settled."""
    wal, counters, _ = _wal(tmp_path, segment_bytes=1)  # every record past the first starts a new segment
    seqs = [wal.append(b"a" * 100, {trace_id}) for trace_id in (1, 2, 3)]
    assert seqs == [1, 2, 3]
    names = [path.name for path in _segments(tmp_path)]
    assert len(names) == 3  # one request each: traces 1, 2 and 3

    def left() -> list[str]:
        return [path.name for path in _segments(tmp_path) if path.name in names]

    wal.settle([(2, 2)])
    assert left() == names  # trace 2's segment is newer than trace 1's, which holds it
    wal.settle([(1, 1)])
    assert left() == names[2:]
    wal.settle([(3, 2)])  # settled only up to an earlier request: the request of seq 3 is kept
    assert left() == names[2:]
    wal.settle([(3, 3)])
    assert left() == []
    assert len(_segments(tmp_path)) == 1  # the one being written (holding the settled records)
    assert counters.snapshot()["wal_segments_deleted"] >= 3
    wal.close()
    assert _segments(tmp_path) == []  # nothing unsettled: a clean stop leaves nothing


def test_the_settled_records_say_what_not_to_replay(tmp_path: Path) -> None:
    """After a restart the settled sequence of each trace is known, so its requests up to there are not replayed."""
    wal, _, _ = _wal(tmp_path)
    wal.append(b"r1", {1, 2})
    wal.settle([(1, 1)])
    wal.append(b"r2", {1})  # a late span of trace 1, not settled yet
    wal.close()
    again, _, _ = _wal(tmp_path, replayed=False)
    assert again.settled_before == {1: 1}
    assert [(r.seq, r.body) for r in again.recover()] == [(1, b"r1"), (2, b"r2")]


def test_full_refuses_and_counts_and_the_segment_being_written_is_freed_once_settled(tmp_path: Path) -> None:
    """Past --wal-max-bytes a request is refused, naming the flag, counted; once settled, the log turns over."""
    wal, counters, _ = _wal(tmp_path, max_bytes=200)
    assert wal.append(b"x" * 100, {1}) == 1
    refused = wal.append(b"x" * 100, {2})
    assert isinstance(refused, str)
    assert "--wal-max-bytes 200" in refused
    assert counters.snapshot()["wal_requests_refused"] == 1
    wal.settle([(1, 1)])  # the only segment, the one being written, now holds nothing unsettled
    assert wal.append(b"x" * 100, {2}) == 2  # rolled and deleted to make room
    assert wal.held()["bytes"] <= 200
    assert len(_segments(tmp_path)) == 1


def test_a_request_larger_than_the_bound_is_taken_when_the_log_holds_nothing_else(tmp_path: Path) -> None:
    """A request over --wal-max-bytes waits for the log to empty, then is taken: refused for now, never for good."""
    wal, _, _ = _wal(tmp_path, max_bytes=1_000)
    assert wal.append(b"x" * 100, {1}) == 1
    assert isinstance(wal.append(b"y" * 5_000, {2}), str)  # the log holds trace 1: the sender retries
    wal.settle([(1, 1)])
    assert wal.append(b"y" * 5_000, {2}) == 2
    assert isinstance(wal.append(b"z" * 10, {3}), str)  # past the bound now, until trace 2 is settled
    wal.settle([(2, 2)])
    assert wal.append(b"z" * 10, {3}) == 3
    wal.close()


def test_the_segment_size_follows_the_bound(tmp_path: Path) -> None:
    """Segments are a quarter of --wal-max-bytes (at most 16 MiB), so a small log rolls and deletes as a large one."""
    small, _, _ = _wal(tmp_path / "small", max_bytes=1_000_000)
    large, _, _ = _wal(tmp_path / "large", max_bytes=1 << 30)
    assert small.held()["segment_bytes"] == 250_000
    assert large.held()["segment_bytes"] <= 16 * 1024 * 1024
    for trace_id in range(1, 51):  # 50 requests of 40 KB: 2 MB through a 1 MB log
        seq = small.append(b"y" * 40_000, {trace_id})
        assert isinstance(seq, int)
        small.settle([(trace_id, seq)])
    assert small.held()["bytes"] <= 250_000 + 40_100
    small.close()
    large.close()


def test_full_log_refuses_over_grpc_with_retry(hop: NextHop, tmp_path: Path) -> None:
    """The server answers a request the log cannot take as it answers when full: RESOURCE_EXHAUSTED, counted."""
    body = _request(1)
    wal = WalOptions(directory=str(tmp_path / "wal"), max_bytes=len(body) + 40)
    with running(BUDGETS, hop.url, limits=Limits(decision_wait_s=60.0), wal=wal) as serve:
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(serve.grpc_endpoint))
        stub.Export(encode_spans(record(agent_trace, first_trace=1)), timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Export(encode_spans(record(agent_trace, first_trace=2)), timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "write-ahead log full" in str(refused.value.details())
        counters = serve.counters()
        assert counters["wal_requests_refused"] == 1
        assert counters["requests_refused"] == 1
        assert counters["spans_received"] == SPANS  # the refused request is not in the buffer either
    assert len(hop.spans()) == SPANS


@pytest.mark.parametrize(("policy", "syncs_per_append"), [("always", 1), ("never", 0)])
def test_fsync_policy_always_syncs_each_request_never_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, syncs_per_append: int
) -> None:
    """--wal-fsync always syncs every request before it is answered; never leaves it to the kernel."""
    wal, _, _ = _wal(tmp_path, fsync=policy)
    synced: list[int] = []
    monkeypatch.setattr(os, "fdatasync", synced.append)
    for trace_id in range(5):
        wal.append(b"x", {trace_id})
    assert len(synced) == 5 * syncs_per_append


def test_fsync_policy_interval_syncs_in_the_background(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--wal-fsync interval does not sync on append; a background thread syncs what was written."""
    synced: list[int] = []
    monkeypatch.setattr(os, "fdatasync", synced.append)
    wal, _, _ = _wal(tmp_path, fsync="interval", fsync_interval_s=0.01)
    wal.append(b"x", {1})
    poll(lambda: True if synced else None, timeout=WAIT_S, what="a background fsync")
    wal.close()


def test_a_bad_wal_dir_is_one_line_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --wal-dir that cannot be made is one line naming --wal-dir and exit status 2, before anything listens."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGET_FILE)
    (tmp_path / "file").write_text("")
    argv = ["serve", "--budgets", str(budgets), "--wal-dir", str(tmp_path / "file" / "wal"), "--reports", "none"]
    assert main([*argv, "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--wal-dir" in err[0]


def test_a_wal_dir_in_use_is_refused(tmp_path: Path) -> None:
    """Two servers never share a log: the second is told the directory is in use."""
    wal, _, _ = _wal(tmp_path)
    with pytest.raises(Exception, match="in use by another"):
        _wal(tmp_path)
    wal.close()


def test_restart_replays_exactly_the_traces_not_yet_forwarded(hop: NextHop, tmp_path: Path) -> None:
    """From the log as a crash leaves it, a new server replays the held trace whole and skips the forwarded one."""
    first_dir, crash_dir = tmp_path / "wal", tmp_path / "crashed"
    limits = Limits(decision_wait_s=0.05, max_wait_s=600.0)  # a rootless trace waits for its root
    with running(BUDGETS, hop.url, limits=limits, wal=WalOptions(directory=str(first_dir))) as first:
        spans = record(agent_trace, first_trace=1)
        assert send_grpc(spans, first.grpc_endpoint).name == "SUCCESS"
        first.wait_for(lambda c: c["spans_forwarded"] == SPANS, "trace 1 forwarded")
        held = [span for span in record(agent_trace, first_trace=2) if span.parent is not None]
        assert send_grpc(held, first.grpc_endpoint).name == "SUCCESS"
        first.wait_for(lambda c: c["spans_received"] == 2 * SPANS - 1, "trace 2's children held")
        # What kill -9 leaves: the files as they are now (written, so in the page cache).
        crash_dir.mkdir()
        for segment in _segments(first_dir):
            shutil.copy(segment, crash_dir / segment.name)
    second_hop = NextHop()
    try:
        with running(BUDGETS, second_hop.url, limits=limits, wal=WalOptions(directory=str(crash_dir))) as second:
            counters = second.counters()
            assert counters["wal_spans_replayed"] == SPANS - 1
            assert counters["wal_traces_replayed"] == 1
            assert counters["wal_spans_deduplicated"] == SPANS
            assert counters["wal_records_corrupt"] == 0
            (replayed,) = [e for e in second.events() if e["event"] == "wal_replayed"]
            assert replayed["spans"] == SPANS - 1
            root = [span for span in record(agent_trace, first_trace=2) if span.parent is None]
            assert send_grpc(root, second.grpc_endpoint).name == "SUCCESS"  # the sender's retry, after the restart
            second.wait_for(lambda c: c["traces_judged"] == 1, "trace 2 judged whole")
            second.wait_for(lambda c: c["spans_forwarded"] == SPANS, "trace 2 forwarded")
            assert second.health()[1]["held"]["wal"]["segments"] == 1  # the earlier ones settled and deleted
        assert _trace_ids(second_hop) == [2] * SPANS
        judged = [span for _, _, span in second_hop.spans() if not span.parent_span_id]
        assert any(pair.key == "latency_budget.verdict" for pair in judged[0].attributes)
    finally:
        second_hop.stop()


def test_kill_9_loses_nothing_acknowledged(hop: NextHop, tmp_path: Path) -> None:
    """A real serve killed by SIGKILL while holding traces forwards them, judged whole, once restarted on its log."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGET_FILE)
    wal_dir = tmp_path / "wal"

    def start(decision_wait: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
        argv = [sys.executable, "-m", "latency_budget", "serve", "--budgets", str(budgets), "--wal-dir", str(wal_dir)]
        env = {
            **os.environ,
            "LATENCY_BUDGET_SERVE_GRPC_ENDPOINT": "127.0.0.1:0",
            "LATENCY_BUDGET_SERVE_HTTP_ENDPOINT": "none",
            "LATENCY_BUDGET_SERVE_HEALTH_ENDPOINT": "127.0.0.1:0",
            "LATENCY_BUDGET_SERVE_REPORTS": "none",
            "LATENCY_BUDGET_SERVE_DECISION_WAIT": decision_wait,
            "OTEL_EXPORTER_OTLP_ENDPOINT": hop.url,
        }
        process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
        assert process.stderr is not None
        while True:  # the replay line (if any) comes before the listening line
            event = json.loads(process.stderr.readline())
            if event["event"] == "listening":
                return process, event

    process, listening = start("600")  # nothing is decided before the kill
    try:
        for first in (1, 2, 3):
            assert send_grpc(record(agent_trace, first_trace=first), str(listening["grpc"])).name == "SUCCESS"
        poll(
            lambda: True if (c := _counters(listening["health"])) and c["spans_received"] == 3 * SPANS else None,
            timeout=WAIT_S,
            what="3 traces held",
        )
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert hop.spans() == []
    process, listening = start("0.05")
    try:
        found = poll(
            lambda: c if (c := _counters(listening["health"])) and c["spans_forwarded"] == 3 * SPANS else None,
            timeout=WAIT_S,
            what="the 3 replayed traces forwarded",
        )
        assert found["wal_spans_replayed"] == 3 * SPANS
        assert found["traces_judged"] == 3
        assert sorted(_trace_ids(hop)) == sorted([1, 2, 3] * SPANS)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert _segments(wal_dir) == []  # all settled, stopped cleanly: nothing left on disk


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--wal-dir", "DIR", "--wal-fsync", "sometimes"], "--wal-fsync: expected one of always, interval, never"),
        (["--wal-dir", "DIR", "--wal-max-bytes", "2000", "--max-bytes", "1000"], "--wal-max-bytes must not be larger"),
        (["--wal-dir", "DIR", "--wal-fsync-interval", "0"], "--wal-fsync-interval: expected a positive number"),
    ],
)
def test_bad_wal_options_are_one_line_and_exit_2(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --wal-* value is one line naming the option, and exit status 2, before anything is written."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGET_FILE)
    argv = [str(tmp_path / "wal") if arg == "DIR" else arg for arg in argv]
    assert main(["serve", "--budgets", str(budgets), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert message in err[0]
    assert not (tmp_path / "wal").exists()
