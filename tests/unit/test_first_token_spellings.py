"""Every first-token spelling of the table is read, in its unit, through a real pipeline.

One streamed chat span per row of ``FIRST_TOKEN_SPELLINGS``, written the way its source
writes it (the attribute in its unit, the instant as a string, or an event), must give
the same time to first token: 250 ms after the span's start.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from latency_budget import _attributes as attr
from latency_budget._config.genai_defaults import DEFAULT_FIRST_TOKEN, FIRST_TOKEN_SPELLINGS, FirstTokenSpelling

from .helpers import T0, at, pipeline

NO_MATCH_RULES = "version: 1\ntotal_ms: 60000\n"
FIRST_TOKEN_MS = 250.0
CHAT_START_MS = 10.0


def _written(spelling: FirstTokenSpelling) -> tuple[dict[str, object], str | None]:
    """The attributes (and event name) a source writes for a first token 250 ms after the chat span starts."""
    read = spelling.read
    if read.event is not None:
        return {}, read.event
    assert read.attribute is not None
    seconds = FIRST_TOKEN_MS / 1000
    instant_ns = at(CHAT_START_MS + FIRST_TOKEN_MS)
    if read.unit == "iso8601":
        whole, nanos = divmod(instant_ns, 1_000_000_000)
        assert whole == T0 // 1_000_000_000  # 2023-11-14T22:13:20Z
        return {read.attribute: f'"2023-11-14T22:13:20.{nanos:09d}Z"'}, None
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[read.unit]
    return {read.attribute: seconds * scale}, None


@pytest.mark.parametrize(
    "spelling", FIRST_TOKEN_SPELLINGS, ids=[s.read.attribute or s.read.event or "" for s in FIRST_TOKEN_SPELLINGS]
)
def test_each_spelling_is_read_in_its_unit(spelling: FirstTokenSpelling) -> None:
    """A chat span with one row's spelling, from its scope, has its first token 250 ms after its start."""
    p = pipeline(NO_MATCH_RULES)
    attributes, event = _written(spelling)
    tracer = p.provider.get_tracer(spelling.read.scope or "some.instrumentation")
    root = p.start("request", 0, kind=SpanKind.SERVER)
    chat = tracer.start_span(
        "chat",
        context=_context(root),  # type: ignore[arg-type]
        attributes={"gen_ai.operation.name": "chat", **attributes},  # type: ignore[dict-item]
        start_time=at(CHAT_START_MS),
    )
    if event is not None:
        chat.add_event(event, timestamp=at(CHAT_START_MS + FIRST_TOKEN_MS))
    chat.end(end_time=at(CHAT_START_MS + 400))
    root.end(end_time=at(500))
    request = dict(p.span("request").attributes or {})
    assert request[attr.stage_key("model_call", "worst_first_token_ms")] == pytest.approx(FIRST_TOKEN_MS)
    assert request["latency_budget.total.first_token_ms"] == pytest.approx(CHAT_START_MS + FIRST_TOKEN_MS)


def test_a_scoped_spelling_is_not_read_from_another_scope() -> None:
    """Strands' milliseconds are read only from Strands' tracer: elsewhere the name is the metric's seconds."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    for scope in ("strands.telemetry.tracer", "openlit.otel.tracing"):
        p.provider.get_tracer(scope).start_span(
            f"chat {scope}",
            context=_context(root),  # type: ignore[arg-type]
            attributes={"gen_ai.operation.name": "chat", "gen_ai.server.time_to_first_token": 0.25},
            start_time=at(CHAT_START_MS),
        ).end(end_time=at(400))
    root.end(end_time=at(500))
    request = dict(p.span("request").attributes or {})
    # 0.25 ms from Strands' span, 250 ms (0.25 s) from the other: the worst is the other's.
    assert request[attr.stage_key("model_call", "worst_first_token_ms")] == pytest.approx(250.0)
    assert request["latency_budget.total.first_token_ms"] == pytest.approx(CHAT_START_MS + 0.25)


def test_the_defaults_are_the_table() -> None:
    """DEFAULT_FIRST_TOKEN is the table's rows, in its order, and every unit is one the table names."""
    assert tuple(spelling.read for spelling in FIRST_TOKEN_SPELLINGS) == DEFAULT_FIRST_TOKEN
    assert {spelling.unit for spelling in FIRST_TOKEN_SPELLINGS} <= {"s", "ms", "us", "ns", "iso8601", "event"}


def test_the_documented_table_has_every_spelling() -> None:
    """docs/budget-file.md's first-token table names every spelling of the table."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "budget-file.md").read_text(encoding="utf-8")
    for spelling in FIRST_TOKEN_SPELLINGS:
        name = spelling.read.attribute or spelling.read.event
        assert f"`{name}`" in text
        if spelling.read.scope is not None:
            assert f"scope `{spelling.read.scope}`" in text


def _context(parent: trace.Span) -> object:
    return trace.set_span_in_context(parent)
