"""The handover (``--handover-endpoint``): a rootless part goes back through layer 1 to its trace's owner.

Layer 1 here is what it does for a part: deliver it to the instance that owns the trace
now. Two serves stand for the two cases: the ring changed (the part goes to the other
instance, which holds the root) and the ring did not (the part comes back to the
instance that sent it, which must not send it again: the loop guard). The real Collector
between them is tests/e2e/test_collector_tier_crash.py's backend_added case.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from latency_budget import _attributes as attr
from latency_budget._serve.assembly import Limits
from latency_budget._serve.otlp import attributes_of
from latency_budget._serve.wal import WalOptions
from tests.e2e.services import free_ports

from .harness import NextHop, record, running, send_grpc
from .test_judging import BUDGETS, agent_trace
from .test_partial import _trace_durations

HELD = Limits(decision_wait_s=30.0, max_wait_s=60.0)  # nothing leaves before the drain


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _forwarded(hop: NextHop) -> list[tuple[tuple[int, int], dict[str, object]]]:
    """Every span the next hop received, duplicates kept: ((trace id, span id), its attributes)."""
    return [
        ((int.from_bytes(span.trace_id, "big"), int.from_bytes(span.span_id, "big")), attributes_of(span.attributes))
        for _, _, span in hop.spans()
    ]


def _key(span: ReadableSpan) -> tuple[int, int]:
    return span.context.trace_id, span.context.span_id


def test_a_part_handed_back_to_its_own_instance_is_not_handed_over_twice(hop: NextHop) -> None:
    """Ring unchanged (layer 1 sends the part back here): handed over once, then forwarded no_root after --max-wait."""
    spans = record(agent_trace)
    children = [s for s in spans if s.parent is not None]
    (port,) = free_ports(1)
    itself = f"127.0.0.1:{port}"
    limits = Limits(decision_wait_s=0.05, max_wait_s=0.5)
    with running(BUDGETS, hop.url, limits=limits, grpc_endpoint=itself, handover_endpoint=f"http://{itself}") as a:
        assert send_grpc(children, a.grpc_endpoint).name == "SUCCESS"
        counters = a.wait_for(lambda c: c["spans_forwarded"] == 3, "the part forwarded after coming back")
    assert counters["traces_handed_over"] == 1
    assert counters["spans_handed_over"] == 3
    assert counters["spans_received"] == 6  # from the sender, then from itself: once each
    assert counters["traces_forwarded_unjudged"] == 1
    forwarded = _forwarded(hop)
    assert sorted(key for key, _ in forwarded) == sorted(_key(s) for s in children)  # each once
    for _, attributes in forwarded:  # the tops of the rootless part, marked; nothing internal leaked
        assert attributes.get(attr.PARTIAL_REASON) == "no_root"
        assert not any("handover" in key for key in attributes)


def test_drain_hands_open_rootless_parts_to_the_owner_which_judges_the_trace_whole(
    hop: NextHop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM of the instance holding the children: they go to the root's instance, which judges the trace whole."""
    spans = record(agent_trace)
    children = [s for s in spans if s.parent is not None]
    root = next(s for s in spans if s.parent is None)
    with running(BUDGETS, hop.url, limits=HELD, reports=True) as owner:
        # The next hop's TLS setting (the chart: serve.nextHop.insecure) is not layer 1's: http:// is plain.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "false")
        with running(BUDGETS, hop.url, limits=HELD, handover_endpoint=f"http://{owner.grpc_endpoint}") as old:
            assert send_grpc([root], owner.grpc_endpoint).name == "SUCCESS"
            assert send_grpc(children, old.grpc_endpoint).name == "SUCCESS"
            old.wait_for(lambda c: c["spans_received"] == 3, "the old instance holds the children")
        # The old instance drained (its block ended): the children are with the owner, acknowledged.
        old_counters = old.server.counters.snapshot()
        owner.wait_for(lambda c: c["spans_received"] == 4, "the owner holds the whole trace")
    owner_counters = owner.server.counters.snapshot()
    assert old_counters["traces_handed_over"] == 1
    assert old_counters["spans_handed_over"] == 3
    assert old_counters["spans_forwarded"] == 0
    assert old_counters["traces_forwarded_unjudged"] == 0
    assert owner_counters["traces_judged"] == 1
    assert owner_counters["traces_partial"] == 0
    forwarded = _forwarded(hop)
    assert sorted(key for key, _ in forwarded) == sorted(_key(s) for s in spans)  # every span once
    root_attributes = dict(forwarded)[_key(root)]
    assert attr.PARTIAL not in root_attributes
    assert root_attributes["latency_budget.stages.retrieval.actual_ms"] == 60.0
    assert root_attributes["latency_budget.stages.model_call.actual_ms"] == 240.0
    assert not any(attr.PARTIAL in attributes for _, attributes in forwarded)
    assert _trace_durations(hop) == [(1, 400.0)]  # the budget metrics count it, with its whole duration


def test_a_handed_over_part_leaves_the_log_only_once_layer_1_took_it(hop: NextHop, tmp_path: Path) -> None:
    """Layer 1 down until the drain's deadline: the part stays in the log, and is handed over after the restart."""
    children = [s for s in record(agent_trace) if s.parent is not None]
    layer_1 = NextHop()
    layer_1.stop()  # down: the handover retries until the deadline
    wal = WalOptions(directory=str(tmp_path / "wal"))
    limits = Limits(decision_wait_s=0.05, max_wait_s=60.0)
    options = {"limits": limits, "wal": wal, "handover_endpoint": layer_1.url, "shutdown_timeout_s": 1.0}
    try:
        with running(BUDGETS, hop.url, **options) as first:
            assert send_grpc(children, first.grpc_endpoint).name == "SUCCESS"
            first.wait_for(lambda c: c["traces_handed_over"] == 1, "the part on its way to layer 1")
        kept = first.server.counters.snapshot()
        layer_1.start()
        with running(BUDGETS, hop.url, **options) as second:
            second.wait_for(lambda c: c["spans_handed_over"] == 3, "the replayed part handed over")
        again = second.server.counters.snapshot()
        with running(BUDGETS, hop.url, **options) as third:
            replayed = third.counters()
    finally:
        layer_1.stop()

    assert kept["spans_handed_over"] == 0
    assert kept["spans_kept_in_wal"] == 3
    assert again["wal_spans_replayed"] == 3
    assert again["spans_kept_in_wal"] == 0
    assert replayed["wal_spans_replayed"] == 0  # settled once layer 1 took it
    handed = sorted(
        (int.from_bytes(span.trace_id, "big"), int.from_bytes(span.span_id, "big")) for _, _, span in layer_1.spans()
    )
    assert handed == sorted(_key(s) for s in children)  # each once
    assert hop.spans() == []  # nothing of it went to the next hop unjudged
