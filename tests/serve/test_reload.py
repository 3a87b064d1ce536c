"""``serve`` reloads its budget file live, from a ConfigMap-style volume whose ``..data`` link is replaced at once.

The volume is laid out as the kubelet's atomic writer lays out a ConfigMap: each version
in a directory of its own, ``..data`` a link to the current one, and ``budgets.yaml`` a
link through ``..data``; an update writes a new directory and renames a new ``..data``
link over the old, in one step. ``serve`` runs as a process (``python -m latency_budget
serve``), spans go in through the SDK's OTLP exporter, and the verdicts are read from the
roots the next hop received, by trace id. Waiting is polling the health counters.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Tracer

from latency_budget import _attributes as attr
from latency_budget._serve.otlp import attributes_of
from tests.e2e.services import poll

from .harness import NextHop, at, record, send_grpc
from .test_command import BUDGET_FILE, _counters, _drain, _listening, _start
from .test_judging import agent_trace

WAIT_S = 30.0
LOOSE = """\
version: 1
stages:
  retrieval:
    budget_ms: 100
    match: {name: "retrieve*"}
  model_call:
    budget_ms: 500
    match: {name: "chat*"}
total_ms: 1000
"""


class ConfigMapVolume:
    """A directory laid out as a ConfigMap volume, updated as the kubelet updates one."""

    def __init__(self, root: Path, text: str) -> None:
        self.root = root
        self.versions = 0
        root.mkdir()
        self.update(text)
        (root / "budgets.yaml").symlink_to(Path("..data") / "budgets.yaml")

    @property
    def path(self) -> Path:
        return self.root / "budgets.yaml"

    def update(self, text: str) -> None:
        """A new version directory, then ``..data`` replaced by a rename (atomic), then the old directory removed."""
        self.versions += 1
        version = self.root / f"..2026_12_07_{self.versions:02d}"
        version.mkdir()
        (version / "budgets.yaml").write_text(text, encoding="utf-8")
        link = self.root / "..data_tmp"
        link.symlink_to(version.name)
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        os.rename(link, self.root / "..data")
        if old is not None:
            (self.root / old / "budgets.yaml").unlink()
            (self.root / old).rmdir()


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _root_of(hop: NextHop, trace_id: int) -> dict[str, object]:
    (root,) = [
        attributes_of(span.attributes)
        for _, _, span in hop.spans()
        if not span.parent_span_id and int.from_bytes(span.trace_id, "big") == trace_id
    ]
    return root


def _wait(health: object, counter: str, value: int) -> None:
    poll(
        lambda: ((c := _counters(health)) is not None and c[counter] == value) or None,
        timeout=WAIT_S,
        what=f"{counter} == {value}",
    )


def test_a_changed_budget_file_changes_the_verdicts_and_a_broken_one_keeps_the_last_good(
    tmp_path: Path, hop: NextHop
) -> None:
    """Loose budgets, then tight ones (the same trace turns over budget), then a broken file: the tight ones stay."""
    volume = ConfigMapVolume(tmp_path / "budgets", LOOSE)
    process = _start(volume.path, hop, "--reload-interval", "1", "--decision-wait", "0.05")
    listening = _listening(process)
    grpc, health = str(listening["grpc"]), listening["health"]
    try:
        assert send_grpc(record(agent_trace, first_trace=1), grpc).name == "SUCCESS"
        _wait(health, "traces_judged", 1)
        volume.update(BUDGET_FILE)
        _wait(health, "budget_reloads", 1)
        assert send_grpc(record(agent_trace, first_trace=2), grpc).name == "SUCCESS"
        _wait(health, "traces_judged", 2)
        volume.update(BUDGET_FILE.replace("budget_ms: 50", "budget_ms: fast"))
        _wait(health, "budget_reloads_failed", 1)
        assert send_grpc(record(agent_trace, first_trace=3), grpc).name == "SUCCESS"
        _wait(health, "traces_judged", 3)
    except BaseException:
        process.kill()
        process.wait()
        raise
    events = _drain(process, health, "spans_forwarded", 12, timeout=30)
    assert _root_of(hop, 1)[attr.TOTAL_BUDGET_MS] == 1000.0
    assert _root_of(hop, 1)[attr.VIOLATED] is False
    assert _root_of(hop, 2)[attr.TOTAL_BUDGET_MS] == 300.0  # the same trace, judged by the new file
    assert _root_of(hop, 2)[attr.VIOLATED] is True
    assert _root_of(hop, 3)[attr.TOTAL_BUDGET_MS] == 300.0  # the broken file changed nothing
    (failed,) = [e for e in events if e["event"] == "budget_reload_failed"]  # once, though checked every second
    assert (failed["file"], failed["line"], failed["key"]) == (str(volume.path), 4, "stages.retrieval.budget_ms")
    assert "fast" in failed["error"]
    assert [e["file"] for e in events if e["event"] == "budgets_reloaded"] == [str(volume.path)]
    shutdown = next(e for e in events if e["event"] == "shutdown")
    assert (shutdown["counters"]["budget_reloads"], shutdown["counters"]["budget_reloads_failed"]) == (1, 1)


BY_ATTRIBUTES = """\
version: 1
total_ms: 1000
stages:
  model_call:
    budget_ms: 500
    match: {attributes: {gen_ai.operation.name: chat}}
"""


def searched_trace(tracer: Tracer) -> None:
    """A request whose vector search (db.system qdrant) takes 60 ms before a model call of 120 ms."""
    root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=at(0))
    ctx = trace.set_span_in_context(root)
    tracer.start_span("search", context=ctx, attributes={"db.system": "qdrant"}, start_time=at(10)).end(end_time=at(70))
    chat = {"gen_ai.operation.name": "chat"}
    tracer.start_span("chat", context=ctx, kind=SpanKind.CLIENT, attributes=chat, start_time=at(80)).end(
        end_time=at(200)
    )
    root.end(end_time=at(250))


def test_a_trace_held_across_a_reload_is_judged_by_the_new_files_rules(tmp_path: Path, hop: NextHop) -> None:
    """Spans held before a reload whose new rule reads a key the old did not (db.system) still match it."""
    volume = ConfigMapVolume(tmp_path / "budgets", BY_ATTRIBUTES)
    process = _start(volume.path, hop, "--reload-interval", "1", "--decision-wait", "0.05")
    listening = _listening(process)
    grpc, health = str(listening["grpc"]), listening["health"]
    spans = record(searched_trace)
    try:
        assert send_grpc([s for s in spans if s.parent is not None], grpc).name == "SUCCESS"
        _wait(health, "spans_received", 2)  # held: no root yet
        volume.update(BY_ATTRIBUTES + "  retrieval:\n    budget_ms: 50\n    match: {attributes: {db.system: qdrant}}\n")
        _wait(health, "budget_reloads", 1)
        assert send_grpc([s for s in spans if s.parent is None], grpc).name == "SUCCESS"
    except BaseException:
        process.kill()
        process.wait()
        raise
    _drain(process, health, "spans_forwarded", 3, timeout=30)
    root = _root_of(hop, 1)
    assert root[attr.stage_key("retrieval", "count")] == 1
    assert list(root[attr.OVER_BUDGET_STAGES]) == ["retrieval"]  # type: ignore[call-overload]
