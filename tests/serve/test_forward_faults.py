"""Forwarding under faults: batches over the hop's limit, a slow or down hop, shutdown; nothing acknowledged lost.

Each test asserts the invariant by span id (acknowledged = forwarded once + still held +
counted as too large), with a sender that retries what ``serve`` refuses. Each runs a
few seconds at most: a few thousand spans, paced.
"""

from __future__ import annotations

import io
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from latency_budget._serve import intake as intake_module
from latency_budget._serve.assembly import Limits
from latency_budget._serve.forwarder import Forwarder, Outcome
from latency_budget._serve.otlp import Origin, attributes_of, decode_request, encode_batch
from latency_budget._serve.stats import Counters, EventLog
from latency_budget._serve.wal import WalOptions
from tests.e2e.services import poll

from .forward_lab import (
    SPANS_PER_TRACE,
    LabHop,
    Pacer,
    RetryingSender,
    assert_invariant,
    genai_request,
    span_ids,
    span_key,
)
from .harness import running
from .test_judging import BUDGETS

MIB = 1024 * 1024
WAIT_S = 25.0


@pytest.fixture
def hop() -> Iterator[LabHop]:
    next_hop = LabHop()
    yield next_hop
    next_hop.stop()


def _all_forwarded(hop: LabHop, acknowledged: list[tuple[int, int]], what: str) -> None:
    wanted = set(acknowledged)
    poll(lambda: True if wanted <= set(hop.received()) else None, timeout=WAIT_S, what=what)


@pytest.mark.parametrize("hop_limit", [4 * MIB, 1 * MIB], ids=["hop-4MiB", "hop-1MiB"])
def test_batches_stay_under_the_hops_limit_or_are_split_and_every_span_arrives_once(
    hop: LabHop, hop_limit: int
) -> None:
    """1,000 GenAI traces with 2.5 KB prompts decided together reach a hop taking 4 MiB (or 1 MiB), once each."""
    hop.stop()
    hop.max_receive_bytes = hop_limit
    hop.start()
    with running(BUDGETS, hop.url, limits=Limits(decision_wait_s=1.0, max_wait_s=30.0)) as serve:
        sender = RetryingSender(serve.grpc_endpoint)
        give_up = time.monotonic() + WAIT_S
        for first in range(1, 1001, 50):
            assert sender.send(genai_request(first, 50), give_up_at=give_up)
        _all_forwarded(hop, sender.acknowledged, "every acknowledged span at the hop")
        counters = serve.counters()
        events = [e["event"] for e in serve.events()]
    sender.close()
    assert len(sender.acknowledged) == 1000 * SPANS_PER_TRACE
    assert_invariant(sender.acknowledged, hop.received())
    assert counters["spans_dropped"] == 0
    assert "next_hop_down" not in events  # the hop was up all along


def test_a_span_alone_over_the_limit_is_truncated_and_counted_and_the_rest_flows(hop: LabHop) -> None:
    """A span with a 5 MiB attribute goes out with its value truncated (counted); every other span arrives too."""
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(genai_request(1, 20))
    spans = request.resource_spans[0].scope_spans[0].spans
    huge = spans[2].attributes.add()
    huge.key = "gen_ai.tool.output"
    huge.value.string_value = "z" * (5 * MIB)
    big_key = span_key(spans[2].trace_id, spans[2].span_id)
    body = request.SerializeToString()
    with running(BUDGETS, hop.url) as serve:
        sender = RetryingSender(serve.grpc_endpoint)
        assert sender.send(body, give_up_at=time.monotonic() + WAIT_S)
        sender.send(genai_request(100, 20), give_up_at=time.monotonic() + WAIT_S)
        _all_forwarded(hop, sender.acknowledged, "every span, the huge one truncated")
        counters = serve.counters()
    sender.close()
    assert_invariant(sender.acknowledged, hop.received())
    assert counters["spans_truncated"] == 1
    (forwarded,) = [s for _, _, s in hop.spans() if span_key(s.trace_id, s.span_id) == big_key]
    value = attributes_of(forwarded.attributes)["gen_ai.tool.output"]
    assert isinstance(value, str)
    assert 0 < len(value) < 4 * MIB
    assert forwarded.ByteSize() < 4 * MIB


@pytest.mark.parametrize("fault", ["slow", "down"])
def test_a_slow_or_down_hop_fills_the_queue_then_intake_is_refused_never_dropped(hop: LabHop, fault: str) -> None:
    """Hop answering in 0.5 s, or down for the traffic's length: the sender is refused and retries; nothing dropped."""
    requests = [genai_request(first, 5, prompt_bytes=200) for first in range(1, 301, 5)]  # 60 requests, 1,200 spans
    if fault == "slow":
        hop.delay_s = 0.5
    else:
        hop.stop()
    limits = Limits(decision_wait_s=0.05, max_wait_s=30.0)
    with running(BUDGETS, hop.url, limits=limits, queue_spans=400, shutdown_timeout_s=15.0) as serve:
        sender = RetryingSender(serve.grpc_endpoint)
        pacer = Pacer(sender, requests, pace_s=0.05, give_up_s=WAIT_S)
        pacer.start()
        if fault == "down":
            # Down until the queue is full, and the sender refused for a while (or, before the fix, dropping).
            poll(
                lambda: (
                    True if serve.counters()["requests_refused"] >= 10 or serve.counters()["spans_dropped"] else None
                ),
                timeout=WAIT_S,
                what="the queue full: intake refused",
            )
            hop.start()
        pacer.join(WAIT_S + 5)
        assert not pacer.is_alive()
        _all_forwarded(hop, sender.acknowledged, "every acknowledged span at the hop")
        counters = serve.counters()
    sender.close()
    assert pacer.failed == 0
    assert len(sender.acknowledged) == 1200
    assert_invariant(sender.acknowledged, hop.received())
    assert counters["spans_dropped"] == 0
    if fault == "down":
        assert counters["requests_refused"] > 0  # the sender's retry queue held the data


def test_sigterm_drain_forwards_everything_held_past_the_queue_size(hop: LabHop) -> None:
    """At shutdown every trace held goes out, more than --queue-size of them, when the hop takes them."""
    limits = Limits(decision_wait_s=60.0, max_wait_s=120.0)
    with running(BUDGETS, hop.url, limits=limits, queue_spans=400, drain=False) as serve:
        sender = RetryingSender(serve.grpc_endpoint)
        give_up = time.monotonic() + WAIT_S
        for first in range(1, 401, 20):
            assert sender.send(genai_request(first, 20, prompt_bytes=100), give_up_at=give_up)
        assert serve.server.drain()
        counters = serve.server.counters.snapshot()
    sender.close()
    assert len(sender.acknowledged) == 1600
    assert_invariant(sender.acknowledged, hop.received())
    assert counters["spans_dropped"] == 0


def test_with_the_log_what_the_hop_did_not_take_by_the_deadline_is_kept_and_sent_after_a_restart(
    hop: LabHop, tmp_path: Path
) -> None:
    """Hop down through a shutdown: the spans stay in the write-ahead log, and the next run forwards them, once."""
    wal = WalOptions(directory=str(tmp_path / "wal"))
    hop.stop()
    limits = Limits(decision_wait_s=0.05, max_wait_s=30.0)
    with running(BUDGETS, hop.url, limits=limits, wal=wal, shutdown_timeout_s=1.0) as serve:
        sender = RetryingSender(serve.grpc_endpoint)
        give_up = time.monotonic() + WAIT_S
        for first in range(1, 101, 20):
            assert sender.send(genai_request(first, 20, prompt_bytes=100), give_up_at=give_up)
        serve.wait_for(lambda c: c["traces_judged"] == 100, "every trace judged, waiting for the hop")
    sender.close()
    first_run = serve.server.counters.snapshot()
    assert hop.received() == {}
    hop.start()
    with running(BUDGETS, hop.url, limits=limits, wal=wal) as again:
        _all_forwarded(hop, sender.acknowledged, "the held spans forwarded by the next run")
        counters = again.counters()
    assert_invariant(sender.acknowledged, hop.received())
    assert counters["wal_spans_replayed"] == 400
    assert first_run["spans_forwarded"] == 0


class _HeldSender:
    """A next hop that takes each request only when the test lets it (one ``release`` a request)."""

    def __init__(self) -> None:
        self.release = threading.Semaphore(0)
        self.sent: list[int] = []
        self.closed = False

    def send(self, request: bytes) -> Outcome:
        self.release.acquire()
        if self.closed:  # as the exporter's shutdown cancels a call in flight
            return "down"
        self.sent.append(len(request))
        return "sent"

    def shutdown(self) -> None:
        self.closed = True
        self.release.release(100)


def _pairs(body: bytes) -> list[tuple[Origin, bytes]]:
    return [(span.origin, span.encoded) for span in decode_request(body)[0]]


def test_a_group_settles_only_after_every_group_ahead_of_it_left_and_close_settles_nothing_unsent() -> None:
    """Groups settle in order once sent; at the close deadline what the hop has not taken is left, never settled."""
    counters, settled = Counters(), []
    sender = _HeldSender()
    forwarder = Forwarder(sender, counters=counters, log=EventLog(io.StringIO()), destination="test", workers=1)
    forwarder.start()
    forwarder.put(_pairs(genai_request(1, 1, prompt_bytes=10)), lambda: settled.append("first"))
    forwarder.put(_pairs(genai_request(2, 1, prompt_bytes=10)), lambda: settled.append("second"))
    assert settled == []
    sender.release.release()
    poll(lambda: True if settled == ["first", "second"] else None, timeout=WAIT_S, what="both settled, in order")
    forwarder.put(_pairs(genai_request(3, 1, prompt_bytes=10)), lambda: settled.append("at close"))
    assert forwarder.close(time.monotonic() + 0.1, kept=True) == SPANS_PER_TRACE  # the hop holds it
    assert settled == ["first", "second"]
    assert counters.snapshot()["spans_kept_in_wal"] == SPANS_PER_TRACE
    assert counters.snapshot()["spans_dropped"] == 0


def test_a_request_still_being_decoded_when_the_drain_ends_is_refused_never_acknowledged_and_lost(
    hop: LabHop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTP request whose decode outlasts the whole drain is answered 503 (retry), not 200 with its spans lost."""
    decoding, release = threading.Event(), threading.Event()

    def held_decode(body: bytes, **options: Any) -> Any:
        decoding.set()
        release.wait(WAIT_S)  # the fault: a decode that outlasts the drain (a large request on a busy core)
        return decode_request(body, **options)

    monkeypatch.setattr(intake_module, "decode_request", held_decode)
    body = genai_request(1, 10)
    answers: list[int] = []
    with running(BUDGETS, hop.url, drain=False, shutdown_timeout_s=2.0) as serve:

        def post() -> None:
            request = urllib.request.Request(
                f"{serve.http_url}/v1/traces",
                data=body,
                method="POST",
                headers={"Content-Type": "application/x-protobuf"},
            )
            try:
                with urllib.request.urlopen(request, timeout=WAIT_S) as response:
                    answers.append(response.status)
            except urllib.error.HTTPError as error:
                answers.append(error.code)

        client = threading.Thread(target=post)
        client.start()
        assert decoding.wait(WAIT_S)
        serve.server.drain()
        release.set()
        client.join(WAIT_S)
    forwarded = hop.received()
    if answers == [200]:  # acknowledged: then it must have been carried
        assert_invariant(span_ids(body), forwarded)
    assert answers == [503]
    assert forwarded == {}


class _GatedSender:
    """A next hop that takes a request once the test opens the gate of every trace in it."""

    def __init__(self) -> None:
        self.gates: dict[int, threading.Event] = {}

    def send(self, request: bytes) -> Outcome:
        for trace_id, _ in span_ids(request):
            if not self.gates.setdefault(trace_id, threading.Event()).wait(WAIT_S):
                return "down"
        return "sent"

    def shutdown(self) -> None:
        for gate in self.gates.values():
            gate.set()


def test_a_group_settles_as_soon_as_it_left_unless_an_earlier_group_of_one_of_its_traces_is_still_out() -> None:
    """Two requests in flight: a trace's group settles before an unrelated earlier one, never before its own earlier."""
    first, second = _pairs(genai_request(1, 1, prompt_bytes=10)), _pairs(genai_request(2, 1, prompt_bytes=10))
    one_request = len(encode_batch(first)) + 200  # each group alone in a request
    sender, settled = _GatedSender(), []
    forwarder = Forwarder(
        sender,
        counters=Counters(),
        log=EventLog(io.StringIO()),
        destination="test",
        workers=2,
        max_batch_bytes=one_request,
    )
    forwarder.start()
    forwarder.put(first, lambda: settled.append("trace 1"), frozenset({1}))
    forwarder.put(second, lambda: settled.append("trace 2"), frozenset({2}))
    sender.gates.setdefault(2, threading.Event()).set()
    poll(lambda: True if settled == ["trace 2"] else None, timeout=WAIT_S, what="trace 2 settled before trace 1")
    forwarder.put(first, lambda: settled.append("trace 1 again"), frozenset({1}))  # late spans of trace 1
    sender.gates.setdefault(1, threading.Event()).set()
    poll(lambda: True if len(settled) == 3 else None, timeout=WAIT_S, what="all settled")
    assert settled == ["trace 2", "trace 1", "trace 1 again"]
    assert forwarder.close(time.monotonic() + 5) == 0


def _tiny_request(spans: int) -> bytes:
    request = trace_service_pb2.ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for index in range(spans):
        span = scope.spans.add(trace_id=(index // 100 + 1).to_bytes(16, "big"), span_id=(index + 1).to_bytes(8, "big"))
        if index % 100:
            span.parent_span_id = (index // 100 * 100 + 1).to_bytes(8, "big")
    return request.SerializeToString()


def _events_request(events: int) -> bytes:
    request = trace_service_pb2.ExportTraceServiceRequest()
    span = (
        request.resource_spans.add()
        .scope_spans.add()
        .spans.add(trace_id=(1).to_bytes(16, "big"), span_id=(1).to_bytes(8, "big"), name="POST /ask")
    )
    for index in range(events):
        span.events.add(name="tok", time_unix_nano=index)
    return request.SerializeToString()


@pytest.mark.parametrize(
    "body",
    [_tiny_request(20_000), genai_request(1, 500), _events_request(20_000)],
    ids=["tiny-spans", "genai-2.5KB-prompts", "a-root-with-20000-events"],
)
def test_what_a_held_span_counts_for_is_at_least_what_it_costs(body: bytes) -> None:
    """The sizes --max-bytes adds up cover the memory the decoded spans really hold (tracemalloc), within 1.5x."""
    tracemalloc.start()
    try:
        spans, _, _ = decode_request(body)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    counted = sum(span.size for span in spans)
    assert held <= counted <= 1.5 * held, (held, counted, len(body))
